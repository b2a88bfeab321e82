"""What a finished worker means for its task, and how deltas combine: pure helpers.

Every value that leaves here for the journal is redacted first (``loopkernel.evidence.
redact``: secret-looking keys and credential-shaped text become ``[redacted:HASH]``): a
worker's result (minus the paths its ``keep_secrets`` marker lists), its error, a park's
reason, and (``clean_patch``, ``clean``) a planner's patches and the kernel's verdicts.
Redaction is a pure function of the value, so a resumed run computes what an
uninterrupted one did, and digests the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import traceback
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from loopkernel.errors import BudgetExceeded, LoopKernelError, TripwireFired, family_of
from loopkernel.evidence import KEEP_SECRETS, redact, redact_text
from loopkernel.executor._context import NeedsApproval
from loopkernel.graph import JSON, Delta, EventKind, GraphPatch, Task, TaskState
from loopkernel.graph.door import Entry, ValueRefused, admit
from loopkernel.ids import TaskId

__all__ = [
    "clean",
    "clean_patch",
    "clean_patch_json",
    "event_data",
    "kept_by",
    "late_result",
    "latest",
    "merge_deltas",
    "outcome_of",
]


def clean(value: JSON, keep: Collection[str] = ()) -> JSON:
    """``value`` as the journal keeps it: redacted, minus the paths in ``keep``."""
    return redact(value, keep=keep)


def kept_by(worker: Any) -> tuple[str, ...]:
    """The result paths a worker's ``keep_secrets`` marker lists (none without one)."""
    return tuple(getattr(worker, KEEP_SECRETS, ()))


def clean_patch(patch: GraphPatch) -> GraphPatch:
    """A planner's patch as the journal keeps it: task inputs, wait reasons, resume
    payloads and verdicts redacted (the same patch when there was nothing to redact)."""
    return clean_patch_json(patch)[0]


def clean_patch_json(patch: GraphPatch) -> tuple[GraphPatch, list[dict[str, JSON]] | None]:
    """``clean_patch``, and the patch's journal form when the patch is the same (encoded
    once a step, not again for its record); ``None`` when redaction changed it."""
    ops = patch.to_json()
    kept = redact(ops)
    return (patch, ops) if kept == ops else (GraphPatch.from_json(kept), None)


def clean_proposal(proposal: Any) -> Any:
    """``clean_patch`` on a proposal's patch and its fallback."""
    inner = None if proposal.patch is None else clean_patch(proposal.patch)
    return dataclasses.replace(proposal, patch=inner, fallback=clean_patch(proposal.fallback))


def outcome_of(
    fut: asyncio.Task[JSON],
    task: Task,
    done_seq: int | None = None,
    *,
    keep: Collection[str] = (),
) -> tuple[EventKind, Task]:
    """The task's new value after its worker ended: results and errors come back as values,
    redacted (``keep``: the result paths the worker opted out for).

    ``done_seq``: the seq its event will have, when already known; a terminal task keeps it.
    """
    failed = TaskState.FAILED
    if fut.cancelled():
        error = {"type": "CancelledError", "message": "the worker was cancelled from outside"}
        return EventKind.TASK_FAILED, task.evolve(state=failed, error=error, done_seq=done_seq)
    exc = fut.exception()
    if isinstance(exc, NeedsApproval):
        return EventKind.APPROVAL_REQUIRED, task.evolve(
            state=TaskState.WAITING,
            wait_reason=redact_text(exc.reason),
            wait_epoch=task.wait_epoch + 1,
        )
    if isinstance(exc, TripwireFired | BudgetExceeded):
        # A policy stopped the work inside the task: the run escalates, not the planner's call.
        error = clean(exc.verdict())
        return EventKind.TRIPWIRE, task.evolve(state=failed, error=error, done_seq=done_seq)
    if exc is not None:
        if isinstance(exc, LoopKernelError):
            error = exc.verdict()
        else:
            error = {"type": type(exc).__name__, "message": str(exc)}
        error = clean(error)
        return EventKind.TASK_FAILED, task.evolve(state=failed, error=error, done_seq=done_seq)
    result = fut.result()
    try:  # the door: a value the journal could not keep fails the task, never the executor
        admit(result, Entry.TASK_RESULT)
    except ValueRefused as err:
        error = clean(err.verdict())
        return EventKind.TASK_FAILED, task.evolve(state=failed, error=error, done_seq=done_seq)
    result = clean(result, keep)
    succeeded = task.evolve(state=TaskState.SUCCEEDED, result=result, done_seq=done_seq)
    return EventKind.TASK_COMPLETED, succeeded


TRACEBACK_CHARS = 8192
"""The most of a failure's traceback its ``task_failed`` event keeps (the end: the frame
that raised, and the exception)."""


def traceback_of(exc: BaseException) -> str:
    """``exc``'s traceback (with its causes) as the journal keeps it: redacted, its last
    ``TRACEBACK_CHARS`` characters, valid UTF-8."""
    text = "".join(traceback.format_exception(exc))
    if len(text) > TRACEBACK_CHARS:
        text = "...\n" + text[-TRACEBACK_CHARS:]
    return redact_text(text.encode("utf-8", "replace").decode("utf-8"))


def event_data(kind: EventKind, task: Task, fut: asyncio.Task[JSON] | None = None) -> JSON:
    if kind in (EventKind.TASK_FAILED, EventKind.TRIPWIRE):
        failure: dict[str, JSON] = {"error": task.error, "attempt": task.attempts}
        # In the event only, not in the task's error: the digest stays free of paths and
        # line numbers, and the inspector shows it beside the failure.
        raised = fut.exception() if fut is not None and not fut.cancelled() else None
        if kind is EventKind.TASK_FAILED and raised is not None:
            failure["traceback"] = traceback_of(raised)
        return failure
    if kind is EventKind.APPROVAL_REQUIRED:
        data: dict[str, JSON] = {"reason": task.wait_reason, "wait_epoch": task.wait_epoch}
        asked = fut.exception() if fut is not None and not fut.cancelled() else None
        if isinstance(asked, NeedsApproval) and asked.call is not None:
            # the call that waits, as the effect journal keeps arguments (redacted)
            data["call"] = dict(asked.call)
        return data
    return {"attempt": task.attempts}


def late_result(fut: asyncio.Task[JSON]) -> JSON:
    """What a cancelled task still produced, as the journal keeps it: never the value."""
    if fut.cancelled():
        return None
    exc = fut.exception()
    if exc is not None:
        return {"outcome": "error", "type": family_of(exc)}
    text = json.dumps(fut.result(), sort_keys=True, default=repr)
    return {
        "outcome": "result",
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "bytes": len(text),
    }


def latest(tasks: Iterable[Task]) -> tuple[Task, ...]:
    """One value per task id, the last one given."""
    return tuple({t.task_id: t for t in tasks}.values())


def merge_deltas(deltas: Sequence[Delta]) -> Delta:
    if len(deltas) == 1:
        return deltas[0]
    tasks: dict[TaskId, Task] = {}
    new_ids: set[TaskId] = set()
    edges: list[tuple[TaskId, TaskId]] = []
    cancelled: list[TaskId] = []
    finish = None
    for d in deltas:
        for t in d.tasks:
            tasks[t.task_id] = t
        new_ids |= d.new_task_ids
        edges.extend(d.edges)
        cancelled.extend(d.cancelled_running)
        finish = d.finish or finish
    return Delta(
        tasks=tuple(tasks.values()),
        new_task_ids=frozenset(new_ids),
        edges=tuple(edges),
        finish=finish,
        cancelled_running=tuple(cancelled),
    )
