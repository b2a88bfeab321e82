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
from collections.abc import Iterable
from typing import Any

from loopkernel_apps.sre._detect import DETECTORS, Finding
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
    "init_container": "Read the init container's full log (kubectl logs {pod} -c {container} "
    "--previous) and check what it waits for.",
    "create_config_error": "Check that {object_kind} {object} exists in the namespace with the "
    "keys the pod references (kubectl get {object_kind_lower} {object} -o yaml).",
    "pvc_unbound": "Check the claim {claim} and the StorageClasses (kubectl get pvc {claim}; "
    "kubectl get storageclass): which class it asks for and whether one is the default.",
    "taint_untolerated": "List the nodes' taints (kubectl describe nodes | grep Taints) and "
    "decide whether the pod belongs on those nodes.",
    "evicted": "Check the node's {resource} (kubectl describe node {node}) and the pod's "
    "usage against its requests.",
    "node_not_ready": "Check the node {node} (kubectl describe node {node}; the kubelet's "
    "log on the node).",
    "service_no_endpoints": "Compare the Service's selector with the pods' labels "
    "(kubectl get svc {service} -o wide; kubectl get pods --show-labels; kubectl get endpoints "
    "{service}).",
    "upstream_unavailable": "Check {host} itself: its pods, its latency and error rate, its "
    "endpoints (kubectl get endpoints).",
    "job_deadline": "Compare how long the job's work takes with activeDeadlineSeconds "
    "({deadline}); read the last pod's log for where it was when it was stopped.",
    "failed_create": "Read the controller's events (kubectl describe {kind_lower} {object}) and "
    "the namespace's quotas and admission policies (kubectl describe resourcequota).",
    "hpa_at_max": "Check the workload's load against maxReplicas {max} (kubectl describe hpa "
    "{hpa}) and whether the nodes can hold more replicas.",
}
_REMEDY = {
    "oomkilled": "Raise the memory limit of container {container} above {limit}, "
    "or reduce its working set, then roll out",
    "crash_log_reason": "Fix what the quoted line names in container {container}{after}",
    "command_not_found": "Fix the command of container {container}: {binary!r} is not in the "
    "image{suggestion_text}",
    "image_pull": "{pull_fix}{rollback}",
    "unschedulable": "{schedule_fix}",
    "missing_env": "Define {variable} for container {container} (env or envFrom) and roll out"
    "{rollback}",
    "dns_resolution": "Point the service at a host name that resolves ({host} does not)",
    "cert_expired": "Renew the expired certificate (or the trust bundle), then {rerun}",
    "probe_failure": "{probe_fix}",
    "config_invalid": "Fix the configuration named in the quoted line, or roll back "
    "the revision that introduced it",
    "init_container": "Fix what init container {container} fails on (the quoted line); the "
    "pod's containers start once it exits 0",
    "create_config_error": "Create {object_kind} {object}{key_text} in the namespace, or fix "
    "the reference in the pod template",
    "pvc_unbound": "Give claim {claim} a StorageClass that exists (or make one the default), "
    "or create a PersistentVolume it can bind; adding a node does not help",
    "taint_untolerated": "Add a toleration for {taint_key} to the pod template if it belongs "
    "on those nodes, or remove the taint / add untainted capacity",
    "evicted": "Give the pod a {resource} request and limit that fits its use, and free "
    "{resource} on node {node}; the controller recreates evicted pods",
    "node_not_ready": "Restore node {node} (kubelet, network, cloud instance), or cordon and "
    "drain it so the pods are rescheduled elsewhere",
    "service_no_endpoints": "Make Service {service}'s selector ({selector}) match the pods' "
    "labels again (or relabel the pods)",
    "upstream_unavailable": "Fix {host} (the failing dependency); {probe_hint}",
    "job_deadline": "Raise activeDeadlineSeconds of job {job} above how long its work takes, "
    "or make the work faster; then re-run it",
    "failed_create": "{create_fix}",
    "hpa_at_max": "Raise maxReplicas of {hpa} (the nodes permitting), or make each replica "
    "handle more; it is capped at {max}",
}


_CREATE_FIX = {
    "quota": "Raise the ResourceQuota the message names, or lower the pods' requests/limits "
    "so the new pods fit in what is left; restarting pods does not help",
    "webhook": "Fix the pod template so the admission webhook admits it, or fix the webhook",
    "pod_security": "Make the pod template satisfy the namespace's Pod Security level "
    "(securityContext: runAsNonRoot, no privilege escalation, dropped capabilities)",
    "service_account": "Create the ServiceAccount the pod template names, or fix the name",
    "other": "Fix what the controller's FailedCreate message names",
}


def _probe_fix(f: dict[str, Any]) -> str:
    quote = str(f.get("quote", ""))
    m = re.search(r"statuscode: (\d{3})", quote)
    if m and m.group(1).startswith("4"):
        return (
            f"Point the probe at a path the container serves: it answers HTTP {m.group(1)} "
            "(a wrong path or port, not a timing problem)"
        )
    if "connection refused" in quote:
        return (
            "Check the probe's port against the port the container listens on; if it only "
            "listens after start-up, add a startupProbe"
        )
    return (
        "Make the probe match the start-up time (initialDelaySeconds, timeoutSeconds, "
        "or a startupProbe), or speed up the endpoint"
    )


def _fmt(
    template: str,
    f: dict[str, Any],
    workload: str | None,
    owner_kind: str | None = None,
    changed: str | None = None,
) -> str:
    extra = f.get("extra", {})
    kind = {"ReplicaSet": "deployment", None: "pod"}.get(owner_kind, str(owner_kind).lower())
    rollback = (
        f"; or roll back {kind}/{workload} (the newest revision changed: {changed})"
        if changed and kind == "deployment"
        else ""
    )
    if kind in ("job", "cronjob"):
        rerun = f"re-run the job (kubectl create job --from=cronjob/... or re-apply {workload})"
        after = f", then re-run the job ({kind} {workload})"
    else:
        rerun = f"restart the pods (kubectl rollout restart {kind}/{workload or f['pod']})"
        after = (
            f"; the newest revision changed {changed}: rolling back {kind}/{workload} is an option"
            if changed and kind == "deployment"
            else ""
        )
    obj_kind = str(extra.get("kind") or "ConfigMap")
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
        "owner_kind_lower": kind,
        "rollback": rollback,
        "rerun": rerun,
        "after": after,
        "probe_fix": _probe_fix(f),
        "pull_fix": "Give the pod an imagePullSecret that can read "
        f"{str(extra.get('image', '')).split('/')[0]} (or fix the one it has): the registry "
        "refused the credentials"
        if re.search(
            r"(?i)unauthorized|authentication required|access denied|denied:|403", f.get("text", "")
        )
        else f"Push {extra.get('image', '')} or point the {kind} at an existing tag",
        "schedule_fix": "Fix the pod's nodeSelector/affinity, or label the node(s) it should run "
        "on; no node carries the labels it asks for"
        if extra.get("affinity")
        else "Lower the pod's requests or add a node with enough allocatable capacity",
        "create_fix": _CREATE_FIX.get(str(extra.get("why")), _CREATE_FIX["other"]),
        "kind_lower": str(extra.get("kind") or "").lower(),
        "object_kind": obj_kind,
        "object_kind_lower": obj_kind.lower(),
        "object": extra.get("object") or "?",
        "key_text": f" with key {extra['key']}" if extra.get("key") else "",
        "claim": extra.get("claim", ""),
        "taint_key": extra.get("key", ""),
        "resource": extra.get("resource", "the resource"),
        "node": extra.get("node", ""),
        "service": extra.get("service", ""),
        "selector": extra.get("selector", ""),
        "deadline": extra.get("deadline"),
        "job": extra.get("job", ""),
        "hpa": extra.get("hpa", ""),
        "max": extra.get("max"),
        "probe_hint": "the probe failures and restarts follow from it, so do not tune the probe"
        if extra.get("symptom_probe")
        else "retries and timeouts in the client only hide it",
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
        next_steps.append(_fmt(_NEXT[f.detector], fj, wl, owner_kinds.get(f.pod), changed))
        remediation.append(
            {
                "action": _fmt(_REMEDY[f.detector], fj, wl, owner_kinds.get(f.pod), changed),
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
    out += [f"**{d}**" for d in r.get("declined", [])]
    if r.get("declined"):
        out.append("")
    verified = r["verified_causes"]
    out += ["## Cause", ""]
    if verified:
        top = verified[0]
        out += [
            f"**{top['detector']}**: {top['text']}{_cite(top['evidence'])}",
            "",
            f"> {top['quote']}",
        ]
    else:
        out.append("None verified: no detector observed a cause directly.")
    if r.get("chain"):
        out += ["", "## Chain (cause → symptom)", ""]
        out += [f"{n}. {s['text']}{_cite(s['evidence'])}" for n, s in enumerate(r["chain"], 1)]
    out += ["", "## Proposed remediation (requires approval; nothing is executed)", ""]
    out += [f"- {p['action']}" for p in r["proposed_remediation"]] or ["None."]
    out += ["", "## Missing evidence", ""]
    out += [f"- {m}" for m in r["missing_evidence"]] or ["None."]
    if len(verified) > 1:
        out += ["", "## Other verified causes", ""]
        out += [
            f"{v['rank']}. **{v['detector']}**: {v['text']}{_cite(v['evidence'])}\n"
            f"   - quote: `{v['quote']}`\n   - ranking: {v['ranking']}"
            for v in verified[1:]
        ]
    if verified:
        out += ["", f"Ranking of the cause: {verified[0]['ranking']}."]
    out += ["", "## Suspected causes", ""]
    out += [
        f"- ({s['confidence']}) {s['text']}{_cite(s['evidence'])}" for s in r["suspected_causes"]
    ] or ["None."]
    out += ["", "## Observed facts", ""]
    out += [f"- {f['text']}{_cite(f['evidence'])}" for f in r["observed_facts"]] or ["None."]
    out += ["", "## Next steps", ""]
    out += [f"- {s}" for s in r["next_steps"]] or ["None."]
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
    out += ["", "## Evidence", ""]
    for e in r["evidence"]:
        cut = " (truncated)" if e["truncated"] else ""
        args = json.dumps(e["args"], sort_keys=True)
        out.append(f"- {e['ref']}: {e['tool']} {args} — {e['source']}{cut}")
    return "\n".join(out) + "\n"
