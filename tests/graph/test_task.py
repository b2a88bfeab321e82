"""``Task.evolve``: the executor's copy-with-changes, written out field by field for speed;
these pin it to the dataclass, so that a field added to ``Task`` and not to ``evolve``
fails here instead of silently vanishing from every copy."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from loopkernel.graph import Task, TaskState
from loopkernel.ids import TaskId

FULL = Task(
    task_id=TaskId("t1"),
    skill="act",
    input={"step": 1},
    evidence_scope="preds",
    state=TaskState.WAITING,
    result={"ok": True},
    error={"type": "X", "message": "m"},
    attempts=3,
    wait_reason="approve the spend",
    human_input={"approved": True},
    wait_epoch=2,
    done_seq=41,
    wake_at=1.5e9,
)


def test_evolve_takes_exactly_the_fields_of_task() -> None:
    params = inspect.signature(Task.evolve).parameters
    assert [p for p in params if p != "self"] == [f.name for f in dataclasses.fields(Task)]


def test_evolve_with_nothing_changed_is_an_equal_copy() -> None:
    copy = FULL.evolve()
    assert copy == FULL
    assert copy is not FULL


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Task)])
def test_evolve_changes_the_field_named_and_keeps_every_other(name: str) -> None:
    other = Task(task_id=TaskId("t2"), skill="verify", done_seq=None)
    value = getattr(other, name)
    assert value != getattr(FULL, name), "the fixture must differ in every field"
    changed = FULL.evolve(**{name: value})
    assert changed == dataclasses.replace(FULL, **{name: value})


def test_a_field_may_be_set_to_none() -> None:
    assert FULL.evolve(result=None, done_seq=None, wait_reason=None).result is None


def test_evolve_keeps_the_task_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        FULL.evolve(attempts=4).attempts = 5  # type: ignore[misc]


def test_delta_with_tasks_keeps_every_other_field() -> None:
    from loopkernel.graph import Delta, RunStatus

    t = Task(task_id=TaskId("a"), skill="s")
    values = {
        "tasks": (),
        "new_task_ids": frozenset({TaskId("a")}),
        "edges": ((TaskId("a"), TaskId("b")),),
        "finish": (RunStatus.SUCCEEDED, {"why": 1}),
        "cancelled_running": (TaskId("c"),),
    }
    # every field of Delta is set above to something not its default
    assert set(values) == {f.name for f in dataclasses.fields(Delta)}
    delta = Delta(**values)  # type: ignore[arg-type]
    assert delta.with_tasks((t,)) == dataclasses.replace(delta, tasks=(t,))
