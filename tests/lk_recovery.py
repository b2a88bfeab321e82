"""What a crash test checks after the resume, beyond the digest (which leaves attempt
counts out): from the execution trace and the journal, that no work ran again that the
crash had already settled, and that nothing was journaled after ``run_finished``.

    crash = at_crash(db, RUN)                 # right after the SIGKILL
    ... resume with LOOPKERNEL_TRACE=<a fresh file> ...
    assert_no_rerun(db, RUN, crash, read_trace(crash_trace, missing_ok=True),
                    read_trace(resume_trace, missing_ok=True))

"Settled at the crash" means: terminal in the store (succeeded, failed, cancelled), or
cancelled by the patch the resume writes for an event the crash left unplanned (that
patch was the crashed process's decision too: planning is deterministic). Such a task
starts 0 more times. A task left ``running`` may start once more (at-least-once at the
task boundary); any other task at most once.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True, kw_only=True)
class AtCrash:
    states: dict[str, str]
    attempts: dict[str, int]
    planned: frozenset[int]
    last_seq: int


def _rows(db: Path, query: str, *args: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


def at_crash(db: Path, run: str) -> AtCrash:
    """The store as the SIGKILL left it."""
    tasks = _rows(db, "SELECT task_id, state, attempts FROM tasks WHERE run_id = ?", run)
    planned = _rows(db, "SELECT event_seq FROM patches WHERE run_id = ?", run)
    (last,) = _rows(db, "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?", run)
    return AtCrash(
        states={str(t): str(s) for t, s, _ in tasks},
        attempts={str(t): int(a) for t, _, a in tasks},
        planned=frozenset(int(s) for (s,) in planned),
        last_seq=int(last[0]),
    )


def starts(trace: Counter[tuple[str, str]]) -> Counter[str]:
    return Counter({tid: n for (what, tid), n in trace.items() if what == "start"})


def assert_journal_ends_at_run_finished(db: Path, run: str) -> None:
    """One ``run_finished``, the last event; every other event has exactly one patch."""
    kinds = _rows(db, "SELECT seq, kind FROM events WHERE run_id = ? ORDER BY seq", run)
    finished = [seq for seq, kind in kinds if kind == "run_finished"]
    assert len(finished) == 1, f"run_finished {len(finished)} times: {kinds}"
    after = [(seq, kind) for seq, kind in kinds if seq > finished[0]]
    assert not after, f"journaled after run_finished (seq {finished[0]}): {after}"
    events = [seq for seq, kind in kinds if kind != "run_finished"]
    patches = [
        seq
        for (seq,) in _rows(db, "SELECT event_seq FROM patches WHERE run_id = ? ORDER BY 1", run)
    ]
    assert patches == events, "each event but run_finished is planned exactly once"


def cancelled_by_recovery(db: Path, run: str, crash: AtCrash) -> tuple[set[str], bool]:
    """Tasks the patches for events the crash left unplanned cancel; and whether one of
    those patches finished the run (then nothing may start at all)."""
    cancelled: set[str] = set()
    finished = False
    for seq, ops in _rows(db, "SELECT event_seq, ops FROM patches WHERE run_id = ?", run):
        if seq in crash.planned or int(seq) > crash.last_seq:
            continue
        for op in json.loads(str(ops)):
            if op["op"] == "cancel":
                cancelled.add(str(op["task_id"]))
            finished = finished or op["op"] == "finish"
    return cancelled, finished


def assert_no_rerun(
    db: Path,
    run: str,
    crash: AtCrash,
    crashed: Counter[tuple[str, str]],
    resumed: Counter[tuple[str, str]],
) -> None:
    """The resume started nothing the crash had settled; trace and journal agree.

    ``crashed`` and ``resumed`` are the traces of the two processes. Every task that
    succeeded must show a start in one of them, so a trace that lost its lines fails here
    instead of making the checks vacuous.
    """
    assert_journal_ends_at_run_finished(db, run)
    ran, total = starts(resumed), starts(crashed) + starts(resumed)
    succeeded = {
        t
        for (t,) in _rows(
            db, "SELECT task_id FROM tasks WHERE run_id = ? AND state = 'succeeded'", run
        )
    }
    silent = sorted(t for t in succeeded if total[t] == 0)
    assert succeeded and not silent, f"succeeded without a start in the trace: {silent}"
    cancelled, finished = cancelled_by_recovery(db, run, crash)
    if finished:
        assert not ran, f"the recovery patch finished the run, yet tasks started: {dict(ran)}"
    final = {
        str(t): int(a)
        for t, a in _rows(db, "SELECT task_id, attempts FROM tasks WHERE run_id = ?", run)
    }
    assert set(ran) <= set(final), f"the trace names tasks the journal lacks: {dict(ran)}"
    for tid, attempts in final.items():
        state = crash.states.get(tid)
        more = attempts - crash.attempts.get(tid, 0)
        why = (
            f"{tid}: {state or 'absent'} at the crash, {ran[tid]} start(s) after, attempts +{more}"
        )
        if state in TERMINAL or tid in cancelled:
            assert ran[tid] == 0 and more == 0, f"settled work ran again: {why}"
        else:
            assert ran[tid] <= 1 and more <= 1, f"ran more than once after the crash: {why}"
        assert ran[tid] <= more, f"a start the journal did not count: {why}"
        assert total[tid] <= attempts, f"{tid}: {total[tid]} starts, {attempts} attempts"
