"""Distractors: true facts that are not the incident's cause. Old restarts of healthy
neighbours, a stale event of a deleted Job (another uid), a neighbour's OOMKilled last
week, a two-day-old Go panic of another workload, a second unrelated event."""

from __future__ import annotations

from collections.abc import Callable

from bench.sre_gen_lib._cluster import DAY, HOUR, MINUTE, Ref
from bench.sre_gen_lib._flavour import Failure, LogStyle, crash_lines
from bench.sre_gen_lib._kit import Ctx, container, healthy_deployment, running, terminated
from bench.sre_gen_lib._model import LogFormat, Runtime


def old_restart(ctx: Ctx) -> None:
    """A healthy neighbour restarted days ago (an error then), Ready since."""
    k = ctx.k
    w, pods = healthy_deployment(ctx, age=9 * DAY)
    old = k.rng.randint(2, 6) * DAY + k.rng.randint(0, 23) * HOUR
    c = w.obj["spec"]["template"]["spec"]["containers"][0]
    pods[0]["status"]["containerStatuses"] = [running(ctx, c, since=old - 25, restarts=k.rng.randint(1, 3),
                                                      last=terminated(ctx, "Error", 1, finished=old, ran=DAY))]  # fmt: skip
    k.log(pods[0], w.name, [ctx.style.line(k, old + 2, "ERROR", "lost connection to broker, exiting",
                                           error="read tcp: connection reset by peer")], previous=True)  # fmt: skip


def stale_job_event(ctx: Ctx) -> None:
    """A FailedCreate (or BackoffLimitExceeded) of an earlier Job object: its uid is gone, and
    the Job of today with the same prefix succeeded."""
    k = ctx.k
    base = ctx.name()
    c = container(ctx, base)
    c.pop("readinessProbe")
    n = k.rng.randint(28_000_000, 29_000_000)
    done = k.job(f"{base}-{n + 1440}", [c], age=50 * MINUTE, status={
        "startTime": k.ago(50 * MINUTE), "completionTime": k.ago(44 * MINUTE), "succeeded": 1, "active": 0,
        "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": k.ago(44 * MINUTE)},
                       {"type": "Complete", "status": "True", "lastTransitionTime": k.ago(44 * MINUTE)}]})  # fmt: skip
    k.event(done.obj, "Completed", "Job completed", type_="Normal", seen=(44 * MINUTE, 44 * MINUTE),
            source=("job-controller", ""))  # fmt: skip
    gone = Ref(kind="Job", name=f"{base}-{n}", uid=k.uid(), api_version="batch/v1")
    when = k.rng.randint(2, 5) * HOUR
    if k.rng.random() < 0.5:
        k.event(gone, "FailedCreate", f'Error creating: pods "{base}-{n}-{k.suffix(5)}" is forbidden: exceeded '
                "quota: batch-quota, requested: requests.cpu=2, used: requests.cpu=7, limited: requests.cpu=8",
                count=k.rng.randint(3, 9), seen=(when + 600, when), source=("job-controller", ""))  # fmt: skip
    else:
        k.event(gone, "BackoffLimitExceeded", "Job has reached the specified backoff limit", seen=(when, when), source=("job-controller", ""))  # fmt: skip


def neighbour_oom_last_week(ctx: Ctx) -> None:
    k = ctx.k
    w, pods = healthy_deployment(ctx, age=10 * DAY)
    old = k.rng.randint(6, 8) * DAY
    c = w.obj["spec"]["template"]["spec"]["containers"][0]
    pods[-1]["status"]["containerStatuses"] = [running(ctx, c, since=old - 30, restarts=1,
                                                       last=terminated(ctx, "OOMKilled", 137, finished=old, ran=2 * DAY))]  # fmt: skip


def old_go_panic(ctx: Ctx) -> None:
    """Another workload panicked two days ago; its previous log still holds the trace."""
    k = ctx.k
    w, pods = healthy_deployment(ctx, age=12 * DAY)
    old = 2 * DAY + k.rng.randint(0, 10) * HOUR
    c = w.obj["spec"]["template"]["spec"]["containers"][0]
    pods[0]["status"]["containerStatuses"] = [running(ctx, c, since=old - 20, restarts=1,
                                                      last=terminated(ctx, "Error", 2, finished=old, ran=9 * DAY))]  # fmt: skip
    style = LogStyle(runtime=Runtime.GO, fmt=LogFormat.PLAIN)
    panic = Failure(forms={rt: ("runtime error", "index out of range [3] with length 3") for rt in Runtime})
    k.log(pods[0], w.name, [*style.noise(k, 8, start=old + 60, span=50), *crash_lines(style, k, old + 1, panic)],
          previous=True)  # fmt: skip


def unrelated_event(ctx: Ctx) -> None:
    """A second event that is true and harmless: the kubelet's nameserver-limit warning, or a
    neighbour's routine scale-up."""
    k = ctx.k
    w, pods = healthy_deployment(ctx, age=4 * DAY)
    if k.rng.random() < 0.5:
        k.event(pods[0], "DNSConfigForming", "Nameserver limits were exceeded, some nameservers have been omitted, "
                "the applied nameserver line is: 10.96.0.10 169.254.169.254 10.0.0.2", count=k.rng.randint(50, 900),
                seen=(4 * DAY, k.rng.randint(10, 300)))  # fmt: skip
    else:
        k.event(w.obj, "ScalingReplicaSet", f"Scaled up replica set {w.owner.name} to 2 from 1", type_="Normal",
                seen=(k.rng.randint(2, 6) * HOUR, k.rng.randint(2, 6) * HOUR),
                source=("deployment-controller", ""))  # fmt: skip


DISTRACTORS: dict[str, Callable[[Ctx], None]] = {
    "old_restart": old_restart, "stale_job_event": stale_job_event,
    "neighbour_oom_last_week": neighbour_oom_last_week, "old_go_panic": old_go_panic,
    "unrelated_event": unrelated_event,
}  # fmt: skip
"""The distractors a generator draws from; ``misleading_question`` is added by the composer."""
