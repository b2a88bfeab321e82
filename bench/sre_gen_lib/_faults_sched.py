"""Fault classes of scheduling, nodes, controllers and the network between workloads:
Pending (resources, taints, anti-affinity, node selectors), preemption, eviction, a node
NotReady, a Deployment scaled to 0, a Service selector matching nothing, probes failing on
an upstream's 503, Jobs out of retries or time, a quota, an HPA at its ceiling; and the
healthy control. Messages follow kube-scheduler, kubelet and controller sources."""

from __future__ import annotations

from typing import Any

from bench.sre_gen_lib._cluster import DAY, HOUR, MINUTE, Obj, Ref, Workload
from bench.sre_gen_lib._kit import (
    Ctx,
    Fault,
    FaultFn,
    Symptom,
    container,
    ent,
    healthy_deployment,
    root,
    running,
    scheduled_event,
    started_events,
    terminated,
)
from bench.sre_gen_lib._model import Entity


def _sym(ctx: Ctx, w: Workload, pods: list[Obj]) -> tuple[Entity, ...]:
    out = [ent(ctx, "Deployment" if w.kind == "Deployment" else w.kind, w.name)]
    if w.kind == "Deployment":
        out.append(ent(ctx, "ReplicaSet", w.owner.name))
    return (*out, *(ent(ctx, "Pod", p["metadata"]["name"]) for p in pods))


def fit_error(ctx: Ctx, clauses: dict[str, int], preemption: dict[str, int]) -> str:
    """The scheduler's ``FitError``: ``0/N nodes are available: <count> <reason>, … .
    preemption: 0/N nodes are available: …`` (clauses sorted, as it sorts them)."""
    n = len(ctx.k.nodes)
    head = ", ".join(sorted(f"{v} {k}" for k, v in clauses.items()))
    tail = ", ".join(sorted(f"{v} {k}" for k, v in preemption.items()))
    return f"0/{n} nodes are available: {head}. preemption: 0/{n} nodes are available: {tail}."


def pending(ctx: Ctx, w: Workload, message: str, *, age: float, count: int | None = None) -> Obj:
    k = ctx.k
    pod = k.pod(w, [], phase="Pending", node=None, age=age, conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "lastTransitionTime": k.ago(age), "message": message}])  # fmt: skip
    k.event(pod, "FailedScheduling", message, count=count or k.rng.randint(3, 20), seen=(age, k.rng.randint(20, 240)), source=("default-scheduler", ""))  # fmt: skip
    return pod


def _scheduling(ctx: Ctx, clause: str, reasons: tuple[str, ...], *, n_ok: int = 1,
                cargs: dict[str, Any] | None = None, **spec: Any) -> Fault:  # fmt: skip
    """A Deployment of which ``n_ok`` pods run and the rest wait on ``clause`` for every worker."""
    k = ctx.k
    app = ctx.name()
    c = container(ctx, app, **(cargs or {}))
    n = n_ok + k.rng.randint(1, 2)
    rollout = k.rng.randint(20, 90) * MINUTE
    w = k.deployment(app, [c], replicas=n, ready=n_ok, rollout=rollout, **spec)
    pods = []
    for _ in range(n_ok):
        node = ctx.node()
        p = k.pod(w, [running(ctx, c, since=rollout - 30)], node=node, age=rollout - 5)
        scheduled_event(ctx, p, node, ago=rollout - 5)
        k.log(p, app, ctx.style.noise(k, 20, start=60, span=rollout - 60))
        pods.append(p)
    workers = len(ctx.nodes.workers)
    msg = fit_error(ctx, {f"node(s) had untolerated taint {ctx.nodes.taint}": 1, clause: workers},
                    {"Preemption is not helpful for scheduling": 1 + (0 if "Insufficient" in clause else workers),
                     **({"No preemption victims found for incoming pod": workers} if "Insufficient" in clause else {})})  # fmt: skip
    for _ in range(n - n_ok):
        pods.append(pending(ctx, w, msg, age=rollout - 5))
    k.service(app, {"app": app}, ready_pods=pods[:n_ok])
    return Fault(roots=(root(ctx, "Deployment", app),), reasons=reasons, symptoms=_sym(ctx, w, pods)[1:],
                 subject=app, symptom=Symptom.PENDING)  # fmt: skip


def insufficient_cpu(ctx: Ctx) -> Fault:
    return _scheduling(ctx, "Insufficient cpu", ("Insufficient cpu",),
                       cargs={"cpu": "3500m"})  # fmt: skip


def insufficient_memory(ctx: Ctx) -> Fault:
    return _scheduling(ctx, "Insufficient memory", ("Insufficient memory",), cargs={"mem": "14Gi"})


def untolerated_taint(ctx: Ctx) -> Fault:
    key, value = ctx.k.rng.choice([("dedicated", "batch"), ("workload", "gpu"), ("team", "data")])
    for node in ctx.k.nodes:
        if node["metadata"]["name"] in ctx.nodes.workers:
            node["spec"]["taints"] = [{"key": key, "value": value, "effect": "NoSchedule",
                                       "timeAdded": ctx.k.ago(3 * HOUR)}]  # fmt: skip
    return _scheduling(ctx, f"node(s) had untolerated taint {{{key}: {value}}}",
                       ("untolerated taint", "toleration", f"{key}"), n_ok=0)  # fmt: skip


def anti_affinity(ctx: Ctx) -> Fault:
    app_label = {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["…"]}]},
                 "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
    fault = _scheduling(ctx, "node(s) didn't match pod anti-affinity rules",
                        ("anti-affinity", "podAntiAffinity"), n_ok=len(ctx.nodes.workers),
                        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [app_label]}})  # fmt: skip
    spec = ctx.k.items("deployments")[-1]["spec"]["template"]["spec"]
    spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "labelSelector"]["matchExpressions"][0]["values"] = [fault.subject]  # fmt: skip
    return fault


def node_selector(ctx: Ctx) -> Fault:
    sel = ctx.k.rng.choice([{"disktype": "ssd"}, {"node-pool": "highmem"}, {"kubernetes.io/arch": "arm64"}])
    return _scheduling(ctx, "node(s) didn't match Pod's node affinity/selector",
                       ("node affinity/selector", "nodeSelector", "node selector", next(iter(sel))),
                       n_ok=0, nodeSelector=sel)  # fmt: skip


def preempted(ctx: Ctx) -> Fault:
    """A higher-priority workload arrived; the victims' events sit on pods that are gone."""
    k = ctx.k
    hi_app, lo_app = ctx.name(), ctx.name()
    arrived = k.rng.randint(10, 50) * MINUTE
    hi_c = container(ctx, hi_app, mem="6Gi", cpu="2")
    hi = k.deployment(hi_app, [hi_c], replicas=len(ctx.nodes.workers), ready=len(ctx.nodes.workers),
                      rollout=arrived, priorityClassName="business-critical")  # fmt: skip
    hi_pods = []
    for node in ctx.nodes.workers:
        p = k.pod(hi, [running(ctx, hi_c, since=arrived - 20)], node=node, age=arrived, priority=1_000_000,
                  priorityClassName="business-critical")  # fmt: skip
        scheduled_event(ctx, p, node, ago=arrived - 2)
        k.log(p, hi_app, ctx.style.noise(k, 20, start=60, span=arrived - 60))
        hi_pods.append(p)
    lo_c = container(ctx, lo_app, mem="4Gi", cpu="1")
    lo = k.deployment(lo_app, [lo_c], replicas=2, ready=0, age=30 * DAY, rollout=9 * DAY)
    victims = []
    for i, pre in enumerate(hi_pods[:2]):
        gone = Ref(kind="Pod", name=f"{lo.owner.name}-{k.suffix(5)}", uid=k.uid())
        node = pre["spec"]["nodeName"]
        k.event(gone, "Preempted", f"Preempted by pod {pre['metadata']['uid']} on node {node}", type_="Normal",
                seen=(arrived - 1 - i, arrived - 1 - i), source=("default-scheduler", ""))  # fmt: skip
        k.event(gone, "Killing", f"Stopping container {lo_app}", type_="Normal", seen=(arrived - 2 - i, arrived - 2 - i), source=("kubelet", node), field_path=f"spec.containers{{{lo_app}}}")  # fmt: skip
        victims.append(gone)
    msg = fit_error(ctx, {f"node(s) had untolerated taint {ctx.nodes.taint}": 1,
                          "Insufficient memory": len(ctx.nodes.workers)},
                    {"Preemption is not helpful for scheduling": 1,
                     "No preemption victims found for incoming pod": len(ctx.nodes.workers)})  # fmt: skip
    pods = [pending(ctx, lo, msg, age=arrived - 3) for _ in range(2)]
    k.service(lo_app, {"app": lo_app})
    return Fault(roots=(root(ctx, "Deployment", hi_app),), reasons=("Preempted", "preemption", "priority"),
                 symptoms=(*_sym(ctx, lo, pods), *(ent(ctx, "Pod", v.name) for v in victims)),
                 subject=lo_app, symptom=Symptom.PENDING)  # fmt: skip


def _evicted(ctx: Ctx, message: str, reasons: tuple[str, ...], *, node_reason: str) -> Fault:
    k = ctx.k
    app = ctx.name()
    c = container(ctx, app, mem="256Mi")
    w = k.deployment(app, [c], replicas=1, ready=1, rollout=6 * DAY)
    node = ctx.node()
    when = k.rng.randint(8, 50) * MINUTE
    dead = k.pod(w, [], phase="Failed", node=node, age=6 * DAY, reason="Evicted",
                 message=message.format(c=app))  # fmt: skip
    dead["status"]["containerStatuses"] = [{
        "name": app, "image": c["image"], "imageID": "", "ready": False, "started": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown", "finishedAt": k.ago(when),
                                 "message": "The container could not be located when the pod was terminated"}},
        "lastState": {}}]  # fmt: skip
    k.event(dead, "Evicted", message.format(c=app), seen=(when, when))
    k.event(dead, "Killing", f"Stopping container {app}", type_="Normal", seen=(when, when),
            field_path=f"spec.containers{{{app}}}")  # fmt: skip
    node_uid = next(n["metadata"]["uid"] for n in k.nodes if n["metadata"]["name"] == node)
    k.event(Ref(kind="Node", name=node, uid=node_uid), "EvictionThresholdMet",
            f"Attempting to reclaim {node_reason}", seen=(when + 30, when), source=("kubelet", node))  # fmt: skip
    fresh = k.pod(w, [running(ctx, c, since=when - 40)], node=ctx.node(), age=when - 5)
    started_events(ctx, fresh, c, seen=(when - 10, when - 10))
    k.log(fresh, app, ctx.style.noise(k, 20, start=60, span=when - 60))
    k.service(app, {"app": app}, ready_pods=[fresh])
    return Fault(roots=(root(ctx, "Deployment", app),), reasons=reasons,
                 symptoms=_sym(ctx, w, [dead, fresh])[1:], subject=app, symptom=Symptom.RESTARTING)  # fmt: skip


def evicted_memory(ctx: Ctx) -> Fault:
    used = ctx.k.rng.randint(2_000_000, 6_000_000)
    msg = (f"The node was low on resource: memory. Threshold quantity: 100Mi, available: "
           f"{ctx.k.rng.randint(40_000, 99_000)}Ki. Container {{c}} was using {used}Ki, request is 256Mi, "
           f"has larger consumption of memory. ")  # fmt: skip
    return _evicted(ctx, msg, ("Evicted",), node_reason="memory")


def evicted_storage(ctx: Ctx) -> Fault:
    msg = ctx.k.rng.choice([
        "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. ",
        "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9Gi. "
        "Container {c} was using 41Gi, request is 0, has larger consumption of ephemeral-storage. "])  # fmt: skip
    return _evicted(ctx, msg, ("Evicted", "ephemeral"), node_reason="ephemeral-storage")


def node_notready(ctx: Ctx) -> Fault:
    k = ctx.k
    bad = ctx.nodes.workers[0]
    since = k.rng.randint(70, 280)  # inside the pods' 300 s unreachable toleration: not evicted yet
    node = next(n for n in k.nodes if n["metadata"]["name"] == bad)
    for cond in node["status"]["conditions"]:
        cond.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.",
                    lastHeartbeatTime=k.ago(since + 40), lastTransitionTime=k.ago(since))  # fmt: skip
    node["spec"]["taints"] = [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": k.ago(since)},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": k.ago(since)}]  # fmt: skip
    k.event(node, "NodeNotReady", f"Node {bad} status is now: NodeNotReady", type_="Normal", seen=(since, since), source=("node-controller", ""))  # fmt: skip
    app = ctx.name()
    c = container(ctx, app)
    w = k.deployment(app, [c], replicas=2, ready=1, age=20 * DAY, rollout=4 * DAY)
    pods = []
    for n in (bad, ctx.nodes.workers[1]):
        p = k.pod(w, [running(ctx, c, since=4 * DAY, ready=n != bad)], node=n, age=4 * DAY,
                  ready_since=since if n == bad else 4 * DAY)  # fmt: skip
        k.log(p, app, ctx.style.noise(k, 20, start=since + 60 if n == bad else 60, span=3 * HOUR))
        if n == bad:
            k.event(p, "NodeNotReady", "Node is not ready", seen=(since, since),
                    source=("node-controller", ""))  # fmt: skip
            for cond in p["status"]["conditions"]:
                if cond["type"] == "Ready":
                    cond["reason"] = ""
        pods.append(p)
    k.service(app, {"app": app}, ready_pods=pods[1:])
    return Fault(roots=(root(ctx, "Node", bad),),
                 reasons=("NotReady", "NodeNotReady", "NodeStatusUnknown", "stopped posting", "unreachable"),
                 symptoms=_sym(ctx, w, pods), subject=app, symptom=Symptom.ERRORS)  # fmt: skip


def scaled_to_zero(ctx: Ctx) -> Fault:
    k = ctx.k
    app = ctx.name()
    c = container(ctx, app)
    when = k.rng.randint(10, 50) * MINUTE
    was = k.rng.randint(2, 5)
    w = k.deployment(app, [c], replicas=0, ready=0, age=40 * DAY, rollout=8 * DAY)
    for rs in k.items("replicasets"):
        if rs["metadata"]["name"] == w.owner.name:
            rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] = "0"
    k.event(w.obj, "ScalingReplicaSet", f"Scaled down replica set {w.owner.name} to 0 from {was}", type_="Normal",
            seen=(when, when), source=("deployment-controller", ""))  # fmt: skip
    svc = k.service(app, {"app": app})
    return Fault(roots=(root(ctx, "Deployment", app),),
                 reasons=("ScalingReplicaSet", "Scaled down", "to 0", "0 replicas", "replicas: 0", "scaled to 0", "zero"),
                 symptoms=(ent(ctx, "Service", svc["metadata"]["name"]), ent(ctx, "ReplicaSet", w.owner.name)),
                 subject=app, symptom=Symptom.DOWN, subject_kind="service")  # fmt: skip


def selector_mismatch(ctx: Ctx) -> Fault:
    w, _ = healthy_deployment(ctx, age=9 * DAY)
    # the Service written by healthy_deployment is the one in front; point it elsewhere
    svc = ctx.k.items("services")[-1]
    wrong = ctx.k.rng.choice([{"app": f"{w.name}-v2"}, {"app": w.name, "tier": "backend"},
                              {"app.kubernetes.io/name": f"{w.name}-api"}])  # fmt: skip
    svc["spec"]["selector"] = wrong
    ctx.k.items("endpoints")[-1]["subsets"] = []
    svc["metadata"]["creationTimestamp"] = ctx.k.ago(ctx.k.rng.randint(10, 60) * MINUTE)
    return Fault(roots=(root(ctx, "Service", w.name),), reasons=("selector",),
                 symptoms=(ent(ctx, "Deployment", w.name),), subject=w.name, symptom=Symptom.DOWN,
                 subject_kind="service")  # fmt: skip


def probe_upstream_503(ctx: Ctx) -> Fault:
    """The probed app's readiness depends on an upstream that answers 503; the structured
    log of the app says so, and the upstream's own log says why."""
    k = ctx.k
    up, _ = healthy_deployment(ctx, age=5 * DAY)
    up_pods = [p for p in k.items("pods") if p["metadata"]["name"].startswith(up.owner.name)]
    for p in up_pods:
        k.log(p, up.name, [*ctx.style.noise(k, 10, start=15 * MINUTE, span=5 * MINUTE),
                           *(ctx.style.line(k, 600 - i * 20, "ERROR", "request failed", status=503,
                                            error="database connection pool exhausted (max=20)")
                             for i in range(25))])  # fmt: skip
    app = ctx.name()
    c = container(ctx, app)
    since = k.rng.randint(8, 30) * MINUTE
    w = k.deployment(app, [c], replicas=2, ready=0, age=30 * DAY, rollout=6 * DAY)
    pods = []
    url = f"http://{up.name}.{ctx.ns}.svc.cluster.local:80"
    for _ in range(2):
        node = ctx.node()
        p = k.pod(w, [running(ctx, c, since=6 * DAY, ready=False)], node=node, age=6 * DAY, ready_since=since)
        lines = ctx.style.noise(k, 15, start=since + 300, span=600)
        for i in range(30):
            lines.append(ctx.style.line(k, since - i * 0.35, "ERROR", "upstream request failed",
                                        upstream=url, status=503, duration_ms=k.rng.randint(9_000, 10_000)))  # fmt: skip
            if i % 5 == 0:
                lines.append(ctx.style.line(k, since - i * 0.35, "WARN", "readiness check failed",
                                            dependency=up.name))  # fmt: skip
        k.log(p, app, lines)
        k.event(p, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503",
                count=k.rng.randint(40, 200), seen=(since, k.rng.randint(3, 20)),
                field_path=f"spec.containers{{{app}}}")  # fmt: skip
        pods.append(p)
    k.service(app, {"app": app})
    return Fault(roots=(root(ctx, "Deployment", up.name, ("Service", up.name)),),
                 reasons=("503", "upstream", "Service Unavailable", "connection pool"),
                 symptoms=_sym(ctx, w, pods), subject=app, symptom=Symptom.ERRORS)  # fmt: skip


def _job(ctx: Ctx, *, reason: str, message: str, deadline: int | None) -> Fault:
    k = ctx.k
    name = f"{ctx.name()}-{k.rng.randint(28_000_000, 29_999_999)}"
    app = name.rsplit("-", 1)[0]
    c = container(ctx, app)
    c.pop("readinessProbe")
    started = k.rng.randint(30, 120) * MINUTE
    failed = k.rng.randint(8, 25) * MINUTE
    status: Obj = {"startTime": k.ago(started), "failed": 1 if deadline else 7, "active": 0,
                   "conditions": [{"type": "FailureTarget", "status": "True", "reason": reason, "message": message,
                                   "lastProbeTime": k.ago(failed), "lastTransitionTime": k.ago(failed)},
                                  {"type": "Failed", "status": "True", "reason": reason, "message": message,
                                   "lastProbeTime": k.ago(failed), "lastTransitionTime": k.ago(failed)}]}  # fmt: skip
    w = k.job(name, [c], age=started, status=status, deadline=deadline)
    pods = []
    for i in range(1 if deadline else 3):
        node = ctx.node()
        fin = failed + (2 - i) * 300
        p = k.pod(w, [], phase="Failed", node=node, age=fin + 400)
        code = 143 if deadline else 1
        p["status"]["containerStatuses"] = [{
            "name": app, "image": c["image"], "imageID": "", "ready": False, "started": False, "restartCount": 0,
            "state": {"terminated": terminated(ctx, "Error", code, finished=fin, ran=380)}, "lastState": {}}]  # fmt: skip
        if deadline:
            p["status"].update(reason="DeadlineExceeded", message="Pod was active on the node longer than the specified deadline")
        body = ctx.style.noise(k, 12, start=fin + 300, span=280)
        if not deadline:
            body.append(ctx.style.line(k, fin + 1, "ERROR", "export failed", error="upstream returned 500"))
        k.log(p, app, body)
        k.event(w.obj, "SuccessfulCreate", f"Created pod: {p['metadata']['name']}", type_="Normal",
                seen=(fin + 400, fin + 400), source=("job-controller", ""))  # fmt: skip
        pods.append(p)
    k.event(w.obj, reason, message, seen=(failed, failed), source=("job-controller", ""))
    return Fault(roots=(root(ctx, "Job", name),), reasons=(reason, "deadline" if deadline else "backoff limit"),
                 symptoms=tuple(ent(ctx, "Pod", p["metadata"]["name"]) for p in pods), subject=name,
                 symptom=Symptom.JOB, subject_kind="job")  # fmt: skip


def job_backoff(ctx: Ctx) -> Fault:
    return _job(ctx, reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit", deadline=None)


def job_deadline(ctx: Ctx) -> Fault:
    return _job(ctx, reason="DeadlineExceeded", message="Job was active longer than specified deadline", deadline=600)


def quota_exceeded(ctx: Ctx) -> Fault:
    k = ctx.k
    app = ctx.name()
    c = container(ctx, app, mem="1Gi")
    c["resources"]["limits"]["memory"] = "1Gi"
    rollout = k.rng.randint(10, 40) * MINUTE
    w = k.deployment(app, [c], replicas=3, ready=1, rollout=rollout)
    for cond in w.obj["status"]["conditions"]:
        if cond["type"] == "Progressing":
            cond.update(reason="ReplicaSetUpdated")
    w.obj["status"]["conditions"].append({
        "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
        "message": f'pods "{w.owner.name}-{k.suffix(5)}" is forbidden: exceeded quota: compute-quota, requested: '
                   "limits.memory=1Gi, used: limits.memory=7680Mi, limited: limits.memory=8Gi",
        "lastUpdateTime": k.ago(rollout), "lastTransitionTime": k.ago(rollout)})  # fmt: skip
    node = ctx.node()
    p = k.pod(w, [running(ctx, c, since=rollout - 30)], node=node, age=rollout - 5)
    k.log(p, app, ctx.style.noise(k, 20, start=60, span=rollout - 60))
    k.add("resourcequotas", {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": k.meta("compute-quota", created=60 * DAY),
                             "spec": {"hard": {"limits.memory": "8Gi", "requests.cpu": "8"}},
                             "status": {"hard": {"limits.memory": "8Gi", "requests.cpu": "8"},
                                        "used": {"limits.memory": "7680Mi", "requests.cpu": "3250m"}}})  # fmt: skip
    rs = next(r for r in k.items("replicasets") if r["metadata"]["name"] == w.owner.name)
    k.event(rs, "FailedCreate",
            f'Error creating: pods "{w.owner.name}-{k.suffix(5)}" is forbidden: exceeded quota: compute-quota, '
            "requested: limits.memory=1Gi, used: limits.memory=7680Mi, limited: limits.memory=8Gi",
            count=k.rng.randint(10, 40), seen=(rollout, k.rng.randint(10, 90)),
            source=("replicaset-controller", ""))  # fmt: skip
    k.service(app, {"app": app}, ready_pods=[p])
    return Fault(roots=(root(ctx, "Deployment", app, ("ResourceQuota", "compute-quota")),),
                 reasons=("exceeded quota", "FailedCreate", "quota"),
                 symptoms=(ent(ctx, "ReplicaSet", w.owner.name), ent(ctx, "Pod", p["metadata"]["name"])),
                 subject=app, symptom=Symptom.SLOW)  # fmt: skip


def hpa_max(ctx: Ctx) -> Fault:
    k = ctx.k
    top = k.rng.randint(3, 6)
    w, pods = healthy_deployment(ctx, replicas=top, age=3 * DAY)
    for p in pods:
        k.log(p, w.name, [*ctx.style.noise(k, 10, start=20 * MINUTE, span=10 * MINUTE),
                          *(ctx.style.line(k, 300 - i * 10, "WARN", "slow request", path="/api/v1/search",
                                           duration_ms=k.rng.randint(2_500, 9_000)) for i in range(15))])  # fmt: skip
    since = k.rng.randint(20, 90) * MINUTE
    k.add("horizontalpodautoscalers", {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": k.meta(w.name, created=30 * DAY),
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": w.name},
                 "minReplicas": 2, "maxReplicas": top,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]},
        "status": {"currentReplicas": top, "desiredReplicas": top, "lastScaleTime": k.ago(since),
                   "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": k.rng.randint(140, 260), "averageValue": "702m"}}}],
                   "conditions": [
                       {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale", "lastTransitionTime": k.ago(since),
                        "message": "recommended size matches current size"},
                       {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound", "lastTransitionTime": k.ago(30 * DAY),
                        "message": "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"},
                       {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas", "lastTransitionTime": k.ago(since),
                        "message": "the desired replica count is more than the maximum replica count"}]},
    })  # fmt: skip
    return Fault(roots=(root(ctx, "HorizontalPodAutoscaler", w.name, ("Deployment", w.name)),),
                 reasons=("ScalingLimited", "TooManyReplicas", "maximum replica count", "maxReplicas"),
                 symptoms=(*(ent(ctx, "Pod", p["metadata"]["name"]) for p in pods),),
                 subject=w.name, symptom=Symptom.SLOW)  # fmt: skip


def healthy(ctx: Ctx) -> Fault:
    """A control: the workload asked about restarted days ago and has been Ready since."""
    k = ctx.k
    w, pods = healthy_deployment(ctx, replicas=2, age=6 * DAY)
    old = k.rng.randint(2, 5) * DAY + k.rng.randint(0, 20) * HOUR
    c = w.obj["spec"]["template"]["spec"]["containers"][0]
    pods[0]["status"]["containerStatuses"] = [running(ctx, c, since=old - 30, restarts=1, last=terminated(
        ctx, "Error", 1, finished=old, ran=5 * DAY))]  # fmt: skip
    return Fault(roots=(), reasons=(), symptoms=(), subject=w.name, symptom=Symptom.RESTARTING)


SCHED_FAULTS: dict[str, FaultFn] = {
    "insufficient_cpu": insufficient_cpu, "insufficient_memory": insufficient_memory,
    "untolerated_taint": untolerated_taint, "anti_affinity": anti_affinity, "node_selector": node_selector,
    "preempted": preempted, "evicted_memory": evicted_memory, "evicted_storage": evicted_storage,
    "node_notready": node_notready, "scaled_to_zero": scaled_to_zero, "selector_mismatch": selector_mismatch,
    "probe_upstream_503": probe_upstream_503, "job_backoff": job_backoff, "job_deadline": job_deadline,
    "quota_exceeded": quota_exceeded, "hpa_max": hpa_max, "healthy": healthy,
}  # fmt: skip
