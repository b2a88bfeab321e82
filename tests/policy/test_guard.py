"""PolicyGuard in a real Kernel: each budget and the verify_stuck tripwire stop the run
``escalated`` before the patch that would pass the limit, with the verdict persisted once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    KernelParts,
    RunStatus,
    Snapshot,
    SQLiteStore,
    TaskContext,
    TaskSpec,
    TaskState,
)
from loopkernel.graph import Task
from loopkernel.ids import RunId, TaskId
from loopkernel.policy import Budget, Policy, PolicyGuard, Tripwires, verify_streak


class Chain(BasePlanner):
    """s1 -> s2 -> ... -> sN, each expecting to spend ``cost``; then finish."""

    def __init__(self, n: int, cost: float) -> None:
        self.n, self.cost = n, cost

    def spec(self, i: int) -> TaskSpec:
        return TaskSpec(task_id=f"s{i}", skill="spend", input={"est_cost_usd": self.cost})

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(self.spec(1))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        i = int(str(event.task_id)[1:])
        if i == self.n:
            return GraphPatch().finish("succeeded", {"steps": i})
        return GraphPatch().add(self.spec(i + 1), after=[f"s{i}"])


async def spend(ctx: TaskContext) -> Any:
    return {"cost_usd": ctx.input["est_cost_usd"]}


class Retry(BasePlanner):
    """Verify until a verification passes; ``outcomes`` scripts each verification."""

    def __init__(self, outcomes: list[bool]) -> None:
        self.outcomes = outcomes

    def spec(self, i: int) -> TaskSpec:
        return TaskSpec(task_id=f"v{i}", skill="verify", input={"passed": self.outcomes[i - 1]})

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(self.spec(1))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        i = int(str(event.task_id)[1:])
        if i == len(self.outcomes):
            return GraphPatch().finish("succeeded", {"verifications": i})
        return GraphPatch().add(self.spec(i + 1), after=[f"v{i}"])


async def verify(ctx: TaskContext) -> Any:
    return {"passed": ctx.input["passed"]}


def run(db: Path, planner: Any, workers: Any, guard: PolicyGuard) -> tuple[Any, Any, Any]:
    async def go() -> tuple[Any, Any, Any]:
        store = SQLiteStore(db)
        await store.open()
        try:
            kernel = Kernel(store, planner, workers, parts=KernelParts(guard=guard))
            await kernel.start(app="t", run_id="r")
            outcome = await kernel.run("r")
            info = await store.get_run(RunId("r"))
            loaded = await store.load_run(RunId("r"))
            patches = await store.patches(RunId("r"))
        finally:
            await store.close()
        assert info.status is outcome.status and info.verdict == outcome.verdict  # persisted
        return outcome, loaded.state, patches

    return asyncio.run(go())


def test_overspend_escalates_before_the_task_that_would_pass_max_usd(tmp_path: Path) -> None:
    guard = Policy(budget=Budget(max_usd=1.0)).guard()
    outcome, state, patches = run(tmp_path / "db", Chain(5, 0.3), {"spend": spend}, guard)
    assert outcome.status is RunStatus.ESCALATED
    v = outcome.verdict
    assert (v["kind"], v["limit"], v["maximum"], v["observed"]) == (
        "budget_exceeded",
        "max_usd",
        1.0,
        1.2,
    )
    assert sorted(state.tasks) == ["s1", "s2", "s3"]  # s4 was never added, let alone run
    assert [p.planner for p in patches if p.outcome == "rejected"] == ["policy"]


def test_a_run_within_its_budget_is_not_touched(tmp_path: Path) -> None:
    guard = Policy(budget=Budget(max_usd=1.5, max_tasks=5)).guard()
    outcome, _, patches = run(tmp_path / "db", Chain(5, 0.3), {"spend": spend}, guard)
    assert outcome.status is RunStatus.SUCCEEDED
    assert all(p.outcome == "applied" for p in patches)


def test_max_tasks_escalates_before_the_graph_grows_past_it(tmp_path: Path) -> None:
    guard = Policy(budget=Budget(max_tasks=2)).guard()
    outcome, state, _ = run(tmp_path / "db", Chain(5, 0.0), {"spend": spend}, guard)
    assert outcome.status is RunStatus.ESCALATED
    assert (outcome.verdict["limit"], outcome.verdict["observed"]) == ("max_tasks", 3)
    assert len(state.tasks) == 2


def test_wall_time_uses_the_injected_clock(tmp_path: Path) -> None:
    now = [1000.0]

    async def slow(ctx: TaskContext) -> Any:
        now[0] += 10.0  # each task "takes" ten seconds; the test takes milliseconds
        return {}

    guard = Policy(budget=Budget(max_wall_seconds=25.0)).guard(clock=lambda: now[0])
    outcome, state, _ = run(tmp_path / "db", Chain(9, 0.0), {"spend": slow}, guard)
    assert outcome.status is RunStatus.ESCALATED
    assert outcome.verdict["limit"] == "max_wall_seconds"
    assert outcome.verdict["observed"] == 30.0
    assert len(state.tasks) == 3


def test_verification_stuck_n_times_in_a_row_escalates(tmp_path: Path) -> None:
    guard = Policy(tripwires=Tripwires(verify_stuck_after=3)).guard()
    outcome, state, patches = run(tmp_path / "db", Retry([False] * 10), {"verify": verify}, guard)
    assert outcome.status is RunStatus.ESCALATED
    assert outcome.verdict["tripwire"] == "verify_stuck"
    assert outcome.verdict["observed"] == 3
    assert sorted(state.tasks) == ["v1", "v2", "v3"]
    assert [p.reason for p in patches if p.planner == "policy"] == [outcome.verdict["message"]]


def test_a_passing_verification_resets_the_streak(tmp_path: Path) -> None:
    guard = Policy(tripwires=Tripwires(verify_stuck_after=3)).guard()
    script = [False, False, True, False, False, True]
    outcome, _, _ = run(tmp_path / "db", Retry(script), {"verify": verify}, guard)
    assert outcome.status is RunStatus.SUCCEEDED


def test_verify_streak_counts_failures_in_finishing_order() -> None:
    def t(tid: str, seq: int, state: TaskState, passed: bool | None, skill: str = "verify") -> Task:
        result = None if passed is None else {"passed": passed}
        return Task(task_id=TaskId(tid), skill=skill, state=state, result=result, done_seq=seq)

    ok, bad = TaskState.SUCCEEDED, TaskState.FAILED
    tasks = [
        t("a", 1, bad, None),
        t("b", 2, ok, True),
        t("c", 5, bad, None),
        t("d", 3, ok, False),
        t("x", 4, ok, None, skill="act"),
        Task(task_id=TaskId("e"), skill="verify", state=TaskState.RUNNING),
    ]
    assert verify_streak(tasks, {"verify"}) == 2  # d (seq 3) and c (seq 5); b passed
    assert verify_streak([], {"verify"}) == 0
