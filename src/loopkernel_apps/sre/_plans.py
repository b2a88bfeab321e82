"""A report's proposed remediation as write-call plans for the fix server (``fix``).

``plans_for(report, ns)`` reads each verified cause of a Deployment's pods with the workload
as the dump shows it, and proposes the write the remediation text describes, when the
write tools can make it; a remediation that needs a person (fix a command, push an image,
define a variable) proposes none. Pure; a plan is data until a fix run parks it
(``_fixes.Fixes.propose``) and someone approves it.

::

    set_image        the newest revision changed a container's image: back to the previous's
    patch (limits)   oomkilled: the container's memory limit doubled
    patch (probe)    probe_failure: the failing probe's timeoutSeconds doubled
    scale            scaled_to_zero: back to the replicas its previous revision had (else 1)
    rollout_restart  a crash the remediation says to restart the pods for
    delete_pod       a pod on a node that is not ready, or evicted: its controller recreates it
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from loopkernel import JSON

__all__ = ["plans_for", "plans_of_run"]

REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
_QTY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_PROBE_OF = {"liveness": "livenessProbe", "readiness": "readinessProbe", "startup": "startupProbe"}


def plans_for(report: Mapping[str, Any], ns: Any) -> list[dict[str, JSON]]:
    """One plan per remediation that a write can carry out, first cause first; ``ns`` is the
    dump's namespace (``_dump.Namespace``) the report was made from."""
    actions = {r.get("detector"): r["action"] for r in report.get("proposed_remediation", [])}
    out: list[dict[str, JSON]] = []
    seen: set[str] = set()
    for cause in report.get("verified_causes", []):
        entity = cause.get("entity") or {}
        if entity.get("kind") != "Deployment" or cause.get("detector") not in actions:
            continue
        dep = _find(ns.items("deployments"), str(entity.get("name")))
        if dep is None:
            continue
        plan = _plan(cause, dep, _revisions(ns, dep))
        if plan is None or (key := repr(plan)) in seen:
            continue
        seen.add(key)
        out.append({"detector": cause["detector"], "action": actions[cause["detector"]],
                    "plan": plan})  # fmt: skip
    return out


def _plan(cause: Mapping[str, Any], dep: dict[str, Any], revs: list[Any]) -> JSON | None:
    name, detector = dep["metadata"]["name"], cause["detector"]
    container = str(cause.get("container") or "")
    spec = _container(dep, container)
    if len(revs) >= 2 and spec is not None:  # the newest revision changed the image: back
        before = _container(revs[-2], container)
        if before is not None and before.get("image") != spec.get("image"):
            args = {"deployment": name, "container": container, "image": before["image"]}
            return {"tool": "set_image", "args": args}
    if detector == "oomkilled" and spec is not None:
        limit = ((spec.get("resources") or {}).get("limits") or {}).get("memory")
        doubled = _double(str(limit)) if limit else None
        if doubled is None:
            return None
        return {"tool": "patch", "args": {"deployment": name, "container": container,
                                          "limits": {"memory": doubled}}}  # fmt: skip
    if detector == "probe_failure" and spec is not None:
        return _probe_plan(cause, name, container, spec)
    if detector == "scaled_to_zero":
        return {"tool": "scale", "args": {"deployment": name, "replicas": _before_zero(revs)}}
    if detector in ("node_not_ready", "evicted") and cause.get("pod"):
        return {"tool": "delete_pod", "args": {"pod": str(cause["pod"])}}
    if detector in ("crash_log_reason", "probe_failure"):
        return {"tool": "rollout_restart", "args": {"deployment": name}}
    return None


def _probe_plan(cause: Mapping[str, Any], name: str, container: str, spec: dict[str, Any]) -> JSON:
    said = " ".join(str(cause.get(k) or "") for k in ("text", "quote", "reason")).lower()
    kinds = [v for k, v in _PROBE_OF.items() if k in said and isinstance(spec.get(v), dict)]
    kinds += [v for v in _PROBE_OF.values() if isinstance(spec.get(v), dict)]
    if not kinds:
        return {"tool": "rollout_restart", "args": {"deployment": name}}
    kind = kinds[0]
    timeout = int(spec[kind].get("timeoutSeconds") or 1)
    probe = {"kind": kind, "set": {"timeoutSeconds": min(3600, timeout * 2)}}
    return {"tool": "patch", "args": {"deployment": name, "container": container, "probe": probe}}


def _find(items: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((i for i in items if i.get("metadata", {}).get("name") == name), None)


def _container(obj: dict[str, Any], name: str) -> dict[str, Any] | None:
    containers = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    return next((c for c in containers if c.get("name") == name), None)


def _revisions(ns: Any, dep: dict[str, Any]) -> list[dict[str, Any]]:
    """The deployment's ReplicaSets, oldest revision first."""
    name = dep["metadata"]["name"]
    owned = [
        rs for rs in ns.items("replicasets")
        if any(o.get("kind") == "Deployment" and o.get("name") == name
               for o in rs.get("metadata", {}).get("ownerReferences", []))
    ]  # fmt: skip

    def rev(rs: dict[str, Any]) -> int:
        raw = (rs["metadata"].get("annotations") or {}).get(REVISION, "0")
        return int(raw) if str(raw).isdigit() else 0

    return sorted(owned, key=rev)


def _before_zero(revs: list[dict[str, Any]]) -> int:
    for rs in reversed(revs):
        raw = (rs["metadata"].get("annotations") or {}).get(DESIRED)
        if raw is not None and str(raw).isdigit() and int(raw) > 0:
            return int(raw)
    return 1


def _double(quantity: str) -> str | None:
    m = _QTY.match(quantity)
    return None if m is None else f"{int(m.group(1)) * 2}{m.group(2) or ''}"


async def plans_of_run(client: Any, run_id: str) -> list[dict[str, JSON]]:
    """The plans of a finished investigation's report, on the dump it read."""
    import asyncio

    from loopkernel import UsageError
    from loopkernel_apps.sre._dump import load_dump

    info = await client.info(run_id)
    if info.app != "sre":
        raise UsageError(f"run {run_id} is not an investigation")
    tasks = {t["task_id"]: t for t in (await client.inspect(run_id)).tasks}
    done = tasks.get("report") or {}
    if done.get("state") != "succeeded":
        raise UsageError(f"run {run_id} has no report yet")
    report = done["result"]["report"]
    params = info.params
    ns = await asyncio.to_thread(lambda: load_dump(params["dump"]).namespace(params["namespace"]))
    return plans_for(report, ns)
