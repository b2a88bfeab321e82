"""A fault class x a cloud flavour x a runtime log style x one to three distractors,
with randomized names and times: deterministic for ``(seed, index)``."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from bench.sre_gen_lib._cluster import Cluster
from bench.sre_gen_lib._distract import DISTRACTORS
from bench.sre_gen_lib._faults import CONTAINER_FAULTS
from bench.sre_gen_lib._faults_sched import SCHED_FAULTS
from bench.sre_gen_lib._faults_unfollowed import UNFOLLOWED
from bench.sre_gen_lib._flavour import LogStyle, build_nodes
from bench.sre_gen_lib._kit import Ctx, Fault, FaultFn, Symptom, healthy_deployment
from bench.sre_gen_lib._model import Flavour, Incident, LogFormat, Runtime, Truth

FAULTS: dict[str, FaultFn] = {**CONTAINER_FAULTS, **SCHED_FAULTS}
"""Every fault class of the default rotation by name (``healthy`` is the control)."""
CLASSES: dict[str, FaultFn] = {**FAULTS, **UNFOLLOWED}
"""Those and the classes ``generate`` composes only when asked by name (``UNFOLLOWED``)."""

NAMESPACES = ("prod", "shop", "payments", "apps", "team-checkout", "backend", "web-prod")

_QUESTIONS: dict[Symptom, tuple[str, ...]] = {
    Symptom.RESTARTING: ("Why is the {s} deployment restarting?", "{s} keeps restarting, what is going on?",
                         "Pods of {s} restart again and again. Why?"),
    Symptom.PENDING: ("Why are the {s} pods not running?", "{s} does not come up after the deploy. Why?",
                      "Why is {s} not starting?"),
    Symptom.DOWN: ("The {s} service is down, every request fails. Why?", "Why is {s} unreachable?"),
    Symptom.ERRORS: ("{s} pods are not ready and requests fail. Why?", "Why is {s} unhealthy?"),
    Symptom.JOB: ("Why did the job {s} fail?", "The batch job {s} did not finish. What happened?"),
    Symptom.SLOW: ("{s} is slow under load, latency is high. Why?", "Why is {s} not keeping up?"),
    Symptom.STUCK: ("Why is {s} stuck and never starts?", "{s} pods hang at startup. Why?"),
}  # fmt: skip

_GUESSES = {
    "selector": "Is the selector wrong?", "memory": "Is it running out of memory?",
    "node": "Did a node crash?", "dns": "Is it a DNS problem?", "image": "Is the image broken?",
    "quota": "Did we hit a quota?",
}  # fmt: skip
"""Misleading guesses, and the words of the classes where a guess would be right."""
_GUESS_RIGHT = {
    "selector": ("selector",), "memory": ("oom", "memory", "evicted"), "node": ("node", "preempt", "evicted"),
    "dns": ("dns",), "image": ("image", "exec_format"), "quota": ("quota",),
}  # fmt: skip


def _misleading(rng: random.Random, fault: str) -> str:
    wrong = [g for g, words in _GUESS_RIGHT.items() if not any(w in fault for w in words)]
    return _GUESSES[rng.choice(sorted(wrong))]


def compose(seed: int, index: int, fault: str) -> Incident:
    """Incident ``index`` of ``seed`` with the fault class ``fault``."""
    rng = random.Random(f"{seed}:{index}:{fault}")
    now = datetime(2026, 11, 2, 8, 0, tzinfo=UTC) + timedelta(minutes=rng.randint(0, 30 * 24 * 60))
    flavour = rng.choice(list(Flavour))
    style = LogStyle(runtime=rng.choice(list(Runtime)), fmt=rng.choice(list(LogFormat)))
    k = Cluster(rng=rng, now=now, namespace=rng.choice(NAMESPACES))
    ctx = Ctx(k=k, flavour=flavour, nodes=build_nodes(k, flavour, workers=rng.choice([2, 2, 3])), style=style)
    for _ in range(rng.randint(1, 2)):
        healthy_deployment(ctx, replicas=rng.randint(1, 3), age=rng.randint(2, 20) * 86400)
    made: Fault = CLASSES[fault](ctx)
    choices = [*sorted(DISTRACTORS), "misleading_question"]
    picked = rng.sample(choices, rng.randint(1, 3))
    for name in picked:
        if name in DISTRACTORS:
            DISTRACTORS[name](ctx)
    question = rng.choice(_QUESTIONS[made.symptom]).format(s=made.subject)
    if "misleading_question" in picked:
        question = f"{question} {_misleading(rng, fault)}"
    _settle(k)
    truth = Truth(fault=fault, root_causes=made.roots, reasons=made.reasons, symptoms=made.symptoms,
                  flavour=flavour, runtime=style.runtime, log_format=style.fmt, distractors=tuple(picked))  # fmt: skip
    return Incident(name=f"{index:04d}-{fault}", namespace=k.namespace, question=question, truth=truth,
                    cluster=k)  # fmt: skip


def _settle(k: Cluster) -> None:
    """Lists in the order the API server returns them: by name; events in arrival order."""
    for lists in k.lists.values():
        for kind, items in lists.items():
            if kind == "events":
                items.sort(key=lambda e: (e["lastTimestamp"], e["metadata"]["name"]))
            else:
                items.sort(key=lambda o: o["metadata"]["name"])
    k.nodes.sort(key=lambda n: n["metadata"]["name"])


def generate(seed: int, count: int, *, classes: list[str] | None = None) -> list[Incident]:
    """``count`` incidents, the classes in turn (so every class gets its share)."""
    names = classes or sorted(FAULTS)
    return [compose(seed, i, names[i % len(names)]) for i in range(count)]
