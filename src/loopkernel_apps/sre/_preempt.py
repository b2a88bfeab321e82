"""Preemption: the ``Preempted`` events the scheduler writes on its victims, read even when the
victims no longer exist, and tied to the pod that caused them.

The scheduler writes, on each victim (``type: Normal``, reason ``Preempted``)::

    Preempted by pod 3f2c…-uid on node gke-pool-1-abcd        (older releases: the uid)
    Preempted by prod/batch-train-7d9f-x2 on node gke-pool-1  (newer: namespace/name)

``preemptions`` (run by the triage over the whole namespace, one pass over the events and
one over the pods) returns one record per victim with the preemptor's workload when the
preemptor is still in the dump; ``preempted`` turns the triage's records into findings: the
cause is the preemptor's workload, the victims' workloads are what it explains. A
preemption whose victims' workload has no failing pod now is history and yields nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from loopkernel_apps.sre._finding import Finding, _meta, _refs, _unhealthy

__all__ = ["preempted", "preemptions"]

_PREEMPTED = re.compile(r"Preempted by (?:pod )?(?P<by>[\w./-]+) on node (?P<node>[\w.-]+)")


def _workload(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    meta = _meta(dict(pod))
    ref = next((o for o in meta.get("ownerReferences", []) or [] if o.get("controller")), None)
    if ref is None:
        return None
    kind, name = str(ref.get("kind")), str(ref.get("name"))
    h = str((meta.get("labels") or {}).get("pod-template-hash") or "")
    if kind == "ReplicaSet" and h and name.endswith("-" + h):
        return "Deployment", name[: -len(h) - 1]
    return kind, name


def _victim_workload(name: str, uid: str | None, pods: Mapping[str, Any]) -> tuple[str, str]:
    pod = pods.get(name)
    top = _workload(pod) if pod else None
    if top:
        return top
    # a victim that is gone: a ReplicaSet's pod is NAME-HASH-SUFFIX
    parts = name.split("-")
    return ("Deployment", "-".join(parts[:-2])) if len(parts) > 2 else ("Pod", name)


def preemptions(
    pods: list[dict[str, Any]], events: list[dict[str, Any]], namespace: str
) -> list[dict[str, Any]]:
    """One record per ``Preempted`` event of the namespace (the victim may be gone)."""
    by_name = {str(_meta(p).get("name")): p for p in pods}
    failing = {top[1] for p in pods if _unhealthy(p) and (top := _workload(p))}
    by_uid = {str(_meta(p).get("uid")): p for p in pods if _meta(p).get("uid")}
    out = []
    for ev in events:
        obj = ev.get("involvedObject", {})
        if ev.get("reason") != "Preempted" or obj.get("kind") != "Pod":
            continue
        m = _PREEMPTED.search(str(ev.get("message") or ""))
        if m is None:
            continue
        by = m.group("by")
        preemptor = by_uid.get(by) or by_name.get(by.rsplit("/", 1)[-1])
        top = _workload(preemptor) if preemptor else None
        victim = str(obj.get("name"))
        vk, vn = _victim_workload(victim, obj.get("uid"), by_name)
        out.append({
            "victim": victim, "victim_kind": vk, "victim_workload": vn,
            "victim_exists": victim in by_name, "node": m.group("node"),
            "current": vn in failing or (victim in by_name and _unhealthy(by_name[victim])),
            "preemptor": str(_meta(preemptor).get("name")) if preemptor else by,
            "preemptor_kind": top[0] if top else "Pod",
            "preemptor_workload": top[1] if top else by.rsplit("/", 1)[-1],
            "priority": (preemptor or {}).get("spec", {}).get("priorityClassName"),
            "message": m.group(0), "when": ev.get("lastTimestamp") or ev.get("eventTime"),
        })  # fmt: skip
    return out


def preempted(triage: list[dict[str, Any]]) -> Iterator[Finding]:
    """One finding per preemptor workload, from the triage items' ``preemptions``."""
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], str | None]]] = {}
    for item in triage:
        for p in item["data"].get("preemptions", []):
            if not p.get("current"):
                continue  # its victims run again: history, not a current cause
            key = (str(p["preemptor_kind"]), str(p["preemptor_workload"]))
            groups.setdefault(key, []).append((p, item["ref"]))
    for (kind, name), rows in groups.items():
        first, ref = rows[0]
        victims = sorted({f"{p['victim_kind']}/{p['victim_workload']}" for p, _ in rows})
        prio = f" (priorityClassName {first['priority']})" if first.get("priority") else ""
        text = (
            f"{kind} {name}{prio} preempted {len(rows)} pod(s) of {', '.join(victims)}: "
            f"the scheduler evicted them to make room for its pods ({first['message']})."
        )
        yield Finding(
            detector="preempted",
            pod=name,
            container=None,
            text=text,
            quote=str(first["message"]),
            identifiers=(name,),
            refs=_refs(ref),
            weight=len(rows),
            extra={
                "kind": kind,
                "object": name,
                "reason": "Preempted",
                "victims": [
                    {"kind": p["victim_kind"], "name": p["victim_workload"]} for p, _ in rows
                ],
                "node": first["node"],
            },
        )
