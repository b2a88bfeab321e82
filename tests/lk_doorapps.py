"""Apps for issue 32's tests: the gate app of ``lk_testapps`` with one free parameter
``v`` that any JSON value may fill (the value door), and one slow task (connection churn)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from lk_testapps import GatePlanner, step
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


def _build(params: Mapping[str, Any]) -> AppParts:
    return AppParts(planner=GatePlanner(), workers={"step": step})


gate_v = App(
    name="lk_doorapps:gate_v",
    description="a run that waits for a human, with a free parameter v",
    build=_build,
    defaults={"v": None},
)


class _SlowPlanner(BasePlanner):
    """One task that works for ``seconds``; finish with its result."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="slow", skill="slow"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", snapshot.task("slow").result)


async def _slow(ctx: TaskContext) -> Any:
    """Each start is one line in ``$LK_TEST_SLOW_STARTS`` when set (outside the run's
    state: a restart shows there, not in the digest)."""
    starts = os.environ.get("LK_TEST_SLOW_STARTS")
    if starts:
        with open(starts, "a") as out:  # noqa: ASYNC230 (one short line, a test's count)
            out.write(f"{ctx.params['seconds']}\n")
    await asyncio.sleep(float(ctx.params["seconds"]))
    return {"slept": ctx.params["seconds"]}


slow = App(
    name="lk_doorapps:slow",
    description="one task that works for `seconds` (connection churn tests)",
    build=lambda params: AppParts(planner=_SlowPlanner(), workers={"slow": _slow}),
    defaults={"seconds": 6.0},
)
