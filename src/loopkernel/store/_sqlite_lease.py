"""SQLite statements for leases (``docs/workers.md``), run inside ``SQLiteStore._tx``.

``BEGIN IMMEDIATE`` takes the database's one write lock, so a claim, a heartbeat and a
fenced write never interleave: what ``SKIP LOCKED`` and the run's row lock do on
PostgreSQL, the single writer does here. Times are this machine's ``time.time()``.
"""

from __future__ import annotations

import sqlite3
import time

from loopkernel.ids import RunId
from loopkernel.store._lease import LOCAL, QUEUED, Holder, run_held, unplanned_kinds
from loopkernel.store._protocol import Claim

__all__ = ["acquire", "claim", "enqueue", "extend", "lease_of", "release", "wake"]

_UNPLANNED = unplanned_kinds()
_WAKE = (
    "UPDATE runs SET status = 'running', updated_at = ? WHERE run_id = ? "
    "AND status = 'waiting' AND lease_until IS NOT NULL AND EXISTS (SELECT 1 FROM events e "
    "WHERE e.run_id = runs.run_id AND e.seq > (SELECT COALESCE(MAX(p.event_seq), 0) "
    "FROM patches p WHERE p.run_id = runs.run_id) "
    f"AND e.kind NOT IN ({', '.join('?' for _ in _UNPLANNED)}))"
)


def wake(db: sqlite3.Connection, run_id: RunId) -> None:
    """An enqueued ``waiting`` run with an event no patch answers yet (human input, a
    cancel request) becomes ``running``: claimable."""
    db.execute(_WAKE, (time.time(), run_id, *_UNPLANNED))


def lease_of(db: sqlite3.Connection, run_id: RunId) -> tuple[int, str | None] | None:
    """The run's ``(lease_epoch, owner)``, or ``None`` if there is no such run."""
    row = db.execute("SELECT lease_epoch, owner FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else (int(row[0]), row[1])


def enqueue(db: sqlite3.Connection, run_id: RunId) -> None:
    db.execute(
        "UPDATE runs SET lease_until = 0 WHERE run_id = ? AND lease_until IS NULL", (run_id,)
    )
    wake(db, run_id)


def claim(db: sqlite3.Connection, worker_id: str, lease_seconds: float) -> Claim | None:
    now = time.time()
    row = db.execute(
        "UPDATE runs SET owner = ?, lease_epoch = lease_epoch + 1, lease_until = ? "
        "WHERE run_id = (SELECT run_id FROM runs WHERE status = 'running' "
        "AND lease_until IS NOT NULL AND lease_until <= ? "
        f"AND (owner IS NULL OR owner NOT LIKE '{LOCAL}%') "
        "ORDER BY created_at, run_id LIMIT 1) RETURNING run_id, lease_epoch",
        (worker_id, now + lease_seconds, now),
    ).fetchone()
    if row is None:
        return None
    return Claim(run_id=RunId(row[0]), epoch=int(row[1]), owner=worker_id)


def acquire(
    db: sqlite3.Connection,
    run_id: RunId,
    holder: Holder,
    lease_seconds: float,
    takeover: int | None,
) -> Claim | None:
    """Take the lease of ``run_id`` if it is free or run out (or still at epoch
    ``takeover``: its holder is known dead); ``RunHeld`` if someone else holds it, ``None``
    if there is no such run."""
    now = time.time()
    row = db.execute(
        f"UPDATE runs SET owner = CASE WHEN lease_until IS NULL OR owner LIKE '{LOCAL}%' "
        "THEN ? ELSE ? END, lease_epoch = lease_epoch + 1, lease_until = ? "
        "WHERE run_id = ? AND (lease_until IS NULL OR lease_until <= ? OR lease_epoch = ?) "
        "RETURNING lease_epoch, owner",
        (
            holder.owner(LOCAL),
            holder.owner(QUEUED),
            now + lease_seconds,
            run_id,
            now,
            -1 if takeover is None else takeover,
        ),
    ).fetchone()
    if row is not None:
        return Claim(run_id=run_id, epoch=int(row[0]), owner=str(row[1]))
    held = db.execute(
        "SELECT owner, lease_until, lease_epoch FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if held is None:
        return None
    raise run_held(run_id, held[0], held[1], int(held[2]), now)


def extend(db: sqlite3.Connection, run_id: RunId, epoch: int, lease_seconds: float) -> bool:
    """Push the lease's end to ``lease_seconds`` from now; False if ``epoch`` is not the run's."""
    cur = db.execute(
        "UPDATE runs SET lease_until = ? WHERE run_id = ? AND lease_epoch = ?",
        (time.time() + lease_seconds, run_id, epoch),
    )
    return cur.rowcount == 1


def release(db: sqlite3.Connection, run_id: RunId, epoch: int) -> bool:
    cur = db.execute(
        "UPDATE runs SET owner = NULL, lease_epoch = lease_epoch + 1, "
        f"lease_until = CASE WHEN owner LIKE '{LOCAL}%' THEN NULL ELSE 0 END "
        "WHERE run_id = ? AND lease_epoch = ?",
        (run_id, epoch),
    )
    if cur.rowcount != 1:
        return False
    wake(db, run_id)
    return True
