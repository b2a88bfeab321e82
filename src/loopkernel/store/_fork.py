"""Writing a fork: one list of statements both stores run in one transaction.

A fork is a new run whose journal is another run's prefix up to and including one event
(``docs/fork.md``). The journal rows (events, patches, and the approvals its ``human_input``
events record) are copied as they are; the graph as of that event (tasks, edges,
the run's status) is computed by replaying the journal (``graph.state_at``) and written
as rows; the effects of the work that had finished by then are copied under the fork's
own idempotency keys.
"""

from __future__ import annotations

from typing import Any

from loopkernel.graph import EventKind
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
from loopkernel.store._protocol import Fork, NewRun

__all__ = ["fork_statements"]


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
                    NewRun(
                        run_id=new,
                        app=info.app,
                        params=info.params,
                        max_events=info.max_events,
                        token_hash=fork.token_hash,
                        trace=fork.trace,
                    ),
                    now,
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
