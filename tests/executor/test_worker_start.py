"""How a worker's task starts (``executor/_start.py``): eagerly on Python 3.12+, on the
loop's next turn on 3.11; either way a worker sees its own task, and a chain of steps
whose workers never wait still lets the process's other coroutines run every step."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from pathlib import Path
from typing import Any

from loopkernel import ExecutionConfig, GraphPatch, Kernel, SQLiteStore, TaskContext, TaskSpec
from loopkernel.executor._start import EAGER, started, task_of
from loopkernel.planner import BasePlanner

STEPS = 40


class Chain(BasePlanner):
    def on_start(self, snapshot: Any, event: Any) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="t0", skill="noop"))

    def on_completed(self, snapshot: Any, event: Any) -> GraphPatch:
        i = int((event.task_id or "t0")[1:]) + 1
        if i == STEPS:
            return GraphPatch().finish("succeeded")
        return GraphPatch().add(TaskSpec(task_id=f"t{i}", skill="noop"), after=[f"t{i - 1}"])


def test_a_chain_of_steps_that_never_wait_lets_other_coroutines_run_every_step(
    tmp_path: Path,
) -> None:
    seen: list[int] = []  # the ticker's count when each worker ran
    ticks = 0

    async def noop(ctx: TaskContext) -> Any:
        seen.append(ticks)
        return ctx.task_id

    async def go() -> None:
        nonlocal ticks
        # NORMAL: a step's commit runs on the loop and never waits, so only the kernel's
        # own yield lets the ticker (a heartbeat, another run) in.
        store = SQLiteStore(tmp_path / "runs.db", synchronous="normal")
        await store.open()
        kernel = Kernel(store, Chain(), {"noop": noop}, config=ExecutionConfig(poll_s=1e6))
        started_run = await kernel.start(app="t")
        run = asyncio.ensure_future(kernel.run(started_run.run_id))
        while not run.done():
            ticks += 1
            await asyncio.sleep(0)
        assert (await run).status.value == "succeeded"
        await store.close()

    asyncio.run(go())
    assert len(seen) == STEPS
    # between any two steps the ticker ran at least once
    assert all(b > a for a, b in pairwise(seen)), seen


def test_a_worker_runs_in_its_own_task_and_context(tmp_path: Path) -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        outer = asyncio.current_task()

        async def worker(ctx: Any) -> Any:
            return asyncio.current_task()

        fut = task_of(loop, started(worker, None))  # type: ignore[arg-type]
        assert fut.done() is EAGER  # eager: a worker that never waits is done at once
        inner = await fut
        assert inner is fut and inner is not outer

    asyncio.run(go())


def test_a_worker_that_raises_as_it_is_called_fails_its_task_not_the_caller() -> None:
    class Broken:
        async def __call__(self, ctx: Any, extra: Any) -> Any:  # wrong signature
            return None

    async def go() -> None:
        fut = task_of(asyncio.get_running_loop(), started(Broken(), None))  # type: ignore[arg-type]
        try:
            await fut
        except TypeError:
            return
        raise AssertionError("the TypeError was lost")

    asyncio.run(go())
