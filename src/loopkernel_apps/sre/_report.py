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

from loopkernel_apps.sre._calls import CallRecord, CallStatus
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


def evidence_items(
    calls: list[CallRecord], *, max_chars: int | None, model_chars: int | None = None
) -> list[dict[str, Any]]:
    """E1, E2 ... for each successful call, in journal order. The run's cap (``max_chars``)
    cuts the content of the rules' calls; the model's calls (``by: model``) are cut at
    their own cap (``model_chars``), so they never spend the rules' budget."""
    items: list[dict[str, Any]] = []
    totals = {"rules": 0, "model": 0}
    caps = {"rules": max_chars, "model": model_chars}
    for call in calls:
        if call.status is not CallStatus.OK or call.result is None:
            continue
        by = call.by.value
        result = call.result
        content, truncated = _cut(
            str(result["content"]), bool(result["truncated"]), totals[by], caps[by], by
        )
        totals[by] += len(content)
        items.append(
            {
                "ref": f"E{len(items) + 1}",
                "tool": call.tool,
                "args": call.args,
                "source": result["source"],
                "content": content,
                "truncated": truncated,
                "data": result["data"],
            }
        )
    return items


def _cut(content: str, truncated: bool, total: int, cap: int | None, by: str) -> tuple[str, bool]:
    """``content`` cut where it would take ``total`` past ``cap``, with a note saying so."""
    if cap is None or total + len(content) <= cap:
        return content, truncated
    room = max(0, cap - total)
    whose = "the run's" if by == "rules" else "the model's own"
    note = f"[truncated: {whose} evidence budget of {cap} characters is spent]"
    return content[:room] + ("\n" if room else "") + note, True


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


class _Checker:
    """Checks each claim's citations against the evidence, noting what it drops."""

    def __init__(self, evidence: list[dict[str, Any]]) -> None:
        self.by_ref = {e["ref"]: e for e in evidence}
        self.dropped: list[str] = []

    def refs(self, claim: dict[str, Any], what: str) -> list[str]:
        """The citations of ``claim`` that name an item holding what it states."""
        kept = []
        for ref in claim.get("evidence") or []:
            if ref not in self.by_ref:
                self.dropped.append(f"{what}: citation {ref} names no evidence item")
            elif not supports(self.by_ref[ref], claim):
                self.dropped.append(f"{what}: {ref} does not contain what the claim states")
            else:
                kept.append(ref)
        return kept


def _facts(draft: dict[str, Any], check: _Checker) -> list[dict[str, Any]]:
    facts = []
    for n, fact in enumerate(draft.get("observed_facts", []), 1):
        refs = check.refs(fact, f"fact {n}")
        if refs:
            facts.append({"text": fact["text"], "evidence": refs, **_opt(fact, "stale")})
        else:
            check.dropped.append(f"fact {n} dropped: no supporting evidence ({fact['text'][:60]})")
    return facts


def _chain(draft: dict[str, Any], check: _Checker) -> list[dict[str, Any]]:
    steps = []
    for n, step in enumerate(draft.get("chain", []), 1):
        refs = check.refs(step, f"chain {n}")
        if refs:
            steps.append({"text": step["text"], "evidence": refs})
    return steps


def _verified_cause(cause: dict[str, Any], refs: list[str]) -> dict[str, Any]:
    return {
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


def _causes(
    draft: dict[str, Any], check: _Checker
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(verified, suspected)``: a verified cause keeps its rank only with a supporting
    citation and a detector's name; else it is a suspected cause of ``low`` confidence."""
    verified, suspected = [], []
    for cause in draft.get("verified_causes", []):
        refs = check.refs(cause, f"cause {cause.get('detector')}")
        if refs and cause.get("detector") in DETECTORS:
            verified.append(_verified_cause(cause, refs))
            continue
        check.dropped.append(f"cause {cause.get('detector')} downgraded to suspected (low)")
        suspected.append(
            {
                "text": f"{cause['text']} {UNVERIFIED_NOTE}",
                "confidence": "low",
                "evidence": refs,
                **_cause_fields(cause),
            }
        )
    return verified, suspected


def _suspected(draft: dict[str, Any], check: _Checker) -> list[dict[str, Any]]:
    out = []
    for n, cause in enumerate(draft.get("suspected_causes", []), 1):
        refs = check.refs(cause, f"suspected {n}")
        confidence = cause.get("confidence", "low")
        if confidence not in ("low", "medium", "high") or not refs:
            confidence = "low"
        text = str(cause["text"])
        if _CONFIRMED.search(text) and UNVERIFIED_NOTE not in text:
            text = f"{text} {UNVERIFIED_NOTE}"
        out.append(
            {"text": text, "confidence": confidence, "evidence": refs, **_cause_fields(cause)}
        )
    return out


def _remediation(draft: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "action": str(r["action"]),
            "requires_approval": True,
            "executable": False,
            **_opt(r, "detector"),
        }
        for r in draft.get("proposed_remediation", [])
    ]


def _shown(evidence: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("ref", "tool", "args", "source", "content", "truncated")
    return [{k: e[k] for k in keys} for e in evidence]


def _sealed(report: dict[str, Any]) -> dict[str, Any]:
    """The report with its Markdown and its digest."""
    digest = hashlib.sha256(
        json.dumps(report, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    return {"report": report, "markdown": render_markdown(report), "digest": digest}


def finalize(
    draft: dict[str, Any],
    evidence: list[dict[str, Any]],
    claims: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate a draft against the evidence; the report, its Markdown and its digest.
    ``claims`` is what the model said, already quote-checked (``_speak.ask_claims``):
    ``apply_claims`` lets its kept claims add suspected causes and order a verified
    cause before its symptom where the cause graph supports it, never verify anything."""
    check = _Checker(evidence)
    facts = _facts(draft, check)
    steps = _chain(draft, check)
    verified, suspected = _causes(draft, check)
    suspected += _suspected(draft, check)
    coverage = dict(draft["coverage"])
    next_steps = list(draft.get("next_steps", []))
    spoken: dict[str, Any] = {}
    if claims is not None:
        from loopkernel_apps.sre._speak import apply_claims

        namespace = str(draft.get("namespace") or "")
        spoken = apply_claims(claims, verified, suspected, next_steps, check.by_ref, namespace)
        coverage["claims"] = spoken["coverage"]
    for i, v in enumerate(verified, 1):
        v["rank"] = i
    report = {
        "summary": _summary(draft, verified, coverage) + spoken.get("summary", ""),
        "answer": draft.get("answer"),
        "declined": _declined(coverage),
        "chain": steps,
        "observed_facts": facts,
        "verified_causes": verified,
        "suspected_causes": suspected,
        "missing_evidence": list(draft.get("missing_evidence", [])),
        "next_steps": next_steps,
        "proposed_remediation": _remediation(draft),
        "coverage": coverage,
        "evidence": _shown(evidence),
        "validation": check.dropped,
        "question": draft.get("question"),
        "namespace": draft.get("namespace"),
    }
    return _sealed(report)


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
    """ "Incomplete: …" when a planned read failed or a bound cut the collection short."""
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
