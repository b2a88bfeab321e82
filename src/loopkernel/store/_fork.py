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
    EFFECT_COLUMNS,
    PATCH_COLUMNS,
    TASK_COLUMNS,
    dumps,
    patch_params,
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
            "INSERT INTO runs (run_id, app, params, status, verdict, max_events, token_hash, "
            "created_at, updated_at, trace) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    new,
                    info.app,
                    dumps(info.params),
                    state.status.value,
                    dumps(state.verdict),
                    info.max_events,
                    fork.token_hash,
                    now,
                    now,
                    fork.trace,
                )
            ],
        ),
        (
            "events",
            "INSERT INTO events (run_id, seq, kind, task_id, data, created_at) "
            "VALUES (?,?,?,?,?,?)",
            [(new, e.seq, e.kind.value, e.task_id, dumps(e.data), now) for e in fork.events],
        ),
        (
            "patches",
            f"INSERT INTO patches (run_id, {PATCH_COLUMNS}, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
            [patch_params(new, p, now) for p in fork.patches],
        ),
        (
            "approvals",
            "INSERT INTO approvals (run_id, task_id, wait_epoch, decision, event_seq) "
            "VALUES (?,?,?,?,?)",
            answers,
        ),
        (
            "tasks",
            f"INSERT INTO tasks (run_id, {TASK_COLUMNS}) VALUES (?,{','.join('?' * 13)})",
            [task_params(new, t) for t in state.tasks.values()],
        ),
        (
            "edges",
            "INSERT INTO edges (run_id, src, dst) VALUES (?,?,?)",
            [(new, s, d) for s, dsts in state.succs.items() for d in dsts],
        ),
        (
            "effects",
            f"INSERT INTO effects ({EFFECT_COLUMNS}, created_at, updated_at) "
            f"VALUES ({','.join('?' * 13)})",
            [
                (
                    new,
                    e.key,
                    e.task_id,
                    e.call_index,
                    e.tool,
                    e.effect,
                    dumps(e.arguments),
                    e.status,
                    dumps(e.result),
                    dumps(e.error),
                    e.arguments_digest,
                    now,
                    now,
                )
                for e in fork.effects
            ],
        ),
        (
            "forks",
            "INSERT INTO forks (run_id, source_run, source_seq, created_at) VALUES (?,?,?,?)",
            [(new, info.run_id, fork.at_seq, now)],
        ),
    ]
