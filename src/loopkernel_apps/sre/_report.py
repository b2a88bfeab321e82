"""The report: evidence numbering, the rules path's draft, validation, Markdown.

``finalize(draft, evidence)`` is applied to every draft, whoever wrote it (the rules
path today, a model tomorrow). Its rules, in order:

1. a citation to a ref that is not in the evidence is dropped;
2. a citation must *support* its claim: the cited item's content holds the claim's quote,
   or every identifier the claim names (pod, container, exit code, image, host, variable;
   for a claim without a quote, also the quoted names and exit codes in its text). A
   citation that does not is dropped;
3. an observed fact left with no citation is dropped; a verified cause left with none, or
   not named after one of the detectors (``DETECTORS``), becomes a suspected cause of ``low``
   confidence; a suspected cause left with none falls to ``low``;
4. "root cause is confirmed" and its kin on anything unverified get an explicit note;
5. every proposed remediation has ``requires_approval: true, executable: false``.

What was dropped or downgraded is listed under ``validation`` in the report.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from loopkernel_apps.sre._detect import DETECTORS
from loopkernel_apps.sre._markdown import render_markdown

__all__ = [
    "EXIT_REASON",
    "REPORT_FIELDS",
    "evidence_items",
    "finalize",
    "merge_facts",
    "model_note",
    "render_markdown",
    "supports",
]

REPORT_FIELDS = (
    "summary",
    "observed_facts",
    "verified_causes",
    "suspected_causes",
    "missing_evidence",
    "next_steps",
    "proposed_remediation",
    "coverage",
    "evidence",
)

_CONFIRMED = re.compile(
    r"(?i)\b(root cause (?:is )?confirmed|confirmed root cause|definitely|certainly|"
    r"without (?:a )?doubt|confirmed)\b"
)
UNVERIFIED_NOTE = "(unverified: no detector observed this directly)"


def evidence_items(calls: list[dict[str, Any]], *, max_chars: int | None) -> list[dict[str, Any]]:
    """E1, E2 ... for each successful call, in journal order; the run's cap cuts content."""
    items: list[dict[str, Any]] = []
    total = 0
    for call in calls:
        if call["status"] != "ok":
            continue
        result = call["result"]
        content, truncated = str(result["content"]), bool(result["truncated"])
        if max_chars is not None and total + len(content) > max_chars:
            room = max(0, max_chars - total)
            note = f"[truncated: the run's evidence budget of {max_chars} characters is spent]"
            content, truncated = content[:room] + ("\n" if room else "") + note, True
        total += len(content)
        items.append(
            {
                "ref": f"E{len(items) + 1}",
                "tool": call["tool"],
                "args": call["args"],
                "source": result["source"],
                "content": content,
                "truncated": truncated,
                "data": result["data"],
            }
        )
    return items


def merge_facts(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One fact per text, citing every item it was seen in."""
    out: dict[str, dict[str, Any]] = {}
    for fact in facts:
        if fact["text"] in out:
            refs = out[fact["text"]]["evidence"]
            refs += [r for r in fact["evidence"] if r not in refs]
        else:
            out[fact["text"]] = {**fact, "evidence": list(fact["evidence"])}
    return list(out.values())


EXIT_REASON = {
    "complete": "the playbooks had nothing more to ask",
    "max_rounds": "stopped after {max_rounds} plan/act rounds (max_rounds)",
    "max_tool_calls": "stopped at {max_tool_calls} tool calls (max_tool_calls)",
    "max_wall_s": "stopped after {max_wall_s} s of wall time (max_wall_s)",
    "max_evidence_chars": "stopped: the run's evidence budget of {max_evidence_chars} "
    "characters is spent",
}


def model_note(params: dict[str, Any], planning: list[dict[str, Any]]) -> str | None:
    """One line: which rounds the model planned, which fell back to the rules and why."""
    if not params.get("model"):
        return None
    if not planning:
        return "a model was asked for, but no planning round ran: the rules path did the work"
    parts = []
    for p in planning:
        if p["by"] == "model":
            asked = ", ".join(c["tool"] for c in p.get("proposed", [])) or "nothing more"
            parts.append(f"round {p['round']} planned with the model (it asked: {asked})")
        else:
            parts.append(f"round {p['round']} fell back to the rules: {p['reason']}")
    return "; ".join(parts)


# -- validation --------------------------------------------------------------------------------


def supports(item: dict[str, Any], claim: dict[str, Any]) -> bool:
    content = item["content"]
    quote = claim.get("quote")
    if quote and str(quote) in content:
        return True
    ids = [str(i) for i in claim.get("identifiers") or [] if str(i)]
    if not quote:
        ids += _identifiers_in(claim.get("text", ""))
    return bool(ids) and all(i in content for i in ids)


def _identifiers_in(text: str) -> list[str]:
    """Identifiers a free-text claim names: quoted names and exit codes."""
    ids = re.findall(r"[`'\"]([\w./:@-]{3,})[`'\"]", text)
    ids += [f"exit code {c}" for c in re.findall(r"exit code (\d+)", text)]
    return ids


def finalize(draft: dict[str, Any], evidence: list[dict[str, Any]]) -> dict[str, Any]:
    """Validate a draft against the evidence; the report, its Markdown and its digest."""
    by_ref = {e["ref"]: e for e in evidence}
    dropped: list[str] = []

    def check(claim: dict[str, Any], what: str) -> list[str]:
        kept = []
        for ref in claim.get("evidence") or []:
            if ref not in by_ref:
                dropped.append(f"{what}: citation {ref} names no evidence item")
            elif not supports(by_ref[ref], claim):
                dropped.append(f"{what}: {ref} does not contain what the claim states")
            else:
                kept.append(ref)
        return kept

    facts = []
    for n, fact in enumerate(draft.get("observed_facts", []), 1):
        refs = check(fact, f"fact {n}")
        if refs:
            facts.append({"text": fact["text"], "evidence": refs, **_opt(fact, "stale")})
        else:
            dropped.append(f"fact {n} dropped: no supporting evidence ({fact['text'][:60]})")
    steps = []
    for n, step in enumerate(draft.get("chain", []), 1):
        refs = check(step, f"chain {n}")
        if refs:
            steps.append({"text": step["text"], "evidence": refs})
    verified, suspected = [], []
    for cause in draft.get("verified_causes", []):
        refs = check(cause, f"cause {cause.get('detector')}")
        if refs and cause.get("detector") in DETECTORS:
            verified.append(
                {
                    "detector": cause["detector"],
                    "text": str(cause["text"]),
                    "evidence": refs,
                    "quote": str(cause.get("quote") or ""),
                    "identifiers": [str(i) for i in cause.get("identifiers") or []],
                    "pod": cause.get("pod"),
                    "container": cause.get("container"),
                    "score": cause.get("score"),
                    "ranking": str(cause.get("ranking") or "as drafted"),
                    **_cause_fields(cause),
                }
            )
        else:
            dropped.append(f"cause {cause.get('detector')} downgraded to suspected (low)")
            suspected.append(
                {
                    "text": f"{cause['text']} {UNVERIFIED_NOTE}",
                    "confidence": "low",
                    "evidence": refs,
                    **_cause_fields(cause),
                }
            )
    for n, cause in enumerate(draft.get("suspected_causes", []), 1):
        refs = check(cause, f"suspected {n}")
        confidence = cause.get("confidence", "low")
        if confidence not in ("low", "medium", "high") or not refs:
            confidence = "low"
        text = str(cause["text"])
        if _CONFIRMED.search(text) and UNVERIFIED_NOTE not in text:
            text = f"{text} {UNVERIFIED_NOTE}"
        suspected.append(
            {"text": text, "confidence": confidence, "evidence": refs, **_cause_fields(cause)}
        )
    for i, v in enumerate(verified, 1):
        v["rank"] = i
    remediation = [
        {
            "action": str(r["action"]),
            "requires_approval": True,
            "executable": False,
            **_opt(r, "detector"),
        }
        for r in draft.get("proposed_remediation", [])
    ]
    coverage = dict(draft["coverage"])
    summary = _summary(draft, verified, coverage)
    report = {
        "summary": summary,
        "answer": draft.get("answer"),
        "declined": _declined(coverage),
        "chain": steps,
        "observed_facts": facts,
        "verified_causes": verified,
        "suspected_causes": suspected,
        "missing_evidence": list(draft.get("missing_evidence", [])),
        "next_steps": list(draft.get("next_steps", [])),
        "proposed_remediation": remediation,
        "coverage": coverage,
        "evidence": [
            {k: e[k] for k in ("ref", "tool", "args", "source", "content", "truncated")}
            for e in evidence
        ],
        "validation": dropped,
        "question": draft.get("question"),
        "namespace": draft.get("namespace"),
    }
    digest = hashlib.sha256(
        json.dumps(report, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    return {"report": report, "markdown": render_markdown(report), "digest": digest}


def _cause_fields(cause: dict[str, Any]) -> dict[str, Any]:
    """The root-cause object, the reason and what it explains, when the draft has them."""
    out: dict[str, Any] = {}
    entity = cause.get("entity")
    if isinstance(entity, dict) and all(isinstance(entity.get(k), str) for k in _ENTITY_KEYS):
        out["entity"] = {k: entity[k] for k in _ENTITY_KEYS}
    if isinstance(cause.get("reason"), str):
        out["reason"] = cause["reason"]
    if isinstance(cause.get("explains"), list):
        out["explains"] = [
            {k: str(e.get(k, "")) for k in _ENTITY_KEYS}
            for e in cause["explains"]
            if isinstance(e, dict)
        ]
    return out


_ENTITY_KEYS = ("kind", "namespace", "name")


def _opt(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {key: d[key]} if key in d else {}


def _incomplete(cov: dict[str, Any]) -> str | None:
    """"Incomplete: …" when a planned read failed or a bound cut the collection short."""
    failed = cov.get("failed_tools") or []
    parts = []
    for f in failed[:3]:
        err = str(f.get("error") or "failed")
        if "Timeout" in err or "timed out" in err:
            parts.append(f"{f.get('tool')} timed out ({err[:120]})")
        else:
            parts.append(f"{f.get('tool')} failed ({err[:120]})")
    if len(failed) > 3:
        parts.append(f"{len(failed) - 3} more read(s) failed")
    if cov.get("budget_exhausted"):
        parts.append(f"collection stopped early: {cov.get('exit_reason')}")
    if not parts:
        return None
    return "Incomplete: " + "; ".join(parts) + ". What follows covers only what was read."


def _summary(draft: dict[str, Any], verified: list[dict[str, Any]], cov: dict[str, Any]) -> str:
    incomplete = _incomplete(cov)
    if verified:
        top = verified[0]
        more = (
            f" ({len(verified) - 1} more verified cause(s) ranked below)"
            if len(verified) > 1
            else ""
        )
        head = f"Verified ({top['detector']}): {top['text']}{more}"
    elif draft.get("suspected_causes"):
        head = "No cause verified; suspected: " + str(draft["suspected_causes"][0]["text"])
    elif incomplete:
        head = f"No cause found in what was read of namespace {draft.get('namespace')}."
    else:
        history = draft.get("history") or []
        head = f"No current fault in namespace {draft.get('namespace')}." + (
            " " + " ".join(history[:2]) if history else " No detector fired."
        )
    head = f"{incomplete} {head}" if incomplete else head
    return head + (f" {draft['answer']}" if draft.get("answer") else "")


def _declined(cov: dict[str, Any]) -> list[str]:
    """One line per request outside the run's scope, for the top of the report."""
    out = []
    for r in cov.get("refused_requests", []):
        ns = r.get("args", {}).get("namespace")
        what = f"namespace {ns}" if ns else f"{r.get('tool')}"
        out.append(f"Declined: {what} is outside this investigation's scope; it was not looked at.")
    for name in cov.get("out_of_scope", []):
        out.append(
            f"Not looked at: {name} is not a workload, pod or Service of this namespace "
            "(another namespace's or team's is outside this investigation's scope)."
        )
    return list(dict.fromkeys(out))
