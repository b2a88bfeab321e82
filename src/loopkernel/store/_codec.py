"""Row <-> value conversion and the canonical digest, shared by every store."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from loopkernel.graph import JSON, Event, EventKind, Task, TaskState
from loopkernel.ids import RunId, TaskId

__all__ = ["canonical", "digest_of", "dumps", "event_from_row", "loads", "task_from_row"]


def dumps(value: JSON) -> str:
    """Canonical JSON text: sorted keys, no spaces, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def loads(text: str | None) -> JSON:
    return None if text is None else json.loads(text)


canonical = dumps


def task_from_row(row: Any) -> Task:
    """Row order: task_id, skill, input, evidence_scope, state, result, error, attempts,
    wait_reason, human_input, wait_epoch, done_seq."""
    return Task(
        task_id=TaskId(row[0]),
        skill=row[1],
        input=loads(row[2]),
        evidence_scope=row[3],
        state=TaskState(row[4]),
        result=loads(row[5]),
        error=loads(row[6]),
        attempts=row[7],
        wait_reason=row[8],
        human_input=loads(row[9]),
        wait_epoch=row[10],
        done_seq=row[11],
    )


TASK_COLUMNS = (
    "task_id, skill, input, evidence_scope, state, result, error, attempts, "
    "wait_reason, human_input, wait_epoch, done_seq"
)


def task_params(run_id: RunId, task: Task) -> tuple[Any, ...]:
    return (
        run_id,
        task.task_id,
        task.skill,
        dumps(task.input),
        task.evidence_scope,
        task.state.value,
        dumps(task.result),
        dumps(task.error),
        task.attempts,
        task.wait_reason,
        dumps(task.human_input),
        task.wait_epoch,
        task.done_seq,
    )


def event_from_row(run_id: RunId, row: Any) -> Event:
    """Row order: seq, kind, task_id, data."""
    return Event(
        run_id=run_id,
        seq=row[0],
        kind=EventKind(row[1]),
        task_id=None if row[2] is None else TaskId(row[2]),
        data=loads(row[3]),
    )


def digest_of(dump: dict[str, JSON]) -> str:
    """The state digest: sha256 of the canonical JSON of a store's ``dump``."""
    return hashlib.sha256(dumps(dump).encode()).hexdigest()
