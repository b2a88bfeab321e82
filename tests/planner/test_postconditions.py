"""Postconditions, not agreement: with ``agree`` off, the judge still refuses, by a named
rule, any proposal that ends a run ``succeeded`` without the work, lies in its verdict,
skips an approval, beats an escalation, stalls the run, or passes the fan-out bounds --
on the shipped apps' own allowlists. Pure: states built in memory, replies as a model
would send them."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopkernel.graph import Event, EventKind, GraphPatch, GraphState, TaskSpec, TaskState, validate
from loopkernel.ids import RunId, TaskId
from loopkernel.planner.llm import REASONS, Allowlist, judge
from loopkernel_apps.looplab._llm import ALLOW as LOOPLAB
from loopkernel_apps.speculation import allow_for

LAB = LOOPLAB
SPEC = allow_for({"delays": [0.1, 0.2, 0.3], "quorum": 2})


def _set(s: GraphState, tid: str, state: TaskState, result: Any = None, error: Any = None) -> None:
    s.tasks[TaskId(tid)] = replace(s.tasks[TaskId(tid)], state=state, result=result, error=error)


def _build(params: dict[str, Any], patch: GraphPatch, skills: set[str]) -> GraphState:
    s = GraphState(run_id=RunId("r"), app="t", params=params)
    s.apply(validate(s, patch, skills))
    return s


LAB_SKILLS = {"load", "plan", "guard", "act", "verify", "record"}
STEPS = [{"name": "a", "irreversible": False, "price_usd": 0.5}, {"name": "b"}]


def lab(records: int = 0, *, waiting: bool = False, escalated: bool = False) -> GraphState:
    """load succeeded (two steps); ``records`` steps fully done; then optionally act:N
    waiting for approval, or guard:N stopped by the budget policy."""
    patch = GraphPatch().add(TaskSpec(task_id="load", skill="load"))
    prev = "load"
    for i in range(1, records + 1):
        for skill in ("plan", "guard", "act", "verify", "record"):
            tid = f"{skill}:{i}" if skill in ("plan", "guard", "record") else f"{skill}:{i}.1"
            patch = patch.add(TaskSpec(task_id=tid, skill=skill), after=[prev])
            prev = tid
    n = records + 1
    if waiting or escalated:
        patch = patch.add(TaskSpec(task_id=f"guard:{n}", skill="guard"), after=[prev])
        if waiting:
            patch = patch.add(TaskSpec(task_id=f"act:{n}.1", skill="act"), after=[f"guard:{n}"])
    s = _build({}, patch, LAB_SKILLS)
    _set(s, "load", TaskState.SUCCEEDED, {"steps": STEPS})
    for tid in list(s.tasks):
        if tid != "load" and not tid.endswith(f":{n}") and not tid.endswith(f":{n}.1"):
            _set(s, tid, TaskState.SUCCEEDED, {"cost_usd": 0.5} if tid.startswith("act") else {})
    if waiting:
        _set(s, f"guard:{n}", TaskState.SUCCEEDED, {})
        _set(s, f"act:{n}.1", TaskState.WAITING)
    if escalated:
        error = {"type": "BudgetExceeded", "message": "over", "limit": "policy.max_usd"}
        _set(s, f"guard:{n}", TaskState.FAILED, error=error)
    return s


def finish(status: str = "succeeded", verdict: Any = None) -> str:
    return json.dumps([{"op": "finish", "status": status, "verdict": verdict}])


def test_a_finish_succeeded_after_one_task_is_unfinished_work() -> None:
    got = judge(finish(verdict={"steps_done": 2, "spent_usd": 0}), lab(0), LAB)
    assert got.patch is None and got.reason == "unfinished_work"
    assert "0 succeeded record task(s) of 2" in (got.detail or "")


def test_a_finish_succeeded_with_the_work_done_is_the_models_to_make() -> None:
    got = judge(finish(verdict={"steps_done": 2, "spent_usd": 1.0}), lab(2), LAB)
    assert got.patch is not None and got.reason is None


@pytest.mark.parametrize(
    "verdict",
    [
        {"steps_done": 3, "spent_usd": 1.0},
        {"steps_done": 2, "spent_usd": 0.0},
        {"ok": True},
        7,
        # the work's own fields, and one the model made up (found by bench.planner_quality's
        # hostile model: it ended looplab with {"answer": "done"} in the verdict)
        {"steps_done": 2, "spent_usd": 1.0, "answer": "done"},
    ],
)
def test_a_verdict_that_is_not_the_works_own_is_uncited(verdict: Any) -> None:
    got = judge(finish(verdict=verdict), lab(2), LAB)
    assert got.reason == "uncited", got


def test_a_finish_while_a_task_waits_for_approval_is_refused_whatever_the_status() -> None:
    s = lab(1, waiting=True)
    for status in ("succeeded", "failed", "cancelled"):
        got = judge(finish(status, {"steps_done": 1}), s, LAB)
        assert got.reason == "approval_pending", (status, got)
    cancel = json.dumps([{"op": "cancel", "task_id": "act:2.1"}])
    assert judge(cancel, s, LAB).reason == "approval_pending"
    # the human's answer is the event: the rules' own "cancel on reject" is admissible
    answer = Event(
        run_id=RunId("r"),
        seq=9,
        kind=EventKind.HUMAN_INPUT,
        task_id=TaskId("act:2.1"),
        data={"decision": "reject"},
    )
    assert judge(cancel, s, LAB, event=answer).reason == "stalls"  # and then nothing to do
    stop = json.dumps(
        [
            {"op": "cancel", "task_id": "act:2.1"},
            {"op": "finish", "status": "cancelled", "verdict": {"kind": "rejected"}},
        ]
    )
    got = judge(stop, s, LAB, event=answer)
    assert got.patch is not None, got
    assert judge(stop, s, LAB).reason == "approval_pending"  # not without the answer


def test_no_finish_beats_an_escalation() -> None:
    s = lab(1, escalated=True)
    for status in ("succeeded", "failed", "cancelled"):
        assert judge(finish(status, {"steps_done": 2}), s, LAB).reason == "escalated"


def test_a_patch_that_leaves_nothing_to_run_stalls() -> None:
    s = lab(2)
    assert judge("[]", s, LAB).reason == "stalls"
    running = lab(1)
    assert judge("[]", running, LAB).reason == "stalls"  # nothing pending after record:1
    add = [{"op": "add", "task_id": "plan:2", "skill": "plan", "input": {"index": 2, "step": {}}}]
    rules = GraphPatch.from_json(add)
    assert judge(json.dumps(add), running, LAB, fallback=rules).patch is not None


def _act(attempt: int = 2, **change: Any) -> dict[str, Any]:
    given = {"index": 1, "attempt": attempt, "step": "a", "tool": "act", "est_cost_usd": 0.5}
    given |= {"approval": None, "guard": "guard:1"}
    return {"op": "add", "task_id": f"act:1.{attempt}", "skill": "act", "input": given | change}


def retrying() -> GraphState:
    """Step 1's first action failed its verification: the rules retry it (act:1.2)."""
    patch = GraphPatch().add(TaskSpec(task_id="load", skill="load"))
    for tid, prev in (("plan:1", "load"), ("guard:1", "plan:1"), ("act:1.1", "guard:1")):
        patch = patch.add(TaskSpec(task_id=tid, skill=tid.split(":")[0]), after=[prev])
    patch = patch.add(TaskSpec(task_id="verify:1.1", skill="verify"), after=["act:1.1"])
    s = _build({}, patch, LAB_SKILLS)
    _set(s, "load", TaskState.SUCCEEDED, {"steps": STEPS})
    for tid in ("plan:1", "guard:1", "act:1.1", "verify:1.1"):
        _set(s, tid, TaskState.SUCCEEDED, {"passed": False} if tid.startswith("verify") else {})
    return s


EDGE = {"op": "connect", "src": "verify:1.1", "dst": "act:1.2"}
RETRY_RULES = GraphPatch.from_json([_act(), EDGE])


@pytest.mark.parametrize(
    "change",
    [
        {"attempt": 1},  # a retry the verify_stuck tripwire would not count
        {"approval": None, "tool": "publish"},  # an irreversible tool without the approval
        {"est_cost_usd": 0.0},  # a cheaper price than the guard's, past the budget
        {"guard": "guard:9"},  # behind another guard
    ],
)
def test_an_action_is_always_the_rules_own_but_for_the_wait(change: dict[str, Any]) -> None:
    s = retrying()
    own = _act()
    assert judge(json.dumps([own, EDGE]), s, LAB, fallback=RETRY_RULES).patch is not None
    waits = _act(backoff_s=1.5)  # retry differently: admitted
    assert judge(json.dumps([waits, EDGE]), s, LAB, fallback=RETRY_RULES).patch is not None
    rogue = {**own, "input": own["input"] | change}
    got = judge(json.dumps([rogue, EDGE]), s, LAB, fallback=RETRY_RULES)
    assert got.reason == "off_path" and "act:1.2" in (got.detail or ""), got
    # nor a task the rules do not add at this event, nor the rules' task without its edge
    record = {
        "op": "add",
        "task_id": "record:1",
        "skill": "record",
        "input": {"index": 1, "attempt": 2},
    }
    extra = [own, EDGE, record, {"op": "connect", "src": "act:1.2", "dst": "record:1"}]
    assert judge(json.dumps(extra), s, LAB, fallback=RETRY_RULES).reason == "off_path"
    assert judge(json.dumps([own]), s, LAB, fallback=RETRY_RULES).reason == "off_path"


def test_stopping_early_instead_of_a_retry_is_the_models_choice() -> None:
    stop = finish("failed", {"stopped": "step 1 does not verify"})
    assert judge(stop, retrying(), LAB, fallback=RETRY_RULES).patch is not None


def spec(researchers_done: int, *, distill: bool, answer: str = "A | B") -> GraphState:
    patch = GraphPatch().add(TaskSpec(task_id="plan", skill="plan", input={"researchers": 3}))
    for i in (1, 2, 3):
        patch = patch.add(TaskSpec(task_id=f"r{i}", skill="research"), after=["plan"])
    if distill:
        patch = patch.add(
            TaskSpec(task_id="distill", skill="distill", evidence_scope="ancestors"),
            after=["r1", "r2"],
        )
    s = _build({"quorum": 2}, patch, {"plan", "research", "distill"})
    _set(s, "plan", TaskState.SUCCEEDED, {"angles": ["a", "b", "c"]})
    for i in range(1, researchers_done + 1):
        _set(s, f"r{i}", TaskState.SUCCEEDED, {"claims": [str(i)]})
    if distill:
        _set(s, "distill", TaskState.SUCCEEDED, {"answer": answer})
    return s


def test_speculation_needs_a_quorum_and_the_distillers_answer() -> None:
    assert judge(finish(verdict={"answer": "A | B"}), spec(1, distill=False), SPEC).reason == (
        "unfinished_work"
    )
    done = spec(2, distill=True)
    assert judge(finish(verdict={"answer": "made up"}), done, SPEC).reason == "uncited"
    assert judge(finish(verdict={"answer": "A | B"}), done, SPEC).patch is not None


def test_speculation_bounds_the_fan_out_and_fixes_the_distillers_scope() -> None:
    s = _build({"quorum": 2}, GraphPatch().add(TaskSpec(task_id="plan", skill="plan")), {"plan"})
    _set(s, "plan", TaskState.SUCCEEDED, {"angles": []})

    def research(*ids: str) -> str:
        return json.dumps(
            [
                {"op": "add", "task_id": t, "skill": "research", "input": {"angle": a, "delay": 0}}
                for t, a in zip(ids, ["cost", "risk", "speed", "x"], strict=False)
            ]
        )

    assert judge(research("r1"), s, SPEC).reason == "fan_out"  # below the quorum of 2
    assert judge(research("r1", "r4"), s, SPEC).reason == "naming"  # the run has 3
    assert judge(research("x1", "x2"), s, SPEC).reason == "naming"
    leaky = [
        {"op": "add", "task_id": "distill", "skill": "distill", "input": {"quorum": 2, "delay": 0}},
    ]
    assert judge(json.dumps(leaky), s, SPEC).reason == "evidence_scope"
    # the model's own choice inside the bounds: two researchers on angles it picked
    assert judge(research("r1", "r2"), s, SPEC).patch is not None
    # and doing nothing where the rules act is not a choice
    rules = GraphPatch().add(TaskSpec(task_id="r1", skill="research", input={"angle": "a"}))
    assert judge("[]", s, SPEC, fallback=rules).reason == "idle"


STATES = {
    "lab-0": lab(0),
    "lab-1": lab(1),
    "lab-waiting": lab(1, waiting=True),
    "lab-escalated": lab(1, escalated=True),
}


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(STATES)),
    status=st.sampled_from(["succeeded", "failed", "cancelled"]),
    verdict=st.one_of(
        st.none(),
        st.integers(),
        st.dictionaries(
            st.sampled_from(["steps_done", "spent_usd", "answer"]),
            st.one_of(st.integers(0, 4), st.floats(0, 3, allow_nan=False), st.text(max_size=5)),
        ),
    ),
    cancels=st.lists(st.sampled_from(["act:2.1", "guard:2", "load"]), max_size=2, unique=True),
)
def test_a_rogue_model_never_ends_a_run_succeeded_without_the_work_nor_past_a_wait(
    name: str, status: str, verdict: Any, cancels: list[str]
) -> None:
    s = STATES[name]
    ops = [{"op": "cancel", "task_id": t} for t in cancels if TaskId(t) in s.tasks]
    ops.append({"op": "finish", "status": status, "verdict": verdict})
    got = judge(json.dumps(ops), s, LAB)
    if got.patch is None:
        assert got.reason in REASONS or got.reason in {"illegal_transition", "run_finished"}
        return
    # stopping early is the model's to choose; succeeded is not (no state has the work
    # done), nor any finish past a pending approval or an escalation
    assert status != "succeeded", (name, ops)
    assert name in ("lab-0", "lab-1"), (name, ops)


def test_with_no_postconditions_the_runtimes_rules_still_hold() -> None:
    bare = Allowlist(skills=LAB.skills, ops=LAB.ops, finish=LAB.finish)
    assert judge(finish(verdict=None), lab(1, waiting=True), bare).reason == "approval_pending"
    assert judge(finish(verdict=None), lab(1, escalated=True), bare).reason == "escalated"
    assert judge(finish(verdict=None), lab(0), bare).patch is not None  # no app rule: allowed
