"""Chain runs for the group-commit benchmarks (``bench/throughput.py``,
``bench/chaos_batch.py``): a run of ``n`` steps, each task started when the one before it
succeeded, its worker returning at once (so a step is the kernel's work and its commit)."""

from __future__ import annotations

from typing import Any

from loopkernel import BasePlanner, Event, GraphPatch, Snapshot, TaskContext, TaskSpec

__all__ = ["ChainPlanner", "echo"]


class ChainPlanner(BasePlanner):
    """``t0 -> t1 -> ... -> t{n-1}``, then the run succeeds."""

    def __init__(self, n: int) -> None:
        self.n = n

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="t0", skill="echo"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        i = int((event.task_id or "t0")[1:]) + 1
        if i == self.n:
            return GraphPatch().finish("succeeded")
        return GraphPatch().add(TaskSpec(task_id=f"t{i}", skill="echo"), after=[f"t{i - 1}"])


async def echo(ctx: TaskContext) -> Any:
    """Names its run and task: two runs' digests differ, a run's is the same every time."""
    return f"{ctx.run_id}/{ctx.task_id}"
