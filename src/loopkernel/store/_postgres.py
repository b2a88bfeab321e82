"""The PostgreSQL store: SQLite's tables and rules, for many processes on many machines.

Every method is one transaction on a connection from a psycopg ``AsyncConnectionPool``
(autocommit connections; ``conn.transaction()`` is the transaction). Writes that touch a
run first lock its row (``SELECT ... FOR UPDATE``): that serializes, per run, what
SQLite's one writer serializes for the whole file -- seq allocation above all -- while
different runs commit in parallel. The executor's step (``commit_step``) is one
statement, a call of the server function ``loopkernel_commit_step`` (schema 7) that does
the same in the same order: one round trip instead of five. Multi-statement reads
(``load_run``, ``dump``) run in one ``REPEATABLE READ`` snapshot.

Durability mirrors SQLite's: ``append_events`` commits with ``synchronous_commit = off``
(the WAL is ordered, so the synchronous patch commit that follows flushes both); every
other write waits for its WAL flush. A client crash loses nothing; a server crash may
lose the last events, which is a crash just before them.

Workers: ``_postgres_lease`` holds the lease statements; a fenced view
(``fenced(run_id, epoch)``) compares the run's lease epoch while it holds the row lock.

Only this module (and its ``_postgres_*`` helpers) imports psycopg: ``import
loopkernel.store`` does not.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import psycopg
from psycopg import sql as pgsql
from psycopg.errors import IdleInTransactionSessionTimeout, UniqueViolation
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from loopkernel.errors import (
    ApprovalRefused,
    ReplayDivergence,
    RunNotFound,
    StoreUnavailable,
    UsageError,
)
from loopkernel.evidence import Evidence, NewEvidence
from loopkernel.graph import (
    JSON,
    TERMINAL_RUN,
    Delta,
    Event,
    EventKind,
    GraphState,
    RunStatus,
    Task,
)
from loopkernel.ids import RunId, TaskId
from loopkernel.store import _postgres_lease as _lease
from loopkernel.store._codec import (
    DUMP_EFFECT_COLUMNS,
    DUMP_TASK_COLUMNS,
    EFFECT_COLUMNS,
    EVIDENCE_COLUMNS,
    PATCH_COLUMNS,
    RUN_COLUMNS,
    TASK_COLUMNS,
    check_decision,
    dump_of,
    dumps,
    effect_from_row,
    effect_params,
    event_from_row,
    evidence_from_row,
    evidence_params,
    human_input_event,
    loads,
    patch_from_row,
    run_info_from_row,
    run_page_filter,
    run_params,
    task_from_row,
    task_params,
    waiting_epoch,
    with_done_seq,
)
from loopkernel.store._fork import Fork, fork_statements
from loopkernel.store._lease import Fence, Holder, check_lease_seconds, run_held
from loopkernel.store._postgres_db import (
    Conn,
    configure,
    connect,
    execute_many,
    fetch_each,
    fetch_one,
    fetch_rows,
    open_pool,
    redact,
)
from loopkernel.store._postgres_lease import JOURNAL_CHANNEL, Listener
from loopkernel.store._postgres_schema import LEASE_LOST, NO_RUN, migrate
from loopkernel.store._protocol import (
    Claim,
    EffectRecord,
    LoadedRun,
    NewEvent,
    PatchRecord,
    RunInfo,
)

__all__ = ["PostgresStore"]

_UPSERT_TASK = (
    f"INSERT INTO tasks (run_id, {TASK_COLUMNS}) "
    "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
    "ON CONFLICT (run_id, task_id) DO UPDATE SET state=excluded.state, "
    "result=excluded.result, error=excluded.error, attempts=excluded.attempts, "
    "wait_reason=excluded.wait_reason, human_input=excluded.human_input, "
    "wait_epoch=excluded.wait_epoch, done_seq=excluded.done_seq"
)
_COMMIT_STEP = "SELECT loopkernel_commit_step(%s, %s, %s, %s::jsonb)"
"""``commit_step`` as one statement: the run, the fence's epoch (or NULL), the time, and
the step's rows as one JSON document (``_step_json``), parsed once on the server."""
_EDGES = "SELECT src, dst FROM edges WHERE run_id = %s ORDER BY src, dst"
_EFFECT = f"SELECT {EFFECT_COLUMNS} FROM effects WHERE run_id = %s AND idem_key = %s"
_EVIDENCE_BY_KEY = f"SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE run_id = %s AND ev_key = %s"

# The run row with its last seq and task counts, in one statement (one snapshot).
_INFO = (
    f"SELECT {', '.join('r.' + c for c in RUN_COLUMNS.split(', '))}, "
    "(SELECT COALESCE(MAX(e.seq), 0) FROM events e WHERE e.run_id = r.run_id), "
    "(SELECT json_object_agg(c.state, c.n) FROM (SELECT t.state, COUNT(*) AS n FROM tasks t "
    "WHERE t.run_id = r.run_id GROUP BY t.state) c) "
    "FROM runs r"
)


def _info(row: Any) -> RunInfo:
    return run_info_from_row(row, last_seq=int(row[9]), task_counts=loads(row[10]) or {})


_step_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _step_json(
    journal: Sequence[Event],
    records: Sequence[PatchRecord],
    delta: Delta,
    final: NewEvent | None,
) -> str:
    """The step's rows for ``loopkernel_commit_step`` (its comment gives the shape). JSON
    column values go as strings holding the text ``dumps`` wrote, so the server stores that
    text, not its own rendering of it. A task written twice is written once, with its last
    value, as upserting the rows one by one would leave it."""
    finish = None
    if delta.finish is not None:
        finish = {"status": delta.finish[0].value, "verdict": dumps(delta.finish[1])}
    return _step_encode(
        {
            "events": [
                {"seq": e.seq, "kind": e.kind.value, "task": e.task_id, "data": dumps(e.data)}
                for e in journal
            ],
            "patches": [
                {
                    "seq": r.event_seq,
                    "ops": dumps(r.ops),
                    "outcome": r.outcome,
                    "reason": r.reason,
                    "planner": r.planner,
                    "proposal": None if r.proposal is None else dumps(r.proposal.to_json()),
                }
                for r in records
            ],
            "tasks": [
                {
                    "id": t.task_id,
                    "skill": t.skill,
                    "input": dumps(t.input),
                    "scope": t.evidence_scope,
                    "state": t.state.value,
                    "result": dumps(t.result),
                    "error": dumps(t.error),
                    "attempts": t.attempts,
                    "wait_reason": t.wait_reason,
                    "human": dumps(t.human_input),
                    "wait_epoch": t.wait_epoch,
                    "done": t.done_seq,
                }
                for t in {t.task_id: t for t in delta.tasks}.values()
            ],
            "edges": [{"src": src, "dst": dst} for src, dst in delta.edges],
            "finish": finish,
            "final": None
            if finish is None or final is None
            else {"kind": final.kind.value, "task": final.task_id, "data": dumps(final.data)},
        }
    )


class PostgresStore:
    """A ``Store`` in a PostgreSQL database (``postgresql://user@host:port/dbname``).

    ``min_size``/``max_size`` bound the connection pool; ``connect_timeout`` is how long
    ``open()`` waits for the server. Put the tables in their own schema with
    ``?options=-csearch_path%3Dloopkernel`` in the URL (the schema must exist).
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 30.0,
    ) -> None:
        if not 1 <= min_size <= max_size:
            raise UsageError(f"need 1 <= min_size <= max_size, got {min_size} and {max_size}")
        self.url = url
        """The URL as given (with its password, if any: workers reconnect with it)."""
        self.where = redact(url)
        """The URL without its password, as messages show it."""
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._fence: Fence | None = None
        self._listener = Listener(url)
        self._journal = Listener(url, JOURNAL_CHANNEL)

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"

    # -- connection ------------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        # Migrate on a connection of its own first: a wrong URL or a missing database fails
        # here at once with the server's words, instead of as a pool timeout.
        async with await connect(self.url, self.where, self.connect_timeout) as conn:
            await configure(conn)
            await migrate(conn, self.where)
        self._pool = await open_pool(
            self.url, self.where, self.min_size, self.max_size, self.connect_timeout
        )

    async def close(self) -> None:
        if self._pool is None or self._fence is not None:  # a view leaves it to its store
            return
        pool, self._pool = self._pool, None
        await self._listener.close()
        await self._journal.close()
        await pool.close()

    async def checkpoint(self) -> None:
        """Nothing to do: the server's WAL is the server's business."""

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        """A pooled connection in autocommit: each statement its own transaction.

        A lost server, an exhausted pool or a deadlock comes out as ``StoreUnavailable``
        (the transaction was rolled back; a broken connection leaves the pool).
        """
        if self._pool is None:
            raise UsageError("the store is not open; call `await store.open()` first")
        try:
            async with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, IdleInTransactionSessionTimeout, PoolTimeout) as exc:
            message = " ".join(str(exc).split())
            raise StoreUnavailable(
                f"PostgreSQL at {self.where}: {message}", url=self.where
            ) from exc

    @asynccontextmanager
    async def _tx(self, *, sync: bool = True) -> AsyncIterator[Conn]:
        """One read-write transaction; rolled back if the block raises. Callers map a
        duplicate key to its meaning outside the block, by constraint name, so that only
        the key that means "already done" becomes a LoopKernel error. ``sync=False``: see
        the module docstring."""
        async with self._conn() as conn, conn.transaction():
            if not sync:
                await conn.execute("SET LOCAL synchronous_commit = off")
            yield conn

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[Conn]:
        """One read-only transaction that sees a single snapshot across its statements."""
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

    # -- runs ------------------------------------------------------------------------------

    async def create_run(
        self,
        *,
        run_id: RunId,
        app: str,
        params: JSON,
        max_events: int,
        token_hash: str,
        trace: str | None = None,
    ) -> Event:
        now = time.time()
        started = NewEvent(kind=EventKind.RUN_STARTED, data={"app": app})
        if self._fence is not None:
            raise UsageError(f"a store view fenced to run {self._fence.run_id} creates no run")
        try:
            async with self._tx() as conn:
                await conn.execute(
                    "INSERT INTO runs (run_id, app, params, status, verdict, max_events, "
                    "token_hash, created_at, updated_at, trace) "
                    "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                    run_params(run_id, app, params, max_events, token_hash, now, trace),
                )
                # A new run has no events, and its row stays locked until we commit.
                (event,) = await self._append(conn, run_id, 0, [started], now)
        except UniqueViolation as exc:
            if exc.diag.constraint_name != "runs_pkey":
                raise
            raise UsageError(
                f"run {run_id} already exists in {self.where}; resume it or pick another id",
                run_id=run_id,
            ) from None
        return event

    def _not_found(self, run_id: RunId) -> RunNotFound:
        return RunNotFound(f"no run {run_id} in {self.where}", run_id=run_id)

    async def _lock_run(
        self, conn: Conn, run_id: RunId, *, seq: bool = True, fence: Fence | None = None
    ) -> tuple[RunStatus, int]:
        """Lock the run's row until the transaction ends; its status and last seq (0
        without ``seq``). A fenced view (or ``fence``) compares the lease epoch here.

        Every write that touches a run's journal or graph takes this lock first (one lock
        order: no deadlocks), so no one else appends until we commit. The MAX must be a
        statement of its own, after the lock: under READ COMMITTED each statement takes a
        fresh snapshot, so it sees what the previous holder of the lock committed (a
        subquery of the locking SELECT would see the snapshot from before the wait).
        """
        fence = fence or self._fence
        if fence is not None:
            fence.check_run(run_id)
        lock = await conn.execute(
            "SELECT status, lease_epoch, owner FROM runs WHERE run_id = %s FOR UPDATE", (run_id,)
        )
        last = seq and await conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = %s", (run_id,)
        )
        row, top = await lock.fetchone(), (await last.fetchone() if last else (0,))
        if row is None or top is None:
            raise self._not_found(run_id)
        if fence is not None:
            fence.check_epoch(row[1], row[2])
        return RunStatus(row[0]), int(top[0])

    async def get_run(self, run_id: RunId) -> RunInfo:
        async with self._conn() as conn:
            row = await fetch_one(conn, f"{_INFO} WHERE r.run_id = %s", (run_id,))
        if row is None:
            raise self._not_found(run_id)
        return _info(row)

    async def list_runs(
        self,
        limit: int = 100,
        *,
        status: RunStatus | None = None,
        app: str | None = None,
        before: tuple[float, str] | None = None,
    ) -> list[RunInfo]:
        where, params = run_page_filter(status, app, before, "%s")
        async with self._conn() as conn:
            rows = await fetch_rows(
                conn,
                f"{_INFO}{where} ORDER BY r.created_at DESC, r.run_id DESC LIMIT %s",
                (*params, limit),
            )
        return [_info(row) for row in rows]

    async def delete_run(self, run_id: RunId) -> None:
        if self._fence is not None:
            raise UsageError(f"a store view fenced to run {self._fence.run_id} deletes no run")
        async with self._tx() as conn:
            row = await fetch_one(
                conn,
                f"SELECT owner, lease_until, lease_epoch, {_lease.NOW} FROM runs "
                "WHERE run_id = %s FOR UPDATE",
                (run_id,),
            )
            if row is None:
                raise self._not_found(run_id)
            owner, until, epoch, now = row
            if owner is not None and until is not None and until > now:
                raise run_held(run_id, owner, until, int(epoch), now)
            tables = await fetch_rows(
                conn,
                "SELECT table_name FROM information_schema.columns WHERE column_name = "
                "'run_id' AND table_schema = current_schema() AND table_name != 'runs' "
                "ORDER BY table_name",
                (),
            )
            for (table,) in tables:  # every table that holds rows of runs, found, not listed
                await conn.execute(
                    pgsql.SQL("DELETE FROM {} WHERE run_id = %s").format(pgsql.Identifier(table)),
                    (run_id,),
                )
            await conn.execute("DELETE FROM runs WHERE run_id = %s", (run_id,))

    async def token_hash(self, run_id: RunId) -> str:
        async with self._conn() as conn:
            row = await fetch_one(conn, "SELECT token_hash FROM runs WHERE run_id = %s", (run_id,))
        if row is None:
            raise self._not_found(run_id)
        return str(row[0])

    async def load_run(self, run_id: RunId) -> LoadedRun:
        async with self._snapshot() as conn:
            queries = [
                f"{_INFO} WHERE r.run_id = %s",
                f"SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = %s ORDER BY task_id",
                _EDGES,
                "SELECT e.seq, e.kind, e.task_id, e.data FROM events e "
                "LEFT JOIN patches p ON p.run_id = e.run_id AND p.event_seq = e.seq "
                "WHERE e.run_id = %s AND p.event_seq IS NULL ORDER BY e.seq",
            ]
            run, tasks, edges, unplanned = await fetch_each(conn, queries, (run_id,))
        if not run:
            raise self._not_found(run_id)
        info = _info(run[0])
        state = GraphState(
            run_id=run_id,
            app=info.app,
            params=info.params,
            status=info.status,
            verdict=info.verdict,
        )
        for row in tasks:
            task = task_from_row(row)
            state.tasks[task.task_id] = task
        state.link(edges)
        return LoadedRun(
            info=info, state=state, unplanned=tuple(event_from_row(run_id, r) for r in unplanned)
        )

    async def set_status(self, run_id: RunId, status: RunStatus, verdict: JSON = None) -> None:
        if status in TERMINAL_RUN:
            raise UsageError("a run ends through a finish patch, not set_status")
        async with self._tx() as conn:
            await self._lock_run(conn, run_id)
            await conn.execute(
                "UPDATE runs SET status = %s, verdict = %s, updated_at = %s WHERE run_id = %s",
                (status.value, dumps(verdict), time.time(), run_id),
            )

    # -- the journal -----------------------------------------------------------------------

    @staticmethod
    async def _append(
        conn: Conn, run_id: RunId, seq: int, events: Sequence[NewEvent], now: float
    ) -> list[Event]:
        """Append ``events`` after ``seq``, the run's last, read under its row lock."""
        out: list[Event] = []
        rows = []
        for ev in events:
            seq += 1
            rows.append((run_id, seq, ev.kind.value, ev.task_id, dumps(ev.data), now))
            out.append(
                Event(run_id=run_id, seq=seq, kind=ev.kind, task_id=ev.task_id, data=ev.data)
            )
        await execute_many(
            conn,
            "INSERT INTO events (run_id, seq, kind, task_id, data, created_at) "
            "VALUES (%s,%s,%s,%s,%s,%s)",
            rows,
        )
        # Watchers of the journal (the web inspector) hear of it when this commits.
        await conn.execute("SELECT pg_notify(%s, %s)", (JOURNAL_CHANNEL, run_id))
        return out

    async def last_seq(self, run_id: RunId) -> int:
        async with self._conn() as conn:
            row = await fetch_one(
                conn, "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = %s", (run_id,)
            )
        return int(row[0]) if row else 0

    async def append_events(
        self, run_id: RunId, events: Sequence[NewEvent], tasks: Sequence[Task] = ()
    ) -> list[Event]:
        now = time.time()
        async with self._tx(sync=False) as conn:
            _, seq = await self._lock_run(conn, run_id)
            out = await self._append(conn, run_id, seq, events, now)
            rows = [task_params(run_id, t) for t in with_done_seq(tasks, out)]
            await execute_many(conn, _UPSERT_TASK, rows)
        return out

    async def commit_patches(
        self,
        run_id: RunId,
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None = None,
    ) -> Event | None:
        return (await self.commit_step(run_id, (), records, delta, final))[1]

    async def commit_step(
        self,
        run_id: RunId,
        journal: Sequence[Event],
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None = None,
    ) -> tuple[list[Event], Event | None]:
        """One statement, one round trip: ``loopkernel_commit_step`` (schema migration 7)
        locks the run, checks a fenced view's epoch, numbers the events after the last seq
        (moving the records' and tasks' seqs if another process appended: ``rebase_step``)
        and writes it all, in the implicit transaction of an autocommit statement."""
        if self._fence is not None:
            self._fence.check_run(run_id)
        epoch = None if self._fence is None else self._fence.epoch
        step = _step_json(journal, records, delta, final)
        try:
            async with self._conn() as conn:
                row = await fetch_one(conn, _COMMIT_STEP, (run_id, epoch, time.time(), step))
        except UniqueViolation as exc:
            if exc.diag.constraint_name != "patches_pkey":
                raise
            raise ReplayDivergence(
                f"run {run_id}: an event in seqs {[r.event_seq for r in records]} already "
                "has a patch; another executor is planning this run",
                run_id=run_id,
            ) from None
        except psycopg.DatabaseError as exc:
            if exc.sqlstate == NO_RUN:
                raise self._not_found(run_id) from None
            if exc.sqlstate == LEASE_LOST and self._fence is not None:
                # The detail is {"epoch": <the run's lease_epoch>, "owner": <its owner>}.
                held = json.loads(exc.diag.message_detail or "{}")
                self._fence.check_epoch(held.get("epoch"), held.get("owner"))
            raise
        assert row is not None
        top = int(row[0])
        out = [
            Event(run_id=run_id, seq=top + i, kind=e.kind, task_id=e.task_id, data=e.data)
            for i, e in enumerate(journal, 1)
        ]
        final_event = None
        if delta.finish is not None and final is not None:
            final_event = Event(
                run_id=run_id,
                seq=top + len(journal) + 1,
                kind=final.kind,
                task_id=final.task_id,
                data=final.data,
            )
        return out, final_event

    async def events(self, run_id: RunId, after: int = 0) -> list[Event]:
        async with self._conn() as conn:
            rows = await fetch_rows(
                conn,
                "SELECT seq, kind, task_id, data FROM events WHERE run_id = %s AND seq > %s "
                "ORDER BY seq",
                (run_id, after),
            )
        return [event_from_row(run_id, row) for row in rows]

    async def patches(self, run_id: RunId, after: int = 0) -> list[PatchRecord]:
        async with self._conn() as conn:
            rows = await fetch_rows(
                conn,
                f"SELECT {PATCH_COLUMNS} FROM patches WHERE run_id = %s AND event_seq > %s "
                "ORDER BY event_seq",
                (run_id, after),
            )
        return [patch_from_row(row) for row in rows]

    async def add_human_input(
        self,
        run_id: RunId,
        task_id: TaskId,
        *,
        decision: Literal["approve", "reject"],
        payload: JSON,
    ) -> Event:
        check_decision(decision)
        epoch = 0
        try:
            async with self._tx() as conn:
                status, seq = await self._lock_run(conn, run_id)
                if status in TERMINAL_RUN:
                    raise ApprovalRefused(f"run {run_id} is already {status}", run_id=run_id)
                row = await fetch_one(
                    conn,
                    "SELECT state, wait_epoch FROM tasks WHERE run_id = %s AND task_id = %s",
                    (run_id, task_id),
                )
                epoch = waiting_epoch(run_id, task_id, row)
                answer = human_input_event(task_id, decision, payload, epoch)
                (event,) = await self._append(conn, run_id, seq, [answer], time.time())
                await conn.execute(
                    "INSERT INTO approvals (run_id, task_id, wait_epoch, decision, event_seq) "
                    "VALUES (%s,%s,%s,%s,%s)",
                    (run_id, task_id, epoch, decision, event.seq),
                )
                if status is RunStatus.WAITING:
                    await _lease.wake(conn, run_id, time.time())
        except UniqueViolation as exc:
            if exc.diag.constraint_name != "approvals_pkey":
                raise
            raise ApprovalRefused(
                f"task {task_id!r} wait #{epoch} was already answered; a replayed approval "
                "is refused",
                run_id=run_id,
                task_id=task_id,
            ) from None
        return event

    async def request_cancel(self, run_id: RunId, reason: str) -> Event:
        async with self._tx() as conn:
            status, seq = await self._lock_run(conn, run_id)
            if status in TERMINAL_RUN:
                raise UsageError(f"run {run_id} is already {status}", run_id=run_id)
            events = [NewEvent(kind=EventKind.CANCEL_REQUESTED, data={"reason": reason})]
            (event,) = await self._append(conn, run_id, seq, events, time.time())
            if status is RunStatus.WAITING:
                await _lease.wake(conn, run_id, time.time())
        return event

    # -- effects ---------------------------------------------------------------------------

    async def get_effect(self, run_id: RunId, key: str) -> EffectRecord | None:
        async with self._conn() as conn:
            row = await fetch_one(conn, _EFFECT, (run_id, key))
        return None if row is None else effect_from_row(row)

    async def intend_effect(self, record: EffectRecord) -> EffectRecord:
        now = time.time()
        # Not flushed on its own, as in SQLite: the key is a function of (run, task,
        # index), so a lost intent changes nothing a re-send does.
        async with self._tx(sync=False) as conn:
            if self._fence is not None:
                await self._lock_run(conn, record.run_id, seq=False)
            # ON CONFLICT waits for a concurrent insert of the same key to commit; the
            # SELECT after it (a new snapshot) then sees whichever row won.
            await conn.execute(
                f"INSERT INTO effects ({EFFECT_COLUMNS}, created_at, updated_at) "
                "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
                "ON CONFLICT (run_id, idem_key) DO NOTHING",
                effect_params(record, now),
            )
            row = await fetch_one(conn, _EFFECT, (record.run_id, record.key))
        return effect_from_row(row)

    async def finish_effect(
        self,
        run_id: RunId,
        key: str,
        *,
        status: Literal["done", "failed"],
        result: JSON = None,
        error: JSON = None,
    ) -> None:
        async with self._tx() if self._fence else self._conn() as conn:
            if self._fence is not None:
                await self._lock_run(conn, run_id, seq=False)
            cur = await conn.execute(
                "UPDATE effects SET status = %s, result = %s, error = %s, updated_at = %s "
                "WHERE run_id = %s AND idem_key = %s AND status = 'intended'",
                (status, dumps(result), dumps(error), time.time(), run_id, key),
            )
            if cur.rowcount != 1:
                raise ReplayDivergence(
                    f"effect {key} of run {run_id} is not intended (missing or already finished)",
                    run_id=run_id,
                    key=key,
                )

    async def effects(self, run_id: RunId) -> list[EffectRecord]:
        async with self._conn() as conn:
            rows = await fetch_rows(
                conn,
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE run_id = %s "
                "ORDER BY task_id, call_index",
                (run_id,),
            )
        return [effect_from_row(row) for row in rows]

    # -- evidence --------------------------------------------------------------------------

    async def add_evidence(
        self, run_id: RunId, item: NewEvidence, *, max_item_chars: int, max_run_chars: int
    ) -> Evidence:
        async with self._tx() as conn:
            # The run's row lock orders concurrent adds: n and the cap are read after it.
            await self._lock_run(conn, run_id, seq=False)
            row = await fetch_one(conn, _EVIDENCE_BY_KEY, (run_id, item.key))
            if row is None:
                top = await fetch_one(
                    conn,
                    "SELECT COALESCE(MAX(n), 0), COALESCE(SUM(LENGTH(content)), 0) "
                    "FROM evidence WHERE run_id = %s",
                    (run_id,),
                )
                assert top is not None
                params = evidence_params(
                    run_id,
                    int(top[0]) + 1,
                    item,
                    item_cap=max_item_chars,
                    room=max_run_chars - int(top[1]),
                    now=time.time(),
                )
                await conn.execute(
                    f"INSERT INTO evidence (run_id, ev_key, {EVIDENCE_COLUMNS}, created_at) "
                    f"VALUES ({','.join(['%s'] * 14)})",
                    params,
                )
                row = await fetch_one(conn, _EVIDENCE_BY_KEY, (run_id, item.key))
        return evidence_from_row(row)

    async def evidence(self, run_id: RunId) -> list[Evidence]:
        async with self._conn() as conn:
            rows = await fetch_rows(
                conn,
                f"SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE run_id = %s ORDER BY n",
                (run_id,),
            )
        return [evidence_from_row(row) for row in rows]

    # -- whole-run views -------------------------------------------------------------------

    async def dump(self, run_id: RunId) -> dict[str, JSON]:
        async with self._snapshot() as conn:
            queries = [
                f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = %s",
                f"SELECT {DUMP_TASK_COLUMNS} FROM tasks WHERE run_id = %s ORDER BY task_id",
                _EDGES,
                f"SELECT {DUMP_EFFECT_COLUMNS} FROM effects WHERE run_id = %s "
                "ORDER BY task_id, call_index",
            ]
            run, tasks, edges, effects = await fetch_each(conn, queries, (run_id,))
        if not run:
            raise self._not_found(run_id)
        return dump_of(run[0], tasks, edges, effects)

    # -- forks (docs/fork.md) --------------------------------------------------------------

    async def fork_run(self, fork: Fork) -> RunInfo:
        if self._fence is not None:
            raise UsageError(f"a store view fenced to run {self._fence.run_id} creates no run")
        try:
            async with self._tx() as conn:
                await self._lock_run(conn, fork.source.run_id, seq=False)
                for sql, rows in fork_statements(fork, time.time()):
                    await execute_many(conn, sql.replace("?", "%s"), rows)
        except UniqueViolation as exc:
            if exc.diag.constraint_name != "runs_pkey":
                raise
            raise UsageError(
                f"run {fork.run_id} already exists in {self.where}; pick another id",
                run_id=fork.run_id,
            ) from None
        return await self.get_run(fork.run_id)

    async def origin(self, run_id: RunId) -> tuple[RunId, int] | None:
        async with self._conn() as conn:
            row = await fetch_one(
                conn, "SELECT source_run, source_seq FROM forks WHERE run_id = %s", (run_id,)
            )
        return None if row is None else (RunId(row[0]), int(row[1]))

    # -- workers: leases and fencing (docs/workers.md) --------------------------------------

    def fenced(self, run_id: RunId, epoch: int) -> PostgresStore:
        view = copy.copy(self)
        view._fence = Fence(run_id=run_id, epoch=epoch)
        view._listener = Listener(self.url)
        return view

    async def enqueue(self, run_id: RunId) -> None:
        async with self._tx() as conn:
            status, _ = await self._lock_run(conn, run_id)
            if status in TERMINAL_RUN:
                raise UsageError(f"run {run_id} is already {status}; nothing is left to run")
            await _lease.enqueue(conn, run_id, time.time())

    async def claim_run(self, worker_id: str, lease_seconds: float) -> Claim | None:
        check_lease_seconds(lease_seconds)
        self._unfenced("claim runs")
        async with self._conn() as conn:
            return await _lease.claim(conn, worker_id, lease_seconds)

    async def acquire(
        self,
        run_id: RunId,
        holder: Holder,
        lease_seconds: float,
        *,
        takeover: int | None = None,
    ) -> Claim:
        check_lease_seconds(lease_seconds)
        self._unfenced("acquire leases")
        async with self._tx() as conn:
            await self._lock_run(conn, run_id, seq=False)
            got = await _lease.acquire(conn, run_id, holder, lease_seconds, takeover)
        if got is None:
            raise self._not_found(run_id)
        return got

    async def heartbeat(self, run_id: RunId, epoch: int, lease_seconds: float) -> None:
        check_lease_seconds(lease_seconds)
        self._unfenced("heartbeat")
        # Not waiting for the WAL flush: a heartbeat lost to a server crash only
        # shortens the lease.
        async with self._tx(sync=False) as conn:
            if not await _lease.extend(conn, run_id, epoch, lease_seconds):
                await self._lock_run(
                    conn, run_id, seq=False, fence=Fence(run_id=run_id, epoch=epoch)
                )

    async def release(self, run_id: RunId, epoch: int) -> bool:
        self._unfenced("release leases")
        async with self._tx() as conn:
            return await _lease.release(conn, run_id, epoch, time.time())

    def _unfenced(self, what: str) -> None:
        if self._fence is not None:
            raise UsageError(f"a store view fenced to run {self._fence.run_id} cannot {what}")

    async def wait_for_journal(self, seconds: float) -> None:
        await self._journal.wait(seconds)

    async def wait_for_work(self, seconds: float) -> None:
        await self._listener.wait(seconds)
