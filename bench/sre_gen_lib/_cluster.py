"""A cluster built object by object, written as ``kubectl cluster-info dump
--output-directory`` writes it (``DESIGN.md`` section 11).

Every object carries a uid; pods point at their ReplicaSet or Job, ReplicaSets at their
Deployment (``ownerReferences`` with the owner's uid); timestamps are ISO-8601 seconds
before the dump's ``now``.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

_SAFE = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet of Kubernetes' generated name suffixes (``rand.SafeEncodeString``)."""

_LISTS = {
    "events": "EventList", "pods": "PodList", "deployments": "DeploymentList",
    "replicasets": "ReplicaSetList", "services": "ServiceList", "daemonsets": "DaemonSetList",
    "replication-controllers": "ReplicationControllerList",
}  # fmt: skip
"""The lists ``kubectl cluster-info dump`` writes for every namespace, empty or not."""

MINUTE = 60
HOUR = 3600
DAY = 86400


@dataclass(frozen=True, kw_only=True, slots=True)
class Ref:
    """What an owner reference or an event's ``involvedObject`` needs of an object."""

    kind: str
    name: str
    uid: str
    api_version: str = "v1"


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A Deployment with its current ReplicaSet (or a Job): what its pods point at."""

    kind: str
    name: str
    labels: dict[str, str]
    owner: Ref
    """The pods' direct owner: the current ReplicaSet, or the Job."""
    top: Ref
    """The Deployment or the Job."""
    obj: Obj


@dataclass(kw_only=True, slots=True)
class Cluster:
    """The objects of one dump; ``now`` is when the dump was taken."""

    rng: random.Random
    now: datetime
    namespace: str
    nodes: list[Obj] = field(default_factory=list)
    lists: dict[str, dict[str, list[Obj]]] = field(default_factory=dict)
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    previous: dict[tuple[str, str, str], str] = field(default_factory=dict)

    # -- names, uids, time ---------------------------------------------------------------

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def suffix(self, n: int) -> str:
        return "".join(self.rng.choice(_SAFE) for _ in range(n))

    def ago(self, seconds: float) -> str:
        """The ISO timestamp ``seconds`` before ``now``."""
        return (self.now - timedelta(seconds=int(seconds))).strftime("%Y-%m-%dT%H:%M:%SZ")

    def at(self, seconds: float) -> datetime:
        return self.now - timedelta(seconds=int(seconds))

    def items(self, kind: str, ns: str | None = None) -> list[Obj]:
        return self.lists.setdefault(ns or self.namespace, {}).setdefault(kind, [])

    def add(self, kind: str, obj: Obj, ns: str | None = None) -> Obj:
        self.items(kind, ns).append(obj)
        return obj

    def meta(self, name: str, *, created: float, labels: dict[str, str] | None = None,
             owner: Ref | None = None, ns: str | None = None) -> Obj:  # fmt: skip
        m: Obj = {"name": name, "namespace": ns or self.namespace, "uid": self.uid(),
                  "resourceVersion": str(self.rng.randint(10_000, 9_000_000)),
                  "creationTimestamp": self.ago(created)}  # fmt: skip
        if labels:
            m["labels"] = dict(labels)
        if owner is not None:
            m["ownerReferences"] = [
                {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name,
                 "uid": owner.uid, "controller": True, "blockOwnerDeletion": True}
            ]  # fmt: skip
        return m

    # -- workloads -------------------------------------------------------------------------

    def deployment(self, name: str, containers: list[Obj], *, replicas: int, ready: int,
                   age: float = 20 * DAY, rollout: float = 2 * DAY, **spec: Any) -> Workload:  # fmt: skip
        """A Deployment, its previous ReplicaSet (scaled to 0) and its current one."""
        labels = {"app.kubernetes.io/name": name, "app": name}
        template: Obj = {"metadata": {"labels": labels}, "spec": {"containers": containers, **spec}}
        dep_meta = self.meta(name, created=age, labels=labels)
        revision = self.rng.randint(2, 40)
        dep_meta["generation"] = revision
        dep_meta["annotations"] = {"deployment.kubernetes.io/revision": str(revision)}
        unavailable = replicas - ready
        dep = self.add("deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": dep_meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                     "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600, "template": template},
            "status": {"observedGeneration": revision, "replicas": replicas, "updatedReplicas": replicas,
                       "readyReplicas": ready, "availableReplicas": ready,
                       **({"unavailableReplicas": unavailable} if unavailable else {}),
                       "conditions": [
                           {"type": "Available", "status": "True" if ready or not replicas else "False",
                            "reason": "MinimumReplicasAvailable" if ready or not replicas else "MinimumReplicasUnavailable",
                            "message": "Deployment has minimum availability." if ready or not replicas
                            else "Deployment does not have minimum availability.",
                            "lastUpdateTime": self.ago(rollout), "lastTransitionTime": self.ago(rollout)},
                           {"type": "Progressing", "status": "True",
                            "reason": "NewReplicaSetAvailable" if not unavailable else "ReplicaSetUpdated",
                            "message": f'ReplicaSet "{name}-…" has successfully progressed.' if not unavailable
                            else f'ReplicaSet "{name}-…" is progressing.',
                            "lastUpdateTime": self.ago(rollout), "lastTransitionTime": self.ago(age)},
                       ]},
        })  # fmt: skip
        top = Ref(kind="Deployment", name=name, uid=dep_meta["uid"], api_version="apps/v1")
        current: Ref | None = None
        for rev, created, count in ((revision - 1, age, 0), (revision, rollout, replicas)):
            h = self.suffix(10)
            rs_name = f"{name}-{h}"
            meta = self.meta(rs_name, created=created, labels={**labels, "pod-template-hash": h},
                             owner=top)  # fmt: skip
            meta["annotations"] = {"deployment.kubernetes.io/revision": str(rev),
                                   "deployment.kubernetes.io/desired-replicas": str(replicas)}  # fmt: skip
            self.add("replicasets", {
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
                "spec": {"replicas": count, "selector": {"matchLabels": {**labels, "pod-template-hash": h}},
                         "template": {**template, "metadata": {"labels": {**labels, "pod-template-hash": h}}}},
                "status": {"replicas": count, "fullyLabeledReplicas": count,
                           "readyReplicas": ready if count else 0, "availableReplicas": ready if count else 0,
                           "observedGeneration": 1},
            })  # fmt: skip
            current = Ref(kind="ReplicaSet", name=rs_name, uid=meta["uid"], api_version="apps/v1")
        assert current is not None
        pod_labels = {**labels, "pod-template-hash": current.name.rsplit("-", 1)[1]}
        return Workload(kind="Deployment", name=name, labels=pod_labels, owner=current, top=top,
                        obj=dep)  # fmt: skip

    def job(self, name: str, containers: list[Obj], *, age: float, status: Obj,
            backoff_limit: int = 6, deadline: int | None = None) -> Workload:  # fmt: skip
        meta = self.meta(name, created=age, labels={"app": name.rsplit("-", 1)[0]})
        uid = meta["uid"]
        labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                  "controller-uid": uid, "job-name": name}  # fmt: skip
        spec: Obj = {"backoffLimit": backoff_limit, "completions": 1, "parallelism": 1,
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": containers, "restartPolicy": "Never"}}}  # fmt: skip
        if deadline is not None:
            spec["activeDeadlineSeconds"] = deadline
        obj = self.add("jobs", {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                                "spec": spec, "status": status})  # fmt: skip
        ref = Ref(kind="Job", name=name, uid=uid, api_version="batch/v1")
        return Workload(kind="Job", name=name, labels=labels, owner=ref, top=ref, obj=obj)

    def pod(self, w: Workload, statuses: list[Obj], *, phase: str = "Running", node: str | None,
            age: float = 2 * DAY, **extra: Any) -> Obj:  # fmt: skip
        """A pod of ``w`` (its name from the owner's), ready when every container is.

        ``extra``: ``ready_since`` (seconds ago the Ready condition last changed), status
        fields (``reason``, ``message``, ``nominatedNodeName``, ``conditions``), spec fields.
        """
        name = f"{w.owner.name}-{self.suffix(5)}"
        containers = w.obj["spec"]["template"]["spec"]["containers"]
        ready = phase == "Running" and bool(statuses) and all(s.get("ready") for s in statuses)
        unready = [s["name"] for s in statuses if not s.get("ready")]
        since = self.ago(min(age, extra.pop("ready_since", age)))
        conds: list[Obj] = [
            {"type": "PodReadyToStartContainers", "status": "True" if node else "False", "lastTransitionTime": self.ago(age)},
            {"type": "Initialized", "status": "True", "lastTransitionTime": self.ago(age)},
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": since,
             **({} if ready else {"reason": "ContainersNotReady", "message": f"containers with unready status: [{' '.join(unready)}]"})},
            {"type": "ContainersReady", "status": "True" if ready else "False", "lastTransitionTime": since,
             **({} if ready else {"reason": "ContainersNotReady", "message": f"containers with unready status: [{' '.join(unready)}]"})},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": self.ago(age)},
        ]  # fmt: skip
        meta = self.meta(name, created=age, labels=w.labels, owner=w.owner)
        spec: Obj = {"containers": containers,
                     "restartPolicy": "Never" if w.kind == "Job" else "Always",
                     "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                     "serviceAccountName": "default", "schedulerName": "default-scheduler",
                     "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
                     "tolerations": [
                         {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                         {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}  # fmt: skip
        for field_, value in w.obj["spec"]["template"]["spec"].items():
            if field_ not in ("containers", "restartPolicy"):  # affinity, nodeSelector, volumes …
                spec[field_] = value
        status: Obj = {"phase": phase, "conditions": conds, "qosClass": "Burstable"}
        if node:
            spec["nodeName"] = node
            n = next((x for x in self.nodes if x["metadata"]["name"] == node), None)
            host = n["status"]["addresses"][0]["address"] if n else "10.0.0.10"
            ip = f"10.{self.rng.randint(4, 60)}.{self.rng.randint(0, 255)}.{self.rng.randint(2, 250)}"
            status.update(hostIP=host, hostIPs=[{"ip": host}], podIP=ip, podIPs=[{"ip": ip}],
                          startTime=self.ago(age), containerStatuses=statuses)  # fmt: skip
        for key in ("reason", "message", "nominatedNodeName"):
            if key in extra:
                status[key] = extra.pop(key)
        if "conditions" in extra:
            status["conditions"] = extra.pop("conditions")
        spec.update(extra)
        return self.add("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                 "spec": spec, "status": status})  # fmt: skip

    def service(self, name: str, selector: dict[str, str], *, port: int = 80,
                target: int = 8080, ready_pods: list[Obj] | None = None) -> Obj:  # fmt: skip
        ip = f"10.96.{self.rng.randint(0, 255)}.{self.rng.randint(2, 250)}"
        svc = self.add("services", {
            "apiVersion": "v1", "kind": "Service", "metadata": self.meta(name, created=30 * DAY, labels={"app": name}),
            "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "selector": selector,
                     "ports": [{"name": "http", "port": port, "protocol": "TCP", "targetPort": target}],
                     "sessionAffinity": "None", "ipFamilies": ["IPv4"], "internalTrafficPolicy": "Cluster"},
            "status": {"loadBalancer": {}},
        })  # fmt: skip
        subsets = []
        if ready_pods:
            subsets = [{"addresses": [
                {"ip": p["status"].get("podIP", ""), "nodeName": p["spec"].get("nodeName", ""),
                 "targetRef": {"kind": "Pod", "namespace": self.namespace, "name": p["metadata"]["name"],
                               "uid": p["metadata"]["uid"]}} for p in ready_pods],
                "ports": [{"name": "http", "port": target, "protocol": "TCP"}]}]  # fmt: skip
        self.add("endpoints", {"apiVersion": "v1", "kind": "Endpoints",
                               "metadata": self.meta(name, created=30 * DAY, labels={"app": name}),
                               "subsets": subsets})  # fmt: skip
        return svc

    # -- events and logs ---------------------------------------------------------------------

    def event(self, about: Obj | Ref, reason: str, message: str, *, type_: str = "Warning",
              count: int = 1, seen: tuple[float, float] = (20 * MINUTE, 30),
              source: tuple[str, str] = ("kubelet", ""), field_path: str | None = None) -> Obj:  # fmt: skip
        """An event about an object (or a ``Ref`` to one that may be gone), first and last
        ``seen`` that many seconds ago."""
        first, last = seen
        if isinstance(about, Ref):
            kind, name, uid, api = about.kind, about.name, about.uid, about.api_version
        else:
            m = about["metadata"]
            kind, name, uid, api = about["kind"], m["name"], m["uid"], about["apiVersion"]
        component, host = source
        if not host and isinstance(about, dict):
            host = about.get("spec", {}).get("nodeName", "") if kind == "Pod" else ""
        involved: Obj = {"kind": kind, "namespace": self.namespace if kind != "Node" else "",
                         "name": name, "uid": uid, "apiVersion": api,
                         "resourceVersion": str(self.rng.randint(10_000, 9_000_000))}  # fmt: skip
        if field_path:
            involved["fieldPath"] = field_path
        if kind == "Node":
            del involved["namespace"]
        evt_name = f"{name}.{self.rng.getrandbits(64):x}"
        # a Node's events live in the default namespace, as the node controller writes them
        evt_ns = "default" if kind == "Node" else self.namespace
        return self.add("events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": evt_name, "namespace": evt_ns, "uid": self.uid(),
                         "resourceVersion": str(self.rng.randint(10_000, 9_000_000)),
                         "creationTimestamp": self.ago(first)},
            "involvedObject": involved, "reason": reason, "message": message, "type": type_,
            "count": count, "firstTimestamp": self.ago(first), "lastTimestamp": self.ago(last),
            "source": {"component": component, **({"host": host} if host else {})},
            "reportingComponent": component if component != "kubelet" else "kubelet",
            "reportingInstance": host,
        }, evt_ns)  # fmt: skip

    def log(self, pod: Obj, container: str, lines: list[str], *, previous: bool = False) -> None:
        book = self.previous if previous else self.logs
        book[(self.namespace, pod["metadata"]["name"], container)] = "\n".join(lines) + "\n"

    # -- writing --------------------------------------------------------------------------

    def write_dir(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        _write(out / "nodes.json", "NodeList", self.nodes)
        for ns, lists in sorted(self.lists.items()):
            for kind in sorted({*_LISTS, *lists}):
                _write(out / ns / f"{kind}.json", _LISTS.get(kind, "List"), lists.get(kind, []))
            for pod in lists.get("pods", []):
                name = pod["metadata"]["name"]
                pod_dir = out / ns / name
                pod_dir.mkdir(parents=True, exist_ok=True)
                blocks = []
                for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
                    body = self.logs.get((ns, name, c["name"]), "")
                    blocks.append(
                        f"==== START logs for container {c['name']} of pod {ns}/{name} ====\n"
                        f"{body}==== END logs for container {c['name']} of pod {ns}/{name} ====\n"
                    )
                    prev = self.previous.get((ns, name, c["name"]))
                    if prev is not None:
                        (pod_dir / f"logs-{c['name']}-previous.txt").write_text(prev)
                (pod_dir / "logs.txt").write_text("".join(blocks))


def _write(path: Path, kind: str, items: list[Obj]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "48213"},
           "items": items}  # fmt: skip
    path.write_text(json.dumps(doc, indent=4) + "\n")
