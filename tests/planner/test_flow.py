"""The planner patterns: what each compiles to, event by event, and the mistakes refused early.

The flow is driven here the way the executor drives a planner: each event is planned
against the materialized graph, the patch is validated and applied, then the next event.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_looplab import DIGESTS
from loopkernel import (
    AppParts,
    Event,
    EventKind,
    GraphPatch,
    Kernel,
    SQLiteStore,
    TaskContext,
    TaskState,
    UsageError,
)
from loopkernel.graph import GraphState, validate
from loopkernel.ids import RunId, TaskId
from loopkernel.planner import At, Flow, Step, for_each, gate, guard, quorum, repeat, retry
from loopkernel.policy import Policy
from loopkernel_apps.looplab._loop import planner as looplab_planner
from loopkernel_apps.speculation import planner as speculation_planner

GOLDEN = Path(__file__).parent.parent / "golden"


class Sim:
    """A run's graph, moved on by hand: a task finishes, the flow answers, the patch applies."""

    def __init__(self, flow: Flow, params: Any = None) -> None:
        self.flow = flow
        self.state = GraphState(run_id=RunId("r"), app="test", params=params)
        self.seq = 0
        self.last = self.answer(EventKind.RUN_STARTED)

    def answer(self, kind: EventKind, task_id: str | None = None, data: Any = None) -> GraphPatch:
        self.seq += 1
        tid = TaskId(task_id) if task_id else None
        event = Event(run_id=self.state.run_id, seq=self.seq, kind=kind, task_id=tid, data=data)
        patch = self.flow.plan(self.state, event)
        assert isinstance(patch, GraphPatch)
        again = Flow.plan(self.flow, self.state, event)  # pure: asked twice, same answer
        assert again == patch
        self.state.apply(validate(self.state, patch, self.flow.skills))
        self.last = patch
        return patch

    def finish_task(self, tid: str, state: TaskState, **fields: Any) -> None:
        task = replace(self.state.tasks[TaskId(tid)], state=state, done_seq=self.seq + 1, **fields)
        self.state.tasks[task.task_id] = task
        for promoted in self.state.promotions(self.state.successors(tid), {}):
            self.state.tasks[promoted.task_id] = promoted

    def done(self, tid: str, result: Any = None) -> list[Any]:
        self.finish_task(tid, TaskState.SUCCEEDED, result=result)
        return ops(self.answer(EventKind.TASK_COMPLETED, tid))

    def fail(self, tid: str) -> list[Any]:
        self.finish_task(tid, TaskState.FAILED, error={"type": "E", "message": "boom"})
        return ops(self.answer(EventKind.TASK_FAILED, tid))

    def ids(self) -> list[str]:
        return list(self.state.tasks)

    def live(self) -> list[str]:
        return [t for t, v in self.state.tasks.items() if v.state is not TaskState.CANCELLED]


def ops(patch: GraphPatch) -> list[Any]:
    """A patch in a short form: ("add", id, input), ("connect", a, b), ("cancel", id) ..."""
    out: list[Any] = []
    for op in patch.to_json():
        match op["op"]:
            case "add":
                out.append(("add", op["task_id"], op["input"]))
            case "connect":
                out.append(("connect", op["src"], op["dst"]))
            case "finish":
                out.append(("finish", op["status"], op["verdict"]))
            case "wait":
                out.append(("wait", op["task_id"], op["reason"]))
            case _:
                out.append((op["op"], op["task_id"]))
    return out


def test_a_sequence_adds_each_step_after_the_last_and_ends_with_the_verdict() -> None:
    flow = Flow(
        Step("fetch", input={"url": "u"}),
        Step("sum", input=lambda at: {"n": len(at.prev.result)}),
        verdict=lambda at: at.result("sum"),
    )
    sim = Sim(flow)
    assert ops(sim.last) == [("add", "fetch", {"url": "u"})]
    assert sim.done("fetch", [1, 2, 3]) == [("add", "sum", {"n": 3}), ("connect", "fetch", "sum")]
    assert sim.done("sum", 6) == [("finish", "succeeded", 6)]


def test_for_each_runs_its_body_once_per_item_with_counted_task_ids() -> None:
    flow = Flow(
        Step("load"),
        for_each(
            lambda at: at.result("load"),
            Step("get", input=lambda at: {"i": at.index, "item": at.item}),
            Step("put", input=lambda at: {"got": at.result("get")}),
        ),
    )
    sim = Sim(flow)
    assert sim.done("load", ["a", "b"]) == [
        ("add", "get:1", {"i": 1, "item": "a"}),
        ("connect", "load", "get:1"),
    ]
    assert sim.done("get:1", "A")[0] == ("add", "put:1", {"got": "A"})
    assert sim.done("put:1")[:2] == [
        ("add", "get:2", {"i": 2, "item": "b"}),
        ("connect", "put:1", "get:2"),
    ]
    sim.done("get:2", "B")
    assert sim.done("put:2") == [("finish", "succeeded", None)]


def test_for_each_over_no_items_goes_straight_on() -> None:
    flow = Flow(Step("load"), for_each(lambda at: [], Step("each")), Step("after"))
    sim = Sim(flow)
    assert sim.done("load", []) == [("add", "after", None), ("connect", "load", "after")]


def test_retry_runs_again_after_the_failed_attempt_until_it_passes() -> None:
    flow = Flow(
        retry(
            Step("act", input=lambda at: {"attempt": at.attempt}),
            Step("check"),
            until=lambda at: at.prev.result["ok"],
            max=3,
        ),
        Step("report", input=lambda at: {"last": at.id("check")}),
    )
    sim = Sim(flow)
    assert ops(sim.last) == [("add", "act:1", {"attempt": 1})]
    sim.done("act:1")
    assert sim.done("check:1", {"ok": False}) == [
        ("add", "act:2", {"attempt": 2}),
        ("connect", "check:1", "act:2"),
    ]
    sim.done("act:2")
    assert sim.done("check:2", {"ok": True})[0] == ("add", "report", {"last": "check:2"})


def test_retry_stops_the_run_escalated_when_its_bound_is_spent() -> None:
    flow = Flow(retry(Step("try"), until=lambda at: at.prev.result, max=2))
    sim = Sim(flow)
    assert sim.done("try:1", False)[0][1] == "try:2"
    assert sim.done("try:2", False) == [
        ("finish", "escalated", {"kind": "retries_exhausted", "task_id": "try:2", "attempts": 2})
    ]


def test_retry_inside_for_each_counts_item_then_attempt() -> None:
    flow = Flow(
        for_each(
            lambda at: at.params["items"],
            retry(Step("do"), until=lambda at: at.prev.result, max=5),
        )
    )
    sim = Sim(flow, params={"items": ["x", "y"]})
    assert sim.ids() == ["do:1.1"]
    sim.done("do:1.1", False)
    sim.done("do:1.2", True)
    assert sim.ids() == ["do:1.1", "do:1.2", "do:2.1"]


def test_repeat_is_a_bounded_plan_and_act_loop_that_may_end_after_any_step() -> None:
    flow = Flow(
        Step("triage"),
        repeat(
            Step("plan", input=lambda at: {"round": at.attempt}),
            Step("act", input=lambda at: at.prev.result),
            until=lambda at: at.result("plan")["calls"] == [],
            max=3,
        ),
        Step("report"),
    )
    sim = Sim(flow)
    sim.done("triage")
    assert sim.done("plan:1", {"calls": ["logs"]})[0] == ("add", "act:1", {"calls": ["logs"]})
    assert sim.done("act:1")[0] == ("add", "plan:2", {"round": 2})
    # the plan proposes nothing: the loop ends after the plan, no act
    assert sim.done("plan:2", {"calls": []}) == [
        ("add", "report", None),
        ("connect", "plan:2", "report"),
    ]


def test_at_tasks_lists_every_round_of_a_step_after_its_loop() -> None:
    flow = Flow(
        repeat(Step("act", input=lambda at: at.attempt), until=lambda at: False, max=3),
        Step("report", input=lambda at: [t.result for t in at.tasks("act")]),
    )
    sim = Sim(flow)
    for k in (1, 2, 3):
        sim.done(f"act:{k}", f"found {k}")
    assert sim.last.ops[0].task.input == ["found 1", "found 2", "found 3"]  # type: ignore[union-attr]


def test_repeat_goes_on_after_its_last_round_instead_of_failing() -> None:
    flow = Flow(repeat(Step("plan"), until=lambda at: False, max=2), Step("report"))
    sim = Sim(flow)
    sim.done("plan:1")
    assert sim.done("plan:2")[0] == ("add", "report", None)


def _race(k: int) -> Flow:
    return Flow(
        Step("plan"),
        quorum(k, of=[Step("r1", "research"), Step("r2", "research"), Step("r3", "research")]),
        Step("distill", evidence_scope="ancestors"),
    )


def test_quorum_cancels_the_rest_in_flight_and_goes_on_after_the_winners() -> None:
    sim = Sim(_race(2))
    assert [o[:2] for o in sim.done("plan")] == [
        ("add", "r1"),
        ("connect", "plan"),
        ("add", "r2"),
        ("connect", "plan"),
        ("add", "r3"),
        ("connect", "plan"),
    ]
    assert sim.done("r2", "b") == []
    assert sim.done("r1", "a") == [
        ("cancel", "r3"),
        ("add", "distill", None),
        ("connect", "r1", "distill"),
        ("connect", "r2", "distill"),
    ]
    assert sim.state.tasks[TaskId("distill")].evidence_scope == "ancestors"


def test_quorum_reached_by_two_results_in_one_batch_is_decided_once() -> None:
    sim = Sim(_race(2))
    sim.done("plan")
    sim.finish_task("r1", TaskState.SUCCEEDED, result="a")
    sim.finish_task("r3", TaskState.SUCCEEDED, result="c")
    first = ops(sim.answer(EventKind.TASK_COMPLETED, "r1"))
    assert first[0] == ("cancel", "r2")
    assert ("connect", "r3", "distill") in first
    assert ops(sim.answer(EventKind.TASK_COMPLETED, "r3")) == []


def test_a_quorum_member_failing_fails_the_run_only_when_k_is_out_of_reach() -> None:
    sim = Sim(_race(2))
    sim.done("plan")
    assert sim.fail("r1") == []
    assert sim.fail("r2") == [
        (
            "finish",
            "failed",
            {"kind": "task_failed", "task_id": "r2", "type": "E", "message": "boom"},
        )
    ]


def test_gate_parks_the_step_until_a_human_answers() -> None:
    flow = Flow(Step("prep"), gate(Step("deploy"), reason="deploys need a human"))
    sim = Sim(flow)
    assert sim.done("prep") == [
        ("add", "deploy", None),
        ("connect", "prep", "deploy"),
        ("wait", "deploy", "deploys need a human"),
    ]
    approve = {"decision": "approve", "payload": {"by": "ops"}}
    assert ops(sim.answer(EventKind.HUMAN_INPUT, "deploy", approve)) == [("resume", "deploy")]
    assert sim.state.tasks[TaskId("deploy")].state is TaskState.READY


def test_a_rejected_gate_cancels_the_step_and_the_run() -> None:
    sim = Sim(Flow(gate(Step("deploy"), reason="r")))
    reject = {"decision": "reject", "payload": {"by": "ops"}}
    assert ops(sim.answer(EventKind.HUMAN_INPUT, "deploy", reject)) == [
        ("cancel", "deploy"),
        ("finish", "cancelled", {"kind": "rejected", "task_id": "deploy", "by": {"by": "ops"}}),
    ]


def test_guard_stops_the_run_before_the_next_step_or_lets_it_through() -> None:
    def affordable(at: At) -> str | None:
        return None if at.prev.result["usd"] <= 1 else f"{at.prev.result['usd']} USD is too much"

    flow = Flow(Step("quote"), guard(affordable), Step("buy"))
    cheap = Sim(flow)
    assert cheap.done("quote", {"usd": 1})[0] == ("add", "buy", None)
    dear = Sim(flow)
    assert dear.done("quote", {"usd": 5}) == [
        ("finish", "escalated", {"kind": "guard", "reason": "5 USD is too much"})
    ]


def test_a_fresh_flow_answers_a_resumed_run_exactly_like_the_first() -> None:
    def build() -> Flow:
        return Flow(
            Step("load"),
            for_each(lambda at: at.result("load"), retry(Step("do"), until=lambda at: True, max=2)),
        )

    sim = Sim(build())
    sim.done("load", [1, 2])
    sim.finish_task("do:1.1", TaskState.SUCCEEDED, result=None)
    event = Event(run_id=RunId("r"), seq=9, kind=EventKind.TASK_COMPLETED, task_id=TaskId("do:1.1"))
    assert build().plan(sim.state, event) == sim.flow.plan(sim.state, event)
    assert ops(build().on_completed(sim.state, event))[0] == ("add", "do:2.1", None)


def test_a_task_the_flow_did_not_add_is_answered_with_the_empty_patch() -> None:
    sim = Sim(Flow(Step("a")))
    sim.state.tasks[TaskId("stray:1")] = replace(
        sim.state.tasks[TaskId("a")], task_id=TaskId("stray:1")
    )
    event = Event(
        run_id=RunId("r"), seq=5, kind=EventKind.TASK_COMPLETED, task_id=TaskId("stray:1")
    )
    assert sim.flow.plan(sim.state, event) == GraphPatch()


# -- mistakes, refused when the flow is built ------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Flow(Step("a"), Step("a")), "two steps are named 'a'"),
        (lambda: Flow(Step("a"), retry(Step("b"), Step("a"), until=bool, max=2)), "named 'a'"),
        (lambda: Step("a:1"), "':' is kept for the loop counters"),
        (lambda: Step(""), "a step name is 1..100 characters"),
        (lambda: retry(Step("a"), until=bool, max=0), "retry() needs a bound: max=N"),
        (lambda: retry(Step("a"), until=bool, max=None), "retry() needs a bound"),
        (lambda: repeat(Step("a"), until=bool, max=True), "repeat() needs a bound"),
        (lambda: retry(until=bool, max=3), "retry() needs at least one step"),
        (lambda: for_each(lambda at: []), "for_each() needs at least one step"),
        (lambda: quorum(3, of=[Step("a"), Step("b")]), "quorum k must be between 1 and 2"),
        (lambda: quorum(1, of=[]), "needs a non-empty list of Step"),
        (lambda: gate(Step("a"), reason=""), "give the reason"),
        (lambda: Flow(), "Flow() needs at least one step"),
        (lambda: retry(Step("a"), until=True, max=2), "retry(): until must be a function of at"),
        (lambda: for_each([1, 2], Step("a")), "for_each(): items must be a function of at"),
        (lambda: guard("no"), "guard(): check must be a function of at"),
        (lambda: Flow(Step("a"), verdict=6), "Flow(): verdict must be a function of at"),
    ],
)
def test_planner_mistakes_are_usage_errors_at_construction(build: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_the_same_pattern_twice_in_one_flow_is_refused() -> None:
    check = guard(lambda at: None)
    with pytest.raises(UsageError, match="used twice"):
        Flow(Step("a"), check, Step("b"), check)


async def _noop(ctx: TaskContext) -> None:
    return None


def test_a_skill_nobody_registered_is_refused_by_the_kernel_and_the_app(tmp_path: Path) -> None:
    flow = Flow(Step("fetch"), Step("r1", "research"))
    message = r"skill\(s\) nobody registered: research \(registered: fetch\)"
    with pytest.raises(UsageError, match=message):
        AppParts(planner=flow, workers={"fetch": _noop})
    with pytest.raises(UsageError, match=message):
        Kernel(SQLiteStore(str(tmp_path / "runs.db")), flow, {"fetch": _noop})
    assert flow.skills == {"fetch", "research"}


def test_at_refuses_what_this_place_does_not_have() -> None:
    flow = Flow(Step("a", input=lambda at: at.index))
    with pytest.raises(UsageError, match="not inside a for_each"):
        Sim(flow)
    with pytest.raises(UsageError, match="no task has finished yet"):
        Sim(Flow(Step("a", input=lambda at: at.prev)))
    with pytest.raises(UsageError, match="the flow has no step 'zzz'"):
        Sim(Flow(Step("a", input=lambda at: at.result("zzz"))))


# -- the shipped app on it ------------------------------------------------------------------


def test_the_speculation_flow_reproduces_the_recorded_patches_op_for_op() -> None:
    recorded = json.loads((GOLDEN / "speculation_v1.json").read_text())
    params = {"delays": [0.01, 0.02, 2.0], "quorum": 2, "distill_delay": 0.05}
    flow = speculation_planner(params)
    state = GraphState(run_id=RunId("golden-spec"), app="speculation", params=params)
    final = {t["task_id"]: t for t in recorded["tasks"]}
    events = {e["seq"]: e for e in recorded["journal"]}
    for record in recorded["patches"]:
        e = events[record["event_seq"]]
        if e["kind"] == "task_completed":
            tid = TaskId(e["task_id"])
            state.tasks[tid] = replace(
                state.tasks[tid],
                state=TaskState.SUCCEEDED,
                result=final[tid]["result"],
                done_seq=e["seq"],
            )
        event = Event(
            run_id=state.run_id,
            seq=e["seq"],
            kind=EventKind(e["kind"]),
            task_id=e["task_id"],
            data=e["data"],
        )
        patch = flow.plan(state, event)
        assert isinstance(patch, GraphPatch)
        if record["planner"] == "planner":
            assert patch.to_json() == record["ops"], f"event {e['seq']}"
        state.apply(validate(state, GraphPatch.from_json(record["ops"]), flow.skills))


LOOPLAB = json.loads((GOLDEN / "looplab_v1.json").read_text())
"""Runs of looplab recorded with its hand-written planner (LoopKernel 0.1, before the flow):
params, journal, every task's final state, and the patch that answered each event."""


@pytest.mark.parametrize("name", sorted(LOOPLAB))
def test_the_looplab_flow_answers_the_hand_written_planners_journal_with_its_patches(
    name: str,
) -> None:
    rec = LOOPLAB[name]
    if name in DIGESTS:
        assert rec["digest"] == DIGESTS[name]  # the recording is of the runs the tests pin
    flow = looplab_planner(Policy.from_json(rec["params"]["policy"]))
    state = GraphState(run_id=RunId(name), app="looplab", params=rec["params"])
    events = {e["seq"]: e for e in rec["journal"]}
    compared = 0
    for record in rec["patches"]:
        e = events[record["event_seq"]]
        if e["task_id"] is not None and e["kind"] != "human_input":
            tid = TaskId(e["task_id"])
            final = rec["results"][tid]
            new = {
                "task_completed": {"state": TaskState.SUCCEEDED, "result": final["result"]},
                "task_failed": {"state": TaskState.FAILED, "error": final["error"]},
                "tripwire": {"state": TaskState.FAILED, "error": final["error"]},
                "approval_required": {"state": TaskState.WAITING, "wait_epoch": 1},
            }[e["kind"]]
            state.tasks[tid] = replace(state.tasks[tid], done_seq=e["seq"], **new)
        event = Event(
            run_id=state.run_id,
            seq=e["seq"],
            kind=EventKind(e["kind"]),
            task_id=e["task_id"],
            data=e["data"],
        )
        if record["planner"] == "planner":
            patch = flow.plan(state, event)
            assert isinstance(patch, GraphPatch)
            assert patch.to_json() == record["ops"], f"{name}: event {e['seq']}"
            compared += 1
        state.apply(validate(state, GraphPatch.from_json(record["ops"]), flow.skills))
    assert state.status.value == rec["status"]
    assert compared >= 8


def test_a_flow_runs_on_the_kernel_end_to_end(tmp_path: Path) -> None:
    calls: list[str] = []

    async def work(ctx: TaskContext) -> Any:
        calls.append(ctx.task_id)
        if ctx.task_id.startswith("check"):
            return {"ok": ctx.input["attempt"] == 2}
        return ctx.input

    flow = Flow(
        Step("load", input=[10, 20]),
        for_each(
            lambda at: at.result("load"),
            retry(
                Step("act", "work", input=lambda at: {"n": at.item, "attempt": at.attempt}),
                Step("check", "work", input=lambda at: {"attempt": at.attempt}),
                until=lambda at: at.prev.result["ok"],
                max=3,
            ),
        ),
        verdict=lambda at: at.result("act")["n"],
    )

    async def go() -> Any:
        store = SQLiteStore(str(tmp_path / "runs.db"))
        await store.open()
        try:
            kernel = Kernel(store, flow, {"load": work, "work": work})
            started = await kernel.start(app="t")
            return await kernel.run(started.run_id)
        finally:
            await store.close()

    outcome = asyncio.run(go())
    assert (outcome.status.value, outcome.verdict) == ("succeeded", 20)
    per_item = ["act:{}.1", "check:{}.1", "act:{}.2", "check:{}.2"]
    assert calls == ["load"] + [c.format(i) for i in (1, 2) for c in per_item]


def test_the_cli_refuses_a_flow_naming_an_unregistered_skill_and_writes_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    out = subprocess.run(
        [*LOOPKERNEL, "--db", str(db), "run", "lk_testapps:unregistered"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "nobody registered: parse (registered: fetch)" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not db.exists()  # refused before the database was even opened: no run written
