"""The executor's behaviour, each invariant of the loop with a run of its own.

Every test runs on SQLite and on PostgreSQL (the ``backend`` fixture), with the same
assertions: the loop cannot tell its stores apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

from loopkernel import (
    ApprovalRefused,
    BasePlanner,
    Event,
    EventKind,
    ExecutionConfig,
    GraphPatch,
    Kernel,
    NeedsApproval,
    RunStatus,
    Snapshot,
    TaskContext,
    TaskSpec,
    TaskState,
)
from loopkernel.client import Answerer, Client
from loopkernel.ids import RunId

if TYPE_CHECKING:
    from lk_stores import Backend

Workers = dict[str, Callable[[TaskContext], Awaitable[Any]]]


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def execute(
    db: Backend, planner: Any, workers: Workers, *, run_id: str = "run-1", **kw: Any
) -> tuple[Kernel, Any]:
    store = db.store()
    await store.open()
    max_events = kw.pop("max_events", 1000)
    config = ExecutionConfig(poll_s=0.02, concurrency=kw.pop("max_concurrency", 16))
    kernel = Kernel(store, planner, workers, config=config)
    if run_id not in [r.run_id for r in await store.list_runs()]:
        await kernel.start(app="test", run_id=run_id, max_events=max_events)
    outcome = await kernel.run(run_id)
    await store.close()
    return kernel, outcome


async def journal_is_complete(db: Backend, run_id: str = "run-1") -> None:
    """Every event but run_finished has exactly one patch."""
    store = db.store()
    await store.open()
    events = await store.events(RunId(run_id))
    patched = [p.event_seq for p in await store.patches(RunId(run_id))]
    await store.close()
    assert sorted(patched) == sorted(set(patched))
    assert patched == [e.seq for e in events if e.kind is not EventKind.RUN_FINISHED]


def spec(tid: str, skill: str = "work", **kw: Any) -> TaskSpec:
    return TaskSpec(task_id=tid, skill=skill, **kw)  # type: ignore[arg-type]


class Chain(BasePlanner):
    """start -> a -> b ... then finish with the last result."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(spec(self.names[0]))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        i = self.names.index(event.task_id)
        if i + 1 == len(self.names):
            return GraphPatch().finish("succeeded", snapshot.task(event.task_id).result)
        return GraphPatch().add(spec(self.names[i + 1]), after=[event.task_id])


async def echo(ctx: TaskContext) -> Any:
    return {"task": ctx.task_id, "seen": sorted(ctx.evidence)}


def test_a_chain_runs_to_the_end_and_every_event_is_planned_once(backend: Backend) -> None:
    _, outcome = run(execute(backend, Chain(["a", "b", "c"]), {"work": echo}))
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.verdict == {"task": "c", "seen": ["a", "b"]}
    run(journal_is_complete(backend))


def test_the_planner_wakes_on_the_first_completion_while_a_sibling_runs(backend: Backend) -> None:
    seen_running: list[list[str]] = []
    next_started = asyncio.Event()

    class Race(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().add(spec("fast")).add(spec("slow"))

        def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            seen_running.append(sorted(t.task_id for t in snapshot.in_state(TaskState.RUNNING)))
            if event.task_id == "fast":
                return GraphPatch().add(spec("next"), after=["fast"])
            if snapshot.task("next").state is TaskState.SUCCEEDED and event.task_id == "slow":
                return GraphPatch().finish("succeeded")
            return GraphPatch()

    async def work(ctx: TaskContext) -> Any:
        if ctx.task_id == "next":
            next_started.set()
        if ctx.task_id == "slow":
            # The slow sibling ends only once the fast branch's successor has started: a
            # loop that waited for the slowest sibling before planning would never start it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(next_started.wait(), 60)
        return ctx.task_id

    _, outcome = run(execute(backend, Race(), {"work": work}))
    assert outcome.status is RunStatus.SUCCEEDED
    assert next_started.is_set(), "next never started while slow ran"
    assert seen_running[0] == ["slow"]


def test_the_speculation_app_cancels_the_straggler_in_flight_and_discards_its_late_result(
    backend: Backend,
) -> None:
    async def go() -> tuple[Any, Any, list[Event]]:
        async with Client(backend.url) as client:
            _, started = await client.start("speculation", scenario="fast", run_id="spec")
            outcome = await client.execute(started.run_id)
            inspection = await client.inspect("spec", journal=True)
            assert inspection.events is not None
            return outcome, inspection, inspection.events

    outcome, inspection, events = run(go())
    assert outcome.status is RunStatus.SUCCEEDED
    tasks = {t["task_id"]: t for t in inspection.tasks}
    assert tasks["r3"]["state"] == "cancelled" and tasks["r3"]["result"] is None
    # Cancelled in flight, not waited for: the straggler handed back its partial notes,
    # which it does only when its 2 s sleep is interrupted.
    late = [e for e in events if e.kind is EventKind.LATE_RESULT_DISCARDED]
    assert [e.task_id for e in late] == ["r3"] and late[0].data["outcome"] == "result"
    partial = {"angle": "first principles", "claims": ["unfinished notes on first principles"]}
    text = json.dumps({**partial, "partial": True}, sort_keys=True)
    assert late[0].data["sha256"] == hashlib.sha256(text.encode()).hexdigest(), late[0].data
    assert events[-1].kind is EventKind.RUN_FINISHED  # nothing journaled after it
    assert tasks["distill"]["result"]["sources"] == ["r1", "r2"]
    assert "first principles" not in outcome.verdict["answer"]
    assert "unfinished" not in str(inspection.to_json()["tasks"])
    run(journal_is_complete(backend, "spec"))


def test_evidence_scope_ancestors_hides_siblings_and_all_shows_them(backend: Backend) -> None:
    seen: dict[str, list[str]] = {}

    class Fork(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().add(spec("root")).add(spec("side"))

        def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            done = {t.task_id for t in snapshot.in_state(TaskState.SUCCEEDED)}
            if done == {"root", "side"} and snapshot.get("mid") is None:
                return (
                    GraphPatch()
                    .add(spec("mid"), after=["root"])
                    .add(spec("leaf", evidence_scope="ancestors"), after=["mid"])
                    .add(spec("wide"), after=["mid"])
                )
            if {"leaf", "wide"} <= done:
                return GraphPatch().finish("succeeded")
            return GraphPatch()

    async def work(ctx: TaskContext) -> Any:
        seen[ctx.task_id] = sorted(ctx.evidence)
        return ctx.task_id

    run(execute(backend, Fork(), {"work": work}))
    assert seen["leaf"] == ["mid", "root"]
    assert seen["wide"] == ["mid", "root", "side"]


class Gate(BasePlanner):
    """prep, then `gate` parked for a human, then finish with what the gate saw."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return (
            GraphPatch()
            .add(spec("prep"))
            .add(spec("gate"), after=["prep"])
            .wait("gate", "deploy to production?")
        )

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "gate":
            return GraphPatch().finish("succeeded", snapshot.task("gate").result)
        return GraphPatch()

    def on_other(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.kind is EventKind.HUMAN_INPUT:
            return GraphPatch()
        return GraphPatch()

    def on_human_input(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        patch = super().on_human_input(snapshot, event)
        if event.data["decision"] == "reject":
            return patch.finish("cancelled", {"kind": "rejected"})
        return patch


def counting(calls: dict[str, int]) -> Callable[[TaskContext], Awaitable[Any]]:
    async def work(ctx: TaskContext) -> Any:
        calls[ctx.task_id] = calls.get(ctx.task_id, 0) + 1
        return {"task": ctx.task_id, "human": ctx.human_input}

    return work


def test_a_wait_stops_the_executor_and_an_approval_from_elsewhere_resumes_it(
    backend: Backend,
) -> None:
    calls: dict[str, int] = {}
    _, first = run(execute(backend, Gate(), {"work": counting(calls)}))
    assert first.status is RunStatus.WAITING
    assert calls == {"prep": 1}

    async def approve() -> None:
        async with Client(backend.url) as other:  # another connection, as another process
            await other.decide(
                "run-1", "gate", "approve", payload={"by": "ops"}, answerer=Answerer(local=True)
            )

    run(approve())
    _, second = run(execute(backend, Gate(), {"work": counting(calls)}))
    assert second.status is RunStatus.SUCCEEDED
    assert second.verdict == {"task": "gate", "human": {"by": "ops"}}
    assert calls == {"prep": 1, "gate": 1}  # nothing that finished ran again
    run(journal_is_complete(backend))


def test_a_rejection_cancels_the_task(backend: Backend) -> None:
    calls: dict[str, int] = {}
    run(execute(backend, Gate(), {"work": counting(calls)}))

    async def reject() -> None:
        async with Client(backend.url) as other:
            await other.decide("run-1", "gate", "reject", answerer=Answerer(local=True))

    run(reject())
    _, outcome = run(execute(backend, Gate(), {"work": counting(calls)}))
    assert outcome.status is RunStatus.CANCELLED
    assert "gate" not in calls


def test_forged_replayed_and_late_approvals_are_refused(backend: Backend) -> None:
    async def go() -> None:
        store = backend.store()
        await store.open()
        kernel = Kernel(store, Gate(), {"work": counting({})}, config=ExecutionConfig(poll_s=0.02))
        started = await kernel.start(app="test", run_id="run-1")
        assert (await kernel.run("run-1")).status is RunStatus.WAITING
        await store.close()
        async with Client(backend.url) as client:
            with pytest.raises(ApprovalRefused, match="token does not match"):
                await client.decide("run-1", "gate", "approve", answerer=Answerer(token="forged"))
            with pytest.raises(ApprovalRefused, match="needs the run's approval token"):
                await client.decide("run-1", "gate", "approve", answerer=Answerer())
            with pytest.raises(ApprovalRefused, match="not waiting"):
                await client.decide(
                    "run-1", "prep", "approve", answerer=Answerer(token=started.token)
                )
            await client.decide("run-1", "gate", "approve", answerer=Answerer(token=started.token))
            with pytest.raises(ApprovalRefused, match="already answered"):
                await client.decide(
                    "run-1", "gate", "approve", answerer=Answerer(token=started.token)
                )

    run(go())
    _, outcome = run(execute(backend, Gate(), {"work": counting({})}))
    assert outcome.status is RunStatus.SUCCEEDED

    async def late() -> None:
        async with Client(backend.url) as client:
            with pytest.raises(ApprovalRefused, match="already succeeded"):
                await client.decide("run-1", "gate", "approve", answerer=Answerer(local=True))

    run(late())


def test_an_approval_that_arrives_while_the_run_is_running_is_picked_up(backend: Backend) -> None:
    class GateAndSlow(Gate):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return super().on_start(snapshot, event).add(spec("slow"))

        def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            done = {t.task_id for t in snapshot.in_state(TaskState.SUCCEEDED)}
            if {"gate", "slow"} <= done:
                return GraphPatch().finish("succeeded")
            return GraphPatch()

    async def work(ctx: TaskContext) -> Any:
        if ctx.task_id == "slow":
            async with Client(backend.url) as other:
                while (await other.inspect("run-1")).tasks[0]["state"] != "waiting":  # noqa: ASYNC110 - polls another connection
                    await asyncio.sleep(0.01)
                await other.decide("run-1", "gate", "approve", answerer=Answerer(local=True))
            await asyncio.sleep(0.2)
        return ctx.task_id

    _, outcome = run(execute(backend, GateAndSlow(), {"work": work}))
    assert outcome.status is RunStatus.SUCCEEDED
    run(journal_is_complete(backend))


def test_a_worker_can_park_its_own_task_and_runs_again_after_approval(backend: Backend) -> None:
    attempts: list[Any] = []

    async def guarded(ctx: TaskContext) -> Any:
        attempts.append(ctx.human_input)
        if ctx.human_input is None:
            raise NeedsApproval("irreversible: delete the bucket", tool="delete")
        return "deleted"

    planner = Chain(["only"])
    _, first = run(execute(backend, planner, {"work": guarded}))
    assert first.status is RunStatus.WAITING

    async def approve() -> None:
        async with Client(backend.url) as other:
            info = await other.inspect("run-1", journal=True)
            assert info.tasks[0]["state"] == "waiting"
            assert info.events is not None
            assert info.events[-1].kind is EventKind.APPROVAL_REQUIRED
            await other.decide(
                "run-1", "only", "approve", payload={"ok": True}, answerer=Answerer(local=True)
            )

    run(approve())
    _, second = run(execute(backend, planner, {"work": guarded}))
    assert (second.status, second.verdict) == (RunStatus.SUCCEEDED, "deleted")
    assert attempts == [None, {"ok": True}]


def test_cancel_while_running_stops_the_run_and_cancels_tasks_in_flight(backend: Backend) -> None:
    cancelled: list[str] = []

    async def slow(ctx: TaskContext) -> Any:
        if ctx.task_id == "a":
            async with Client(backend.url) as other:
                await other.cancel("run-1", "operator said stop")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(ctx.task_id)
            raise
        return None

    class Two(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().add(spec("a")).add(spec("b"))

    _, outcome = run(execute(backend, Two(), {"work": slow}))
    # Both caught CancelledError in their 10 s sleep: stopped in flight, not waited for.
    assert outcome.status is RunStatus.CANCELLED
    assert outcome.verdict == {"kind": "cancelled", "reason": "operator said stop"}
    assert sorted(cancelled) == ["a", "b"]
    run(journal_is_complete(backend))


def test_cancel_of_a_waiting_run_finishes_it_at_once(backend: Backend) -> None:
    async def go() -> RunStatus:
        async with Client(backend.url) as client:
            # A waiting run of a real app: the speculation app cannot wait, so park by hand.
            _, started = await client.start("speculation", scenario="fast", run_id="w")
            await client.store.set_status(started.run_id, RunStatus.WAITING)
            return await client.cancel("w")

    assert run(go()) is RunStatus.CANCELLED


def test_the_runaway_guard_fails_the_run_with_a_verdict(backend: Backend) -> None:
    class Forever(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().add(spec("t0"))

        def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            n = len(snapshot.tasks)
            return GraphPatch().add(spec(f"t{n}"), after=[event.task_id or ""])

    _, outcome = run(execute(backend, Forever(), {"work": echo}, max_events=12))
    assert outcome.status is RunStatus.FAILED
    assert outcome.verdict["kind"] == "runaway"
    assert (outcome.verdict["max_events"], outcome.verdict["observed"]) == (12, 13)
    run(journal_is_complete(backend))


def test_a_planner_that_raises_fails_the_run_with_type_and_message(backend: Backend) -> None:
    class Broken(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            raise KeyError("no such plan")

    run(execute(backend, Broken(), {"work": echo}))

    async def read() -> Any:
        store = backend.store()  # a fresh connection reads what was persisted
        await store.open()
        info = await store.get_run(RunId("run-1"))
        await store.close()
        return info

    info = run(read())
    assert info.status is RunStatus.FAILED
    assert info.verdict == {
        "kind": "planner_error",
        "type": "KeyError",
        "message": "'no such plan'",
    }


def test_a_worker_that_raises_fails_the_run_by_default(backend: Backend) -> None:
    async def boom(ctx: TaskContext) -> Any:
        raise RuntimeError("disk full")

    _, outcome = run(execute(backend, Chain(["a"]), {"work": boom}))
    assert outcome.status is RunStatus.FAILED
    assert outcome.verdict == {
        "kind": "task_failed",
        "task_id": "a",
        "type": "RuntimeError",
        "message": "disk full",
    }


def test_a_non_json_result_fails_the_task(backend: Backend) -> None:
    async def bad(ctx: TaskContext) -> Any:
        return {1, 2}

    _, outcome = run(execute(backend, Chain(["a"]), {"work": bad}))
    assert outcome.verdict["type"] == "ValueRefused"  # the value door: loopkernel.graph.door
    assert "task result refused (not_json)" in outcome.verdict["message"]


def test_a_rejected_patch_fails_the_run_naming_the_rule(backend: Backend) -> None:
    class Cyclic(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().add(spec("a")).add(spec("b"), after=["a"]).connect("b", "a")

    _, outcome = run(execute(backend, Cyclic(), {"work": echo}))
    assert outcome.status is RunStatus.FAILED
    assert outcome.verdict["rule"] == "cycle"

    async def patches() -> Any:
        store = backend.store()
        await store.open()
        out = await store.patches(RunId("run-1"))
        await store.close()
        return out

    record = run(patches())[0]
    assert record.outcome == "rejected" and record.ops[0]["op"] == "add"


def test_a_run_with_nothing_left_to_do_but_no_finish_is_failed_as_stalled(backend: Backend) -> None:
    class Forgetful(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().add(spec("a")).add(spec("b"), after=["a"])

        def on_failed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch()

    async def boom(ctx: TaskContext) -> Any:
        raise ValueError("nope")

    _, outcome = run(execute(backend, Forgetful(), {"work": boom}))
    assert outcome.status is RunStatus.FAILED
    assert outcome.verdict["kind"] == "stalled"
    assert outcome.verdict["stuck_tasks"] == ["b"]


def test_max_concurrency_is_respected(backend: Backend) -> None:
    live = {"now": 0, "peak": 0}

    class Wide(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            patch = GraphPatch()
            for i in range(12):
                patch = patch.add(spec(f"t{i}"))
            return patch

        def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            if len(snapshot.in_state(TaskState.SUCCEEDED)) == 12:
                return GraphPatch().finish("succeeded")
            return GraphPatch()

    async def work(ctx: TaskContext) -> Any:
        live["now"] += 1
        live["peak"] = max(live["peak"], live["now"])
        await asyncio.sleep(0.01)
        live["now"] -= 1
        return None

    _, outcome = run(execute(backend, Wide(), {"work": work}, max_concurrency=3))
    assert outcome.status is RunStatus.SUCCEEDED
    assert live["peak"] == 3


def test_an_event_appended_while_a_step_is_planned_moves_the_step_after_it(
    backend: Backend,
) -> None:
    """A step's completion is numbered in memory and written with its patch; a cancel
    request another process appends meanwhile takes that seq, so the store writes the step
    after it (its patch and its task's done_seq follow), and the cancel is planned next."""

    def cancel_from_elsewhere() -> None:
        # Another process: its own store and event loop, on a thread of its own.
        thread = threading.Thread(
            target=backend.run, args=(lambda s: s.request_cancel(RunId("run-1"), "elsewhere"),)
        )
        thread.start()
        thread.join()

    class CancelledMidStep(Chain):
        def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            if event.task_id == "a":
                cancel_from_elsewhere()
            return super().on_completed(snapshot, event)

    async def slow(ctx: TaskContext) -> Any:
        if ctx.task_id == "b":
            await asyncio.Event().wait()  # runs until the cancel stops it
        return ctx.task_id

    _, outcome = run(execute(backend, CancelledMidStep(["a", "b"]), {"work": slow}))
    assert outcome.status is RunStatus.CANCELLED
    run(journal_is_complete(backend))

    async def journaled(store: Any) -> tuple[list[Event], list[Any], Any]:
        loaded = await store.load_run(RunId("run-1"))
        return await store.events(RunId("run-1")), await store.patches(RunId("run-1")), loaded

    events, patches, loaded = backend.run(journaled)
    kinds = [(e.seq, e.kind, e.task_id) for e in events[:3]]
    assert kinds == [
        (1, EventKind.RUN_STARTED, None),
        (2, EventKind.CANCEL_REQUESTED, None),
        (3, EventKind.TASK_COMPLETED, "a"),
    ]
    assert loaded.state.tasks["a"].done_seq == 3
    (answer,) = [p for p in patches if p.event_seq == 3]
    assert [op["op"] for op in answer.ops] == ["add", "connect"]
