"""The rules path's draft of a report, one function per part over two frozen records.

``Collected`` is what the run read (calls, numbered evidence, the triage, planning) and
``Diagnosis`` what the detectors made of it (ranked causes, symptoms, stale events, history).
``build_draft`` assembles the parts: facts, verified causes (each with its root-cause
``entity``, its ``reason`` and what it ``explains``, ``_cause``), suspected causes, next
steps and remediation, coverage. ``finalize`` (``_report``) validates the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopkernel_apps.sre._calls import CallRecord, CallStatus
from loopkernel_apps.sre._cause import Entity, cause_entity, explains, owners, reason_of
from loopkernel_apps.sre._detect import Finding
from loopkernel_apps.sre._remedy import NEXT, REMEDY, fmt
from loopkernel_apps.sre._report import EXIT_REASON, merge_facts, model_note, supports
from loopkernel_apps.sre._story import (
    answer,
    chain,
    context_facts,
    missing,
    out_of_scope,
    rollout_changes,
)
from loopkernel_apps.sre._time import recovered

__all__ = ["Collected", "Diagnosis", "build_draft"]

Claim = dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Collected:
    """What the run read."""

    calls: Sequence[CallRecord]
    """Every call record, in journal order."""
    items: Sequence[dict[str, Any]]
    """The evidence items E1, E2 …"""
    triage: Mapping[str, Any]
    """The triage task's result."""
    skills: Sequence[Mapping[str, Any]] = ()
    planning: Sequence[Mapping[str, Any]] = ()
    stop: str | None = None
    """The bound that ended the collection, if one did."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Diagnosis:
    """What the detectors made of it."""

    ranked: Sequence[tuple[Finding, int, str]]
    symptoms: Sequence[tuple[Finding, Finding]] = ()
    stale: Sequence[tuple[dict[str, Any], str]] = ()
    history: Sequence[Finding] = field(default_factory=tuple)
    """Findings about containers that recovered since: stated with their date, not causes."""


def _ref(c: Collected, tool: str) -> str | None:
    return next((i["ref"] for i in c.items if i["tool"] == tool), None)


def _pod_facts(c: Collected, namespace: str) -> list[Claim]:
    triage_ref = _ref(c, "triage")
    facts: list[Claim] = []
    for u in c.triage.get("unhealthy", []):
        desc = "; ".join(
            f"container {x['name']} {x['state']}"
            + (f" ({x['reason']})" if x.get("reason") else "")
            + f", {x['restarts']} restarts"
            + (f", last terminated {x['last_reason']}" if x.get("last_reason") else "")
            for x in u.get("containers", [])
        )
        facts.append(
            {
                "text": f"Pod {u['pod']} is {u['phase']}" + (f": {desc}" if desc else "") + ".",
                "evidence": [triage_ref] if triage_ref else [],
                "quote": None,
                "identifiers": [u["pod"]],
            }
        )
    if triage_ref and not c.triage.get("unhealthy"):
        n = c.triage.get("pods", 0)
        facts.append(
            {
                "text": f"{n} pods in namespace {namespace}, none unhealthy.",
                "evidence": [triage_ref],
                "quote": f"{n} pods",
                "identifiers": [],
            }
        )
    return facts


def _finding_facts(d: Diagnosis) -> list[Claim]:
    facts: list[Claim] = []
    for f, _, _ in d.ranked:
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
    for item, why in d.stale:
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
    return facts


def history_lines(c: Collected) -> list[tuple[str, str | None]]:
    """``(sentence, pod)`` for every container that restarted and is Ready since: the date
    of its last termination, its reason, since when it runs."""
    out = []
    now = c.triage.get("now")
    for u in c.triage.get("unhealthy", []):
        for x in u.get("containers", []):
            if int(x.get("restarts") or 0) and recovered(x, now):
                when = x.get("last_finished") or "an unrecorded time"
                why = x.get("last_reason") or "no reason recorded"
                code = f", exit code {x['last_exit']}" if x.get("last_exit") is not None else ""
                out.append(
                    (
                        f"The last restart of container {x['name']} of pod {u['pod']} was on "
                        f"{when} "
                        f"({why}{code}); it has been running and Ready since {x.get('started')}.",
                        u["pod"],
                    )
                )
    return out


def _history_facts(c: Collected, d: Diagnosis) -> list[Claim]:
    triage_ref = _ref(c, "triage")
    facts: list[Claim] = [
        {
            "text": line + " History, not a current fault.",
            "evidence": [triage_ref] if triage_ref else [],
            "quote": None,
            "identifiers": [pod],
        }
        for line, pod in history_lines(c)
    ]
    for f in d.history:
        facts.append(
            {
                "text": f"History, not the stated cause: {f.text}",
                "evidence": list(f.refs),
                "quote": f.quote,
                "identifiers": [],
                "stale": True,
            }
        )
    return facts


def _entities(c: Collected, namespace: str) -> dict[str, Entity]:
    pods = [
        {"pod": i["data"]["pod"]}
        for i in c.items
        if i["tool"] == "describe_pod" and isinstance(i["data"].get("pod"), dict)
    ]
    known = owners(c.triage.get("unhealthy", []), pods, namespace)
    for i in c.items:
        if i["tool"] == "services":
            for svc in i["data"].get("services", []):
                e = Entity(kind="Service", namespace=namespace, name=str(svc.get("name")))
                known[f"svc:{svc.get('name')}"] = e
                if svc.get("clusterIP") and svc["clusterIP"] != "None":
                    known[f"ip:{svc['clusterIP']}"] = e
        if i["tool"] == "rollout_history":
            dep = str(i["args"].get("deployment"))
            for rev in i["data"].get("revisions", []):
                known[f"rs:{rev.get('replicaset')}"] = Entity(
                    kind="Deployment", namespace=namespace, name=dep
                )
    return known


def _failed_jobs(c: Collected) -> dict[str, str]:
    """A failed Job's name -> its Failed condition's reason (BackoffLimitExceeded …)."""
    return {
        str(w.get("name")): str(cond).split("=", 1)[1]
        for w in c.triage.get("workloads", [])
        if w.get("kind") == "job"
        for cond in w.get("conditions", [])
        if str(cond).startswith("Failed=")
    }


def _verified(c: Collected, d: Diagnosis, namespace: str) -> list[Claim]:
    known = _entities(c, namespace)
    failed_jobs = _failed_jobs(c)
    out = []
    for i, (f, score, why) in enumerate(d.ranked, 1):
        entity = cause_entity(f, known, namespace)
        reason = reason_of(f)
        if entity.kind == "Job" and entity.name in failed_jobs and f.detector != "job_deadline":
            reason = f"{failed_jobs[entity.name]}: {reason}"  # the Job's own reason first
        out.append(
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
                "entity": entity.to_json(),
                "reason": reason,
                "explains": [
                    e.to_json() for e in explains(f, entity, d.symptoms, known, namespace)
                ],
            }
        )
    return out


def _suspected(c: Collected, d: Diagnosis, namespace: str) -> list[Claim]:
    known = _entities(c, namespace)
    explained_objects = {
        (e["kind"], e["name"]) for v in _verified(c, d, namespace) for e in v["explains"]
    }
    triage_ref = _ref(c, "triage")
    explained = {(f.pod, f.container) for f, _, _ in d.ranked}
    pod_refs = {i["args"].get("pod"): i["ref"] for i in c.items if i["tool"] == "describe_pod"}
    history = {
        item["event"]["involvedObject"].get("name")
        for item, _ in d.stale
        if item["event"].get("reason") == "Evicted"
    }
    now = c.triage.get("now")
    failed_jobs = _failed_jobs(c)
    out: list[Claim] = []
    for u in c.triage.get("unhealthy", []):
        if u["pod"] in history:
            continue  # evicted long ago or replaced since: stated as stale, not as failing
        ref = pod_refs.get(u["pod"]) or triage_ref
        entity = (
            known.get(u["pod"]) or Entity(kind="Pod", namespace=namespace, name=u["pod"])
        ).to_json()
        if (entity["kind"], entity["name"]) in explained_objects:
            continue  # a verified cause explains it: a symptom, not a suspect
        pod_explained = any(p == u["pod"] for p, _ in explained)
        if not u.get("containers") and not pod_explained:
            out.append(
                {
                    "text": f"Pod {u['pod']} is {u['phase']} with no container started, but no "
                    "event or condition collected says why.",
                    "confidence": "low",
                    "evidence": [ref] if ref else [],
                    "quote": None,
                    "identifiers": [u["pod"]],
                    "entity": entity,
                    "reason": str(u.get("reason") or u["phase"]),
                }
            )
        for x in u.get("containers", []):
            if (u["pod"], x["name"]) in explained or (u["pod"], None) in explained:
                continue
            if pod_explained and x.get("reason") in ("PodInitializing", "ContainerCreating"):
                continue  # waits for what the pod's verified cause explains
            if recovered(x, now):
                continue  # history: stated with its date among the facts
            if x.get("restarts") or x.get("last_reason") or x.get("reason"):
                why = x.get("reason") or x.get("last_reason") or "restarts"
                if entity["kind"] == "Job" and entity["name"] in failed_jobs:
                    why = f"{failed_jobs[entity['name']]}: {why}"
                out.append(
                    {
                        "text": f"Container {x['name']} of pod {u['pod']} is failing ({why}) but "
                        "no detector observed why.",
                        "confidence": "low",
                        "evidence": [ref] if ref else [],
                        "quote": None,
                        "identifiers": [u["pod"], x["name"]],
                        "entity": entity,
                        "reason": str(why),
                    }
                )
    return out


def _actions(c: Collected, d: Diagnosis, namespace: str) -> tuple[list[str], list[Claim]]:
    workloads = {u["pod"]: u.get("workload") for u in c.triage.get("unhealthy", [])}
    owner_kinds = {u["pod"]: u.get("owner_kind") for u in c.triage.get("unhealthy", [])}
    changes = rollout_changes(list(c.items))
    steps: list[str] = []
    remediation: list[Claim] = []
    seen: set[str] = set()
    for f, _, _ in d.ranked:
        if f.detector in seen:
            continue
        seen.add(f.detector)
        fj = f.to_json()
        if any(s.pod == f.pod and s.detector == "probe_failure" for s, _ in d.symptoms):
            fj["extra"] = {**fj["extra"], "symptom_probe": True}
        wl, kind = workloads.get(f.pod), owner_kinds.get(f.pod)
        changed = "; ".join(changes.get(wl or "", [])[:3]) or None
        step = fmt(NEXT[f.detector], fj, wl, kind, changed)
        steps.append(step or f"Read the whole of what {f.detector} quoted: `{f.quote[:120]}`.")
        action = fmt(REMEDY[f.detector], fj, wl, kind, changed) or f.extra.get("remedy")
        if action:  # a template with an empty slot is not offered
            remediation.append({"action": str(action), "detector": f.detector})
    if not steps:
        steps = _default_steps(c, namespace)
    return steps, remediation


def _default_steps(c: Collected, namespace: str) -> list[str]:
    failed = [x for x in c.calls if x.status is CallStatus.FAILED]
    if failed:
        return [
            f"Re-run the investigation: {len(failed)} read(s) failed "
            f"({', '.join(x.tool for x in failed[:3])}), so the cause may be in "
            "what was not read."
        ]
    return [
        f"Watch the namespace for a new failure (kubectl get events -n {namespace} --watch; "
        f"kubectl get pods -n {namespace} -w) and compare with the monitoring system's "
        "error rate and latency, which a dump does not hold.",
    ]


def _coverage(c: Collected, params: Mapping[str, Any]) -> dict[str, Any]:
    refused = [
        {"tool": x.tool, "args": x.args, "reason": (x.result or {})["refused"]}
        for x in c.calls
        if x.status is CallStatus.REFUSED
    ] + [
        {**r, "reason": f"proposed by the model and refused: {r['reason']}"}
        for p in c.planning
        for r in p.get("refused", [])
    ]
    failed = [
        {"tool": x.tool, "args": x.args, "error": x.error}
        for x in c.calls
        if x.status is CallStatus.FAILED
    ]
    made = [x for x in c.calls if x.status.made]
    stop = c.stop
    return {
        "sources": [i["source"] for i in c.items],
        "failed_tools": failed,
        "refused_requests": refused,
        "budget_exhausted": stop if stop and stop.startswith("max_") else None,
        "exit": stop or "complete",
        "exit_reason": EXIT_REASON[stop or "complete"].format(**params),
        "tool_calls": len(made),
        "already_collected": sum(1 for x in c.calls if x.status is CallStatus.DUPLICATE),
        "skills": [{"name": s["name"], "why": s["why"]} for s in c.skills],
        "planner": "model" if any(p["by"] == "model" for p in c.planning) else "rules",
        "model": model_note(dict(params), [dict(p) for p in c.planning]),
        "planning": list(c.planning),
        "out_of_scope": [
            n
            for n in out_of_scope(str(params["question"]), str(params["namespace"]), list(c.items))
            if not any(n == r["args"].get("namespace") for r in refused)
        ],
        "complete": not failed and not (stop and stop.startswith("max_")),
    }


def build_draft(params: Mapping[str, Any], c: Collected, d: Diagnosis) -> dict[str, Any]:
    """The report before validation (the rules path's)."""
    ns = str(params["namespace"])
    ranked, symptoms, items = list(d.ranked), list(d.symptoms), list(c.items)
    workloads = {u["pod"]: u.get("workload") for u in c.triage.get("unhealthy", [])}
    facts = _pod_facts(c, ns) + _finding_facts(d) + _history_facts(c, d)
    facts = merge_facts(facts + context_facts(items, ranked))
    steps = chain(ranked, symptoms, items, workloads)
    next_steps, remediation = _actions(c, d, ns)
    by_ref = {i["ref"]: i for i in items}
    for claim in [*facts, *steps]:
        claim["evidence"] = [
            r for r in claim["evidence"] if r in by_ref and supports(by_ref[r], claim)
        ]
    return {
        "question": params["question"],
        "namespace": ns,
        "observed_facts": facts,
        "verified_causes": _verified(c, d, ns),
        "suspected_causes": _suspected(c, d, ns),
        "missing_evidence": missing(items, list(c.calls), ranked, dict(c.triage)),
        "chain": steps,
        "answer": answer(str(params["question"]), ranked, symptoms, items),
        "next_steps": next_steps,
        "proposed_remediation": remediation,
        "coverage": _coverage(c, params),
        "history": [line for line, _ in history_lines(c)],
    }
