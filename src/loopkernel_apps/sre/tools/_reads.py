"""The read tools past the triage, one function each: ``fn(scope, args) -> result``.

``READS`` names them for ``build_host``; each answers from the run's ``Scope`` only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from loopkernel import JSON, ToolError
from loopkernel_apps.sre.tools import _workload as _wl
from loopkernel_apps.sre.tools._render import (
    _event_line,
    _event_subset,
    _meta,
    _owner,
    _pod_subset,
    describe,
)
from loopkernel_apps.sre.tools._scope import Scope
from loopkernel_apps.sre.tools._triage import triage

__all__ = ["READS", "Read"]

Read = Callable[[Scope, dict[str, JSON]], JSON]


def list_pods(scope: Scope, args: dict[str, JSON]) -> JSON:
    rows, data = [], []
    for p in scope.ns.items("pods"):
        st = p.get("status", {})
        cs = st.get("containerStatuses", []) or []
        ready = sum(1 for s in cs if s.get("ready"))
        restarts = sum(int(s.get("restartCount", 0)) for s in cs)
        owner = _owner(p)
        name = _meta(p).get("name")
        rows.append(
            f"{name}  {ready}/{len(p.get('spec', {}).get('containers', []))}  "
            f"{st.get('phase')}  restarts={restarts}  "
            f"owner={owner[0] + '/' + owner[1] if owner else '-'}"
        )
        data.append(
            {
                "name": name,
                "phase": st.get("phase"),
                "ready": ready,
                "restarts": restarts,
                "owner": owner[1] if owner else None,
            }
        )
    return scope.result(f"pods.json {scope.name}", "\n".join(rows), {"pods": data})


def describe_pod(scope: Scope, args: dict[str, JSON]) -> JSON:
    pod = scope.pod(str(args["pod"]))
    events = scope.events_of(str(args["pod"]))
    stale = scope.stale_map(events)
    refs = _wl.config_refs(pod)
    absent = [k for k in ("configmaps", "secrets") if refs[k] and k not in scope.ns.lists]
    data = {
        "pod": _pod_subset(pod),
        "events": [_event_subset(e) for e in events],
        "stale": [stale.get(id(e)) for e in events],
        "absent": absent,
        "config_refs": {k: sorted(v) for k, v in refs.items()},
    }
    return scope.result(f"pod {scope.name}/{args['pod']}", describe(pod, events, stale), data)


def _log_container(pod: dict[str, Any], name: str, container: JSON) -> tuple[str, list[Any]]:
    """The container a log request means, and the pod's init containers."""
    spec_ = pod.get("spec", {})
    names = [c.get("name") for c in spec_.get("containers", [])]
    inits = [c.get("name") for c in spec_.get("initContainers", []) or []]
    if container is None:
        if len(names) != 1:
            raise ToolError(f"pod {name} has containers {names}: name one", tool="pod_logs")
        container = names[0]
    if container not in names + inits:
        raise ToolError(
            f"pod {name} has no container {container!r} ({names + inits})", tool="pod_logs"
        )
    return str(container), inits


def _no_log(which: str, container: str, name: str, previous: bool, init: bool) -> str:
    return f"no {which} log for container {container} of pod {name} in the dump" + (
        " (collect it with kubectl logs --previous)"
        if previous
        else " (kubectl cluster-info dump writes no init container logs; sre collect does)"
        if init
        else ""
    )


def pod_logs(scope: Scope, args: dict[str, JSON]) -> JSON:
    name = str(args["pod"])
    container, inits = _log_container(scope.pod(name), name, args.get("container"))
    previous = bool(args.get("previous", False))
    tail = int(str(args.get("tail", 200)))
    text = scope.ns.logs.get((name, container, previous))
    which = "previous" if previous else "current"
    source = f"logs {scope.name}/{name}/{container} ({which})"
    data: dict[str, Any] = {"pod": name, "container": container, "previous": previous}
    if text is None:
        note = _no_log(which, container, name, previous, container in inits)
        return scope.result(source, note, {**data, "available": False})
    lines = text.splitlines()[-tail:]
    data.update(available=True, lines=len(lines))
    return scope.result(source, "\n".join(lines), data, tail=True)


def events(scope: Scope, args: dict[str, JSON]) -> JSON:
    obj = args.get("object")
    evs = scope.events_of(None if obj is None else str(obj))
    stale = scope.stale_map(evs)
    lines = [_event_line(e, stale.get(id(e))) for e in evs] or ["<no events>"]
    data = {"events": [_event_subset(e) for e in evs], "stale": [stale.get(id(e)) for e in evs]}
    what = f"events {scope.name}" + (f" {obj}" if obj else "")
    return scope.result(what, "\n".join(lines), data)


_SPEC_KEYS = (
    "replicas",
    "backoffLimit",
    "activeDeadlineSeconds",
    "completions",
    "parallelism",
    "schedule",
    "suspend",
)


def _status_lines(st: dict[str, Any]) -> list[str]:
    lines = [f"  {k}: {v}" for k, v in sorted(st.items()) if k != "conditions"]
    lines += [
        f"  condition {c.get('type')}={c.get('status')} "
        f"{c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
        for c in st.get("conditions", []) or []
    ]
    return lines


def workload_status(scope: Scope, args: dict[str, JSON]) -> JSON:
    kind, name, namespace = str(args["kind"]), str(args["name"]), scope.name
    w = next((w for w in scope.ns.items(kind + "s") if _meta(w).get("name") == name), None)
    if w is None:
        raise ToolError(f"no {kind} {name!r} in namespace {namespace!r}", tool="workload_status")
    st, wspec = w.get("status", {}), w.get("spec", {})
    spec_subset = {k: wspec[k] for k in _SPEC_KEYS if k in wspec}
    lines = [f"{kind} {namespace}/{name}", *_status_lines(st)]
    lines += [f"  spec.{k}: {v}" for k, v in sorted(spec_subset.items())]
    pods = [
        str(_meta(p).get("name"))
        for p in scope.ns.items("pods")
        if _owner(p) is not None and _owner(p)[1] == name  # type: ignore[index]
    ]
    data = {
        "kind": kind,
        "name": name,
        "status": st,
        "replicas": wspec.get("replicas"),
        "spec": spec_subset,
        "pods": pods,
    }
    return scope.result(f"{kind}s.json {namespace}/{name}", "\n".join(lines), data)


def _revisions(scope: Scope, dep: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A deployment's ReplicaSets as revisions, oldest first, and their pod templates."""
    revisions = []
    templates: dict[str, Any] = {}
    for rs in scope.ns.items("replicasets"):
        if _owner(rs) != ("Deployment", dep):
            continue
        rev = _meta(rs).get("annotations", {}).get("deployment.kubernetes.io/revision", "?")
        template = rs.get("spec", {}).get("template", {})
        st = rs.get("status", {})
        templates[str(_meta(rs).get("name"))] = template
        revisions.append(
            {
                "revision": rev,
                "replicaset": _meta(rs).get("name"),
                "images": [c.get("image") for c in template.get("spec", {}).get("containers", [])],
                "replicas": st.get("replicas", 0),
                "ready": st.get("readyReplicas", 0),
                "created": _meta(rs).get("creationTimestamp"),
            }
        )
    revisions.sort(key=lambda r: int(r["revision"]) if str(r["revision"]).isdigit() else 0)
    return revisions, templates


def rollout_history(scope: Scope, args: dict[str, JSON]) -> JSON:
    dep = str(args["deployment"])
    revisions, templates = _revisions(scope, dep)
    if not revisions:
        raise ToolError(f"no ReplicaSets of deployment {dep!r}", tool="rollout_history")
    lines = [f"deployment {scope.name}/{dep}: REVISION REPLICASET IMAGES READY CREATED"]
    lines += [
        f"  {r['revision']} {r['replicaset']} {','.join(map(str, r['images']))} "
        f"{r['ready']}/{r['replicas']} {r['created']}"
        for r in revisions
    ]
    changes = []
    for old, new in itertools.pairwise(revisions):
        diff = _wl.template_changes(templates[old["replicaset"]], templates[new["replicaset"]])
        new["changes"] = diff
        lines.append(
            f"revision {new['revision']} against {old['revision']}: "
            + ("; ".join(diff) or "no change to the containers")
        )
        changes += [{"revision": new["revision"], "from": old["revision"], "change": d}
                    for d in diff]  # fmt: skip
    return scope.result(
        f"rollout {scope.name}/{dep}",
        "\n".join(lines),
        {"revisions": revisions, "changes": changes},
    )


def _node_lines(n: dict[str, Any]) -> list[str]:
    st = n.get("status", {})
    cap, alloc = st.get("capacity", {}), st.get("allocatable", {})
    conds = st.get("conditions", []) or []
    true = ",".join(c.get("type", "") for c in conds if c.get("status") == "True")
    extended = " ".join(
        f"{k}={v}" for k, v in sorted(cap.items()) if k not in ("cpu", "memory", "pods")
        and not k.startswith("hugepages")
    )  # fmt: skip
    lines = [
        f"node {_meta(n).get('name')}: capacity cpu={cap.get('cpu')} "
        f"memory={cap.get('memory')} pods={cap.get('pods')}"
        + (f" {extended}" if extended else "")
        + f"; allocatable cpu={alloc.get('cpu')} memory={alloc.get('memory')}; "
        f"conditions {true or '<none true>'}"
    ]
    lines += [
        f"  condition {c.get('type')}={c.get('status')} {c.get('reason', '')}: "
        f"{c.get('message', '')}"
        for c in conds
        if (c.get("type") == "Ready") != (c.get("status") == "True")
    ]
    taints = n.get("spec", {}).get("taints", []) or []
    if taints:
        lines.append(
            "  taints: "
            + ", ".join(
                f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
                for t in taints
            )
        )
    if n.get("spec", {}).get("unschedulable"):
        lines.append("  unschedulable (cordoned)")
    return lines


def node_capacity(scope: Scope, args: dict[str, JSON]) -> JSON:
    lines, data = [], []
    for n in scope.dump.nodes:
        st, name = n.get("status", {}), _meta(n).get("name")
        lines += _node_lines(n)
        here = [str(_meta(p).get("name")) for p in scope.ns.items("pods")
                if p.get("spec", {}).get("nodeName") == name]  # fmt: skip
        if here:
            lines.append(f"  pods of {scope.name} here: {', '.join(here)}")
        data.append(
            {
                "name": name,
                "capacity": st.get("capacity", {}),
                "allocatable": st.get("allocatable", {}),
                "conditions": st.get("conditions", []) or [],
                "taints": n.get("spec", {}).get("taints", []) or [],
                "pods": here,
            }
        )
    return scope.result("nodes.json", "\n".join(lines) or "<no nodes>", {"nodes": data})


def services(scope: Scope, args: dict[str, JSON]) -> JSON:
    text, data = _wl.services(scope.ns)
    return scope.result(f"services.json {scope.name}", text, data)


def claims(scope: Scope, args: dict[str, JSON]) -> JSON:
    pod = args.get("pod")
    text, data = _wl.claims(scope.ns, None if pod is None else str(pod))
    return scope.result(f"claims {scope.name}" + (f" {pod}" if pod else ""), text, data)


def autoscalers(scope: Scope, args: dict[str, JSON]) -> JSON:
    text, data = _wl.autoscalers(scope.ns)
    return scope.result(f"horizontalpodautoscalers {scope.name}", text, data)


READS: dict[str, Read] = {
    "triage": triage,
    "list_pods": list_pods,
    "describe_pod": describe_pod,
    "pod_logs": pod_logs,
    "events": events,
    "workload_status": workload_status,
    "rollout_history": rollout_history,
    "node_capacity": node_capacity,
    "services": services,
    "claims": claims,
    "autoscalers": autoscalers,
}
"""The tools that read the dump, by name."""
