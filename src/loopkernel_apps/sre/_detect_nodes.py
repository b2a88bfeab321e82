"""Detectors on the node a pod ran on: evictions and nodes that are not Ready.

::

    evicted          status.reason Evicted, with the node condition behind it; not an eviction
                     that is history (``stale_evictions``)
    node_not_ready   an unready pod on a node whose Ready condition is not True
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from loopkernel_apps.sre._finding import Finding, _meta, _refs, _unhealthy

__all__ = ["dump_now", "stale_evictions"]


def _node_rows(nodes: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], str | None]]:
    return {str(n.get("name")): (n, item["ref"]) for item in nodes
            for n in item["data"].get("nodes", [])}  # fmt: skip


_EVICTED_USE = re.compile(
    r"Container (\S+) was using (\S+?),? (?:request is|which exceeds its request of) (\S+?)[,.]"
)


def _times(obj: Any) -> Iterator[str]:
    """Every RFC 3339 timestamp in an object's status (conditions, container states)."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _times(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _times(v)
    elif isinstance(obj, str) and _RFC3339.match(obj):
        yield obj


_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
STALE_EVICTION_S = 24 * 3600
"""An eviction this much older than the newest thing the dump shows is history."""


def _evicted_at(pod: dict[str, Any], mine: list[dict[str, Any]]) -> str:
    """When the pod was evicted: its ``Evicted`` event, else the latest time in its status."""
    for e in mine:
        if e["event"].get("reason") == "Evicted":
            ev = e["event"]
            return str(ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp"))
    return max(_times(pod.get("status", {})), default=str(_meta(pod).get("creationTimestamp", "")))


def _seconds(t: str) -> float:
    try:
        return datetime.fromisoformat(t[:19]).timestamp()
    except ValueError:
        return 0.0


def dump_now(pods: list[dict[str, Any]], events: list[dict[str, Any]]) -> str:
    """The dump's own "now": the newest RFC 3339 time in the pods' status and the events."""
    now = max((t for p in pods for t in _times(p["pod"].get("status", {}))), default="")
    for e in events:
        t = str(e["event"].get("lastTimestamp") or e["event"].get("eventTime") or "")
        if _RFC3339.match(t) and t > now:
            now = t
    return now


def _controller_uid(pod: dict[str, Any]) -> str | None:
    refs = _meta(pod).get("ownerReferences", []) or []
    return next((o.get("uid") for o in refs if o.get("controller")), None)


def stale_evictions(pods: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, str]:
    """``{pod: why}`` for the evicted pods whose eviction is not the current failure: a
    newer pod of the same controller exists and is itself unhealthy (it fails on its own,
    after the eviction), or the eviction is a day older than the newest time the dump
    shows. Such a pod is history, stated as a stale fact, never a verified cause.

    Linear in pods + events: the events are indexed by object name and the pods by
    controller uid once."""
    now = dump_now(pods, events)
    evicted = [p for p in pods if p["pod"].get("status", {}).get("reason") == "Evicted"]
    if not evicted:
        return {}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_name.setdefault(str(e["event"].get("involvedObject", {}).get("name")), []).append(e)
    failing: dict[str, list[tuple[str, str]]] = {}
    for p in pods:
        uid = _controller_uid(p["pod"])
        if uid and p["pod"].get("status", {}).get("reason") != "Evicted" and _unhealthy(p["pod"]):
            created = str(_meta(p["pod"]).get("creationTimestamp", ""))
            failing.setdefault(uid, []).append((created, _meta(p["pod"]).get("name", "")))
    out: dict[str, str] = {}
    for item in evicted:
        pod = item["pod"]
        name = _meta(pod).get("name", "")
        when = _evicted_at(pod, by_name.get(name, []))
        uid = _controller_uid(pod)
        newer = [n for created, n in failing.get(uid or "", []) if n != name and created > when]
        if newer:
            out[name] = (
                f"it was evicted at {when}, before pod {newer[0]} of the same controller was "
                "created, which fails on its own"
            )
        elif when and now and _seconds(now) - _seconds(when) > STALE_EVICTION_S:
            out[name] = (
                f"it was evicted at {when}, more than a day before the dump's newest time ({now})"
            )
    return out


def _evicted(
    item: dict[str, Any], nodes: list[dict[str, Any]], stale: dict[str, str]
) -> Iterator[Finding]:
    pod, ref = item["pod"], item["ref"]
    st = pod.get("status", {})
    if st.get("reason") != "Evicted" or _meta(pod).get("name", "") in stale:
        return
    name = _meta(pod).get("name", "")
    message = str(st.get("message") or "")
    m = re.search(r"The node was low on resource: [\w-]+", message)
    quote = m.group(0) if m else (message[:120] or "Evicted")
    node = str(pod.get("spec", {}).get("nodeName") or "")
    row, node_ref = _node_rows(nodes).get(node, ({}, None))
    pressure = [
        f"{c['type']}={c['status']} ({c.get('reason', '')})"
        for c in row.get("conditions", []) or []
        if c.get("type", "").endswith("Pressure") and c.get("status") == "True"
    ]
    use = _EVICTED_USE.search(message)
    by = (
        f"; container {use.group(1)} used {use.group(2)} against a request of {use.group(3)}"
        if use
        else ""
    )
    on = f" (node {node}: {', '.join(pressure)})" if pressure else ""
    text = f"Pod {name} was evicted by the kubelet: {quote}{on}{by}."
    yield Finding(
        detector="evicted",
        pod=name,
        container=use.group(1) if use else None,
        text=text,
        quote=quote,
        identifiers=(name,),
        refs=_refs(ref, node_ref if pressure else None),
        extra={"node": node, "pressure": pressure, "resource": quote.rsplit(" ", 1)[-1]},
    )


def _node_not_ready(
    item: dict[str, Any], mine: list[dict[str, Any]], nodes: list[dict[str, Any]]
) -> Iterator[Finding]:
    pod, ref = item["pod"], item["ref"]
    node = str(pod.get("spec", {}).get("nodeName") or "")
    if not node or not _unhealthy(pod) or pod.get("status", {}).get("reason") == "Evicted":
        return
    row, node_ref = _node_rows(nodes).get(node, ({}, None))
    ready = next((c for c in row.get("conditions", []) or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") == "True":
        return
    name = _meta(pod).get("name", "")
    msg = str(ready.get("message") or ready.get("reason") or "")
    text = (
        f"Pod {name} runs on node {node}, whose Ready condition is {ready.get('status')} "
        f"({ready.get('reason', '')}: {msg}); the pod's containers cannot be served there."
    )
    yield Finding(
        detector="node_not_ready",
        pod=name,
        container=None,
        text=text,
        quote=msg,
        identifiers=(node,),
        refs=_refs(
            node_ref,
            ref,
            *[
                e["ref"]
                for e in mine
                if e["event"].get("reason") in ("NodeNotReady", "TaintManagerEviction")
            ],
        ),
        extra={"node": node, "status": ready.get("status")},
    )
