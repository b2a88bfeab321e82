"""The SRE tool set, read-only, over stdio.

``python -m loopkernel_apps.sre.tools --dump DUMP --namespace NS [--audit FILE]``

::

    triage           the namespace's unhealthy workloads and pods, with findings
    list_pods        every pod: phase, readiness, restarts, owner
    describe_pod     status, container states, limits, probes, env, its events
    pod_logs         current or previous instance, last N lines
    events           of the namespace or of one object; stale ones labelled
    workload_status  deployment / replicaset / job / daemonset / statefulset
    rollout_history  a deployment's revisions, and what each changed (image, env, probes)
    node_capacity    capacity, allocatable, conditions and taints per node
    services         each Service's selector against the pods' labels (its endpoints)
    claims           the PersistentVolumeClaims the pods mount, and the events on them
    autoscalers      HorizontalPodAutoscalers: replicas against min/max, conditions

All are ``read_only`` (``tool-defs.json``, frozen). The server, not its caller, holds the
scope: the namespace is given on its command line by the run, and a request naming any
other namespace is answered with ``refused`` set and no data. Every result is redacted
(``_redact.redact``) and its ``content`` capped at ``ITEM_CAP`` characters, the cut
recorded in ``truncated``; logs keep their tail, everything else its head.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopkernel import JSON, ToolError
from loopkernel.tools import CallInfo, ToolDefs, ToolHost, ToolSource, load_tool_defs
from loopkernel_apps.sre._detect import detect, stale_events
from loopkernel_apps.sre._detect_nodes import dump_now
from loopkernel_apps.sre._dump import Dump, Namespace, load_dump
from loopkernel_apps.sre._preempt import preemptions
from loopkernel_apps.sre._redact import redact, secret_values
from loopkernel_apps.sre.tools import _workload as _wl
from loopkernel_apps.sre.tools._render import (
    _event_line,
    _event_subset,
    _meta,
    _owner,
    _pod_subset,
    describe,
)

__all__ = ["AUDIT_ENV", "DEFS", "ITEM_CAP", "build_host", "main", "tool_source"]

DEFS = Path(__file__).with_name("tool-defs.json")
ITEM_CAP = 3500
"""Characters of ``content`` per result."""


@functools.cache
def _defs() -> ToolDefs:
    return load_tool_defs(DEFS)


AUDIT_ENV = "LOOPKERNEL_SRE_AUDIT"
"""A file the server appends one line to per request it serves (``--audit``)."""


def tool_source(dump: str, namespace: str, *, timeout: float = 30.0) -> ToolSource:
    """The tools server for one run: its dump and its namespace (and ``$LOOPKERNEL_SRE_AUDIT``)."""
    args = ["--dump", os.fspath(Path(dump).resolve()), "--namespace", namespace]
    if os.environ.get(AUDIT_ENV):
        args += ["--audit", os.fspath(Path(os.environ[AUDIT_ENV]).resolve())]
    return ToolSource.python_module(
        "sre",
        "loopkernel_apps.sre.tools",
        *args,
        defs=_defs(),
        timeouts={name: timeout for name in _defs().names()},
    )


# -- the host --------------------------------------------------------------------------------


class Scope:
    """One run's view of a dump: its namespace, the secret literals to scrub, the caps."""

    def __init__(self, dump: Dump, namespace: str) -> None:
        self.dump = dump
        self.name = namespace
        self.ns: Namespace = dump.namespace(namespace)
        self.secrets = secret_values(
            pod for ns in dump.namespaces.values() for pod in ns.items("pods")
        )

    def result(
        self, source: str, content: str, data: dict[str, Any], *, tail: bool = False
    ) -> dict[str, JSON]:
        content = redact(content, self.secrets)
        data = redact(data, self.secrets)
        truncated = len(content) > ITEM_CAP
        if truncated:
            note = f"[truncated: {ITEM_CAP} of {len(content)} characters kept]"
            content = (
                note + "\n" + content[-ITEM_CAP:] if tail else content[:ITEM_CAP] + "\n" + note
            )
        return {
            "source": source,
            "content": content,
            "truncated": truncated,
            "data": data,
            "refused": None,
        }

    def refuse(self, tool: str, asked: str) -> dict[str, JSON]:
        why = (
            f"namespace {asked!r} is outside this investigation's scope "
            f"(namespace {self.name!r}); {tool} was not run"
        )
        return {
            "source": f"{tool} {asked}",
            "content": why,
            "truncated": False,
            "data": {},
            "refused": why,
        }

    def pod(self, name: str) -> dict[str, Any]:
        pod = self.ns.pod(name)
        if pod is None:
            raise ToolError(f"no pod {name!r} in namespace {self.name!r}", tool="describe_pod")
        return pod

    def events_of(self, name: str | None = None) -> list[dict[str, Any]]:
        evs = [
            e
            for e in self.ns.items("events")
            if name is None or e.get("involvedObject", {}).get("name") == name
        ]
        return sorted(evs, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def stale_map(self, events: list[dict[str, Any]]) -> dict[int, str]:
        pods = [{"ref": None, "pod": p} for p in self.ns.items("pods")]
        items = [{"ref": None, "event": e} for e in events]
        return {id(item["event"]): why for item, why in stale_events(items, pods)}


_Fn = Callable[[dict[str, JSON]], JSON]


def _unhealthy(pod: dict[str, Any]) -> bool:
    status = pod.get("status", {})
    if status.get("phase") not in ("Running", "Succeeded"):
        return True
    for s in status.get("containerStatuses", []) or []:
        if status.get("phase") == "Running" and not s.get("ready"):
            return True
        if int(s.get("restartCount", 0)) > 0:
            return True
    return False


def build_host(dump: Dump, namespace: str, *, audit: str | None = None) -> ToolHost:
    """The tool set over ``dump``, serving ``namespace`` only; ``audit`` logs each request."""
    host = ToolHost(_defs())
    scope = Scope(dump, namespace)

    def log(call: CallInfo, args: dict[str, JSON], refused: bool) -> None:
        if audit is None:
            return
        line = {"key": call.key, "tool": call.tool, "args": args, "refused": refused}
        fd = os.open(audit, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
        finally:
            os.close(fd)

    def scoped(tool: str) -> Callable[[_Fn], _Fn]:
        def wrap(fn: _Fn) -> _Fn:
            async def handler(args: dict[str, JSON], call: CallInfo) -> JSON:
                asked = args.get("namespace")
                refused = asked is not None and asked != namespace
                log(call, args, refused)
                if refused:
                    return scope.refuse(tool, str(asked))
                result: JSON = fn(args)
                return result

            host.add(tool, handler)
            return fn

        return wrap

    @scoped("triage")
    def triage(args: dict[str, JSON]) -> JSON:
        ns = scope.ns
        pods = [{"ref": None, "pod": p} for p in ns.items("pods")]
        events = [{"ref": None, "event": e} for e in ns.items("events")]
        findings, stale = detect(pods, events, [])
        unhealthy = []
        lines = [f"namespace {namespace}: {len(pods)} pods"]
        node_ready = {
            str(_meta(n).get("name")): any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in n.get("status", {}).get("conditions", []) or []
            )
            for n in scope.dump.nodes
        }
        for p in ns.items("pods"):
            if not _unhealthy(p):
                continue
            owner = _owner(p)
            containers = []
            st_ = p.get("status", {})
            init_names = {s.get("name") for s in st_.get("initContainerStatuses") or []}
            for s in (st_.get("initContainerStatuses") or []) + (
                st_.get("containerStatuses") or []
            ):
                if (
                    s.get("name") in init_names
                    and (s.get("state") or {}).get("terminated", {}).get("exitCode") == 0
                ):
                    continue  # an init container that completed
                state = next(iter(s.get("state") or {"unknown": {}}))
                reason = ((s.get("state") or {}).get(state) or {}).get("reason")
                last_term = (s.get("lastState") or {}).get("terminated") or {}
                containers.append(
                    {
                        "name": s.get("name"),
                        "restarts": s.get("restartCount", 0),
                        "state": state,
                        "reason": reason,
                        "last_reason": last_term.get("reason"),
                        "ready": bool(s.get("ready")),
                        "started": ((s.get("state") or {}).get("running") or {}).get("startedAt"),
                        "last_finished": last_term.get("finishedAt"),
                        "last_exit": last_term.get("exitCode"),
                        **({"init": True} if s.get("name") in init_names else {}),
                    }
                )
            entry = {
                "pod": _meta(p).get("name"),
                "phase": p.get("status", {}).get("phase"),
                "owner_kind": owner[0] if owner else None,
                "owner": owner[1] if owner else None,
                "workload": _workload(ns, owner),
                "containers": containers,
                "reason": st_.get("reason"),
                "node": p.get("spec", {}).get("nodeName"),
                "node_ready": node_ready.get(str(p.get("spec", {}).get("nodeName"))),
            }
            unhealthy.append(entry)
            desc = ", ".join(
                f"{c['name']} {c['state']}{'(' + c['reason'] + ')' if c['reason'] else ''} "
                f"restarts={c['restarts']}{' last=' + c['last_reason'] if c['last_reason'] else ''}"
                for c in containers
            )
            lines.append(
                f"UNHEALTHY pod {entry['pod']} phase={entry['phase']}"
                + (f" reason={entry['reason']}" if entry["reason"] else "")
                + f" owner={entry['owner_kind']}/{entry['owner']}: "
                + (desc or "no containers started")
            )
        workloads = []
        for h in ns.items("horizontalpodautoscalers"):
            hs, hspec = h.get("status", {}), h.get("spec", {})
            if hspec.get("maxReplicas") and int(hs.get("currentReplicas") or 0) >= int(
                hspec["maxReplicas"]
            ):
                target = hspec.get("scaleTargetRef", {}).get("name")
                workloads.append(
                    {
                        "kind": "hpa",
                        "name": _meta(h).get("name"),
                        "target": target,
                        "desired": hspec["maxReplicas"],
                        "ready": hs.get("currentReplicas"),
                        "failed": 0,
                        "at_max": True,
                    }
                )
                lines.append(f"hpa {_meta(h).get('name')}: at maxReplicas {hspec['maxReplicas']}")
        for kind in ("deployments", "daemonsets", "statefulsets", "jobs"):
            for w in ns.items(kind):
                st = w.get("status", {})
                want = w.get("spec", {}).get("replicas", st.get("desiredNumberScheduled"))
                ready = st.get("readyReplicas", st.get("numberReady", st.get("succeeded", 0)))
                failed = st.get("failed", 0)
                bad = [f"{c.get('type')}={c.get('reason')}" for c in st.get("conditions", []) or []
                       if (c.get("type") == "Failed" and c.get("status") == "True")
                       or c.get("reason") == "ProgressDeadlineExceeded"]  # fmt: skip
                workloads.append(
                    {
                        "kind": kind[:-1],
                        "name": _meta(w).get("name"),
                        "desired": want,
                        "ready": ready or 0,
                        "failed": failed,
                        "conditions": bad,
                        "pods": _pod_count(ns, kind, str(_meta(w).get("name"))),
                    }
                )
                lines.append(
                    f"{kind[:-1]} {_meta(w).get('name')}: ready {ready or 0}/{want}"
                    + (f", failed {failed}" if failed else "")
                    + (f" ({', '.join(bad)})" if bad else "")
                )
        preempts = preemptions(ns.items("pods"), ns.items("events"), namespace)
        for pr in preempts:
            lines.append(
                f"preempted: pod {pr['victim']} ({pr['victim_kind']} {pr['victim_workload']}"
                f"{'' if pr['victim_exists'] else ', gone since'}): {pr['message']}"
            )
        lines.append("findings:")
        lines += [f"- {f.detector}: {f.text}" for f in findings] or [
            "- none from status and events"
        ]
        for item, why in stale:
            lines.append(f"- stale event set aside: {_event_line(item['event'])} ({why})")
        data = {
            "unhealthy": unhealthy,
            "workloads": workloads,
            "findings": [f.to_json() for f in findings],
            "stale": len(stale),
            "pods": len(pods),
            "now": dump_now(pods, events),
            "preemptions": preempts,
        }
        return scope.result(f"triage {namespace}", "\n".join(lines), data)

    @scoped("list_pods")
    def list_pods(args: dict[str, JSON]) -> JSON:
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
        return scope.result(f"pods.json {namespace}", "\n".join(rows), {"pods": data})

    @scoped("describe_pod")
    def describe_pod(args: dict[str, JSON]) -> JSON:
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
        return scope.result(f"pod {namespace}/{args['pod']}", describe(pod, events, stale), data)

    @scoped("pod_logs")
    def pod_logs(args: dict[str, JSON]) -> JSON:
        name = str(args["pod"])
        pod = scope.pod(name)
        spec_ = pod.get("spec", {})
        names = [c.get("name") for c in spec_.get("containers", [])]
        inits = [c.get("name") for c in spec_.get("initContainers", []) or []]
        container = args.get("container")
        if container is None:
            if len(names) != 1:
                raise ToolError(f"pod {name} has containers {names}: name one", tool="pod_logs")
            container = names[0]
        if container not in names + inits:
            raise ToolError(
                f"pod {name} has no container {container!r} ({names + inits})", tool="pod_logs"
            )
        previous = bool(args.get("previous", False))
        tail = int(str(args.get("tail", 200)))
        text = scope.ns.logs.get((name, str(container), previous))
        which = "previous" if previous else "current"
        source = f"logs {namespace}/{name}/{container} ({which})"
        if text is None:
            note = f"no {which} log for container {container} of pod {name} in the dump" + (
                " (collect it with kubectl logs --previous)"
                if previous
                else " (kubectl cluster-info dump writes no init container logs; sre collect does)"
                if container in inits
                else ""
            )
            data = {"pod": name, "container": container, "previous": previous, "available": False}
            return scope.result(source, note, data)
        lines = text.splitlines()[-tail:]
        data = {
            "pod": name,
            "container": container,
            "previous": previous,
            "available": True,
            "lines": len(lines),
        }
        return scope.result(source, "\n".join(lines), data, tail=True)

    @scoped("events")
    def events(args: dict[str, JSON]) -> JSON:
        obj = args.get("object")
        evs = scope.events_of(None if obj is None else str(obj))
        stale = scope.stale_map(evs)
        lines = [_event_line(e, stale.get(id(e))) for e in evs] or ["<no events>"]
        data = {"events": [_event_subset(e) for e in evs], "stale": [stale.get(id(e)) for e in evs]}
        what = f"events {namespace}" + (f" {obj}" if obj else "")
        return scope.result(what, "\n".join(lines), data)

    @scoped("workload_status")
    def workload_status(args: dict[str, JSON]) -> JSON:
        kind, name = str(args["kind"]), str(args["name"])
        for w in scope.ns.items(kind + "s"):
            if _meta(w).get("name") == name:
                st = w.get("status", {})
                lines = [f"{kind} {namespace}/{name}"]
                for k, v in sorted(st.items()):
                    if k != "conditions":
                        lines.append(f"  {k}: {v}")
                for c in st.get("conditions", []) or []:
                    lines.append(
                        f"  condition {c.get('type')}={c.get('status')} "
                        f"{c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
                    )
                wspec = w.get("spec", {})
                keys = (
                    "replicas backoffLimit activeDeadlineSeconds completions parallelism "
                    "schedule suspend"
                )
                spec_subset = {k: wspec[k] for k in keys.split() if k in wspec}
                for k, v in sorted(spec_subset.items()):
                    lines.append(f"  spec.{k}: {v}")
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
        raise ToolError(f"no {kind} {name!r} in namespace {namespace!r}", tool="workload_status")

    @scoped("rollout_history")
    def rollout_history(args: dict[str, JSON]) -> JSON:
        dep = str(args["deployment"])
        revisions = []
        templates: dict[str, Any] = {}
        for rs in scope.ns.items("replicasets"):
            owner = _owner(rs)
            if owner != ("Deployment", dep):
                continue
            rev = _meta(rs).get("annotations", {}).get("deployment.kubernetes.io/revision", "?")
            images = [
                c.get("image")
                for c in rs.get("spec", {})
                .get("template", {})
                .get("spec", {})
                .get("containers", [])
            ]
            st = rs.get("status", {})
            templates[str(_meta(rs).get("name"))] = rs.get("spec", {}).get("template", {})
            revisions.append(
                {
                    "revision": rev,
                    "replicaset": _meta(rs).get("name"),
                    "images": images,
                    "replicas": st.get("replicas", 0),
                    "ready": st.get("readyReplicas", 0),
                    "created": _meta(rs).get("creationTimestamp"),
                }
            )
        if not revisions:
            raise ToolError(f"no ReplicaSets of deployment {dep!r}", tool="rollout_history")
        revisions.sort(key=lambda r: int(r["revision"]) if str(r["revision"]).isdigit() else 0)
        lines = [f"deployment {namespace}/{dep}: REVISION REPLICASET IMAGES READY CREATED"]
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
            f"rollout {namespace}/{dep}",
            "\n".join(lines),
            {"revisions": revisions, "changes": changes},
        )

    @scoped("node_capacity")
    def node_capacity(args: dict[str, JSON]) -> JSON:
        lines, data = [], []
        for n in scope.dump.nodes:
            st = n.get("status", {})
            cap, alloc = st.get("capacity", {}), st.get("allocatable", {})
            name = _meta(n).get("name")
            conds = st.get("conditions", []) or []
            true = ",".join(c.get("type", "") for c in conds if c.get("status") == "True")
            extended = " ".join(
                f"{k}={v}" for k, v in sorted(cap.items()) if k not in ("cpu", "memory", "pods")
                and not k.startswith("hugepages")
            )  # fmt: skip
            taints = n.get("spec", {}).get("taints", []) or []
            lines.append(
                f"node {name}: capacity cpu={cap.get('cpu')} "
                f"memory={cap.get('memory')} pods={cap.get('pods')}"
                + (f" {extended}" if extended else "")
                + f"; allocatable cpu={alloc.get('cpu')} memory={alloc.get('memory')}; "
                f"conditions {true or '<none true>'}"
            )
            for c in conds:
                nominal = (c.get("type") == "Ready") == (c.get("status") == "True")
                if not nominal:
                    lines.append(
                        f"  condition {c.get('type')}={c.get('status')} {c.get('reason', '')}: "
                        f"{c.get('message', '')}"
                    )
            if taints:
                lines.append(
                    "  taints: "
                    + ", ".join(
                        f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}"
                        f":{t.get('effect')}"
                        for t in taints
                    )
                )
            if n.get("spec", {}).get("unschedulable"):
                lines.append("  unschedulable (cordoned)")
            here = [str(_meta(p).get("name")) for p in scope.ns.items("pods")
                    if p.get("spec", {}).get("nodeName") == name]  # fmt: skip
            if here:
                lines.append(f"  pods of {namespace} here: {', '.join(here)}")
            data.append({"name": name, "capacity": cap, "allocatable": alloc,
                         "conditions": conds, "taints": taints, "pods": here})  # fmt: skip
        return scope.result("nodes.json", "\n".join(lines) or "<no nodes>", {"nodes": data})

    @scoped("services")
    def services(args: dict[str, JSON]) -> JSON:
        text, data = _wl.services(scope.ns)
        return scope.result(f"services.json {namespace}", text, data)

    @scoped("claims")
    def claims(args: dict[str, JSON]) -> JSON:
        pod = args.get("pod")
        text, data = _wl.claims(scope.ns, None if pod is None else str(pod))
        return scope.result(f"claims {namespace}" + (f" {pod}" if pod else ""), text, data)

    @scoped("autoscalers")
    def autoscalers(args: dict[str, JSON]) -> JSON:
        text, data = _wl.autoscalers(scope.ns)
        return scope.result(f"horizontalpodautoscalers {namespace}", text, data)

    host.check_complete()
    return host


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loopkernel_apps.sre.tools")
    parser.add_argument("--dump", required=True, help="a kubectl cluster-info dump (dir or file)")
    parser.add_argument("--namespace", required=True, help="the only namespace served")
    parser.add_argument("--audit", help="append one JSON line per request served to this file")
    args = parser.parse_args(argv)
    build_host(load_dump(args.dump), args.namespace, audit=args.audit).run()
    return 0
