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

from loopkernel_apps.sre._detect import DETECTORS, Finding
from loopkernel_apps.sre._markdown import render_markdown
from loopkernel_apps.sre._remedy import NEXT, REMEDY, fmt
from loopkernel_apps.sre._story import (
    answer,
    chain,
    context_facts,
    missing,
    out_of_scope,
    rollout_changes,
)

__all__ = ["REPORT_FIELDS", "build_draft", "evidence_items", "finalize", "render_markdown"]

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


# -- the rules path's draft ------------------------------------------------------------------


def build_draft(
    *,
    params: dict[str, Any],
    triage: dict[str, Any],
    calls: list[dict[str, Any]],
    items: list[dict[str, Any]],
    ranked: list[tuple[Finding, int, str]],
    stale: list[tuple[dict[str, Any], str]],
    skills: list[dict[str, Any]],
    stop: str | None,
    planning: list[dict[str, Any]] | None = None,
    symptoms: list[tuple[Finding, Finding]] | None = None,
) -> dict[str, Any]:
    """The report before validation (the rules path's; ``planning``: the model rounds)."""
    triage_ref = next((i["ref"] for i in items if i["tool"] == "triage"), None)
    workloads = {u["pod"]: u.get("workload") for u in triage.get("unhealthy", [])}
    owner_kinds = {u["pod"]: u.get("owner_kind") for u in triage.get("unhealthy", [])}
    changes = rollout_changes(items)
    facts: list[dict[str, Any]] = []
    for u in triage.get("unhealthy", []):
        desc = "; ".join(
            f"container {c['name']} {c['state']}"
            + (f" ({c['reason']})" if c.get("reason") else "")
            + f", {c['restarts']} restarts"
            + (f", last terminated {c['last_reason']}" if c.get("last_reason") else "")
            for c in u.get("containers", [])
        )
        facts.append(
            {
                "text": f"Pod {u['pod']} is {u['phase']}" + (f": {desc}" if desc else "") + ".",
                "evidence": [triage_ref] if triage_ref else [],
                "quote": None,
                "identifiers": [u["pod"]],
            }
        )
    if triage_ref and not triage.get("unhealthy"):
        facts.append(
            {
                "text": f"{triage.get('pods', 0)} pods in namespace "
                f"{params['namespace']}, none unhealthy.",
                "evidence": [triage_ref],
                "quote": f"{triage.get('pods', 0)} pods",
                "identifiers": [],
            }
        )
    for f, _, _ in ranked:
        kind = "" if f.detector in ("failed_create", "job_deadline", "hpa_at_max") else "pod "
        where = f"{kind}{f.pod}" + (f", container {f.container}" if f.container else "")
        facts.append(
            {
                "text": f"{where}: `{f.quote}`",
                "evidence": list(f.refs),
                "quote": f.quote,
                "identifiers": [],
            }
        )
    for item, why in stale:
        ev = item["event"]
        msg = str(ev.get("message", ""))
        facts.append(
            {
                "text": f"Stale event set aside: {ev.get('reason')} ({msg[:120]}) — {why}; "
                "it is not the stated cause.",
                "evidence": [item["ref"]] if item["ref"] else [],
                "quote": msg[:80],
                "identifiers": [],
                "stale": True,
            }
        )
    facts += context_facts(items, ranked)
    steps = chain(ranked, symptoms or [], items, workloads)
    facts = _merge(facts)
    verified = []
    for i, (f, score, why) in enumerate(ranked, 1):
        verified.append(
            {
                "detector": f.detector,
                "text": f.text,
                "evidence": list(f.refs),
                "quote": f.quote,
                "identifiers": list(f.identifiers),
                "pod": f.pod,
                "container": f.container,
                "rank": i,
                "score": score,
                "ranking": why,
            }
        )
    suspected = []
    explained = {(f.pod, f.container) for f, _, _ in ranked}
    pod_refs = {i["args"].get("pod"): i["ref"] for i in items if i["tool"] == "describe_pod"}
    history = {
        item["event"]["involvedObject"].get("name")
        for item, _ in stale
        if item["event"].get("reason") == "Evicted"
    }
    for u in triage.get("unhealthy", []):
        if u["pod"] in history:
            continue  # evicted long ago or replaced since: stated as stale, not as failing
        pod_explained = any(p == u["pod"] for p, _ in explained)
        if not u.get("containers") and not pod_explained:
            ref = pod_refs.get(u["pod"]) or triage_ref
            suspected.append(
                {
                    "text": f"Pod {u['pod']} is {u['phase']} with no container started, but no "
                    "event or condition collected says why.",
                    "confidence": "low",
                    "evidence": [ref] if ref else [],
                    "quote": None,
                    "identifiers": [u["pod"]],
                }
            )
        for c in u.get("containers", []):
            if (u["pod"], c["name"]) in explained or (u["pod"], None) in explained:
                continue
            if pod_explained and c.get("reason") in ("PodInitializing", "ContainerCreating"):
                continue  # waits for what the pod's verified cause explains
            if c.get("restarts") or c.get("last_reason") or c.get("reason"):
                ref = pod_refs.get(u["pod"]) or triage_ref
                suspected.append(
                    {
                        "text": f"Container {c['name']} of pod {u['pod']} is failing "
                        f"({c.get('reason') or c.get('last_reason') or 'restarts'}) but no "
                        "detector observed why.",
                        "confidence": "low",
                        "evidence": [ref] if ref else [],
                        "quote": None,
                        "identifiers": [u["pod"], c["name"]],
                    }
                )
    gaps = missing(items, calls, ranked, triage)
    next_steps, remediation, seen = [], [], set()
    for f, _, _ in ranked:
        fj = f.to_json()
        if f.detector in seen:
            continue
        seen.add(f.detector)
        if any(s.pod == f.pod and s.detector == "probe_failure" for s, _ in symptoms or []):
            fj["extra"] = {**fj["extra"], "symptom_probe": True}
        wl = workloads.get(f.pod)
        changed = "; ".join(changes.get(wl or "", [])[:3]) or None
        next_steps.append(fmt(NEXT[f.detector], fj, wl, owner_kinds.get(f.pod), changed))
        remediation.append(
            {
                "action": fmt(REMEDY[f.detector], fj, wl, owner_kinds.get(f.pod), changed),
                "detector": f.detector,
            }
        )
    refused = [
        {"tool": c["tool"], "args": c["args"], "reason": c["result"]["refused"]}
        for c in calls
        if c["status"] == "refused"
    ] + [
        {**r, "reason": f"proposed by the model and refused: {r['reason']}"}
        for p in planning or []
        for r in p.get("refused", [])
    ]
    failed = [
        {"tool": c["tool"], "args": c["args"], "error": c["error"]}
        for c in calls
        if c["status"] == "failed"
    ]
    made = [c for c in calls if c["status"] in ("ok", "refused", "failed")]
    coverage = {
        "sources": [i["source"] for i in items],
        "failed_tools": failed,
        "refused_requests": refused,
        "budget_exhausted": stop if stop and stop.startswith("max_") else None,
        "exit": stop or "complete",
        "exit_reason": _EXIT_REASON[stop or "complete"].format(**params),
        "tool_calls": len(made),
        "already_collected": sum(1 for c in calls if c["status"] == "duplicate"),
        "skills": [{"name": s["name"], "why": s["why"]} for s in skills],
        "planner": "model" if any(p["by"] == "model" for p in planning or []) else "rules",
        "model": _model_note(params, planning or []),
        "planning": planning or [],
        "out_of_scope": [
            n
            for n in out_of_scope(str(params["question"]), str(params["namespace"]), items)
            if not any(n == r["args"].get("namespace") for r in refused)
        ],
    }
    # The rules path cites only what holds its claim, so validation has nothing to drop here.
    by_ref = {i["ref"]: i for i in items}
    for claim in [*facts, *steps]:
        claim["evidence"] = [
            r for r in claim["evidence"] if r in by_ref and _supports(by_ref[r], claim)
        ]
    return {
        "question": params["question"],
        "namespace": params["namespace"],
        "observed_facts": facts,
        "verified_causes": verified,
        "suspected_causes": suspected,
        "missing_evidence": gaps,
        "chain": steps,
        "answer": answer(str(params["question"]), ranked, symptoms or [], items),
        "next_steps": next_steps,
        "proposed_remediation": remediation,
        "coverage": coverage,
    }


def _merge(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One fact per text, citing every item it was seen in."""
    out: dict[str, dict[str, Any]] = {}
    for fact in facts:
        if fact["text"] in out:
            refs = out[fact["text"]]["evidence"]
            refs += [r for r in fact["evidence"] if r not in refs]
        else:
            out[fact["text"]] = {**fact, "evidence": list(fact["evidence"])}
    return list(out.values())


_EXIT_REASON = {
    "complete": "the playbooks had nothing more to ask",
    "max_rounds": "stopped after {max_rounds} plan/act rounds (max_rounds)",
    "max_tool_calls": "stopped at {max_tool_calls} tool calls (max_tool_calls)",
    "max_wall_s": "stopped after {max_wall_s} s of wall time (max_wall_s)",
    "max_evidence_chars": "stopped: the run's evidence budget of {max_evidence_chars} "
    "characters is spent",
}


def _model_note(params: dict[str, Any], planning: list[dict[str, Any]]) -> str | None:
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


def _supports(item: dict[str, Any], claim: dict[str, Any]) -> bool:
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
            elif not _supports(by_ref[ref], claim):
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
                }
            )
        else:
            dropped.append(f"cause {cause.get('detector')} downgraded to suspected (low)")
            suspected.append(
                {
                    "text": f"{cause['text']} {UNVERIFIED_NOTE}",
                    "confidence": "low",
                    "evidence": refs,
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
        suspected.append({"text": text, "confidence": confidence, "evidence": refs})
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


def _opt(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {key: d[key]} if key in d else {}


def _summary(draft: dict[str, Any], verified: list[dict[str, Any]], cov: dict[str, Any]) -> str:
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
    else:
        head = f"No failure found in namespace {draft.get('namespace')}: no detector fired."
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
