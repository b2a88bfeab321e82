"""The report: evidence numbering, the rules path's draft, validation, Markdown.

``finalize(draft, evidence)`` is applied to every draft, whoever wrote it (the rules
path today, a model tomorrow). Its rules, in order:

1. a citation to a ref that is not in the evidence is dropped;
2. a citation must *support* its claim: the cited item's content holds the claim's quote,
   or every identifier the claim names (pod, container, exit code, image, host, variable;
   for a claim without a quote, also the quoted names and exit codes in its text). A
   citation that does not is dropped;
3. an observed fact left with no citation is dropped; a verified cause left with none, or
   not named after one of the ten detectors, becomes a suspected cause of ``low``
   confidence; a suspected cause left with none falls to ``low``;
4. "root cause is confirmed" and its kin on anything unverified get an explicit note;
5. every proposed remediation has ``requires_approval: true, executable: false``.

What was dropped or downgraded is listed under ``validation`` in the report.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from loopkernel_apps.sre._detect import DETECTORS, Finding

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

_NEXT = {
    "oomkilled": "Compare the container's working set with its limit {limit} "
    "(kubectl top pod {pod} --containers, or the memory graph of the last hour).",
    "crash_log_reason": "Read the full previous log of {container} "
    "(kubectl logs {pod} -c {container} --previous) around the quoted line.",
    "command_not_found": "Check the image's entrypoint and the container command "
    "(kubectl get pod {pod} -o jsonpath='{{.spec.containers[*].command}}').",
    "image_pull": "Check that {image} exists in the registry and the pull secret can read it.",
    "unschedulable": "Compare the pod's requests with the nodes' free allocatable "
    "(kubectl describe nodes) and check quotas.",
    "missing_env": "Check which ConfigMap or Secret should provide {variable} and whether "
    "the last rollout dropped it (kubectl rollout history).",
    "dns_resolution": "Check that the Service behind {host} exists in the namespace it names "
    "(kubectl get svc -A | grep ...) and that CoreDNS answers.",
    "cert_expired": "Check the expiry of the certificate the peer presents "
    "(openssl s_client -connect HOST:PORT | openssl x509 -noout -enddate).",
    "probe_failure": "Time the probed endpoint from inside the pod and compare it with the "
    "probe's timeout and initial delay.",
    "config_invalid": "Diff the configuration of the failing revision against the last "
    "working one (kubectl rollout history, the ConfigMap's history).",
}
_REMEDY = {
    "oomkilled": "Raise the memory limit of container {container} above {limit}, "
    "or reduce its working set, then roll out",
    "crash_log_reason": "Roll back {workload} to its previous revision "
    "(kubectl rollout undo deployment/{workload}) while the crash is fixed",
    "command_not_found": "Fix the command of container {container}: {binary!r} is not in the "
    "image{suggestion_text}",
    "image_pull": "Push {image} or point the deployment at an existing tag; "
    "or roll back to the previous revision",
    "unschedulable": "Lower the pod's requests or add a node with enough allocatable capacity",
    "missing_env": "Define {variable} for container {container} (env or envFrom) and roll out",
    "dns_resolution": "Point the service at a host name that resolves ({host} does not)",
    "cert_expired": "Renew the expired certificate (or the trust bundle) and restart the job",
    "probe_failure": "Make the probe match the start-up time (initialDelaySeconds, "
    "timeoutSeconds, or a startupProbe), or fix the endpoint",
    "config_invalid": "Fix the configuration named in the quoted line, or roll back "
    "the revision that introduced it",
}


def _fmt(template: str, f: dict[str, Any], workload: str | None) -> str:
    extra = f.get("extra", {})
    values = {
        "pod": f["pod"],
        "container": f.get("container") or "",
        "workload": workload or f["pod"],
        "limit": extra.get("memory_limit") or "the current limit",
        "image": extra.get("image", ""),
        "variable": extra.get("variable", ""),
        "host": extra.get("host", ""),
        "binary": extra.get("binary", ""),
        "suggestion_text": f" (did you mean {extra['suggestion']!r}?)"
        if extra.get("suggestion")
        else "",
    }
    return template.format(**values)


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
) -> dict[str, Any]:
    """The report before validation (the rules path's; ``planning``: the model rounds)."""
    triage_ref = next((i["ref"] for i in items if i["tool"] == "triage"), None)
    workloads = {u["pod"]: u.get("workload") for u in triage.get("unhealthy", [])}
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
        where = f"pod {f.pod}" + (f", container {f.container}" if f.container else "")
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
    for u in triage.get("unhealthy", []):
        for c in u.get("containers", []):
            if (u["pod"], c["name"]) in explained or (u["pod"], None) in explained:
                continue
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
    missing = [
        item["content"]
        for item in items
        if item["tool"] == "pod_logs" and not item["data"].get("available")
    ]
    missing += [
        f"{call['tool']} {json.dumps(call['args'], sort_keys=True)} not collected: {call['note']}"
        for call in calls
        if call["status"] == "skipped"
    ]
    if any(f.detector == "oomkilled" for f, _, _ in ranked):
        missing.append("memory usage over time (a cluster-info dump holds no metrics)")
    if not triage.get("unhealthy"):
        missing.append("no unhealthy pod in the namespace: nothing to explain from this dump")
    next_steps, remediation, seen = [], [], set()
    for f, _, _ in ranked:
        fj = f.to_json()
        if f.detector in seen:
            continue
        seen.add(f.detector)
        next_steps.append(_fmt(_NEXT[f.detector], fj, workloads.get(f.pod)))
        remediation.append(
            {"action": _fmt(_REMEDY[f.detector], fj, workloads.get(f.pod)), "detector": f.detector}
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
    }
    return {
        "question": params["question"],
        "namespace": params["namespace"],
        "observed_facts": facts,
        "verified_causes": verified,
        "suspected_causes": suspected,
        "missing_evidence": missing,
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
        return f"Verified ({top['detector']}): {top['text']}{more}"
    if draft.get("suspected_causes"):
        return "No cause verified; suspected: " + str(draft["suspected_causes"][0]["text"])
    return f"No failure found in namespace {draft.get('namespace')}: no detector fired."


# -- Markdown --------------------------------------------------------------------------------------


def _cite(refs: Iterable[str]) -> str:
    refs = list(refs)
    return f" [{', '.join(refs)}]" if refs else ""


def render_markdown(r: dict[str, Any]) -> str:
    cov = r["coverage"]
    out = [
        f"# Investigation: {r.get('question') or ''}".rstrip(),
        "",
        f"Namespace `{r.get('namespace')}`.",
        "",
        f"**Summary.** {r['summary']}",
        "",
    ]
    out += ["## Verified causes", ""]
    out += [
        f"{v['rank']}. **{v['detector']}**: {v['text']}{_cite(v['evidence'])}\n"
        f"   - quote: `{v['quote']}`\n   - ranking: {v['ranking']}"
        for v in r["verified_causes"]
    ] or ["None: no detector observed a cause directly."]
    out += ["", "## Suspected causes", ""]
    out += [
        f"- ({s['confidence']}) {s['text']}{_cite(s['evidence'])}" for s in r["suspected_causes"]
    ] or ["None."]
    out += ["", "## Observed facts", ""]
    out += [f"- {f['text']}{_cite(f['evidence'])}" for f in r["observed_facts"]] or ["None."]
    out += ["", "## Missing evidence", ""]
    out += [f"- {m}" for m in r["missing_evidence"]] or ["None."]
    out += ["", "## Next steps", ""]
    out += [f"- {s}" for s in r["next_steps"]] or ["None."]
    out += ["", "## Proposed remediation (requires approval; nothing is executed)", ""]
    out += [f"- {p['action']}" for p in r["proposed_remediation"]] or ["None."]
    out += [
        "",
        "## Coverage",
        "",
        f"- exit: {cov['exit']} ({cov['exit_reason']}); {cov['tool_calls']} tool calls, "
        f"{cov['already_collected']} answered 'already collected'",
        f"- sources: {', '.join(cov['sources']) or 'none'}",
    ]
    for s in cov["skills"]:
        out.append(f"- playbook {s['name']}: chosen for {', '.join(s['why'])}")
    for ref in cov["refused_requests"]:
        out.append(
            f"- declined: {ref['tool']} {json.dumps(ref['args'], sort_keys=True)}: {ref['reason']}"
        )
    for f in cov["failed_tools"]:
        out.append(f"- failed: {f['tool']} {json.dumps(f['args'], sort_keys=True)}: {f['error']}")
    if cov.get("model"):
        out.append(f"- model: {cov['model']}")
    if r.get("validation"):
        out += ["", "## Validation", ""] + [f"- {v}" for v in r["validation"]]
    out += ["", "## Evidence", ""]
    for e in r["evidence"]:
        cut = " (truncated)" if e["truncated"] else ""
        args = json.dumps(e["args"], sort_keys=True)
        out.append(f"- {e['ref']}: {e['tool']} {args} — {e['source']}{cut}")
    return "\n".join(out) + "\n"
