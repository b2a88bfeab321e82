"""What every fault class builds with: the context (cluster, nodes, log style), containers,
container statuses as the kubelet writes them, healthy workloads, and a fault's outcome."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from bench.sre_gen_lib._cluster import DAY, MINUTE, Cluster, Obj, Workload
from bench.sre_gen_lib._flavour import LogStyle, Nodes, image
from bench.sre_gen_lib._model import Entity, Flavour, RootCause

APPS = (
    "payments", "checkout", "orders", "cart", "inventory", "search", "catalog", "auth",
    "billing", "notifications", "ledger", "shipping", "pricing", "reviews", "recommender",
    "gateway", "profile", "media", "reports", "invoices", "fraud-check", "loyalty", "quotes",
)  # fmt: skip
SUFFIXES = ("", "", "-api", "-svc", "-worker", "-web", "-backend")


class Symptom(StrEnum):
    """What the person asking sees: it picks the question's wording."""

    RESTARTING = "restarting"
    PENDING = "pending"
    DOWN = "down"
    ERRORS = "errors"
    JOB = "job"
    SLOW = "slow"
    STUCK = "stuck"


@dataclass(kw_only=True, slots=True)
class Ctx:
    """One incident under construction."""

    k: Cluster
    flavour: Flavour
    nodes: Nodes
    style: LogStyle
    used: set[str] = field(default_factory=set)

    @property
    def ns(self) -> str:
        return self.k.namespace

    def name(self) -> str:
        """A fresh workload name."""
        while True:
            n = self.k.rng.choice(APPS) + self.k.rng.choice(SUFFIXES)
            if n not in self.used:
                self.used.add(n)
                return n

    def image(self, app: str) -> str:
        return image(self.k, self.flavour, app.split("-")[0])

    def node(self) -> str:
        return self.k.rng.choice(self.nodes.workers)


@dataclass(frozen=True, kw_only=True, slots=True)
class Fault:
    """What a fault class made: its truth and what the question is about."""

    roots: tuple[RootCause, ...]
    reasons: tuple[str, ...]
    symptoms: tuple[Entity, ...]
    subject: str
    """The workload (or object) the person asks about."""
    symptom: Symptom
    subject_kind: str = "deployment"


FaultFn = Callable[[Ctx], Fault]


def ent(ctx: Ctx, kind: str, name: str) -> Entity:
    return Entity(kind=kind, namespace="" if kind == "Node" else ctx.ns, name=name)


def root(ctx: Ctx, kind: str, name: str, *aliases: tuple[str, str]) -> RootCause:
    return RootCause(entity=ent(ctx, kind, name), aliases=tuple(ent(ctx, k, n) for k, n in aliases))


def container(ctx: Ctx, name: str, *, img: str | None = None, mem: str = "512Mi",
              cpu: str = "250m", **extra: object) -> Obj:  # fmt: skip
    c: Obj = {
        "name": name, "image": img or ctx.image(name), "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": {"limits": {"memory": mem}, "requests": {"cpu": cpu, "memory": mem}},
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080, "scheme": "HTTP"},
                           "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3,
                           "successThreshold": 1},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    }  # fmt: skip
    c.update(extra)
    return c


def cid(ctx: Ctx) -> str:
    return "containerd://" + f"{ctx.k.rng.getrandbits(256):064x}"


def image_id(img: str) -> str:
    repo = img.rsplit(":", 1)[0]
    return f"{repo}@sha256:{hashlib.sha256(img.encode()).hexdigest()}"


def terminated(ctx: Ctx, reason: str, code: int, *, finished: float, ran: float = 20,
               message: str | None = None) -> Obj:  # fmt: skip
    t: Obj = {"exitCode": code, "reason": reason, "startedAt": ctx.k.ago(finished + ran),
              "finishedAt": ctx.k.ago(finished), "containerID": cid(ctx)}  # fmt: skip
    if message:
        t["message"] = message
    return t


def running(ctx: Ctx, c: Obj, *, since: float, restarts: int = 0, last: Obj | None = None,
            ready: bool = True) -> Obj:  # fmt: skip
    return {
        "name": c["name"], "image": c["image"], "imageID": image_id(c["image"]),
        "containerID": cid(ctx), "ready": ready, "started": True, "restartCount": restarts,
        "state": {"running": {"startedAt": ctx.k.ago(since)}},
        "lastState": {"terminated": last} if last else {},
    }  # fmt: skip


_NOT_PULLED = ("ImagePullBackOff", "ErrImagePull", "ContainerCreating", "PodInitializing")
"""Waiting reasons under which the image is not (yet) there: no ``imageID``."""


def waiting(ctx: Ctx, c: Obj, reason: str, message: str | None = None, *, restarts: int = 0,
            last: Obj | None = None) -> Obj:  # fmt: skip
    pulled = reason not in _NOT_PULLED
    s: Obj = {
        "name": c["name"], "image": c["image"], "imageID": image_id(c["image"]) if pulled else "",
        "ready": False, "started": False, "restartCount": restarts,
        "state": {"waiting": {"reason": reason, **({"message": message} if message else {})}},
        "lastState": {"terminated": last} if last else {},
    }  # fmt: skip
    if last:
        s["containerID"] = last["containerID"]
    return s


def pod_ref(pod: Obj, ns: str) -> str:
    """The kubelet's ``format.Pod``: ``NAME_NAMESPACE(UID)``."""
    return f"{pod['metadata']['name']}_{ns}({pod['metadata']['uid']})"


def started_events(ctx: Ctx, pod: Obj, c: Obj, *, count: int = 1, seen: tuple[float, float]) -> None:
    """The Normal kubelet lifecycle events of a container that starts (``seen``: first and
    last time, seconds ago)."""
    fp = f"spec.containers{{{c['name']}}}"
    k = ctx.k
    k.event(pod, "Pulled", f'Container image "{c["image"]}" already present on machine',
            type_="Normal", count=count, seen=seen, field_path=fp)  # fmt: skip
    k.event(pod, "Created", f"Created container {c['name']}", type_="Normal", count=count,
            seen=seen, field_path=fp)  # fmt: skip
    k.event(pod, "Started", f"Started container {c['name']}", type_="Normal", count=count,
            seen=seen, field_path=fp)  # fmt: skip


def scheduled_event(ctx: Ctx, pod: Obj, node: str, *, ago: float) -> None:
    ctx.k.event(pod, "Scheduled",
                f"Successfully assigned {ctx.ns}/{pod['metadata']['name']} to {node}",
                type_="Normal", seen=(ago, ago), source=("default-scheduler", ""))  # fmt: skip


def healthy_deployment(ctx: Ctx, app: str | None = None, *, replicas: int = 2,
                       age: float = 12 * DAY, logs: int = 30) -> tuple[Workload, list[Obj]]:  # fmt: skip
    """A workload that is fine: pods Ready for days, ordinary logs, a Service with endpoints."""
    app = app or ctx.name()
    c = container(ctx, app)
    w = ctx.k.deployment(app, [c], replicas=replicas, ready=replicas, age=age * 2, rollout=age)
    pods = []
    for _ in range(replicas):
        node = ctx.node()
        pod = ctx.k.pod(w, [running(ctx, c, since=age - 20)], node=node, age=age)
        ctx.k.log(pod, app, ctx.style.noise(ctx.k, logs, start=5 * MINUTE, span=2 * 3600))
        pods.append(pod)
    ctx.k.service(app, {"app": app}, ready_pods=pods)
    return w, pods
