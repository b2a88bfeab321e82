"""The cause graph: which object a cause is about, which reason it states, what it explains.

A finding is about a pod; the report names the *root-cause object* instead: the workload
that owns the pod (Deployment, StatefulSet, DaemonSet, Job) where its owner is known, or
the object the detector observed directly (a PersistentVolumeClaim that does not bind, a
Node that is not Ready, a Service without endpoints, an autoscaler at its maximum, the
ResourceQuota a controller's ``FailedCreate`` names). The edges of the graph::

    Service without endpoints  -> the clients that fail on it
    Node not Ready             -> the workloads of the pods on it
    claim not bound            -> the workload whose pod waits for it
    ResourceQuota exceeded     -> the controller that cannot create pods
    autoscaler at maximum      -> its target
    a cause                    -> the symptoms ``split_symptoms`` hung under it

``explains`` lists the symptoms' objects (never the cause itself).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loopkernel_apps.sre._finding import Finding, _meta
from loopkernel_apps.sre._vocab_rows import default_reason

__all__ = ["Entity", "cause_entity", "explains", "owners", "reason_of"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Entity:
    """A Kubernetes object named as a cause or as what a cause explains."""

    kind: str
    namespace: str
    name: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name}


_TOP = {
    "ReplicaSet": "Deployment",
    "Job": "Job",
    "StatefulSet": "StatefulSet",
    "DaemonSet": "DaemonSet",
    "ReplicationController": "ReplicationController",
}


def _from_pod(pod: dict[str, Any]) -> tuple[str, str] | None:
    """``(kind, name)`` of the workload that owns ``pod``, read from its owner reference (a
    ReplicaSet's Deployment is its name without the pod-template-hash)."""
    meta = _meta(pod)
    ref = next((o for o in meta.get("ownerReferences", []) or [] if o.get("controller")), None)
    if ref is None:
        return None
    kind, name = str(ref.get("kind")), str(ref.get("name"))
    if kind == "ReplicaSet":
        h = str((meta.get("labels") or {}).get("pod-template-hash") or "")
        if h and name.endswith("-" + h):
            return "Deployment", name[: -len(h) - 1]
        return "ReplicaSet", name
    return _TOP.get(kind, kind), name


def owners(
    unhealthy: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], namespace: str
) -> dict[str, Entity]:
    """Each pod's root object by pod name: from the triage's owners (which resolved a
    ReplicaSet to its Deployment), else from the described pod's owner reference."""
    out: dict[str, Entity] = {}
    for item in pods:
        pod = item["pod"]
        top = _from_pod(pod)
        if top:
            out[str(_meta(pod).get("name"))] = Entity(kind=top[0], namespace=namespace, name=top[1])
    for u in unhealthy:
        kind, owner, workload = u.get("owner_kind"), u.get("owner"), u.get("workload")
        if not kind or not workload:
            continue
        top_kind = "Deployment" if kind == "ReplicaSet" and workload != owner else str(kind)
        out[str(u["pod"])] = Entity(kind=top_kind, namespace=namespace, name=str(workload))
    return out


def _of_pod(pod: str, known: Mapping[str, Entity], namespace: str) -> Entity:
    return known.get(pod) or Entity(kind="Pod", namespace=namespace, name=pod)


_QUOTA = re.compile(r"exceeded quota: ([\w.-]+)")


def cause_entity(f: Finding, known: Mapping[str, Entity], namespace: str) -> Entity:
    """The root-cause object of a finding."""
    x = f.extra

    def obj(kind: str, name: object) -> Entity:
        return Entity(kind=kind, namespace=namespace, name=str(name))

    if f.detector == "pvc_unbound" and x.get("claim"):
        return obj("PersistentVolumeClaim", x["claim"])
    if f.detector == "node_not_ready" and x.get("node"):
        return Entity(kind="Node", namespace="", name=str(x["node"]))
    if f.detector == "service_no_endpoints" and x.get("service"):
        return obj("Service", x["service"])
    if f.detector == "hpa_at_max" and x.get("hpa"):
        return obj("HorizontalPodAutoscaler", x["hpa"])
    if f.detector == "upstream_unavailable" and x.get("host"):
        upstream = _service_of(str(x["host"]), known, namespace)
        if upstream is not None:
            return upstream
    if f.detector in ("scaled_to_zero", "preempted"):
        return obj(str(x.get("kind") or "Deployment"), x.get("object") or f.pod)
    if f.detector == "job_deadline":
        return obj("Job", x.get("job") or f.pod)
    if f.detector == "failed_create":
        quota = _QUOTA.search(f.quote)
        if quota:
            return obj("ResourceQuota", quota.group(1))
        kind = str(x.get("kind") or "ReplicaSet")
        name = str(x.get("object") or f.pod)
        if kind == "ReplicaSet":
            return known.get(f"rs:{name}") or obj("ReplicaSet", name)
        return obj(kind, name)
    return _of_pod(f.pod, known, namespace)


def _service_of(host: str, known: Mapping[str, Entity], namespace: str) -> Entity | None:
    """The namespace's Service a failing address names (its DNS name or its ClusterIP)."""
    name = host.rsplit(":", 1)[0].strip("[]")
    if f"ip:{name}" in known:
        return known[f"ip:{name}"]
    labels = name.split(".")
    if len(labels) > 1 and labels[1] not in (namespace, "svc"):
        return None  # another namespace's, or an outside host
    return known.get(f"svc:{labels[0]}")


def reason_of(f: Finding) -> str:
    """The Kubernetes reason (or error class) the cause states: what the detector read, else
    its vocabulary row's reason."""
    got = f.extra.get("reason")
    if f.detector == "failed_create":
        return "FailedCreate"
    return str(got) if got else default_reason(f.detector)


def explains(
    f: Finding,
    entity: Entity,
    symptoms: Iterable[tuple[Finding, Finding]],
    known: Mapping[str, Entity],
    namespace: str,
) -> list[Entity]:
    """The objects whose trouble this cause explains (its symptoms' and its victims')."""
    out: list[Entity] = []
    if f.detector in ("pvc_unbound", "node_not_ready") or (
        f.detector in ("service_no_endpoints", "upstream_unavailable") and f.extra.get("client")
    ):
        out.append(_of_pod(f.pod, known, namespace))
    for v in f.extra.get("victims", []) if f.detector == "preempted" else []:
        out.append(Entity(kind=str(v["kind"]), namespace=namespace, name=str(v["name"])))
    if f.detector == "scaled_to_zero" and f.extra.get("service"):
        out.append(Entity(kind="Service", namespace=namespace, name=str(f.extra["service"])))
    if f.detector == "hpa_at_max" and f.extra.get("target"):
        target = str(f.extra["target"])
        kind, _, name = target.rpartition("/")
        out.append(Entity(kind=kind or "Deployment", namespace=namespace, name=name))
    if f.detector == "failed_create" and entity.kind == "ResourceQuota":
        name = str(f.extra.get("object") or f.pod)
        out.append(
            known.get(f"rs:{name}")
            or Entity(kind=str(f.extra.get("kind") or "ReplicaSet"), namespace=namespace, name=name)
        )
    for symptom, cause in symptoms:
        if cause is f:
            out.append(_of_pod(symptom.pod, known, namespace))
    seen: list[Entity] = []
    for e in out:
        if e != entity and e not in seen:
            seen.append(e)
    return seen
