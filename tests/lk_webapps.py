"""An app for the inspector's tests, loaded by the CLI as ``lk_webapps:NAME``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

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


class ChainPlanner(BasePlanner):
    """``s0 -> s1 -> ... -> s{steps-1}``, one added when the one before finishes."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="s0", skill="step"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        n = int(str(event.task_id)[1:]) + 1
        if n == self.steps:
            return GraphPatch().finish("succeeded", {"steps": n})
        return GraphPatch().add(TaskSpec(task_id=f"s{n}", skill="step"), after=[f"s{n - 1}"])


async def slow_step(ctx: TaskContext) -> Any:
    await asyncio.sleep(float(ctx.params["seconds"]))
    return {"task": ctx.task_id}


def _chain(params: Mapping[str, Any]) -> AppParts:
    return AppParts(planner=ChainPlanner(int(params["steps"])), workers={"step": slow_step})


chain = App(
    name="lk_webapps:chain",
    description="a chain of steps that each take a while",
    build=_chain,
    defaults={"steps": 30, "seconds": 0.1},
)


class OneTaskPlanner(BasePlanner):
    """One task, ``parse``; the run ends as its task did."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="parse", skill="parse"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", None)

    def on_failed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("failed", {"task": str(event.task_id)})


def read_config_line(line: str) -> int:
    """Where the failure is raised: its name must show in the page's traceback."""
    return int(line.split("=", 1)[1])


async def parse_config(ctx: TaskContext) -> Any:
    return {"port": read_config_line("api_key=sk-live-abcdefghijklmnopqrstuvwx")}


broken = App(
    name="lk_webapps:broken",
    description="a task whose worker raises",
    build=lambda params: AppParts(planner=OneTaskPlanner(), workers={"parse": parse_config}),
)
