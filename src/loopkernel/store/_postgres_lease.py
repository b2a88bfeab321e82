"""PostgreSQL statements for leases (``docs/workers.md``), run inside ``PostgresStore``'s
transactions.

A claim is one statement: ``UPDATE ... WHERE run_id = (SELECT ... FOR UPDATE SKIP
LOCKED)``, so claimers never wait for each other and never get the same run. A fenced
write compares the epoch while it holds the run's row lock (``_lock_run``), and a claim
must take that lock to bump the epoch: the two are ordered, whichever comes first.
Lease times are the server's clock (``clock_timestamp()``), so machines whose clocks
disagree still agree on when a lease ends. Whatever makes a run claimable sends
``NOTIFY loopkernel_runnable`` with its id, delivered when the transaction commits.
"""

from __future__ import annotations

import asyncio

import psycopg

from loopkernel.ids import RunId
from loopkernel.store._lease import CHANNEL, LOCAL, QUEUED, Holder, run_held, unplanned_kinds
from loopkernel.store._postgres_db import Conn, fetch_one
from loopkernel.store._protocol import Claim

__all__ = [
    "JOURNAL_CHANNEL",
    "Listener",
    "acquire",
    "claim",
    "enqueue",
    "extend",
    "notify",
    "release",
    "wake",
]

JOURNAL_CHANNEL = "loopkernel_journal"
"""Notified with the run id by every commit that appends to a run's journal."""

NOW = "extract(epoch FROM clock_timestamp())::double precision"
"""The server's time in seconds since the epoch, as ``lease_until`` holds it."""

_WAKE = (
    "WITH woken AS (UPDATE runs SET status = 'running', updated_at = %s WHERE run_id = %s "
    "AND status = 'waiting' AND lease_until IS NOT NULL AND EXISTS (SELECT 1 FROM events e "
    "WHERE e.run_id = runs.run_id AND e.seq > (SELECT COALESCE(MAX(p.event_seq), 0) "
    "FROM patches p WHERE p.run_id = runs.run_id) AND e.kind <> ALL(%s)) RETURNING run_id) "
    f"SELECT pg_notify('{CHANNEL}', run_id) FROM woken"
)


async def notify(conn: Conn, run_id: RunId) -> None:
    """Tell listening workers (at commit) that ``run_id`` may be claimable."""
    await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, run_id))


async def wake(conn: Conn, run_id: RunId, now: float) -> None:
    """An enqueued ``waiting`` run with an event no patch answers yet (human input, a
    cancel request) becomes ``running`` -- claimable -- and workers are told."""
    await conn.execute(_WAKE, (now, run_id, list(unplanned_kinds())))


async def enqueue(conn: Conn, run_id: RunId, now: float) -> None:
    """Under the run's row lock: mark it enqueued, wake it if answered, tell workers."""
    row = await fetch_one(
        conn,
        "UPDATE runs SET lease_until = COALESCE(lease_until, 0) WHERE run_id = %s RETURNING status",
        (run_id,),
    )
    if row is not None and row[0] == "waiting":
        await wake(conn, run_id, now)
    elif row is not None:
        await notify(conn, run_id)


async def claim(conn: Conn, worker_id: str, lease_seconds: float) -> Claim | None:
    row = await fetch_one(
        conn,
        f"UPDATE runs SET owner = %s, lease_epoch = lease_epoch + 1, lease_until = {NOW} + %s "
        "WHERE run_id = (SELECT run_id FROM runs WHERE status = 'running' "
        f"AND lease_until IS NOT NULL AND lease_until <= {NOW} "
        f"AND (owner IS NULL OR owner NOT LIKE '{LOCAL}%%') "
        "ORDER BY created_at, run_id LIMIT 1 FOR UPDATE SKIP LOCKED) "
        "RETURNING run_id, lease_epoch",
        (worker_id, lease_seconds),
    )
    if row is None:
        return None
    return Claim(run_id=RunId(row[0]), epoch=int(row[1]), owner=worker_id)


async def acquire(
    conn: Conn, run_id: RunId, holder: Holder, lease_seconds: float, takeover: int | None
) -> Claim | None:
    """Under the run's row lock (the caller's ``_lock_run``): take its lease if it is free
    or run out (or still at epoch ``takeover``: its holder is known dead); ``RunHeld`` if
    someone else holds it."""
    row = await fetch_one(
        conn,
        f"UPDATE runs SET owner = CASE WHEN lease_until IS NULL OR owner LIKE '{LOCAL}%%' "
        f"THEN %s ELSE %s END, lease_epoch = lease_epoch + 1, lease_until = {NOW} + %s "
        f"WHERE run_id = %s AND (lease_until IS NULL OR lease_until <= {NOW} "
        "OR lease_epoch = %s) RETURNING lease_epoch, owner",
        (
            holder.owner(LOCAL),
            holder.owner(QUEUED),
            lease_seconds,
            run_id,
            -1 if takeover is None else takeover,
        ),
    )
    if row is not None:
        return Claim(run_id=run_id, epoch=int(row[0]), owner=str(row[1]))
    held = await fetch_one(
        conn,
        f"SELECT owner, lease_until, lease_epoch, {NOW} FROM runs WHERE run_id = %s",
        (run_id,),
    )
    if held is None:
        return None
    raise run_held(run_id, held[0], held[1], int(held[2]), float(held[3]))


async def extend(conn: Conn, run_id: RunId, epoch: int, lease_seconds: float) -> bool:
    """Push the lease's end to ``lease_seconds`` from now; False if ``epoch`` is not the run's."""
    cur = await conn.execute(
        f"UPDATE runs SET lease_until = {NOW} + %s WHERE run_id = %s AND lease_epoch = %s",
        (lease_seconds, run_id, epoch),
    )
    return cur.rowcount == 1


async def release(conn: Conn, run_id: RunId, epoch: int, now: float) -> bool:
    row = await fetch_one(
        conn,
        "UPDATE runs SET owner = NULL, lease_epoch = lease_epoch + 1, "
        f"lease_until = CASE WHEN owner LIKE '{LOCAL}%%' THEN NULL ELSE 0 END "
        "WHERE run_id = %s AND lease_epoch = %s RETURNING status",
        (run_id, epoch),
    )
    if row is None:
        return False
    if row[0] == "waiting":
        await wake(conn, run_id, now)
    elif row[0] == "running":
        await notify(conn, run_id)
    return True


class Listener:
    """``LISTEN channel`` (``loopkernel_runnable`` unless told) on a connection of its own,
    opened at the first wait.

    Notifications that arrive between two waits are kept by the connection (psycopg 3.2.4
    and later queue them while ``notifies()`` is not running), so a worker that checks for
    work and then waits misses none. If the connection cannot be had or breaks, what was
    notified meanwhile is lost: the wait then returns after a short pause (doubling from
    ``RETRY_SECONDS`` up to ``seconds`` while it keeps failing), so the caller looks for
    work itself instead of sleeping out a long poll interval, and the next wait listens
    again.
    """

    RETRY_SECONDS = 0.5

    def __init__(self, url: str, channel: str = CHANNEL) -> None:
        self.url = url
        self.channel = channel
        self._conn: Conn | None = None
        self._failures = 0

    async def wait(self, seconds: float) -> None:
        """Until a notification arrives, at most ``seconds``."""
        conn = self._conn
        if conn is None or conn.closed:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=5
                )
                await conn.execute(f"LISTEN {self.channel}")
            except psycopg.Error:
                await self._pause(seconds)
                return
            self._conn = conn
            if self._failures:  # listening again: look for what was notified meanwhile
                self._failures = 0
                return
        try:
            async for _ in conn.notifies(timeout=seconds, stop_after=1):
                pass
        except psycopg.Error:
            await self.close()
            await self._pause(seconds)

    async def _pause(self, seconds: float) -> None:
        self._failures += 1
        await asyncio.sleep(min(seconds, self.RETRY_SECONDS * 2 ** min(self._failures - 1, 10)))

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
