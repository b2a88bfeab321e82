"""Helpers for the worker tests: a relay app that names its executor, worker processes.

``lk_workers:relay`` runs tasks ``a -> b -> c`` one after the other; each sleeps its delay
and returns the ``LK_WORKER_TAG`` of the process that executed it, so a test can see which
worker's writes landed. The task named by ``hang`` hangs on its first attempt (a stuck
machine); run again after a takeover, it takes its delay.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import (
    App,
    AppParts,
    BasePlanner,
    Event,
    GraphPatch,
    Snapshot,
    TaskContext,
    TaskSpec,
)

T = TypeVar("T")
STEPS = ("a", "b", "c")


class RelayPlanner(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="a", skill="step"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        i = STEPS.index(event.task_id)
        if i + 1 == len(STEPS):
            return GraphPatch().finish(
                "succeeded", {t: snapshot.task(t).result["by"] for t in STEPS}
            )
        return GraphPatch().add(TaskSpec(task_id=STEPS[i + 1], skill="step"), after=[event.task_id])


def _relay(params: Mapping[str, Any]) -> AppParts:
    delays, hang = dict(params["delays"]), params["hang"]

    async def step(ctx: TaskContext) -> Any:
        hung = ctx.task_id == hang and ctx.attempt == 1
        await asyncio.sleep(3600 if hung else float(delays[ctx.task_id]))
        return {"task": ctx.task_id, "by": os.environ.get("LK_WORKER_TAG", "inprocess")}

    return AppParts(planner=RelayPlanner(), workers={"step": step})


relay = App(
    name="lk_workers:relay",
    description="a -> b -> c, each result naming the worker that executed it",
    build=_relay,
    defaults={"delays": {"a": 0.05, "b": 0.05, "c": 0.05}, "hang": ""},
)


# -- worker processes ------------------------------------------------------------------------


def start_worker(
    db: str,
    tag: str,
    log: Path,
    *,
    lease: float = 2.0,
    poll: float = 0.2,
    concurrency: int = 8,
    env: Mapping[str, str] | None = None,
    apps: Sequence[str] = ("lk_workers:relay", "lk_testapps:gate"),
    flags: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """``loopkernel worker`` in a session of its own (its tool servers die with it), also
    running the ``module:attribute`` test apps ``apps``."""
    args = ["--db", db, "worker", "--id", tag, "--lease", str(lease), "--poll", str(poll)]
    args += ["--concurrency", str(concurrency), *flags]
    for app in apps:
        args += ["--app", app]
    with log.open("ab") as out:
        return subprocess.Popen(
            [*LOOPKERNEL, *args],
            env=cli_env(**{"LK_WORKER_TAG": tag, **dict(env or {})}),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@contextmanager
def reaped(procs: list[subprocess.Popen[bytes]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Whatever happens in the block, every process (and its session) is gone after it."""
    try:
        yield procs
    finally:
        for proc in procs:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in procs:
            with suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def until(what: str, check: Callable[[], T | None], timeout: float = 30, step: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def cli(db: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, "--db", db, *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _compat() -> tuple[str, ...] | None:
    listed = os.environ.get("LK_APP_COMPAT")
    return None if listed is None else tuple(v for v in listed.split(",") if v)


versioned = App(
    name="lk_workers:versioned",
    description="the relay, at the version LK_APP_VERSION says (resuming LK_APP_COMPAT)",
    build=_relay,
    defaults={"delays": {"a": 0.05, "b": 0.05, "c": 0.05}, "hang": ""},
    version=os.environ.get("LK_APP_VERSION", "1"),
    compatible_with=_compat(),
)
