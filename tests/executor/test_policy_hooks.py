"""How the executor honours policy: a guard on every patch, tripwires raised inside tasks.

On SQLite and on PostgreSQL (the ``backend`` fixture), with the same assertions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    KernelParts,
    RunStatus,
    Snapshot,
    TaskContext,
    TaskSpec,
)
from loopkernel.errors import BudgetExceeded, TripwireFired
from loopkernel.ids import RunId

if TYPE_CHECKING:
    from lk_stores import Backend


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


def _run(db: Backend, planner: Any, workers: Any, **kw: Any) -> tuple[Any, Any]:
    async def go() -> tuple[Any, Any]:
        store = db.store()
        await store.open()
        kernel = Kernel(store, planner, workers, parts=KernelParts(**kw))
        await kernel.start(app="t", run_id="r")
        outcome = await kernel.run("r")
        patches = await store.patches(RunId("r"))
        info = await store.get_run(RunId("r"))
        await store.close()
        # persisted, not only returned: the run row says escalated and why
        assert (info.status, info.verdict) == (outcome.status, outcome.verdict)
        return outcome, patches

    return asyncio.run(go())


def test_a_guard_escalates_before_the_patch_that_would_exceed_a_budget(backend: Backend) -> None:
    outcome, patches = _run(backend, Fan(), {"w": ok}, guard=MaxTasks(3))
    assert outcome.status is RunStatus.ESCALATED
    assert outcome.verdict["kind"] == "budget_exceeded"
    assert outcome.verdict["limit"] == "max_tasks" and outcome.verdict["observed"] == 6
    rejected = [p for p in patches if p.outcome == "rejected"]
    assert len(rejected) == 1 and rejected[0].planner == "policy"


def test_a_tripwire_inside_a_task_escalates_the_run_with_its_reason(backend: Backend) -> None:
    async def trip(ctx: TaskContext) -> Any:
        if ctx.task_id == "b2":
            raise TripwireFired("verification failed 3 times in a row", tripwire="verify_stuck")
        if ctx.task_id != "a":
            await asyncio.Event().wait()  # still running when b2 trips: the escalation ends it
        return ctx.task_id

    outcome, patches = _run(backend, Fan(), {"w": trip})
    assert outcome.status is RunStatus.ESCALATED
    assert outcome.verdict == {
        "kind": "tripwire",
        "type": "TripwireFired",
        "message": "verification failed 3 times in a row",
        "tripwire": "verify_stuck",
        "task_id": "b2",
    }
    assert [p.reason for p in patches].count("tripwire") == 1
