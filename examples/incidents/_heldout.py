"""Write the held-out incidents: ``python examples/incidents/_heldout.py`` (deterministic).

A second author's set, written apart from ``_make.py`` and before the detectors were looked
at for them: other namespaces, names, images, node names, label schemes
(``app.kubernetes.io/name``, ``pod-template-hash``), and the message variants the kubelet,
the scheduler and the controllers really emit. Each has distractors: a healthy neighbour,
a stale warning of an earlier pod, a noisy log line with the word "error" in it that is
harmless, a consequence that is not the cause. Three have no verified cause at all: the
dump does not show why, and the honest report says so.

Each directory ``heldout-NAME/`` is laid out like ``_make.py``'s (``dump/``, ``question.txt``,
``namespace.txt``, ``expected.json``) and checked by ``_expect.py`` the same way.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DAY = "2026-12-01"
NOW = f"{DAY}T14:30:00Z"

J = dict[str, Any]


def h(*parts: str, n: int = 10) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:n]


def the_uid(*parts: str) -> str:
    x = hashlib.sha256("|".join(("heldout", *parts)).encode()).hexdigest()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:32]}"


def at(hhmm: str, sec: int = 0, day: str = DAY) -> str:
    return f"{day}T{hhmm}:{sec:02d}Z"


class Scene:
    """One namespace of a cluster as ``kubectl cluster-info dump`` would write it."""

    def __init__(self, ns: str, nodes: int = 3) -> None:
        self.ns = ns
        self.nodes: list[J] = [self.make_node(i) for i in range(nodes)]
        self.lists: dict[str, list[J]] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.previous: dict[tuple[str, str], str] = {}

    # -- objects ----------------------------------------------------------------------------

    def make_node(self, i: int, *, mem: str = "31Gi", cpu: str = "8") -> J:
        name = f"ip-10-42-{i + 1}-{17 + i * 9}.eu-west-1.compute.internal"
        return {
            "metadata": {
                "name": name, "uid": the_uid("node", name), "creationTimestamp": "2026-11-11T03:12:40Z",
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                           "node.kubernetes.io/instance-type": "m6i.2xlarge",
                           "topology.kubernetes.io/zone": f"eu-west-1{'abc'[i % 3]}",
                           "eks.amazonaws.com/nodegroup": "general"},
            },
            "spec": {"providerID": f"aws:///eu-west-1a/i-0{h(name, n=16)}"},
            "status": {
                "capacity": {"cpu": cpu, "memory": "32386604Ki", "pods": "58", "ephemeral-storage": "83873772Ki"},
                "allocatable": {"cpu": f"{int(cpu) * 1000 - 90}m", "memory": "31369772Ki", "pods": "58",
                                "ephemeral-storage": "76224326324"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                     "message": "kubelet has sufficient memory available", "lastHeartbeatTime": at("14:29")},
                    {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                     "message": "kubelet has no disk pressure", "lastHeartbeatTime": at("14:29")},
                    {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                     "message": "kubelet has sufficient PID available", "lastHeartbeatTime": at("14:29")},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "kubelet is posting ready status", "lastHeartbeatTime": at("14:29")},
                ],
                "nodeInfo": {"kubeletVersion": "v1.29.8-eks-a737599", "containerRuntimeVersion": "containerd://1.7.22",
                             "osImage": "Amazon Linux 2", "architecture": "amd64"},
            },
        }  # fmt: skip

    def add(self, kind: str, obj: J) -> J:
        self.lists.setdefault(kind, []).append(obj)
        return obj

    def deploy(self, app: str, spec: J, *, replicas: int = 2, ready: int | None = None,
               rev: int = 5, old_spec: J | None = None) -> tuple[str, str, str]:  # fmt: skip
        """A Deployment with its two newest ReplicaSets; returns (rs, rs uid, hash)."""
        ready = replicas if ready is None else ready
        labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": self.ns}
        dep_uid = the_uid(self.ns, "Deployment", app)
        tmpl = {"metadata": {"labels": labels}, "spec": spec}
        conds = [
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable" if ready == replicas
             else "ReplicaSetUpdated", "message": f'ReplicaSet "{app}" is progressing.',
             "lastUpdateTime": at("14:02"), "lastTransitionTime": at("14:02")},
            {"type": "Available", "status": "True" if ready else "False",
             "reason": "MinimumReplicasAvailable" if ready else "MinimumReplicasUnavailable",
             "message": "Deployment has minimum availability." if ready
             else "Deployment does not have minimum availability.",
             "lastUpdateTime": at("14:03"), "lastTransitionTime": at("14:03")},
        ]  # fmt: skip
        self.add("deployments", {
            "metadata": {"name": app, "namespace": self.ns, "uid": dep_uid, "generation": rev + 1,
                         "creationTimestamp": "2026-09-14T08:21:07Z", "labels": labels,
                         "annotations": {"deployment.kubernetes.io/revision": str(rev)}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": tmpl,
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                     "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
            "status": {"observedGeneration": rev + 1, "replicas": replicas, "updatedReplicas": replicas,
                       "readyReplicas": ready, "availableReplicas": ready,
                       "unavailableReplicas": replicas - ready, "conditions": conds},
        })  # fmt: skip
        out = ("", "", "")
        for r, s in ((rev - 1, old_spec or spec), (rev, spec)):
            cur = r == rev
            ph = h(app, str(r), n=10)
            name = f"{app}-{ph}"
            rs_uid = the_uid(self.ns, "ReplicaSet", name)
            self.add("replicasets", {
                "metadata": {"name": name, "namespace": self.ns, "uid": rs_uid,
                             "creationTimestamp": at("14:01") if cur else "2026-11-24T16:40:11Z",
                             "labels": {**labels, "pod-template-hash": ph},
                             "annotations": {"deployment.kubernetes.io/revision": str(r),
                                             "deployment.kubernetes.io/desired-replicas": str(replicas)},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                                                  "uid": dep_uid, "controller": True, "blockOwnerDeletion": True}]},
                "spec": {"replicas": replicas if cur else 0,
                         "selector": {"matchLabels": {**labels, "pod-template-hash": ph}},
                         "template": {"metadata": {"labels": {**labels, "pod-template-hash": ph}},
                                      "spec": json.loads(json.dumps(s))}},
                "status": {"replicas": replicas if cur else 0, "fullyLabeledReplicas": replicas if cur else 0,
                           "readyReplicas": ready if cur else 0, "availableReplicas": ready if cur else 0,
                           "observedGeneration": 1},
            })  # fmt: skip
            if cur:
                out = (name, rs_uid, ph)
        return out

    def pod(self, name: str, spec: J, statuses: list[J], *, owner: tuple[str, str, str] | None,
            labels: J, phase: str = "Running", created: str = at("14:01", 12), node: int | None = 0,
            init_statuses: list[J] | None = None, reason: str | None = None, message: str | None = None,
            sched: J | None = None, initialized: bool = True) -> J:  # fmt: skip
        ready = phase == "Running" and all(s.get("ready") for s in statuses) and bool(statuses)
        unready = [s["name"] for s in statuses if not s.get("ready")]
        conds = [
            {"type": "PodReadyToStartContainers", "status": "True" if node is not None else "False",
             "lastTransitionTime": created},
            {"type": "Initialized", "status": "True" if initialized else "False", "lastTransitionTime": created,
             **({} if initialized else {"reason": "ContainersNotInitialized",
                                        "message": "containers with incomplete status: [" + " ".join(
                                            s["name"] for s in init_statuses or []) + "]"})},
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": created,
             **({} if ready else {"reason": "ContainersNotReady",
                                  "message": f"containers with unready status: [{' '.join(unready)}]"})},
            {"type": "ContainersReady", "status": "True" if ready else "False", "lastTransitionTime": created},
            sched or {"type": "PodScheduled", "status": "True", "lastTransitionTime": created},
        ]  # fmt: skip
        meta: J = {"name": name, "generateName": name.rsplit("-", 1)[0] + "-", "namespace": self.ns,
                   "uid": the_uid(self.ns, "Pod", name, created), "creationTimestamp": created,
                   "labels": labels}  # fmt: skip
        if owner:
            kind, oname, ouid = owner
            meta["ownerReferences"] = [{"apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
                                        "kind": kind, "name": oname, "uid": ouid,
                                        "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
        spec = {"restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                     "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                     "tolerationSeconds": 300}],
                **json.loads(json.dumps(spec))}  # fmt: skip
        status: J = {"phase": phase, "conditions": conds, "qosClass": "Burstable"}
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        if node is not None:
            spec["nodeName"] = self.nodes[node]["metadata"]["name"]
            status.update(hostIP=f"10.42.{node + 1}.{17 + node * 9}", podIP=f"10.42.{node + 1}.{100 + int(h(name, n=2), 16) % 150}",
                          startTime=created, containerStatuses=statuses)  # fmt: skip
            if init_statuses is not None:
                status["initContainerStatuses"] = init_statuses
        return self.add("pods", {"metadata": meta, "spec": spec, "status": status})

    def event(self, kind: str, obj: J, reason: str, message: str, *, warning: bool = True,
              count: int = 1, first: str = at("14:02"), last: str = at("14:28"),
              field: str | None = None, source: str = "kubelet", api: str = "v1") -> None:  # fmt: skip
        m = obj["metadata"]
        inv: J = {"kind": kind, "namespace": self.ns, "name": m["name"], "uid": m.get("uid", ""),
                  "apiVersion": api, "resourceVersion": str(100000 + len(self.lists.get("events", [])))}  # fmt: skip
        if field:
            inv["fieldPath"] = field
        n = len(self.lists.get("events", []))
        host = obj.get("spec", {}).get("nodeName", "")
        self.add("events", {
            "metadata": {"name": f"{m['name']}.{h(reason, str(n), m['name'], n=16)}", "namespace": self.ns,
                         "uid": the_uid(self.ns, "Event", str(n)), "creationTimestamp": first},
            "involvedObject": inv, "reason": reason, "message": message,
            "type": "Warning" if warning else "Normal", "count": count,
            "firstTimestamp": first, "lastTimestamp": last, "eventTime": None,
            "source": {"component": source, **({"host": host} if source == "kubelet" and host else {})},
            "reportingComponent": source, "reportingInstance": host if source == "kubelet" else "",
        })  # fmt: skip

    # -- conveniences -----------------------------------------------------------------------

    def neighbour(self, app: str, image: str, *, replicas: int = 2) -> None:
        """A healthy Deployment that must be ignored, with a harmless 'error' in its log."""
        spec = {"containers": [ctr(app, image)]}
        rs, rs_uid, ph = self.deploy(app, spec, replicas=replicas)
        for i in range(replicas):
            name = f"{rs}-{h(app, str(i), n=5)}"
            pod = self.pod(name, spec, [up(app, image)], owner=("ReplicaSet", rs, rs_uid),
                           labels=labels(app, ph), node=i % len(self.nodes),
                           created=at("11:4" + str(i)))  # fmt: skip
            self.logs[(name, app)] = chatter(
                app,
                25,
                name,
                [
                    'level=info msg="request served" path=/api/search status=200 error=null latency_ms=12',
                    'level=warn msg="slow query, retrying" attempt=1 error="context canceled" recovered=true',
                ],
            )
            self.event("Pod", pod, "Pulled", f'Container image "{image}" already present on machine',
                       warning=False, first=at("11:40"), last=at("11:40"), field=f"spec.containers{{{app}}}")  # fmt: skip

    def stale_backoff(self, app: str, rs: str, days_ago: int = 3) -> None:
        """A warning event about a pod of the same workload that no longer exists."""
        gone = {"metadata": {"name": f"{rs}-{h('gone', app, n=5)}", "uid": the_uid("gone", app)}}
        day = f"2026-11-{30 - days_ago + 1:02d}"
        self.event("Pod", gone, "BackOff", f"Back-off restarting failed container {app} in pod "
                   f"{gone['metadata']['name']}_{self.ns}({gone['metadata']['uid']})", count=9,
                   first=at("02:11", day=day), last=at("02:19", day=day), field=f"spec.containers{{{app}}}")  # fmt: skip

    # -- writing ----------------------------------------------------------------------------

    def write(self, out: Path) -> None:
        out.mkdir(parents=True)
        _dump_list(out / "nodes.json", "NodeList", self.nodes)
        base = ["events", "pods", "deployments", "replicasets", "services", "daemonsets",
                "replication-controllers"]  # fmt: skip
        for kind in base + sorted(set(self.lists) - set(base)):
            _dump_list(
                out / self.ns / f"{kind}.json", _KIND.get(kind, "List"), self.lists.get(kind, [])
            )
        for pod in self.lists.get("pods", []):
            name = pod["metadata"]["name"]
            d = out / self.ns / name
            d.mkdir(parents=True, exist_ok=True)
            text = ""
            # kubectl's dump writes app containers only; an init container's log is there
            # when the incident says it was collected (``sre collect`` writes it)
            inits = [
                c for c in pod["spec"].get("initContainers", []) if (name, c["name"]) in self.logs
            ]
            for c in inits + pod["spec"]["containers"]:
                body = self.logs.get((name, c["name"]), "")
                text += (f"==== START logs for container {c['name']} of pod {self.ns}/{name} ====\n{body}"
                         f"==== END logs for container {c['name']} of pod {self.ns}/{name} ====\n")  # fmt: skip
            (d / "logs.txt").write_text(text)
            for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
                prev = self.previous.get((name, c["name"]))
                if prev is not None:
                    (d / f"logs-{c['name']}-previous.txt").write_text(prev)


_KIND = {"events": "EventList", "pods": "PodList", "deployments": "DeploymentList",
         "replicasets": "ReplicaSetList", "services": "ServiceList", "daemonsets": "DaemonSetList",
         "replication-controllers": "ReplicationControllerList", "jobs": "JobList",
         "horizontalpodautoscalers": "HorizontalPodAutoscalerList"}  # fmt: skip


def _dump_list(path: Path, kind: str, items: list[J]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    api = "v1" if kind in ("NodeList", "EventList", "PodList", "ServiceList") else "apps/v1"
    path.write_text(json.dumps({"kind": kind, "apiVersion": api,
                                "metadata": {"resourceVersion": "9917341"}, "items": items}, indent=4) + "\n")  # fmt: skip


def labels(app: str, ph: str | None = None) -> J:
    out = {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop"}
    if ph:
        out["pod-template-hash"] = ph
    return out


def ctr(
    name: str, image: str, *, mem: str = "768Mi", env: list[J] | None = None, **extra: Any
) -> J:
    c: J = {"name": name, "image": image, "imagePullPolicy": "Always",
            "ports": [{"name": "http", "containerPort": 3000, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "200m", "memory": mem}, "limits": {"memory": mem}},
            "env": env if env is not None else [{"name": "NODE_ENV", "value": "production"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}  # fmt: skip
    c.update(extra)
    return c


def up(name: str, image: str, *, restarts: int = 0, ready: bool = True, last: J | None = None,
       started: str = at("14:01", 40)) -> J:  # fmt: skip
    return {"name": name, "image": image, "imageID": f"{image.rsplit(':', 1)[0]}@sha256:{h(image, n=64)}",
            "containerID": f"containerd://{h(name, started, n=64)}", "ready": ready, "started": True,
            "restartCount": restarts, "state": {"running": {"startedAt": started}},
            "lastState": {"terminated": last} if last else {}}  # fmt: skip


def backoff(name: str, image: str, pod: str, *, restarts: int, last: J) -> J:
    s = up(name, image, restarts=restarts, ready=False, last=last)
    s["started"] = False
    s["state"] = {"waiting": {"reason": "CrashLoopBackOff",
                              "message": f"back-off 5m0s restarting failed container={name} pod={pod}_"
                                         f"ns({the_uid(pod)})"}}  # fmt: skip
    return s


def waiting(name: str, image: str, reason: str, message: str, *, restarts: int = 0) -> J:
    return {"name": name, "image": image, "imageID": "", "ready": False, "started": False,
            "restartCount": restarts, "state": {"waiting": {"reason": reason, "message": message}},
            "lastState": {}}  # fmt: skip


def ended(reason: str, code: int, start: str = at("14:26", 3), end: str = at("14:26", 51),
          message: str | None = None) -> J:  # fmt: skip
    t: J = {"exitCode": code, "reason": reason, "startedAt": start, "finishedAt": end,
            "containerID": f"containerd://{h(reason, start, n=64)}"}  # fmt: skip
    if message:
        t["message"] = message
    return t


def chatter(app: str, n: int, seed: str, extra: list[str] = ()) -> str:  # type: ignore[assignment]
    """JSON-ish request logs of a busy service, with the given lines spread in."""
    lines = []
    routes = [
        "/api/search?q=boots",
        "/api/products/8812",
        "/internal/metrics",
        "/api/cart",
        "/livez",
    ]
    for i in range(n):
        d = int(h(seed, str(i), n=6), 16)
        lines.append(json.dumps({"ts": f"{DAY}T14:{10 + i // 6:02d}:{(i * 9) % 60:02d}.{d % 1000:03d}Z",
                                 "level": "info", "svc": app, "route": routes[d % 5],
                                 "status": 200 if d % 17 else 304, "dur_ms": d % 140 + 1}))  # fmt: skip
        if extra and i % max(1, n // (len(extra) + 1)) == 0 and i:
            lines.append(extra[(i // max(1, n // (len(extra) + 1)) - 1) % len(extra)])
    return "\n".join(lines) + "\n"


# -- the incidents ----------------------------------------------------------------------------

INCIDENTS: dict[str, tuple[Any, str, str, J]] = {}


def case(name: str, ns: str, question: str, expected: J) -> Any:
    def register(fn: Any) -> Any:
        INCIDENTS["heldout-" + name] = (fn, ns, question, expected)
        return fn

    return register


def crashing(s: Scene, app: str, image: str, *, restarts: int, last: J, previous: str,
             current: str = "", rev: int = 5, old_spec: J | None = None, **ckw: Any) -> J:  # fmt: skip
    spec = {"containers": [ctr(app, image, **ckw)]}
    rs, rs_uid, ph = s.deploy(app, spec, replicas=1, ready=0, rev=rev, old_spec=old_spec)
    name = f"{rs}-{h(rs, n=5)}"
    pod = s.pod(name, spec, [backoff(app, image, name, restarts=restarts, last=last)],
                owner=("ReplicaSet", rs, rs_uid), labels=labels(app, ph), node=1)  # fmt: skip
    s.previous[(name, app)] = previous
    s.logs[(name, app)] = current
    s.event("Pod", pod, "Started", f"Started container {app}", warning=False, count=restarts + 1,
            field=f"spec.containers{{{app}}}")  # fmt: skip
    s.event("Pod", pod, "BackOff", "Back-off restarting failed container "
            f"{app} in pod {name}_{s.ns}({pod['metadata']['uid']})", count=restarts * 3,
            field=f"spec.containers{{{app}}}")  # fmt: skip
    return pod


@case("oom-jvm", "storefront",
      "catalog-api restarts every few minutes since this morning, why?",
      {"detector": "oomkilled", "pod_prefix": "catalog-api-", "fact": "OOMKilled",
       "identifiers": ["1Gi"], "not_causes": ["probe_failure", "crash_log_reason"]})  # fmt: skip
def _oom_jvm(s: Scene) -> None:
    s.neighbour("search-ui", "ghcr.io/acme/search-ui:v3.18.2")
    prev = chatter("catalog-api", 40, "cat", [
        "2026-12-01T14:25:58.114Z  WARN 1 --- [nio-8080-exec-7] o.h.engine.jdbc.spi.SqlExceptionHelper : SQL Error: 0, SQLState: 57014 (retry ok)",
        "2026-12-01T14:26:40.870Z  INFO 1 --- [   scheduling-1] c.a.catalog.ReindexJob : reindex loaded 1,204,331 products",
    ])  # fmt: skip
    pod = crashing(s, "catalog-api", "ghcr.io/acme/catalog-api:2024.11.3", restarts=9,
                   last=ended("OOMKilled", 137), previous=prev, current=prev[:600], mem="1Gi",
                   readinessProbe={"httpGet": {"path": "/actuator/health/readiness", "port": 8080},
                                   "periodSeconds": 5, "failureThreshold": 3})  # fmt: skip
    s.event("Pod", pod, "Unhealthy", "Readiness probe failed: Get \"http://10.42.2.131:8080/actuator/health/"
            "readiness\": dial tcp 10.42.2.131:8080: connect: connection refused", count=14,
            field="spec.containers{catalog-api}")  # fmt: skip
    s.stale_backoff("catalog-api", "catalog-api-5c9f7d8b44")


@case("python-import", "analytics",
      "The report-api deployment went into CrashLoopBackOff after today's release",
      {"detector": "crash_log_reason", "pod_prefix": "report-api-",
       "fact": "ModuleNotFoundError: No module named 'pyarrow'", "identifiers": ["exit code 1"],
       "not_causes": ["oomkilled", "missing_env", "config_invalid"],
       "remediation_not": ["(?i)restart the job"]})  # fmt: skip
def _py_import(s: Scene) -> None:
    s.neighbour("dash", "europe-docker.pkg.dev/acme-analytics/apps/dash:1.7.0")
    prev = (
        "[2026-12-01 14:26:03 +0000] [1] [INFO] Starting gunicorn 22.0.0\n"
        "[2026-12-01 14:26:03 +0000] [1] [INFO] Listening at: http://0.0.0.0:8000 (1)\n"
        "[2026-12-01 14:26:03 +0000] [7] [INFO] Booting worker with pid: 7\n"
        "/usr/local/lib/python3.12/site-packages/pandas/core/arrays/masked.py:60: UserWarning: "
        "Pandas requires version '1.3.6' or newer of 'bottleneck' (version '1.3.5' currently installed).\n"
        "[2026-12-01 14:26:04 +0000] [7] [ERROR] Exception in worker process\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/site-packages/gunicorn/arbiter.py", line 609, in spawn_worker\n'
        "    worker.init_process()\n"
        '  File "/app/report_api/export.py", line 4, in <module>\n'
        "    import pyarrow.parquet as pq\n"
        "ModuleNotFoundError: No module named 'pyarrow'\n"
        "[2026-12-01 14:26:04 +0000] [7] [INFO] Worker exiting (pid: 7)\n"
        "[2026-12-01 14:26:04 +0000] [1] [ERROR] Worker (pid:7) exited with code 3\n"
        "[2026-12-01 14:26:04 +0000] [1] [ERROR] Shutting down: Master\n"
        "[2026-12-01 14:26:04 +0000] [1] [ERROR] Reason: Worker failed to boot.\n"
    )
    crashing(s, "report-api", "europe-docker.pkg.dev/acme-analytics/apps/report-api:2.0.0",
             restarts=6, last=ended("Error", 1), previous=prev, current=prev[:180],
             old_spec={"containers": [ctr("report-api", "europe-docker.pkg.dev/acme-analytics/apps/report-api:1.9.4")]})  # fmt: skip


@case("java-unknown-host", "payments-eu",
      "ledger-writer won't come up, can you check?",
      {"detector": "dns_resolution", "pod_prefix": "ledger-writer-", "fact": "mysql-primary.db.internal",
       "identifiers": ["mysql-primary.db.internal"], "also": ["crash_log_reason"],
       "not_causes": ["oomkilled", "config_invalid"]})  # fmt: skip
def _java_dns(s: Scene) -> None:
    s.neighbour("fx-rates", "123456789012.dkr.ecr.eu-west-1.amazonaws.com/fx-rates:8.2.1")
    prev = (
        "  .   ____          _            __ _ _\n"
        " /\\\\ / ___'_ __ _ _(_)_ __  __ _ \\ \\ \\ \\\n"
        "2026-12-01T14:25:11.402Z  INFO 1 --- [           main] c.a.ledger.LedgerWriterApplication       : Starting LedgerWriterApplication v4.2.0 using Java 21.0.5\n"
        "2026-12-01T14:25:13.019Z  INFO 1 --- [           main] com.zaxxer.hikari.HikariDataSource       : HikariPool-1 - Starting...\n"
        "2026-12-01T14:25:13.377Z ERROR 1 --- [           main] com.zaxxer.hikari.pool.HikariPool        : HikariPool-1 - Exception during pool initialization.\n"
        "\n"
        "com.mysql.cj.jdbc.exceptions.CommunicationsException: Communications link failure\n"
        "\tat com.mysql.cj.jdbc.exceptions.SQLError.createCommunicationsException(SQLError.java:175)\n"
        "\tat com.zaxxer.hikari.pool.HikariPool.<init>(HikariPool.java:115)\n"
        "Caused by: java.net.UnknownHostException: mysql-primary.db.internal: Name or service not known\n"
        "\tat java.base/java.net.Inet6AddressImpl.lookupAllHostAddr(Native Method)\n"
        "\tat java.base/java.net.InetAddress.getAllByName0(InetAddress.java:1529)\n"
        "\t... 48 common frames omitted\n"
        "2026-12-01T14:25:13.401Z  WARN 1 --- [           main] ConfigServletWebServerApplicationContext : Exception encountered during context initialization - cancelling refresh attempt\n"
        "2026-12-01T14:25:13.455Z ERROR 1 --- [           main] o.s.boot.SpringApplication               : Application run failed\n"
    )
    crashing(s, "ledger-writer", "123456789012.dkr.ecr.eu-west-1.amazonaws.com/ledger-writer:4.2.0",
             restarts=5, last=ended("Error", 1), previous=prev, current=prev[:200])  # fmt: skip


@case("image-tag-missing", "web",
      "storefront rollout has been stuck for 20 minutes",
      {"detector": "image_pull", "pod_prefix": "storefront-", "fact": "docker.io/acmeshop/storefront:v2.31.0",
       "identifiers": [], "not_causes": ["probe_failure"], "remediation_not": ["(?i)imagePullSecret"]})  # fmt: skip
def _image_tag(s: Scene) -> None:
    image = "docker.io/acmeshop/storefront:v2.31.0"
    old = "docker.io/acmeshop/storefront:v2.30.4"
    spec = {"containers": [ctr("storefront", image)]}
    rs, rs_uid, ph = s.deploy("storefront", spec, replicas=3, ready=2,
                              old_spec={"containers": [ctr("storefront", old)]})  # fmt: skip
    # the old ReplicaSet's pods still serve: the rollout is stuck, not the site down
    old_rs = next(r for r in s.lists["replicasets"] if r["metadata"]["name"] != rs)
    old_rs["spec"]["replicas"] = old_rs["status"]["replicas"] = 2
    old_rs["status"]["readyReplicas"] = old_rs["status"]["availableReplicas"] = 2
    oph = old_rs["metadata"]["labels"]["pod-template-hash"]
    for i in range(2):
        name = f"{old_rs['metadata']['name']}-{h('old', str(i), n=5)}"
        s.pod(name, {"containers": [ctr("storefront", old)]}, [up("storefront", old, started=at("09:12"))],
              owner=("ReplicaSet", old_rs["metadata"]["name"], old_rs["metadata"]["uid"]),
              labels=labels("storefront", oph), created=at("09:11"), node=i)  # fmt: skip
        s.logs[(name, "storefront")] = chatter("storefront", 20, name)
    name = f"{rs}-{h(rs, n=5)}"
    pod = s.pod(name, spec, [waiting("storefront", image, "ImagePullBackOff", f'Back-off pulling image "{image}"')],
                owner=("ReplicaSet", rs, rs_uid), labels=labels("storefront", ph), phase="Pending", node=2)  # fmt: skip
    s.event(
        "Pod",
        pod,
        "Pulling",
        f'Pulling image "{image}"',
        warning=False,
        count=7,
        field="spec.containers{storefront}",
    )
    s.event("Pod", pod, "Failed", f'Failed to pull image "{image}": Error response from daemon: manifest for '
            f"acmeshop/storefront:v2.31.0 not found: manifest unknown: manifest unknown", count=7,
            field="spec.containers{storefront}")  # fmt: skip
    s.event(
        "Pod", pod, "Failed", "Error: ErrImagePull", count=7, field="spec.containers{storefront}"
    )
    s.event(
        "Pod",
        pod,
        "Failed",
        "Error: ImagePullBackOff",
        count=31,
        field="spec.containers{storefront}",
    )
    s.event("Pod", pod, "BackOff", f'Back-off pulling image "{image}"', warning=False, count=31,
            field="spec.containers{storefront}")  # fmt: skip


@case("insufficient-memory", "ml",
      "why are the embedder pods pending?",
      {"detector": "unschedulable", "pod_prefix": "embedder-", "fact": "Insufficient memory",
       "identifiers": ["memory"], "not_causes": ["pvc_unbound", "taint_untolerated"],
       "remediation_not": ["(?i)storageclass"]})  # fmt: skip
def _insufficient(s: Scene) -> None:
    s.neighbour("tokenizer", "ghcr.io/acme-ml/tokenizer:0.9.1")
    image = "ghcr.io/acme-ml/embedder:3.3.0"
    c = ctr("embedder", image, mem="40Gi")
    c["resources"] = {"requests": {"cpu": "4", "memory": "40Gi"}, "limits": {"memory": "40Gi"}}
    spec = {"containers": [c]}
    rs, rs_uid, ph = s.deploy("embedder", spec, replicas=2, ready=0)
    msg = ("0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: "
           "3 No preemption victims found for incoming pod.")  # fmt: skip
    for i in range(2):
        name = f"{rs}-{h(rs, str(i), n=5)}"
        pod = s.pod(name, spec, [], owner=("ReplicaSet", rs, rs_uid), labels=labels("embedder", ph),
                    phase="Pending", node=None,
                    sched={"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": msg, "lastTransitionTime": at("14:01", 12)})  # fmt: skip
        s.event("Pod", pod, "FailedScheduling", msg, count=18, source="default-scheduler")
        s.event("Pod", pod, "NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size "
                "reached", warning=False, count=40, source="cluster-autoscaler")  # fmt: skip


@case("pvc-storageclass", "data",
      "postgres-0 has been Pending since we recreated the statefulset",
      {"detector": "pvc_unbound", "pod_prefix": "postgres-0", "fact": "data-postgres-0",
       "identifiers": [], "not_causes": ["unschedulable"], "remediation_not": ["(?i)add a node"]})  # fmt: skip
def _pvc(s: Scene) -> None:
    s.neighbour("pgbouncer", "bitnami/pgbouncer:1.23.1")
    image = "postgres:16.4"
    spec = {"containers": [ctr("postgres", image, mem="2Gi",
                               volumeMounts=[{"name": "data", "mountPath": "/var/lib/postgresql/data"}])],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-postgres-0"}}]}  # fmt: skip
    sts_uid = the_uid(s.ns, "StatefulSet", "postgres")
    msg = ("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
           "0/3 nodes are available: 3 Preemption is not helpful for scheduling.")  # fmt: skip
    pod = s.pod("postgres-0", spec, [], owner=("StatefulSet", "postgres", sts_uid),
                labels={"app.kubernetes.io/name": "postgres", "statefulset.kubernetes.io/pod-name": "postgres-0"},
                phase="Pending", node=None,
                sched={"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg,
                       "lastTransitionTime": at("14:05")})  # fmt: skip
    s.event("Pod", pod, "FailedScheduling", msg, count=6, source="default-scheduler")
    claim = {
        "metadata": {"name": "data-postgres-0", "uid": the_uid(s.ns, "PVC", "data-postgres-0")}
    }
    s.event("PersistentVolumeClaim", claim, "ProvisioningFailed",
            'storageclass.storage.k8s.io "gp3-encrypted" not found', count=25,
            source="persistentvolume-controller")  # fmt: skip
    s.event("StatefulSet", {"metadata": {"name": "postgres", "uid": sts_uid}}, "SuccessfulCreate",
            "create Pod postgres-0 in StatefulSet postgres successful", warning=False,
            source="statefulset-controller", api="apps/v1")  # fmt: skip


@case("configmap-absent", "billing",
      "invoice-renderer never starts after the helm upgrade",
      {"detector": "create_config_error", "pod_prefix": "invoice-renderer-",
       "fact": "invoice-renderer-templates", "identifiers": ["invoice-renderer-templates"],
       "not_causes": ["image_pull"]})  # fmt: skip
def _cm_absent(s: Scene) -> None:
    s.neighbour("invoice-api", "registry.gitlab.com/acme/billing/invoice-api:7.4.0")
    image = "registry.gitlab.com/acme/billing/invoice-renderer:7.4.0"
    c = ctr("renderer", image, envFrom=[{"configMapRef": {"name": "invoice-renderer-templates"}}])
    spec = {"containers": [c]}
    rs, rs_uid, ph = s.deploy("invoice-renderer", spec, replicas=1, ready=0)
    name = f"{rs}-{h(rs, n=5)}"
    msg = 'configmap "invoice-renderer-templates" not found'
    pod = s.pod(name, spec, [waiting("renderer", image, "CreateContainerConfigError", msg)],
                owner=("ReplicaSet", rs, rs_uid), labels=labels("invoice-renderer", ph), phase="Pending")  # fmt: skip
    s.event("Pod", pod, "Pulled", f'Successfully pulled image "{image}" in 1.204s (1.204s including waiting)',
            warning=False, count=12, field="spec.containers{renderer}")  # fmt: skip
    s.event("Pod", pod, "Failed", f"Error: {msg}", count=12, field="spec.containers{renderer}")


@case("secret-key-absent", "auth",
      "Why is the oauth-proxy pod not starting?",
      {"detector": "create_config_error", "pod_prefix": "oauth-proxy-", "fact": "client-secret",
       "identifiers": ["oidc-credentials"], "not_causes": ["missing_env"]})  # fmt: skip
def _secret_key(s: Scene) -> None:
    s.neighbour("keycloak", "quay.io/keycloak/keycloak:25.0.6", replicas=1)
    image = "quay.io/oauth2-proxy/oauth2-proxy:v7.7.1"
    env = [{"name": "OAUTH2_PROXY_CLIENT_ID", "value": "shop"},
           {"name": "OAUTH2_PROXY_CLIENT_SECRET",
            "valueFrom": {"secretKeyRef": {"name": "oidc-credentials", "key": "client-secret"}}}]  # fmt: skip
    spec = {"containers": [ctr("oauth-proxy", image, env=env)]}
    rs, rs_uid, ph = s.deploy("oauth-proxy", spec, replicas=1, ready=0)
    name = f"{rs}-{h(rs, n=5)}"
    msg = "couldn't find key client-secret in Secret auth/oidc-credentials"
    pod = s.pod(name, spec, [waiting("oauth-proxy", image, "CreateContainerConfigError", msg)],
                owner=("ReplicaSet", rs, rs_uid), labels=labels("oauth-proxy", ph), phase="Pending")  # fmt: skip
    s.event("Pod", pod, "Failed", f"Error: {msg}", count=8, field="spec.containers{oauth-proxy}")


@case("stale-eviction", "search",
      "Why is the indexer deployment failing?",
      {"detector": "crash_log_reason", "pod_prefix": "indexer-",
       "fact": "/etc/indexer/synonyms.txt: no such file or directory",
       "identifiers": [], "not_causes": ["evicted", "oomkilled"]})  # fmt: skip
def _stale_evict(s: Scene) -> None:
    s.neighbour("query", "ghcr.io/acme/search-query:5.0.3")
    image = "ghcr.io/acme/search-indexer:5.0.3"
    prev = chatter("indexer", 10, "idx") + (
        'time="2026-12-01T14:26:02Z" level=info msg="loading analyzers" dir=/etc/indexer\n'
        'time="2026-12-01T14:26:02Z" level=fatal msg="cannot build analyzer" '
        'error="open /etc/indexer/synonyms.txt: no such file or directory"\n'
    )
    pod = crashing(s, "indexer", image, restarts=7, last=ended("Error", 1), previous=prev,
                   volumeMounts=[{"name": "analyzers", "mountPath": "/etc/indexer"}])  # fmt: skip
    pod["spec"]["volumes"] = [{"name": "analyzers", "configMap": {"name": "indexer-analyzers"}}]
    # a pod of the same ReplicaSet evicted two days ago, still listed as Failed
    owner = pod["metadata"]["ownerReferences"][0]
    name = f"{owner['name']}-{h('evicted', n=5)}"
    msg = (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 91340Ki. "
        "Container indexer was using 2310244Ki, request is 768Mi, has larger consumption of memory."
    )
    old = s.pod(name, pod["spec"], [], owner=(owner["kind"], owner["name"], owner["uid"]),
                labels=pod["metadata"]["labels"], phase="Failed", created="2026-11-29T03:10:00Z",
                reason="Evicted", message=msg, node=2)  # fmt: skip
    old["status"]["containerStatuses"] = [{"name": "indexer", "image": image, "ready": False, "restartCount": 0,
                                            "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                                                     "message": "The container could not be located when the pod was terminated",
                                                                     "startedAt": "2026-11-29T03:10:20Z",
                                                                     "finishedAt": "2026-11-29T21:44:02Z"}},
                                            "lastState": {}}]  # fmt: skip
    s.event(
        "Pod",
        old,
        "Evicted",
        msg,
        count=1,
        first="2026-11-29T21:44:01Z",
        last="2026-11-29T21:44:01Z",
    )


@case("liveness-500", "api",
      "orders-api keeps getting restarted by Kubernetes",
      {"detector": "probe_failure", "pod_prefix": "orders-api-", "fact": "statuscode: 500",
       "identifiers": [], "not_causes": ["oomkilled"]})  # fmt: skip
def _liveness500(s: Scene) -> None:
    s.neighbour("users-api", "ghcr.io/acme/users-api:1.44.0")
    image = "ghcr.io/acme/orders-api:1.44.0"
    probe = {"httpGet": {"path": "/livez", "port": 3000}, "periodSeconds": 10, "failureThreshold": 3,
             "timeoutSeconds": 1}  # fmt: skip
    prev = (
        chatter(
            "orders-api",
            30,
            "oa",
            [
                '{"level":"error","msg":"health check failed","check":"orders-db","err":"pool exhausted: 20/20 connections in use"}',
                '{"level":"info","msg":"GET /livez","status":500,"dur_ms":2}',
            ],
        )
        + '{"level":"info","msg":"received SIGTERM, draining"}\n'
    )
    pod = crashing(s, "orders-api", image, restarts=11, last=ended("Error", 137), previous=prev,
                   current=chatter("orders-api", 8, "oa2"), livenessProbe=probe)  # fmt: skip
    s.event("Pod", pod, "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500",
            count=33, field="spec.containers{orders-api}")  # fmt: skip
    s.event("Pod", pod, "Killing", "Container orders-api failed liveness probe, will be restarted",
            warning=False, count=11, field="spec.containers{orders-api}")  # fmt: skip


@case("job-go-panic", "batch",
      "The export-invoices job failed overnight, what happened?",
      {"detector": "crash_log_reason", "pod_prefix": "export-invoices-",
       "fact": "invalid memory address or nil pointer dereference", "identifiers": [],
       "not_causes": ["oomkilled", "job_deadline"], "remediation_not": ["(?i)roll ?back"]})  # fmt: skip
def _job_panic(s: Scene) -> None:
    image = "ghcr.io/acme/exporter:0.12.0"
    job_uid = the_uid(s.ns, "Job", "export-invoices-29412840")
    spec = {"containers": [ctr("exporter", image, args=["--since=24h", "--bucket=s3://acme-exports"])],
            "restartPolicy": "Never"}  # fmt: skip
    s.add("jobs", {
        "metadata": {"name": "export-invoices-29412840", "namespace": s.ns, "uid": job_uid,
                     "creationTimestamp": "2026-12-01T02:00:00Z",
                     "labels": {"batch.kubernetes.io/job-name": "export-invoices-29412840"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "export-invoices",
                                          "uid": the_uid(s.ns, "CronJob", "export-invoices"), "controller": True}]},
        "spec": {"backoffLimit": 2, "completions": 1, "parallelism": 1, "template": {"spec": spec}},
        "status": {"failed": 3, "startTime": "2026-12-01T02:00:00Z", "terminating": 0, "ready": 0,
                   "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                   "message": "Job has reached the specified backoff limit",
                                   "lastProbeTime": "2026-12-01T02:03:41Z",
                                   "lastTransitionTime": "2026-12-01T02:03:41Z"}]},
    })  # fmt: skip
    log = (
        '{"level":"info","ts":"2026-12-01T02:03:30Z","msg":"listing invoices","since":"24h"}\n'
        '{"level":"warn","ts":"2026-12-01T02:03:31Z","msg":"s3 retry","error":"RequestTimeout","attempt":1}\n'
        "panic: runtime error: invalid memory address or nil pointer dereference\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x9c1f3a]\n"
        "\n"
        "goroutine 1 [running]:\n"
        "github.com/acme/exporter/internal/invoice.(*Batch).Flush(0x0)\n"
        "\t/src/internal/invoice/batch.go:141 +0x3a\n"
        "main.run({0xc0000b4000, 0x2, 0x2})\n"
        "\t/src/cmd/exporter/main.go:77 +0x2c5\n"
    )
    for i in range(3):
        name = f"export-invoices-29412840-{h('job', str(i), n=5)}"
        t0 = f"02:0{i}"
        s.pod(name, spec, [{"name": "exporter", "image": image, "ready": False, "started": False,
                                  "restartCount": 0, "lastState": {},
                                  "state": {"terminated": ended("Error", 2, at(t0, 5, "2026-12-01"), at(t0, 41, "2026-12-01"))}}],
                    owner=("Job", "export-invoices-29412840", job_uid),
                    labels={"batch.kubernetes.io/job-name": "export-invoices-29412840",
                            "batch.kubernetes.io/controller-uid": job_uid},
                    phase="Failed", created=at(t0, 1, "2026-12-01"), node=i)  # fmt: skip
        s.logs[(name, "exporter")] = log
    s.event("Job", {"metadata": {"name": "export-invoices-29412840", "uid": job_uid}}, "BackoffLimitExceeded",
            "Job has reached the specified backoff limit", first="2026-12-01T02:03:41Z",
            last="2026-12-01T02:03:41Z", source="job-controller", api="batch/v1")  # fmt: skip


@case("taint-batch-pool", "etl",
      "spark-driver is stuck pending after we moved it to the batch pool",
      {"detector": "taint_untolerated", "pod_prefix": "spark-driver-", "fact": "workload",
       "identifiers": [], "not_causes": ["unschedulable"], "remediation_not": ["(?i)add a node"]})  # fmt: skip
def _taint(s: Scene) -> None:
    s.neighbour("airflow-web", "apache/airflow:2.10.2", replicas=1)
    for node in s.nodes:
        node["spec"]["taints"] = [{"key": "workload", "value": "batch", "effect": "NoSchedule"}]
        node["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] = "batch"
    s.nodes.append(s.make_node(3))
    image = "ghcr.io/acme/spark-driver:3.5.3"
    spec = {"containers": [ctr("spark-driver", image, mem="4Gi")],
            "nodeSelector": {"eks.amazonaws.com/nodegroup": "batch"}}  # fmt: skip
    rs, rs_uid, ph = s.deploy("spark-driver", spec, replicas=1, ready=0)
    msg = ("0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 3 node(s) had "
           "untolerated taint {workload: batch}. preemption: 0/4 nodes are available: 4 Preemption is "
           "not helpful for scheduling.")  # fmt: skip
    name = f"{rs}-{h(rs, n=5)}"
    pod = s.pod(name, spec, [], owner=("ReplicaSet", rs, rs_uid), labels=labels("spark-driver", ph),
                phase="Pending", node=None,
                sched={"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg,
                       "lastTransitionTime": at("14:04")})  # fmt: skip
    s.event("Pod", pod, "FailedScheduling", msg, count=9, source="default-scheduler")


@case("node-lost", "edge",
      "half of the ingest-gateway replicas are not ready",
      {"detector": "node_not_ready", "pod_prefix": "ingest-gateway-",
       "fact": "Kubelet stopped posting node status", "identifiers": [],
       "not_causes": ["probe_failure", "crash_log_reason"]})  # fmt: skip
def _node_lost(s: Scene) -> None:
    lost = s.nodes[2]
    for c in lost["status"]["conditions"]:
        c.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.",
                 lastHeartbeatTime=at("13:51"))  # fmt: skip
    lost["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule",
                               "timeAdded": at("13:52")},
                              {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                               "timeAdded": at("13:52")}]  # fmt: skip
    image = "ghcr.io/acme/ingest-gateway:2.2.0"
    spec = {"containers": [ctr("gateway", image)]}
    rs, rs_uid, ph = s.deploy("ingest-gateway", spec, replicas=2, ready=1)
    for i, node in enumerate((0, 2)):
        name = f"{rs}-{h(rs, str(i), n=5)}"
        ok = node == 0
        st = up("gateway", image, ready=ok, started=at("10:02"))
        pod = s.pod(name, spec, [st], owner=("ReplicaSet", rs, rs_uid), labels=labels("ingest-gateway", ph),
                    created=at("10:01"), node=node)  # fmt: skip
        if ok:
            s.logs[(name, "gateway")] = chatter(
                "ingest-gateway",
                30,
                name,
                [
                    '{"level":"error","msg":"client closed connection","peer":"10.42.7.4:51122","err":"EOF"}'
                ],
            )
        else:
            pod["status"]["conditions"][2].update(status="False", reason=None, message=None)
            s.event("Pod", pod, "NodeNotReady", "Node is not ready", count=1, first=at("13:52"),
                    last=at("13:52"), source="node-controller")  # fmt: skip
            s.event("Pod", pod, "TaintManagerEviction", f"Marking for deletion Pod {s.ns}/{name}", warning=False,
                    first=at("13:57"), last=at("13:57"), source="taint-eviction-controller")  # fmt: skip
    s.event("Node", lost, "NodeNotReady", f"Node {lost['metadata']['name']} status is now: NodeNotReady",
            warning=False, first=at("13:52"), last=at("13:52"), source="node-controller")  # fmt: skip


@case("init-pg-wait", "crm",
      "crm-web is stuck in Init, why?",
      {"detector": "service_no_endpoints", "pod_prefix": "crm-web-", "fact": "crm-postgres",
       "identifiers": [], "not_causes": ["init_container", "dns_resolution"]})  # fmt: skip
def _init_wait(s: Scene) -> None:
    image = "ghcr.io/acme/crm-web:6.1.0"
    init = {"name": "wait-for-postgres", "image": "postgres:16-alpine",
            "command": ["sh", "-c", "until pg_isready -h crm-postgres -p 5432; do echo waiting for database; sleep 2; done"],
            "resources": {}}  # fmt: skip
    spec = {"initContainers": [init], "containers": [ctr("crm-web", image)]}
    rs, rs_uid, ph = s.deploy("crm-web", spec, replicas=1, ready=0)
    name = f"{rs}-{h(rs, n=5)}"
    ist = {"name": "wait-for-postgres", "image": "postgres:16-alpine", "ready": False, "started": True,
           "restartCount": 0, "state": {"running": {"startedAt": at("14:01", 30)}}, "lastState": {}}  # fmt: skip
    main = waiting("crm-web", image, "PodInitializing", "")
    main["state"]["waiting"].pop("message")
    s.pod(name, spec, [main], owner=("ReplicaSet", rs, rs_uid), labels=labels("crm-web", ph),
          phase="Pending", init_statuses=[ist], initialized=False)  # fmt: skip
    s.logs[(name, "crm-web")] = ""
    s.logs[(name, "wait-for-postgres")] = "".join(
        "crm-postgres:5432 - no response\nwaiting for database\n" for _ in range(30)
    )
    # the database runs, but its pods were relabelled by the chart upgrade
    db_spec = {"containers": [ctr("postgres", "postgres:16.4", mem="2Gi")]}
    sts_uid = the_uid(s.ns, "StatefulSet", "crm-db")
    db = s.pod("crm-db-0", db_spec, [up("postgres", "postgres:16.4", started=at("08:00"))],
               owner=("StatefulSet", "crm-db", sts_uid), created=at("07:59"), node=1,
               labels={"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "crm-db",
                       "app.kubernetes.io/component": "primary"})  # fmt: skip
    s.logs[("crm-db-0", "postgres")] = ("2026-12-01 08:00:03.112 UTC [1] LOG:  database system is ready to accept connections\n"
                                        "2026-12-01 12:14:55.020 UTC [811] ERROR:  duplicate key value violates unique constraint \"contacts_email_key\"\n")  # fmt: skip
    del db
    s.add("services", {
        "metadata": {"name": "crm-postgres", "namespace": s.ns, "uid": the_uid(s.ns, "Service", "crm-postgres"),
                     "creationTimestamp": "2026-10-02T10:00:00Z"},
        "spec": {"type": "ClusterIP", "clusterIP": "172.20.91.14", "clusterIPs": ["172.20.91.14"],
                 "ports": [{"name": "tcp-postgresql", "port": 5432, "protocol": "TCP", "targetPort": 5432}],
                 "selector": {"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "crm-db",
                              "role": "primary"}},
        "status": {"loadBalancer": {}},
    })  # fmt: skip


@case("env-renamed-envconfig", "orders",
      "fulfilment started crashing right after the 14:00 deploy",
      {"detector": "missing_env", "pod_prefix": "fulfilment-", "fact": "REDIS_HOST",
       "identifiers": ["REDIS_HOST"], "not_causes": ["dns_resolution"], "also": []})  # fmt: skip
def _env_renamed(s: Scene) -> None:
    s.neighbour("orders-api", "ghcr.io/acme/orders-api:9.0.1")
    image = "ghcr.io/acme/fulfilment:9.1.0"
    new_env = [
        {"name": "REDIS_ADDR", "value": "redis-master:6379"},
        {"name": "LOG_FORMAT", "value": "json"},
    ]
    old_env = [
        {"name": "REDIS_HOST", "value": "redis-master:6379"},
        {"name": "LOG_FORMAT", "value": "json"},
    ]
    prev = ('{"level":"info","time":"2026-12-01T14:26:10Z","message":"fulfilment 9.1.0 starting"}\n'
            '{"level":"error","time":"2026-12-01T14:26:10Z","message":"config: required key REDIS_HOST missing value"}\n'
            "panic: required key REDIS_HOST missing value\n\ngoroutine 1 [running]:\nmain.main()\n"
            "\t/build/cmd/fulfilment/main.go:31 +0x1e5\n")  # fmt: skip
    crashing(s, "fulfilment", image, restarts=4, last=ended("Error", 2), previous=prev, env=new_env,
             old_spec={"containers": [ctr("fulfilment", "ghcr.io/acme/fulfilment:9.0.3", env=old_env)]})  # fmt: skip


@case("hpa-ceiling", "gateway",
      "p99 latency on edge-proxy doubled during the sale, are we out of capacity?",
      {"detector": "hpa_at_max", "pod_prefix": "edge-proxy",
       "fact": "the desired replica count is more than the maximum replica count",
       "identifiers": [], "not_causes": ["probe_failure", "crash_log_reason"]})  # fmt: skip
def _hpa(s: Scene) -> None:
    image = "envoyproxy/envoy:v1.31.2"
    spec = {"containers": [ctr("envoy", image, mem="512Mi")]}
    rs, rs_uid, ph = s.deploy("edge-proxy", spec, replicas=6)
    for i in range(6):
        name = f"{rs}-{h(rs, str(i), n=5)}"
        s.pod(name, spec, [up("envoy", image, started=at("12:00"))], owner=("ReplicaSet", rs, rs_uid),
              labels=labels("edge-proxy", ph), created=at("11:59"), node=i % 3)  # fmt: skip
        s.logs[(name, "envoy")] = (
            '[2026-12-01 14:20:11.021][1][warning][config] [source/common/config/grpc_stream.h:191] '
            "StreamAggregatedResources gRPC config stream to xds-cluster closed since 42s ago: 14, upstream connect error\n"
            '[2026-12-01T14:21:03.551Z] "GET /api/products HTTP/1.1" 200 - 0 5123 812 811 "-" "Mozilla/5.0" "b1e2" "shop.acme.io" "10.42.1.130:3000"\n')  # fmt: skip
    s.add("horizontalpodautoscalers", {
        "metadata": {"name": "edge-proxy", "namespace": s.ns, "uid": the_uid(s.ns, "HPA", "edge-proxy"),
                     "creationTimestamp": "2026-09-14T08:21:07Z"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "edge-proxy"},
                 "minReplicas": 2, "maxReplicas": 6,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                              "target": {"type": "Utilization", "averageUtilization": 60}}}]},
        "status": {"currentReplicas": 6, "desiredReplicas": 6, "lastScaleTime": at("13:41"),
                   "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                                       "current": {"averageUtilization": 137, "averageValue": "685m"}}}],
                   "conditions": [
                       {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                        "message": "recommended size matches current size"},
                       {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound",
                        "message": "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"},
                       {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas",
                        "message": "the desired replica count is more than the maximum replica count"}]},
    })  # fmt: skip
    s.event("HorizontalPodAutoscaler", s.lists["horizontalpodautoscalers"][0], "SuccessfulRescale",
            "New size: 6; reason: cpu resource utilization (percentage of request) above target",
            warning=False, first=at("13:41"), last=at("13:41"), source="horizontal-pod-autoscaler",
            api="autoscaling/v2")  # fmt: skip


# -- no verified cause: the dump does not show why -------------------------------------------


@case("unexplained-restarts", "shop",
      "why did checkout restart three times?",
      {"detector": None, "unexplained": True, "pod_prefix": "checkout-", "fact": None, "identifiers": [],
       "not_causes": ["oomkilled", "crash_log_reason", "probe_failure", "upstream_unavailable",
                      "dns_resolution", "config_invalid", "missing_env"]})  # fmt: skip
def _unexplained(s: Scene) -> None:
    s.neighbour("basket", "ghcr.io/acme/basket:4.4.0")
    image = "ghcr.io/acme/checkout:4.4.0"
    spec = {"containers": [ctr("checkout", image)]}
    rs, rs_uid, ph = s.deploy("checkout", spec, replicas=1)
    name = f"{rs}-{h(rs, n=5)}"
    # running and ready now; it exited with 1 three times; no previous log was collected
    s.pod(name, spec, [up("checkout", image, restarts=3, last=ended("Error", 1, at("13:58"), at("14:07")),
                          started=at("14:07", 20))],
          owner=("ReplicaSet", rs, rs_uid), labels=labels("checkout", ph))  # fmt: skip
    s.logs[(name, "checkout")] = chatter("checkout", 30, "co", [
        '{"level":"warn","msg":"payment provider slow","error":"none","retry":false}',
        '{"level":"info","msg":"errors in the last minute","errors":0}'])  # fmt: skip


@case("unexplained-segfault", "media",
      "thumbnailer is crashlooping, what's wrong with it?",
      {"detector": None, "unexplained": True, "pod_prefix": "thumbnailer-", "fact": None, "identifiers": [],
       "not_causes": ["oomkilled", "crash_log_reason", "probe_failure", "config_invalid", "missing_env",
                      "command_not_found"]})  # fmt: skip
def _segfault(s: Scene) -> None:
    s.neighbour("uploader", "ghcr.io/acme/uploader:2.3.1")
    image = "ghcr.io/acme/thumbnailer:2.3.1"
    prev = (
        "thumbnailer 2.3.1 (libvips 8.15.3)\n"
        "watching queue media.thumbnails\n"
        "decoder: no error handler registered for image/heic, using default\n"
    )
    crashing(
        s, "thumbnailer", image, restarts=14, last=ended("Error", 139), previous=prev, current=prev
    )


@case("unexplained-stale-history", "reports",
      "Did the pdf-builder crash last night? It looks fine now.",
      {"detector": None, "unexplained": True, "pod_prefix": "pdf-builder-", "fact": None, "identifiers": [],
       "not_causes": ["oomkilled", "crash_log_reason", "probe_failure", "image_pull", "evicted",
                      "node_not_ready"]})  # fmt: skip
def _stale_history(s: Scene) -> None:
    image = "ghcr.io/acme/pdf-builder:1.2.0"
    spec = {
        "containers": [
            ctr("pdf-builder", image, readinessProbe={"httpGet": {"path": "/ready", "port": 3000}})
        ]
    }
    rs, rs_uid, ph = s.deploy("pdf-builder", spec, replicas=2)
    for i in range(2):
        name = f"{rs}-{h(rs, str(i), n=5)}"
        s.pod(name, spec, [up("pdf-builder", image, started=at("06:00"))], owner=("ReplicaSet", rs, rs_uid),
              labels=labels("pdf-builder", ph), created=at("05:59"), node=i)  # fmt: skip
        s.logs[(name, "pdf-builder")] = chatter(
            "pdf-builder",
            20,
            name,
            [
                '{"level":"error","msg":"font cache rebuilt after error","err":"stale cache","recovered":true}'
            ],
        )
    # events of last night's pods, which no longer exist
    gone = {"metadata": {"name": f"{rs}-x7k2p", "uid": the_uid("gone", "pdf")}}
    s.event("Pod", gone, "Unhealthy", "Readiness probe failed: Get \"http://10.42.1.77:3000/ready\": "
            "context deadline exceeded (Client.Timeout exceeded while awaiting headers)", count=12,
            first="2026-11-30T23:40:00Z", last="2026-11-30T23:52:00Z", field="spec.containers{pdf-builder}")  # fmt: skip
    s.event("Pod", gone, "BackOff", "Back-off restarting failed container pdf-builder in pod "
            f"{rs}-x7k2p_{s.ns}", count=5, first="2026-11-30T23:45:00Z", last="2026-11-30T23:55:00Z",
            field="spec.containers{pdf-builder}")  # fmt: skip


# -- round 2: written after the fixes of round 1, to check they generalize ------------------


@case("r2-jvm-caused-by-auth", "loyalty",
      "points-service crashes on startup since the credentials rotation",
      {"detector": "crash_log_reason", "pod_prefix": "points-service-",
       "fact": "password authentication failed for user", "identifiers": ["exit code 1"],
       "not_causes": ["oomkilled", "dns_resolution"]})  # fmt: skip
def _r2_jvm(s: Scene) -> None:
    s.neighbour("rewards-ui", "ghcr.io/acme/rewards-ui:3.0.0")
    prev = (
        "14:26:01.120 [main] INFO  c.a.points.Main - points-service 1.8.2 starting\n"
        "14:26:02.883 [main] WARN  c.a.points.cache.Warmup - cache warmup skipped: error budget ok\n"
        'Exception in thread "main" java.lang.IllegalStateException: Failed to execute CommandLineRunner\n'
        "\tat org.springframework.boot.SpringApplication.callRunner(SpringApplication.java:774)\n"
        "\tat com.acme.points.Main.main(Main.java:22)\n"
        'Caused by: org.postgresql.util.PSQLException: FATAL: password authentication failed for user "points"\n'
        "\tat org.postgresql.core.v3.ConnectionFactoryImpl.doAuthentication(ConnectionFactoryImpl.java:693)\n"
        "\t... 9 more\n"
    )
    crashing(s, "points-service", "ghcr.io/acme/points-service:1.8.2", restarts=8,
             last=ended("Error", 1), previous=prev, current=prev[:120])  # fmt: skip


@case("r2-dotnet-abort", "retail",
      "pricing-engine is in CrashLoopBackOff, exit code 134",
      {"detector": "crash_log_reason", "pod_prefix": "pricing-engine-",
       "fact": "Unable to resolve service for type", "identifiers": ["exit code 134"],
       "not_causes": ["oomkilled"]})  # fmt: skip
def _r2_dotnet(s: Scene) -> None:
    s.neighbour("catalog", "mcr.microsoft.com/dotnet/samples:aspnetapp")
    prev = (
        "info: Microsoft.Hosting.Lifetime[14]\n      Now listening on: http://[::]:8080\n"
        "warn: Microsoft.AspNetCore.DataProtection.Repositories.EphemeralXmlRepository[50]\n"
        "      Using an in-memory repository. Keys will not be persisted to storage.\n"
        "Unhandled exception. System.InvalidOperationException: Unable to resolve service for type "
        "'Acme.Pricing.IRateProvider' while attempting to activate 'Acme.Pricing.PriceCalculator'.\n"
        "   at Microsoft.Extensions.DependencyInjection.ServiceLookup.CallSiteFactory.CreateArgumentCallSites()\n"
        "   at Acme.Pricing.Program.Main(String[] args) in /src/Program.cs:line 31\n"
    )
    crashing(s, "pricing-engine", "acme.azurecr.io/retail/pricing-engine:2025.1.7", restarts=10,
             last=ended("Error", 134), previous=prev, current=prev[:80])  # fmt: skip


@case("r2-pydantic-settings", "notify",
      "Why does the mailer crash right away?",
      {"detector": "crash_log_reason", "pod_prefix": "mailer-", "fact": "ValidationError",
       "identifiers": [], "not_causes": ["oomkilled", "config_invalid", "dns_resolution"]})  # fmt: skip
def _r2_pydantic(s: Scene) -> None:
    s.neighbour("sms", "ghcr.io/acme/sms:1.1.0")
    prev = (
        "INFO:     Started server process [1]\n"
        "INFO:     Waiting for application startup.\n"
        "Traceback (most recent call last):\n"
        '  File "/app/mailer/settings.py", line 19, in <module>\n'
        "    settings = Settings()\n"
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for Settings\n"
        "smtp_password\n"
        "  Field required [type=missing, input_value={'smtp_host': 'smtp.acme.io'}, input_type=dict]\n"
        "ERROR:    Application startup failed. Exiting.\n"
    )
    crashing(s, "mailer", "ghcr.io/acme/mailer:0.4.0", restarts=5, last=ended("Error", 3),
             previous=prev, current=prev[:60])  # fmt: skip


@case("r2-pull-denied", "partners",
      "partner-sync pods never start",
      {"detector": "image_pull", "pod_prefix": "partner-sync-", "fact": "pull access denied",
       "identifiers": [], "not_causes": ["create_config_error"], "remediation": ["imagePullSecret"]})  # fmt: skip
def _r2_denied(s: Scene) -> None:
    s.neighbour("partner-portal", "ghcr.io/acme/partner-portal:1.0.0", replicas=1)
    image = "acmecorp/partner-sync:4.0.0"
    spec = {"containers": [ctr("partner-sync", image)]}
    rs, rs_uid, ph = s.deploy("partner-sync", spec, replicas=1, ready=0)
    name = f"{rs}-{h(rs, n=5)}"
    pod = s.pod(name, spec, [waiting("partner-sync", image, "ErrImagePull",
                                     "pull access denied, repository does not exist or may require authorization")],
                owner=("ReplicaSet", rs, rs_uid), labels=labels("partner-sync", ph), phase="Pending")  # fmt: skip
    s.event("Pod", pod, "Failed", f'Failed to pull image "{image}": Error response from daemon: pull access '
            "denied for acmecorp/partner-sync, repository does not exist or may require 'docker login': "
            "denied: requested access to the resource is denied", count=5,
            field="spec.containers{partner-sync}")  # fmt: skip
    s.event(
        "Pod", pod, "Failed", "Error: ErrImagePull", count=5, field="spec.containers{partner-sync}"
    )


@case("r2-evicted-recent-disk", "logs",
      "log-shipper pod got killed an hour ago, why?",
      {"detector": "evicted", "pod_prefix": "log-shipper-", "fact": "ephemeral-storage",
       "identifiers": [], "not_causes": ["oomkilled", "crash_log_reason"]})  # fmt: skip
def _r2_evicted(s: Scene) -> None:
    image = "fluent/fluent-bit:3.1.9"
    spec = {"containers": [ctr("fluent-bit", image, mem="256Mi")]}
    rs, rs_uid, ph = s.deploy("log-shipper", spec, replicas=1)
    msg = ("The node was low on resource: ephemeral-storage. Threshold quantity: 8388608000, available: "
           "7524312Ki. Container fluent-bit was using 11328104Ki, request is 0, has larger consumption "
           "of ephemeral-storage.")  # fmt: skip
    gone = f"{rs}-{h('ev', n=5)}"
    old = s.pod(gone, spec, [], owner=("ReplicaSet", rs, rs_uid), labels=labels("log-shipper", ph),
                phase="Failed", created=at("09:00"), reason="Evicted", message=msg, node=1)  # fmt: skip
    old["status"]["containerStatuses"] = [{"name": "fluent-bit", "image": image, "ready": False,
                                            "restartCount": 0, "lastState": {},
                                            "state": {"terminated": {"exitCode": 137, "reason": "Error",
                                                                     "startedAt": at("09:01"),
                                                                     "finishedAt": at("13:31")}}}]  # fmt: skip
    s.event("Pod", old, "Evicted", msg, first=at("13:30"), last=at("13:30"))
    s.nodes[1]["status"]["conditions"][1].update(status="True", reason="KubeletHasDiskPressure",
                                                 message="kubelet has disk pressure")  # fmt: skip
    name = f"{rs}-{h(rs, n=5)}"
    s.pod(name, spec, [up("fluent-bit", image, started=at("13:32"))], owner=("ReplicaSet", rs, rs_uid),
          labels=labels("log-shipper", ph), created=at("13:31"), node=0)  # fmt: skip
    s.logs[(name, "fluent-bit")] = ("[2026/12/01 13:32:10] [ info] [output:forward:forward.0] worker #0 started\n"
                                    "[2026/12/01 13:40:02] [error] [output:forward:forward.0] no upstream "
                                    "connections available, retrying\n[2026/12/01 13:40:04] [ info] retry succeeded\n")  # fmt: skip


@case("r2-unexplained-pending", "sandbox",
      "why is the notebook pod pending?",
      {"detector": None, "unexplained": True, "pod_prefix": "notebook-", "fact": None, "identifiers": [],
       "not_causes": ["unschedulable", "pvc_unbound", "taint_untolerated", "image_pull"]})  # fmt: skip
def _r2_pending(s: Scene) -> None:
    s.neighbour("hub", "quay.io/jupyterhub/k8s-hub:3.3.8", replicas=1)
    image = "quay.io/jupyter/scipy-notebook:2024-11-19"
    spec = {"containers": [ctr("notebook", image, mem="2Gi")], "schedulerName": "volcano"}
    rs, rs_uid, ph = s.deploy("notebook", spec, replicas=1, ready=0)
    # no scheduler has looked at it: no PodScheduled reason, no event; the dump cannot say why
    name = f"{rs}-{h(rs, n=5)}"
    pod = s.pod(name, spec, [], owner=("ReplicaSet", rs, rs_uid), labels=labels("notebook", ph),
                phase="Pending", node=None,
                sched={"type": "PodScheduled", "status": "False", "lastTransitionTime": at("14:01")})  # fmt: skip
    del pod


def main() -> None:
    for name, (fn, ns, question, expected) in INCIDENTS.items():
        out = HERE / name
        if out.exists():
            shutil.rmtree(out)
        out.mkdir()
        scene = Scene(ns)
        fn(scene)
        scene.write(out / "dump")
        (out / "question.txt").write_text(question + "\n")
        (out / "namespace.txt").write_text(ns + "\n")
        (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
        print(f"wrote {out.relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    main()
