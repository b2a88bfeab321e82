"""How the executor honours policy: a guard on every patch, tripwires raised inside tasks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    RunStatus,
    Snapshot,
    SQLiteStore,
    TaskContext,
    TaskSpec,
)
from loopkernel.errors import BudgetExceeded, TripwireFired
from loopkernel.ids import RunId


class Fan(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="a", skill="w"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "a":
            patch = GraphPatch()
            for i in range(5):
                patch = patch.add(TaskSpec(task_id=f"b{i}", skill="w"), after=["a"])
            return patch
        return GraphPatch()


class MaxTasks:
    def __init__(self, limit: int) -> None:
        self.limit = limit

    def check_patch(self, snapshot: Snapshot, event: Event, patch: GraphPatch) -> None:
        adds = sum(1 for op in patch.to_json() if op["op"] == "add")
        if len(snapshot.tasks) + adds > self.limit:
            raise BudgetExceeded(
                f"the patch would make {len(snapshot.tasks) + adds} tasks; max_tasks={self.limit}",
                limit="max_tasks",
                observed=len(snapshot.tasks) + adds,
            )


async def ok(ctx: TaskContext) -> Any:
    return ctx.task_id


def _run(db: Path, planner: Any, workers: Any, **kw: Any) -> tuple[Any, Any]:
    async def go() -> tuple[Any, Any]:
        store = SQLiteStore(db)
        await store.open()
        kernel = Kernel(store, planner, workers, **kw)
        await kernel.start(app="t", run_id="r")
        outcome = await kernel.run("r")
        patches = await store.patches(RunId("r"))
        info = await store.get_run(RunId("r"))
        await store.close()
        assert info.verdict == outcome.verdict  # persisted, not only returned
        return outcome, patches

    return asyncio.run(go())


def test_a_guard_escalates_before_the_patch_that_would_exceed_a_budget(tmp_path: Path) -> None:
    outcome, patches = _run(tmp_path / "db", Fan(), {"w": ok}, guard=MaxTasks(3))
    assert outcome.status is RunStatus.ESCALATED
    assert outcome.verdict["kind"] == "budget_exceeded"
    assert outcome.verdict["limit"] == "max_tasks" and outcome.verdict["observed"] == 6
    rejected = [p for p in patches if p.outcome == "rejected"]
    assert len(rejected) == 1 and rejected[0].planner == "policy"


def test_a_tripwire_inside_a_task_escalates_the_run_with_its_reason(tmp_path: Path) -> None:
    async def trip(ctx: TaskContext) -> Any:
        if ctx.task_id == "b2":
            raise TripwireFired("verification failed 3 times in a row", tripwire="verify_stuck")
        await asyncio.sleep(0.5 if ctx.task_id != "a" else 0)
        return ctx.task_id

    outcome, patches = _run(tmp_path / "db", Fan(), {"w": trip})
    assert outcome.status is RunStatus.ESCALATED
    assert outcome.verdict == {
        "kind": "tripwire",
        "type": "TripwireFired",
        "message": "verification failed 3 times in a row",
        "tripwire": "verify_stuck",
        "task_id": "b2",
    }
    assert [p.reason for p in patches].count("tripwire") == 1
