"""Small apps with timers for subprocess tests (``lk_timerapps:NAME``).

Their clock is a file the test writes (``clock_file``): the test decides when "now" is,
so a timer comes due because the test says so, not because the machine was fast.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
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
from loopkernel.executor import ApprovalTimeout
from loopkernel.planner import Flow, Step, gate
from loopkernel.testing import trace


def file_clock(path: str) -> Callable[[], float]:
    """Seconds since the epoch as the file at ``path`` says (the real clock if it is empty)."""

    def now() -> float:
        text = Path(path).read_text().strip()
        return float(text) if text else time.time()

    return now


class NapPlanner(BasePlanner):
    """prep -> nap (asleep for ``seconds`` after the start) -> finish with nap's result."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return (
            GraphPatch()
            .add(TaskSpec(task_id="prep", skill="step"))
            .add(TaskSpec(task_id="nap", skill="step"), after=["prep"])
            .sleep("nap", seconds=self.seconds, reason="a nap")
        )

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "nap":
            return GraphPatch().finish("succeeded", snapshot.task("nap").result)
        return GraphPatch()


async def step(ctx: TaskContext) -> Any:
    trace("start", ctx.task_id)
    return {"task": ctx.task_id, "saw": sorted(ctx.evidence)}


def _nap(params: Mapping[str, Any]) -> AppParts:
    clock = file_clock(params["clock_file"]) if params["clock_file"] else None
    return AppParts(planner=NapPlanner(params["seconds"]), workers={"step": step}, clock=clock)


nap = App(
    name="lk_timerapps:nap",
    description="a run that sleeps between two tasks",
    build=_nap,
    defaults={"seconds": 60.0, "clock_file": ""},
)


def _gated(params: Mapping[str, Any]) -> AppParts:
    clock = file_clock(params["clock_file"]) if params["clock_file"] else None
    timeout = ApprovalTimeout(seconds=params["seconds"], action=params["action"])
    flow = Flow(
        Step("prep", "step"),
        gate(Step("pay", "step"), "pay 100 USD?", timeout=timeout),
        verdict=lambda at: at.result("pay"),
    )
    return AppParts(planner=flow, workers={"step": step}, clock=clock)


gated = App(
    name="lk_timerapps:gated",
    description="a Flow whose gate times out after `seconds` (action: reject or escalate)",
    build=_gated,
    defaults={"seconds": 60.0, "action": "reject", "clock_file": ""},
)
