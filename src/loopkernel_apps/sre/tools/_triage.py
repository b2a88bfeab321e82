"""The ``triage`` tool: the namespace's unhealthy pods and workloads, with the findings.

One function per part of the answer (a pod's containers, a pod's entry and line, the
autoscalers at their maximum, the workloads, the preemptions), joined by ``triage``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopkernel import JSON
from loopkernel_apps.sre._detect import detect
from loopkernel_apps.sre._detect_nodes import dump_now
from loopkernel_apps.sre._dump import Namespace
from loopkernel_apps.sre._preempt import preemptions
from loopkernel_apps.sre.tools._render import _event_line, _meta, _owner
from loopkernel_apps.sre.tools._scope import Scope

__all__ = ["triage", "unhealthy"]

_Rows = tuple[list[dict[str, Any]], list[str]]


def unhealthy(pod: dict[str, Any]) -> bool:
    status = pod.get("status", {})
    if status.get("phase") not in ("Running", "Succeeded"):
        return True
    for s in status.get("containerStatuses", []) or []:
        if status.get("phase") == "Running" and not s.get("ready"):
            return True
        if int(s.get("restartCount", 0)) > 0:
            return True
    return False


def _node_ready(scope: Scope) -> dict[str, bool]:
    return {
        str(_meta(n).get("name")): any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in n.get("status", {}).get("conditions", []) or []
        )
        for n in scope.dump.nodes
    }


def _container(s: dict[str, Any], init: bool) -> dict[str, Any]:
    state = next(iter(s.get("state") or {"unknown": {}}))
    reason = ((s.get("state") or {}).get(state) or {}).get("reason")
    last_term = (s.get("lastState") or {}).get("terminated") or {}
    return {
        "name": s.get("name"),
        "restarts": s.get("restartCount", 0),
        "state": state,
        "reason": reason,
        "last_reason": last_term.get("reason"),
        "ready": bool(s.get("ready")),
        "started": ((s.get("state") or {}).get("running") or {}).get("startedAt"),
        "last_finished": last_term.get("finishedAt"),
        "last_exit": last_term.get("exitCode"),
        **({"init": True} if init else {}),
    }


def _containers(status: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's containers, init containers first, leaving out init containers that
    completed."""
    inits = status.get("initContainerStatuses") or []
    init_names = {s.get("name") for s in inits}
    out = []
    for s in inits + (status.get("containerStatuses") or []):
        init = s.get("name") in init_names
        if init and (s.get("state") or {}).get("terminated", {}).get("exitCode") == 0:
            continue  # an init container that completed
        out.append(_container(s, init))
    return out


def _pod_entry(ns: Namespace, p: dict[str, Any], node_ready: dict[str, bool]) -> dict[str, Any]:
    owner = _owner(p)
    st_ = p.get("status", {})
    return {
        "pod": _meta(p).get("name"),
        "phase": p.get("status", {}).get("phase"),
        "owner_kind": owner[0] if owner else None,
        "owner": owner[1] if owner else None,
        "workload": _workload(ns, owner),
        "containers": _containers(st_),
        "reason": st_.get("reason"),
        "node": p.get("spec", {}).get("nodeName"),
        "node_ready": node_ready.get(str(p.get("spec", {}).get("nodeName"))),
    }


def _pod_line(entry: dict[str, Any]) -> str:
    desc = ", ".join(
        f"{c['name']} {c['state']}{'(' + c['reason'] + ')' if c['reason'] else ''} "
        f"restarts={c['restarts']}{' last=' + c['last_reason'] if c['last_reason'] else ''}"
        for c in entry["containers"]
    )
    return (
        f"UNHEALTHY pod {entry['pod']} phase={entry['phase']}"
        + (f" reason={entry['reason']}" if entry["reason"] else "")
        + f" owner={entry['owner_kind']}/{entry['owner']}: "
        + (desc or "no containers started")
    )


def _autoscalers_at_max(ns: Namespace) -> _Rows:
    rows, lines = [], []
    for h in ns.items("horizontalpodautoscalers"):
        hs, hspec = h.get("status", {}), h.get("spec", {})
        if hspec.get("maxReplicas") and int(hs.get("currentReplicas") or 0) >= int(
            hspec["maxReplicas"]
        ):
            rows.append(
                {
                    "kind": "hpa",
                    "name": _meta(h).get("name"),
                    "target": hspec.get("scaleTargetRef", {}).get("name"),
                    "desired": hspec["maxReplicas"],
                    "ready": hs.get("currentReplicas"),
                    "failed": 0,
                    "at_max": True,
                }
            )
            lines.append(f"hpa {_meta(h).get('name')}: at maxReplicas {hspec['maxReplicas']}")
    return rows, lines


def _bad_conditions(st: dict[str, Any]) -> list[str]:
    return [
        f"{c.get('type')}={c.get('reason')}"
        for c in st.get("conditions", []) or []
        if (c.get("type") == "Failed" and c.get("status") == "True")
        or c.get("reason") == "ProgressDeadlineExceeded"
    ]


def _workloads(ns: Namespace) -> _Rows:
    rows, lines = [], []
    for kind in ("deployments", "daemonsets", "statefulsets", "jobs"):
        for w in ns.items(kind):
            st = w.get("status", {})
            want = w.get("spec", {}).get("replicas", st.get("desiredNumberScheduled"))
            ready = st.get("readyReplicas", st.get("numberReady", st.get("succeeded", 0)))
            failed = st.get("failed", 0)
            bad = _bad_conditions(st)
            name = str(_meta(w).get("name"))
            rows.append(
                {
                    "kind": kind[:-1],
                    "name": _meta(w).get("name"),
                    "desired": want,
                    "ready": ready or 0,
                    "failed": failed,
                    "conditions": bad,
                    "pods": _pod_count(ns, kind, name),
                }
            )
            lines.append(
                f"{kind[:-1]} {_meta(w).get('name')}: ready {ready or 0}/{want}"
                + (f", failed {failed}" if failed else "")
                + (f" ({', '.join(bad)})" if bad else "")
            )
    return rows, lines


def triage(scope: Scope, args: dict[str, JSON]) -> JSON:
    ns, namespace = scope.ns, scope.name
    pods = [{"ref": None, "pod": p} for p in ns.items("pods")]
    events = [{"ref": None, "event": e} for e in ns.items("events")]
    findings, stale = detect(pods, events, [])
    node_ready = _node_ready(scope)
    sick = [_pod_entry(ns, p, node_ready) for p in ns.items("pods") if unhealthy(p)]
    lines = [f"namespace {namespace}: {len(pods)} pods", *map(_pod_line, sick)]
    hpas, hpa_lines = _autoscalers_at_max(ns)
    workloads, workload_lines = _workloads(ns)
    lines += hpa_lines + workload_lines
    preempts = preemptions(ns.items("pods"), ns.items("events"), namespace)
    lines += [
        f"preempted: pod {pr['victim']} ({pr['victim_kind']} {pr['victim_workload']}"
        f"{'' if pr['victim_exists'] else ', gone since'}): {pr['message']}"
        for pr in preempts
    ]
    lines.append("findings:")
    lines += [f"- {f.detector}: {f.text}" for f in findings] or ["- none from status and events"]
    lines += [f"- stale event set aside: {_event_line(i['event'])} ({why})" for i, why in stale]
    data = {
        "unhealthy": sick,
        "workloads": hpas + workloads,
        "findings": [f.to_json() for f in findings],
        "stale": len(stale),
        "pods": len(pods),
        "now": dump_now(pods, events),
        "preemptions": preempts,
    }
    return scope.result(f"triage {namespace}", "\n".join(lines), data)


# -- who owns what ---------------------------------------------------------------------------


def _pod_count(ns: Namespace, kind: str, name: str) -> int:
    """How many pods of the namespace a workload owns (a Deployment through its ReplicaSets)."""
    index = _owner_index(ns)
    if kind == "deployments":
        return sum(index.pods_of.get(rs, 0) for rs in index.replicasets_of.get(name, ()))
    return index.pods_of.get(name, 0)


def _workload(ns: Namespace, owner: tuple[str, str] | None) -> str | None:
    """The top controller's name: a pod's ReplicaSet's Deployment, else the owner itself."""
    if owner is None:
        return None
    if owner[0] == "ReplicaSet":
        return _owner_index(ns).top.get(owner[1], owner[1])
    return owner[1]


@dataclass(frozen=True, kw_only=True, slots=True)
class _OwnerIndex:
    """Who owns what in one namespace, built once (the triage stays linear in its size)."""

    top: dict[str, str]
    """A ReplicaSet's name -> its Deployment's (or itself when it has no owner)."""
    replicasets_of: dict[str, tuple[str, ...]]
    """A Deployment's name -> its ReplicaSets' names."""
    pods_of: dict[str, int]
    """An owner's name -> how many pods it owns."""


def _owner_index(ns: Namespace) -> _OwnerIndex:
    held = ns.derived.get("owners")
    if isinstance(held, _OwnerIndex):
        return held
    top: dict[str, str] = {}
    of_dep: dict[str, list[str]] = {}
    for rs in ns.items("replicasets"):
        name, up = str(_meta(rs).get("name")), _owner(rs)
        top[name] = up[1] if up else name
        if up and up[0] == "Deployment":
            of_dep.setdefault(up[1], []).append(name)
    pods_of: dict[str, int] = {}
    for p in ns.items("pods"):
        up = _owner(p)
        if up:
            pods_of[up[1]] = pods_of.get(up[1], 0) + 1
    index = _OwnerIndex(
        top=top, replicasets_of={k: tuple(v) for k, v in of_dep.items()}, pods_of=pods_of
    )
    ns.derived["owners"] = index
    return index
