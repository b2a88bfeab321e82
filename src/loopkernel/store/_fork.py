"""Writing a fork: one list of statements both stores run in one transaction.

A fork is a new run whose journal is another run's prefix up to and including one event
(``docs/fork.md``). The journal rows (events, patches, and the approvals its ``human_input``
events record) are copied as they are; the graph as of that event (tasks, edges,
the run's status) is computed by replaying the journal (``graph.state_at``) and written
as rows; the effects of the work that had finished by then are copied under the fork's
own idempotency keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopkernel.graph import Event, EventKind, GraphState
from loopkernel.ids import RunId
from loopkernel.store._codec import (
    INSERT_APPROVAL,
    INSERT_EDGE,
    INSERT_EFFECT,
    INSERT_EVENT,
    INSERT_PATCH,
    INSERT_RUN,
    INSERT_TASK,
    dumps,
    effect_row,
    patch_params,
    run_params,
    task_params,
)
from loopkernel.store._protocol import EffectRecord, PatchRecord, RunInfo

__all__ = ["Fork", "fork_statements"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Fork:
    """What ``Store.fork_run`` writes, all of it read from the source beforehand, so the
    fork is exactly the prefix that was replayed even if the source is still running."""

    source: RunInfo
    """The run forked from."""
    at_seq: int
    """The last event of the source the fork keeps."""
    run_id: RunId
    """The new run."""
    token_hash: str
    """SHA-256 of the fork's own approval token."""
    events: tuple[Event, ...]
    """The source's events up to ``at_seq``."""
    patches: tuple[PatchRecord, ...]
    """Their patches (an event a crash left unplanned stays unplanned)."""
    state: GraphState
    """The graph as of ``at_seq``, with the status the fork starts in."""
    effects: tuple[EffectRecord, ...]
    """The source's finished effects the fork keeps, already under the fork's keys."""
    trace: str | None = None
    """The ``traceparent`` of the fork's run span (linked to its source's), when traced."""


Statement = tuple[str, str, list[tuple[Any, ...]]]


def fork_statements(fork: Fork, now: float) -> list[Statement]:
    """``(table, sql, rows)`` in ``?`` style, to run in order in one transaction: one for
    each table of ``TABLES`` whose ``fork`` says it is written (a test checks)."""
    new, state, info = fork.run_id, fork.state, fork.source
    answers = [
        (new, e.task_id, e.data["wait_epoch"], e.data["decision"], e.seq)
        for e in fork.events
        if e.kind is EventKind.HUMAN_INPUT and isinstance(e.data, dict)
    ]
    return [
        (
            "runs",
            INSERT_RUN,
            [
                run_params(
                    new,
                    info.app,
                    info.params,
                    info.max_events,
                    fork.token_hash,
                    now,
                    fork.trace,
                    status=state.status,
                    verdict=state.verdict,
                )
            ],
        ),
        (
            "events",
            INSERT_EVENT,
            [(new, e.seq, e.kind.value, e.task_id, dumps(e.data), now) for e in fork.events],
        ),
        ("patches", INSERT_PATCH, [patch_params(new, p, now) for p in fork.patches]),
        ("approvals", INSERT_APPROVAL, answers),
        ("tasks", INSERT_TASK, [task_params(new, t) for t in state.tasks.values()]),
        ("edges", INSERT_EDGE, [(new, s, d) for s, dsts in state.succs.items() for d in dsts]),
        ("effects", INSERT_EFFECT, [effect_row(new, e, now) for e in fork.effects]),
        (
            "forks",
            "INSERT INTO forks (run_id, source_run, source_seq, created_at) VALUES (?,?,?,?)",
            [(new, info.run_id, fork.at_seq, now)],
        ),
    ]
