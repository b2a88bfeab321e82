"""Each validation rule rejects a patch whole, naming the op and the rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loopkernel import GraphPatch, PatchRejected, TaskSpec, TaskState, UsageError
from loopkernel.graph import GraphState, validate
from loopkernel.ids import RunId, TaskId

SKILLS = {"work"}


def spec(tid: str, skill: str = "work", **kw: object) -> TaskSpec:
    return TaskSpec(task_id=TaskId(tid), skill=skill, **kw)  # type: ignore[arg-type]


def state_with(*patches: GraphPatch) -> GraphState:
    state = GraphState(run_id=RunId("r"), app="t", params=None)
    for patch in patches:
        state.apply(validate(state, patch, SKILLS))
    return state


def set_state(state: GraphState, tid: str, new: TaskState) -> None:
    state.tasks[TaskId(tid)] = replace(state.tasks[TaskId(tid)], state=new)


def rule_of(state: GraphState, patch: GraphPatch) -> tuple[int, str]:
    with pytest.raises(PatchRejected) as info:
        validate(state, patch, SKILLS)
    return info.value.attrs["op"], info.value.attrs["rule"]


def test_add_promotes_a_root_to_ready_and_a_dependent_stays_pending() -> None:
    state = state_with(GraphPatch().add(spec("a")).add(spec("b"), after=["a"]))
    assert state.task("a").state is TaskState.READY
    assert state.task("b").state is TaskState.PENDING
    assert state.predecessors("b") == ["a"]


def test_duplicate_task_is_rejected() -> None:
    state = state_with(GraphPatch().add(spec("a")))
    assert rule_of(state, GraphPatch().add(spec("b")).add(spec("a"))) == (1, "duplicate_task")


def test_unknown_task_is_rejected() -> None:
    assert rule_of(state_with(), GraphPatch().cancel("ghost")) == (0, "unknown_task")
    assert rule_of(state_with(GraphPatch().add(spec("a"))), GraphPatch().connect("a", "x")) == (
        0,
        "unknown_task",
    )


def test_unknown_skill_is_rejected_at_validation_not_at_run_time() -> None:
    with pytest.raises(PatchRejected, match="not in the worker registry") as info:
        validate(state_with(), GraphPatch().add(spec("a", skill="rm_rf")), SKILLS)
    assert info.value.attrs["rule"] == "unknown_skill"


def test_an_edge_that_closes_a_cycle_rejects_the_whole_patch() -> None:
    state = state_with(GraphPatch().add(spec("a")).add(spec("b"), after=["a"]))
    state.tasks[TaskId("a")] = replace(state.task("a"), state=TaskState.PENDING)
    patch = GraphPatch().add(spec("c"), after=["b"]).connect("c", "a")
    assert rule_of(state, patch) == (2, "cycle")
    assert "c" not in state.tasks  # nothing of the patch was applied
    assert rule_of(state, GraphPatch().connect("a", "a")) == (0, "cycle")


def test_resuming_a_task_that_is_not_waiting_is_rejected() -> None:
    state = state_with(GraphPatch().add(spec("a")))
    assert rule_of(state, GraphPatch().resume("a")) == (0, "not_waiting")


@pytest.mark.parametrize("terminal", [TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED])
def test_a_terminal_task_never_changes(terminal: TaskState) -> None:
    state = state_with(GraphPatch().add(spec("a")))
    set_state(state, "a", terminal)
    assert rule_of(state, GraphPatch().cancel("a")) == (0, "illegal_transition")
    assert rule_of(state, GraphPatch().wait("a", "why")) == (0, "illegal_transition")


def test_a_patch_cannot_park_a_running_task() -> None:
    state = state_with(GraphPatch().add(spec("a")))
    set_state(state, "a", TaskState.RUNNING)
    assert rule_of(state, GraphPatch().wait("a", "why")) == (0, "illegal_transition")


def test_connect_into_a_started_task_or_from_a_dead_one_is_rejected() -> None:
    state = state_with(GraphPatch().add(spec("a")).add(spec("b")).add(spec("c")))
    set_state(state, "b", TaskState.RUNNING)
    assert rule_of(state, GraphPatch().connect("a", "b")) == (0, "dst_started")
    set_state(state, "a", TaskState.FAILED)
    assert rule_of(state, GraphPatch().connect("a", "c")) == (0, "dead_predecessor")


def test_duplicate_edge_is_rejected() -> None:
    state = state_with(GraphPatch().add(spec("a")).add(spec("b"), after=["a"]))
    assert rule_of(state, GraphPatch().connect("a", "b")) == (0, "duplicate_edge")


def test_nothing_follows_finish_and_a_finished_run_takes_no_patch() -> None:
    state = state_with(GraphPatch().add(spec("a")))
    assert rule_of(state, GraphPatch().finish("succeeded").add(spec("b"))) == (1, "after_finish")
    state.apply(validate(state, GraphPatch().finish("succeeded"), SKILLS))
    assert state.task("a").state is TaskState.CANCELLED  # finish cancels what is left
    assert rule_of(state, GraphPatch().add(spec("b"))) == (0, "run_finished")
    assert validate(state, GraphPatch(), SKILLS).tasks == ()  # the empty patch is always fine


def test_non_json_input_is_rejected() -> None:
    assert rule_of(state_with(), GraphPatch().add(spec("a", input={"x": object()}))) == (
        0,
        "input_not_json",
    )


def test_wait_then_resume_round_trip_counts_epochs() -> None:
    state = state_with(GraphPatch().add(spec("a")), GraphPatch().wait("a", "needs a human"))
    task = state.task("a")
    assert (task.state, task.wait_reason, task.wait_epoch) == (
        TaskState.WAITING,
        "needs a human",
        1,
    )
    state.apply(validate(state, GraphPatch().resume("a", {"ok": True}), SKILLS))
    assert state.task("a").state is TaskState.READY
    assert state.task("a").human_input == {"ok": True}


def test_cancel_of_a_running_task_is_reported_for_in_flight_cancellation() -> None:
    state = state_with(GraphPatch().add(spec("a")))
    set_state(state, "a", TaskState.RUNNING)
    delta = validate(state, GraphPatch().cancel("a"), SKILLS)
    assert delta.cancelled_running == ("a",)


def test_journal_form_round_trips_and_is_parsed_strictly() -> None:
    patch = (
        GraphPatch()
        .add(spec("a", input={"k": [1, 2]}, evidence_scope="ancestors"))
        .add(spec("b"), after=["a"])
        .wait("b", "why")
        .resume("b", {"p": 1})
        .cancel("a")
        .finish("escalated", {"kind": "tripwire"})
    )
    assert GraphPatch.from_json(patch.to_json()) == patch
    with pytest.raises(UsageError, match="unknown fields"):
        GraphPatch.from_json([{"op": "cancel", "task_id": "a", "force": True}])
    with pytest.raises(UsageError, match="not terminal"):
        GraphPatch.from_json([{"op": "finish", "status": "running"}])
    with pytest.raises(UsageError, match="expected an object"):
        GraphPatch.from_json([{"op": "explode"}])
