"""One SQL engine for both stores: every method written once, over a small ``Dialect``.

A method is a *body*, a plain function of a ``Cursor``, run as one transaction on a
connection the dialect owns, **off the event loop**: SQLite on its one writer thread,
PostgreSQL on a thread of its pool. The loop only awaits the body's result, so a lock
held by another process, a slow disk or a slow server never stalls heartbeats, tool
deadlines or cancellation. (SQLite runs a small write that cannot wait -- no fsync, no
lock wait, no checkpoint -- on the loop when its thread is idle: ``SQLiteStore._submit``.)

Faults are translated in one place, ``Cursor._execute``, where every statement passes:
a passing fault (the write lock held, a full disk, an I/O error, a lost server) becomes
``StoreUnavailable``; a file that cannot serve (read-only, corrupt) ``NotADatabase``; a
unique key that was already there ``DuplicateKey(table)``, which the method that knows
what that key means turns into ``ReplayDivergence``, ``ApprovalRefused`` or
``UsageError``. A write that finds SQLite's write lock held is retried with an async
backoff (the loop free meanwhile) until ``lock_wait_s`` seconds have passed in all.

Writes that touch a run first read its row under the dialect's lock (SQLite: the one
write lock ``BEGIN IMMEDIATE`` took; PostgreSQL: ``FOR UPDATE``): that serializes the
run's seq allocation, and is where a fenced view (``fenced(run_id, epoch)``) compares the
run's lease epoch before anything is written.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from functools import lru_cache
from typing import Any, ClassVar, Literal, TypeVar

from loopkernel.errors import (
    ApprovalRefused,
    ReplayDivergence,
    RunNotFound,
    SchemaTooNew,
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
from loopkernel.store._codec import (
    DUMP_EFFECT_COLUMNS,
    DUMP_TASK_COLUMNS,
    EFFECT_COLUMNS,
    EVIDENCE_COLUMNS,
    INSERT_APPROVAL,
    INSERT_EDGE,
    INSERT_EFFECT,
    INSERT_EVENT,
    INSERT_EVIDENCE,
    INSERT_PATCH,
    INSERT_RUN,
    INSERT_TASK,
    PATCH_COLUMNS,
    RUN_COLUMNS,
    TASK_COLUMNS,
    as_new,
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
    patch_params,
    rebase_step,
    run_info_from_row,
    run_page_filter,
    run_params,
    task_from_row,
    task_params,
    waiting_epoch,
    with_done_seq,
)
from loopkernel.store._fork import fork_statements
from loopkernel.store._inspect import InspectorReads
from loopkernel.store._lease import (
    CHANNEL,
    LOCAL,
    QUEUED,
    ClaimFilter,
    Fence,
    Holder,
    check_lease_seconds,
    run_held,
    unplanned_kinds,
    wake_due,
)
from loopkernel.store._lockwait import DEFAULT_LOCK_WAIT_S, lock_wait_s_within
from loopkernel.store._protocol import (
    Claim,
    EffectRecord,
    Fork,
    LoadedRun,
    NewEvent,
    NewRun,
    PatchRecord,
    Reclaimed,
    RunInfo,
)
from loopkernel.store._schedule_rows import ScheduleRows
from loopkernel.store._schema import TABLES

__all__ = [
    "JOURNAL_CHANNEL",
    "Cursor",
    "Dialect",
    "DuplicateKey",
    "LockHeld",
    "SQLStore",
    "check_version",
    "migrate",
]

T = TypeVar("T")
How = Literal["write", "snapshot", "statement"]
"""A body's transaction: a write, a read in one snapshot, or one autocommit statement."""

JOURNAL_CHANNEL = "loopkernel_journal"
"""Notified (PostgreSQL) with the run id by every commit that appends to a run's journal."""


class DuplicateKey(Exception):
    """A unique key of ``table`` was already there (internal: a method maps it)."""

    def __init__(self, table: str) -> None:
        super().__init__(table)
        self.table = table


class LockHeld(Exception):
    """Another process holds the write lock (SQLite); the transaction wrote nothing."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Dialect:
    """What differs between the databases, and nothing else."""

    NOW: ClassVar[str]
    """SQL for the database's time in seconds since the epoch (lease times)."""
    LOCK: ClassVar[str] = ""
    """Appended to the run-row read of a write: PostgreSQL's ``FOR UPDATE``."""
    SKIP_LOCKED: ClassVar[str] = ""
    """Appended to the claim's subquery: PostgreSQL's ``FOR UPDATE SKIP LOCKED``."""
    OBJECT_AGG: ClassVar[str]
    """The aggregate of ``(key, value)`` rows into a JSON object."""
    SEQ_WITH_LOCK: ClassVar[bool] = False
    """Whether the run-row read of a write may read the run's last seq in the same
    statement: true where the lock is taken before the statement (SQLite's ``BEGIN
    IMMEDIATE``); not under ``FOR UPDATE``, whose subqueries see the snapshot taken before
    the lock was waited for."""

    def sql(self, text: str) -> str:
        """``text`` (written with ``?`` placeholders, so never a ``?`` of its own) as the
        driver wants it."""
        return text

    def begin(self, how: Literal["write", "snapshot"], sync: bool) -> list[str]:
        raise NotImplementedError

    def after(self, how: Literal["write", "snapshot"], sync: bool) -> list[str]:
        """Statements after the transaction ended, either way (restoring a setting)."""
        return []

    def classify(self, exc: Exception) -> Exception | None:
        """What a driver error means (see the module docstring); ``None``: not the
        driver's, raise it as it is."""
        raise NotImplementedError

    def notify(self, cur: Cursor, channel: str, run_id: RunId) -> None:
        """Tell listeners, when the transaction commits, that ``run_id`` changed."""


class Cursor:
    """What a body gets: statements on one connection, faults translated here."""

    __slots__ = ("_conn", "_dialect", "_sql", "top")

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect
        self._sql = None if type(dialect).sql is Dialect.sql else dialect.sql
        """The dialect's translation of the text, ``None`` where it keeps it (SQLite)."""
        self.top: int | None = None
        """The run's last seq, when the run-row read under the lock read it too."""

    def _execute(self, sql: str, params: Sequence[Any], many: bool = False) -> Any:
        if self._sql is not None:
            sql = self._sql(sql)
        try:
            if many:
                cur = self._conn.cursor()
                try:
                    cur.executemany(sql, params)
                finally:
                    cur.close()
                return None
            return self._conn.execute(sql, params)
        except Exception as exc:
            meant = self._dialect.classify(exc)
            if meant is None or meant is exc:
                raise
            raise meant from exc

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute; the number of rows it changed."""
        return int(self._execute(sql, params).rowcount)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._execute(sql, params).fetchone()

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self._execute(sql, params).fetchall())

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement for many rows (pipelined where the driver can)."""
        if rows:
            self._execute(sql, rows, many=True)


def transact(
    conn: Any,
    dialect: Dialect,
    body: Callable[[Cursor], T],
    how: How,
    sync: bool,
) -> T:
    """Run ``body`` on ``conn`` as one transaction (``statement``: in autocommit)."""
    cur = Cursor(conn, dialect)
    if how == "statement":
        return body(cur)
    for sql in dialect.begin(how, sync):
        cur.run(sql)
    try:
        out = body(cur)
        cur.run("COMMIT")
        return out
    except BaseException:
        # The database may have rolled back already (a full disk, a lost server); the
        # original error is the one to report.
        with suppress(Exception):
            cur.run("ROLLBACK")
        raise
    finally:
        for sql in dialect.after(how, sync):
            with suppress(Exception):
                cur.run(sql)


_UPSERT_TASK = (
    f"{INSERT_TASK} ON CONFLICT (run_id, task_id) DO UPDATE SET state=excluded.state, "
    "result=excluded.result, error=excluded.error, attempts=excluded.attempts, "
    "wait_reason=excluded.wait_reason, human_input=excluded.human_input, "
    "wait_epoch=excluded.wait_epoch, done_seq=excluded.done_seq, wake_at=excluded.wake_at"
)
_LAST_SEQ = "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?"
_RUN_ROW = "SELECT status, lease_epoch, owner FROM runs WHERE run_id = ?"
_RUN_ROW_SEQ = (
    "SELECT status, lease_epoch, owner, (SELECT COALESCE(MAX(seq), 0) FROM events "
    "WHERE events.run_id = runs.run_id) FROM runs WHERE run_id = ?"
)
_STATUS = {status.value: status for status in RunStatus}
_EDGES = "SELECT src, dst FROM edges WHERE run_id = ? ORDER BY src, dst"
_EFFECT = f"SELECT {EFFECT_COLUMNS} FROM effects WHERE run_id = ? AND idem_key = ?"
_EVIDENCE_BY_KEY = f"SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE run_id = ? AND ev_key = ?"
_UNPLANNED = "SELECT e.seq, e.kind, e.task_id, e.data FROM events e LEFT JOIN patches p ON "
_UNPLANNED += "p.run_id = e.run_id AND p.event_seq = e.seq WHERE e.run_id = ? "
_UNPLANNED += "AND p.event_seq IS NULL ORDER BY e.seq"
_KINDS = ", ".join(f"'{kind}'" for kind in unplanned_kinds())
_WAKE = (
    "UPDATE runs SET status = 'running', updated_at = ? WHERE run_id = ? "
    "AND status = 'waiting' AND lease_until IS NOT NULL AND EXISTS (SELECT 1 FROM events e "
    "WHERE e.run_id = runs.run_id AND e.seq > (SELECT COALESCE(MAX(p.event_seq), 0) "
    f"FROM patches p WHERE p.run_id = runs.run_id) AND e.kind NOT IN ({_KINDS})) "
    "RETURNING run_id"
)


@lru_cache(maxsize=4)
def _info_sql(agg: str, now: str) -> str:
    """The run row, its last seq and task counts, lease, timer and the database's clock."""
    return (
        f"SELECT {', '.join('r.' + c for c in RUN_COLUMNS.split(', '))}, "
        "(SELECT COALESCE(MAX(e.seq), 0) FROM events e WHERE e.run_id = r.run_id), "
        f"(SELECT {agg}(c.state, c.n) FROM (SELECT t.state, COUNT(*) AS n FROM tasks t "
        "WHERE t.run_id = r.run_id GROUP BY t.state) c), "
        f"r.owner, r.lease_until, r.wake_at, {now} FROM runs r"
    )


def _info(row: Any) -> RunInfo:
    info = run_info_from_row(row, last_seq=int(row[10]), task_counts=loads(row[11]) or {})
    lease, wake = (None if v is None else float(v) for v in row[13:15])
    return replace(info, owner=row[12], lease_until=lease, wake_at=wake, seen_at=float(row[15]))


def check_version(where: str, version: int, known: int) -> int:
    """``version``, unless this code knows only up to ``known`` (``SchemaTooNew``)."""
    if version > known:
        raise SchemaTooNew(
            f"{where} has schema version {version}; this LoopKernel knows up to {known}. "
            "Upgrade loopkernel to open it.",
            found=version,
            known=known,
        )
    return version


def migrate(cur: Cursor, where: str, migrations: Sequence[Sequence[str]], version: int) -> None:
    """In the caller's transaction: run the ``migrations`` after ``version`` and record the
    last as ``meta``'s schema version."""
    check_version(where, version, len(migrations))
    for statements in migrations[version:]:
        for sql in statements:
            cur.run(sql)
    if version < len(migrations):
        cur.run(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(len(migrations)),),
        )


class SQLStore(InspectorReads, ScheduleRows):
    """The ``Store`` protocols, once: a subclass gives the dialect, the connection (where a
    body runs: ``_submit``), ``open``/``close`` and what only its database has."""

    dialect: Dialect
    where: str
    """The database as messages name it (a path; a URL without its password)."""
    url: str
    lock_wait_s: float = DEFAULT_LOCK_WAIT_S
    """Seconds, in all, a write waits for a write lock another process holds (within
    ``lock_wait_at_most``'s bound)."""
    _fence: Fence | None = None

    # -- the connection --------------------------------------------------------------------

    async def _submit(
        self, body: Callable[[Cursor], T], how: How, sync: bool, bulk: bool = False
    ) -> T:
        raise NotImplementedError

    async def _call(
        self,
        body: Callable[[Cursor], T],
        how: How = "statement",
        *,
        sync: bool = True,
        bulk: bool = False,
    ) -> T:
        """``body`` as one transaction, never waiting on the loop (a dialect may run a
        write that cannot wait on the loop itself: SQLite's unsynced ones). ``bulk``: a
        write of a whole run's rows (a fork, a delete), always off the loop. The first
        try is made here, the retries (rare) in ``_retrying``: a step pays no loop."""
        submit = self._submit
        try:
            return await submit(body, how, sync, bulk)
        except LockHeld as exc:
            held = exc
        return await self._retrying(lambda: submit(body, how, sync, bulk), held)

    async def _retrying(
        self, attempt: Callable[[], Awaitable[T]], held: LockHeld | None = None
    ) -> T:
        """``attempt()``, again after an async backoff while another process holds the
        write lock, for ``lock_wait_s`` seconds in all; then ``StoreUnavailable``.
        ``held``: the first try was made already, and found the lock held."""
        deadline: float | None = None
        pause = 0.002
        wait = lock_wait_s_within(self.lock_wait_s)
        while True:
            if held is None:
                try:
                    return await attempt()
                except LockHeld as exc:
                    held = exc
            now = time.monotonic()
            deadline = now + wait if deadline is None else deadline
            if now >= deadline:
                raise StoreUnavailable(
                    f"{self.where}: the database is locked by another process "
                    f"({held.detail}; waited {wait:g} s)",
                    url=self.url,
                    reason="the database is locked by another process",
                    waited=wait,
                ) from None
            await asyncio.sleep(min(pause, deadline - now))
            pause = min(pause * 2, 0.05)
            held = None

    async def _write(
        self,
        run_id: RunId,
        body: Callable[[Cursor, RunStatus], T],
        *,
        sync: bool = True,
        lock: bool = True,
        bulk: bool = False,
        seq: bool = False,
    ) -> T:
        """A write of ``run_id``: its row read under the dialect's lock (``RunNotFound``
        without it) and a fenced view's epoch compared, before ``body(cur, status)``.
        ``lock=False`` (an effect of an unfenced store): straight to the body. ``seq``:
        the body appends; the run's last seq is read with the row where the dialect can
        (``Dialect.SEQ_WITH_LOCK``; ``_last_seq`` answers it)."""
        fence = self._fence
        if fence is not None:
            fence.check_run(run_id)
        top = seq and self.dialect.SEQ_WITH_LOCK
        sql = _RUN_ROW_SEQ if top else _RUN_ROW + self.dialect.LOCK

        def locked(cur: Cursor) -> T:
            if not (lock or fence):
                return body(cur, RunStatus.RUNNING)
            row = cur.one(sql, (run_id,))
            if row is None:
                raise self._not_found(run_id)
            if fence is not None:
                fence.check_epoch(row[1], row[2])
            if top:
                cur.top = int(row[3])
            return body(cur, _STATUS[row[0]])

        return await self._call(locked, "write", sync=sync, bulk=bulk)

    def _unfenced(self, what: str) -> None:
        if self._fence is not None:
            raise UsageError(f"a store view fenced to run {self._fence.run_id} cannot {what}")

    def _not_found(self, run_id: RunId) -> RunNotFound:
        return RunNotFound(f"no run {run_id} in {self.where}", run_id=run_id)

    def fenced(self, run_id: RunId, epoch: int) -> Any:
        view = copy.copy(self)
        view._fence = Fence(run_id=run_id, epoch=epoch)
        return view

    # -- Journal: runs ---------------------------------------------------------------------

    async def create_run(self, run: NewRun) -> Event:
        self._unfenced("create runs")
        now = time.time()
        started = NewEvent(kind=EventKind.RUN_STARTED, data={"app": run.app})
        run_id = run.run_id

        def body(cur: Cursor) -> Event:
            cur.run(INSERT_RUN, run_params(run, now))
            return self._append(cur, run_id, 0, [started], now)[0]

        try:
            return await self._call(body, "write")
        except DuplicateKey:
            raise UsageError(
                f"run {run_id} already exists in {self.where}; resume it or pick another id",
                run_id=run_id,
            ) from None

    async def get_run(self, run_id: RunId) -> RunInfo:
        sql = f"{_info_sql(self.dialect.OBJECT_AGG, self.dialect.NOW)} WHERE r.run_id = ?"
        row = await self._call(lambda cur: cur.one(sql, (run_id,)))
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
        where, params = run_page_filter(status, app, before, "?")
        sql = f"{_info_sql(self.dialect.OBJECT_AGG, self.dialect.NOW)}{where} "
        sql += "ORDER BY r.created_at DESC, r.run_id DESC LIMIT ?"
        rows = await self._call(lambda cur: cur.all(sql, (*params, limit)))
        return [_info(row) for row in rows]

    async def token_hash(self, run_id: RunId) -> str:
        row = await self._call(
            lambda cur: cur.one("SELECT token_hash FROM runs WHERE run_id = ?", (run_id,))
        )
        if row is None:
            raise self._not_found(run_id)
        return str(row[0])

    async def load_run(self, run_id: RunId) -> LoadedRun:
        info_sql = f"{_info_sql(self.dialect.OBJECT_AGG, self.dialect.NOW)} WHERE r.run_id = ?"
        tasks_sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ? ORDER BY task_id"

        def body(cur: Cursor) -> tuple[Any, ...]:
            key = (run_id,)
            run = cur.one(info_sql, key)
            if run is None:
                raise self._not_found(run_id)
            lease = cur.one("SELECT owner, lease_epoch FROM runs WHERE run_id = ?", key)
            return run, lease, *(cur.all(sql, key) for sql in (tasks_sql, _EDGES, _UNPLANNED))

        run, lease, tasks, edges, unplanned = await self._call(body, "snapshot")
        info = _info(run)
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
            info=info,
            state=state,
            unplanned=tuple(event_from_row(run_id, r) for r in unplanned),
            free_epoch=int(lease[1]) if lease[0] is None else None,  # nobody holds it
        )

    async def set_status(
        self,
        run_id: RunId,
        status: RunStatus,
        verdict: JSON = None,
        *,
        wake_at: float | None = None,
    ) -> None:
        if status in TERMINAL_RUN:
            raise UsageError("a run ends through a finish patch, not set_status")
        wake = wake_at if status is RunStatus.WAITING else None
        await self._write(
            run_id,
            lambda cur, _: cur.run(
                "UPDATE runs SET status = ?, verdict = ?, updated_at = ?, wake_at = ? "
                "WHERE run_id = ?",
                (status.value, dumps(verdict), time.time(), wake, run_id),
            ),
        )
        if status is RunStatus.WAITING:
            await self._call_quiet()

    async def _call_quiet(self) -> None:
        """The checkpoint of a quiet point, off the loop (SQLite; nothing elsewhere)."""

    # -- Journal: events and patches -------------------------------------------------------

    def _append(
        self, cur: Cursor, run_id: RunId, seq: int, events: Sequence[NewEvent], now: float
    ) -> list[Event]:
        """Append ``events`` after ``seq``, the run's last, read under the run's lock."""
        out: list[Event] = []
        rows = []
        for ev in events:
            seq += 1
            rows.append((run_id, seq, ev.kind.value, ev.task_id, dumps(ev.data), now))
            out.append(
                Event(run_id=run_id, seq=seq, kind=ev.kind, task_id=ev.task_id, data=ev.data)
            )
        cur.many(INSERT_EVENT, rows)
        self.dialect.notify(cur, JOURNAL_CHANNEL, run_id)
        return out

    def _append_planned(
        self, cur: Cursor, run_id: RunId, events: Sequence[Event], now: float
    ) -> list[Event]:
        """``_append`` of events the executor numbered right after the run's last seq:
        written at their own seqs, and they are what was written (no second copy)."""
        rows = [(run_id, e.seq, e.kind._value_, e.task_id, dumps(e.data), now) for e in events]
        cur.many(INSERT_EVENT, rows)
        self.dialect.notify(cur, JOURNAL_CHANNEL, run_id)
        return list(events)

    @staticmethod
    def _last_seq(cur: Cursor, run_id: RunId) -> int:
        """The run's last seq, read under the run's lock (once, with its row, if it was)."""
        top = cur.top
        if top is not None:
            cur.top = None
            return top
        return int(cur.one(_LAST_SEQ, (run_id,))[0])

    async def last_seq(self, run_id: RunId) -> int:
        return await self._call(lambda cur: self._last_seq(cur, run_id))

    async def append_events(
        self, run_id: RunId, events: Sequence[NewEvent], tasks: Sequence[Task] = ()
    ) -> list[Event]:
        now = time.time()

        def body(cur: Cursor, _: RunStatus) -> list[Event]:
            out = self._append(cur, run_id, self._last_seq(cur, run_id), events, now)
            cur.many(_UPSERT_TASK, [task_params(run_id, t) for t in with_done_seq(tasks, out)])
            return out

        # Not fsynced on its own: the WAL is ordered, so the patch commit that follows
        # makes both durable with one fsync (docs/durability.md).
        return await self._write(run_id, body, sync=False, seq=True)

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
        now = time.time()

        def body(cur: Cursor, _: RunStatus) -> tuple[list[Event], Event | None]:
            top = self._last_seq(cur, run_id)
            if journal and journal[0].seq == top + 1:
                out = self._append_planned(cur, run_id, journal, now)
            else:  # another process appended since: ours go after its
                out = self._append(cur, run_id, top, [as_new(e) for e in journal], now)
            moved, step = rebase_step(journal, out, records, delta)
            cur.many(INSERT_PATCH, [patch_params(run_id, r, now) for r in moved])
            cur.many(_UPSERT_TASK, [task_params(run_id, t) for t in step.tasks])
            cur.many(INSERT_EDGE, [(run_id, s, d) for s, d in step.edges])
            if step.finish is None:
                return out, None
            status, verdict = step.finish
            cur.run(
                "UPDATE runs SET status = ?, verdict = ?, updated_at = ? WHERE run_id = ?",
                (status.value, dumps(verdict), now, run_id),
            )
            last = top + len(out)
            return out, None if final is None else self._append(cur, run_id, last, [final], now)[0]

        try:
            written = await self._write(run_id, body, seq=True)
        except DuplicateKey:
            raise self._planned_twice(run_id, records) from None
        if delta.finish is not None:
            await self._call_quiet()
        return written

    @staticmethod
    def _planned_twice(run_id: RunId, records: Sequence[PatchRecord]) -> ReplayDivergence:
        return ReplayDivergence(
            f"run {run_id}: an event in seqs {[r.event_seq for r in records]} already "
            "has a patch; another executor is planning this run",
            run_id=run_id,
        )

    async def events(self, run_id: RunId, after: int = 0) -> list[Event]:
        sql = "SELECT seq, kind, task_id, data FROM events WHERE run_id = ? AND seq > ? "
        rows = await self._call(lambda cur: cur.all(sql + "ORDER BY seq", (run_id, after)))
        return [event_from_row(run_id, row) for row in rows]

    async def patches(self, run_id: RunId, after: int = 0) -> list[PatchRecord]:
        sql = f"SELECT {PATCH_COLUMNS} FROM patches WHERE run_id = ? AND event_seq > ? "
        rows = await self._call(lambda cur: cur.all(sql + "ORDER BY event_seq", (run_id, after)))
        return [patch_from_row(row) for row in rows]

    async def add_human_input(
        self,
        run_id: RunId,
        task_id: TaskId,
        *,
        decision: Literal["approve", "reject"],
        payload: JSON,
        by: JSON = None,
    ) -> Event:
        check_decision(decision)
        epoch = [0]

        def body(cur: Cursor, status: RunStatus) -> Event:
            if status in TERMINAL_RUN:
                raise ApprovalRefused(f"run {run_id} is already {status}", run_id=run_id)
            row = cur.one(
                "SELECT state, wait_epoch FROM tasks WHERE run_id = ? AND task_id = ?",
                (run_id, task_id),
            )
            epoch[0] = waiting_epoch(run_id, task_id, row)
            answer = human_input_event(task_id, decision, payload, epoch[0], by)
            now = time.time()
            (event,) = self._append(cur, run_id, self._last_seq(cur, run_id), [answer], now)
            cur.run(INSERT_APPROVAL, (run_id, task_id, epoch[0], decision, event.seq))
            if status is RunStatus.WAITING:
                self._wake(cur, run_id, now)
            return event

        try:
            return await self._write(run_id, body, seq=True)
        except DuplicateKey:
            raise ApprovalRefused(
                f"task {task_id!r} wait #{epoch[0]} was already answered; a replayed approval "
                "is refused",
                run_id=run_id,
                task_id=task_id,
            ) from None

    async def request_cancel(self, run_id: RunId, reason: str, by: JSON = None) -> Event:
        def body(cur: Cursor, status: RunStatus) -> Event:
            if status in TERMINAL_RUN:
                raise UsageError(f"run {run_id} is already {status}", run_id=run_id)
            data = {"reason": reason} if by is None else {"reason": reason, "by": by}
            events = [NewEvent(kind=EventKind.CANCEL_REQUESTED, data=data)]
            now = time.time()
            (event,) = self._append(cur, run_id, self._last_seq(cur, run_id), events, now)
            if status is RunStatus.WAITING:
                self._wake(cur, run_id, now)
            return event

        return await self._write(run_id, body, seq=True)

    # -- Effects ---------------------------------------------------------------------------

    async def get_effect(self, run_id: RunId, key: str) -> EffectRecord | None:
        row = await self._call(lambda cur: cur.one(_EFFECT, (run_id, key)))
        return None if row is None else effect_from_row(row)

    async def intend_effect(self, record: EffectRecord) -> EffectRecord:
        now = time.time()
        sql = f"{INSERT_EFFECT} ON CONFLICT (run_id, idem_key) DO NOTHING"

        def body(cur: Cursor, _: RunStatus) -> Any:
            # ON CONFLICT waits (PostgreSQL) for a concurrent insert of the same key to
            # commit; the SELECT after it then sees whichever row won.
            cur.run(sql, effect_params(record, now))
            return cur.one(_EFFECT, (record.run_id, record.key))

        # Not fsynced on its own: the key is a function of (run, task, index), so a lost
        # intent changes nothing a re-send does; the result commit that follows is.
        return effect_from_row(await self._write(record.run_id, body, sync=False, lock=False))

    async def finish_effect(
        self,
        run_id: RunId,
        key: str,
        *,
        status: Literal["done", "failed"],
        result: JSON = None,
        error: JSON = None,
    ) -> None:
        def body(cur: Cursor, _: RunStatus) -> None:
            changed = cur.run(
                "UPDATE effects SET status = ?, result = ?, error = ?, updated_at = ? "
                "WHERE run_id = ? AND idem_key = ? AND status = 'intended'",
                (status, dumps(result), dumps(error), time.time(), run_id, key),
            )
            if changed != 1:
                raise ReplayDivergence(
                    f"effect {key} of run {run_id} is not intended (missing or already finished)",
                    run_id=run_id,
                    key=key,
                )

        await self._write(run_id, body, lock=False)

    async def effects(self, run_id: RunId) -> list[EffectRecord]:
        sql = f"SELECT {EFFECT_COLUMNS} FROM effects WHERE run_id = ? ORDER BY task_id, call_index"
        return [effect_from_row(r) for r in await self._call(lambda cur: cur.all(sql, (run_id,)))]

    async def add_evidence(
        self, run_id: RunId, item: NewEvidence, *, max_item_chars: int, max_run_chars: int
    ) -> Evidence:
        def body(cur: Cursor, _: RunStatus) -> Any:
            # The run's lock orders concurrent adds: n and the cap are read after it.
            row = cur.one(_EVIDENCE_BY_KEY, (run_id, item.key))
            if row is not None:
                return row
            n, used = cur.one(
                "SELECT COALESCE(MAX(n), 0), COALESCE(SUM(LENGTH(content)), 0) "
                "FROM evidence WHERE run_id = ?",
                (run_id,),
            )
            params = evidence_params(
                run_id,
                int(n) + 1,
                item,
                item_cap=max_item_chars,
                room=max_run_chars - int(used),
                now=time.time(),
            )
            cur.run(INSERT_EVIDENCE, params)
            return cur.one(_EVIDENCE_BY_KEY, (run_id, item.key))

        return evidence_from_row(await self._write(run_id, body))

    async def evidence(self, run_id: RunId) -> list[Evidence]:
        sql = f"SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE run_id = ? ORDER BY n"
        return [evidence_from_row(r) for r in await self._call(lambda cur: cur.all(sql, (run_id,)))]

    # -- Catalog ---------------------------------------------------------------------------

    async def dump(self, run_id: RunId) -> dict[str, JSON]:
        queries = {
            "runs": f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?",
            "tasks": f"SELECT {DUMP_TASK_COLUMNS} FROM tasks WHERE run_id = ? ORDER BY task_id",
            "edges": _EDGES,
            "effects": f"SELECT {DUMP_EFFECT_COLUMNS} FROM effects WHERE run_id = ? "
            "ORDER BY task_id, call_index",
        }
        assert set(queries) == {t.name for t in TABLES if t.digest}

        def body(cur: Cursor) -> dict[str, list[Any]]:
            return {name: cur.all(sql, (run_id,)) for name, sql in queries.items()}

        rows = await self._call(body, "snapshot")
        if not rows["runs"]:
            raise self._not_found(run_id)
        return dump_of(rows["runs"][0], rows["tasks"], rows["edges"], rows["effects"])

    async def checkpoint(self) -> None:
        """A no-op here; ``SQLiteStore`` folds its WAL in."""

    async def reclaim(self, *, full: bool = False) -> Reclaimed | None:
        """None here: PostgreSQL's autovacuum reuses the space of deleted rows (a ``VACUUM
        FULL`` would lock every table for its length; an operator runs it knowingly)."""
        return None

    async def fork_run(self, fork: Fork) -> RunInfo:
        self._unfenced("create runs")

        def body(cur: Cursor, _: RunStatus) -> None:
            for _table, sql, rows in fork_statements(fork, time.time()):
                cur.many(sql, rows)

        try:
            await self._write(fork.source.run_id, body, bulk=True)
        except DuplicateKey:
            raise UsageError(
                f"run {fork.run_id} already exists in {self.where}; pick another id",
                run_id=fork.run_id,
            ) from None
        return await self.get_run(fork.run_id)

    async def origin(self, run_id: RunId) -> tuple[RunId, int] | None:
        sql = "SELECT source_run, source_seq FROM forks WHERE run_id = ?"
        row = await self._call(lambda cur: cur.one(sql, (run_id,)))
        return None if row is None else (RunId(row[0]), int(row[1]))

    async def delete_run(self, run_id: RunId) -> None:
        self._unfenced("delete runs")
        now_sql = f"SELECT owner, lease_until, lease_epoch, {self.dialect.NOW} FROM runs "

        def body(cur: Cursor, _: RunStatus) -> None:
            owner, until, epoch, now = cur.one(now_sql + "WHERE run_id = ?", (run_id,))
            if owner is not None and until is not None and until > now:
                raise run_held(run_id, owner, until, int(epoch), float(now))
            for table in TABLES:
                cur.run(f"DELETE FROM {table.name} WHERE run_id = ?", (run_id,))

        await self._write(run_id, body, bulk=True)

    # -- Leases (docs/workers.md) ----------------------------------------------------------

    def _notify(self, cur: Cursor, run_id: RunId) -> None:
        self.dialect.notify(cur, CHANNEL, run_id)

    def _wake(self, cur: Cursor, run_id: RunId, now: float) -> None:
        """An enqueued ``waiting`` run with an event no patch answers yet (human input, a
        cancel request) becomes ``running`` -- claimable -- and workers are told."""
        if cur.one(_WAKE, (now, run_id)) is not None:
            self._notify(cur, run_id)

    async def due_runs(self, now: float, limit: int = 100) -> list[RunId]:
        sql = "SELECT run_id FROM runs WHERE status = 'waiting' AND wake_at IS NOT NULL "
        sql += "AND wake_at <= ? ORDER BY wake_at, run_id LIMIT ?"
        rows = await self._call(lambda cur: cur.all(sql, (now, limit)))
        return [RunId(r[0]) for r in rows]

    async def enqueue(self, run_id: RunId) -> None:
        def body(cur: Cursor, status: RunStatus) -> None:
            if status in TERMINAL_RUN:
                raise UsageError(f"run {run_id} is already {status}; nothing is left to run")
            cur.run(
                "UPDATE runs SET lease_until = 0 WHERE run_id = ? AND lease_until IS NULL",
                (run_id,),
            )
            if status is RunStatus.WAITING:
                self._wake(cur, run_id, time.time())
            else:
                self._notify(cur, run_id)

        await self._write(run_id, body)

    async def claim_run(
        self, worker_id: str, lease_seconds: float, only: ClaimFilter | None = None
    ) -> Claim | None:
        check_lease_seconds(lease_seconds)
        self._unfenced("claim runs")
        sql, which = (only or ClaimFilter()).claim(self.dialect.NOW, self.dialect.SKIP_LOCKED)

        def body(cur: Cursor) -> Any:
            cur.run(wake_due(self.dialect.NOW))  # timers that came: their runs are claimable now
            return cur.one(sql, (worker_id, lease_seconds, *which))

        row = await self._call(body, "write")
        if row is None:
            return None
        return Claim(run_id=RunId(row[0]), epoch=int(row[1]), owner=worker_id)

    async def unclaimable(self, only: ClaimFilter, limit: int = 10) -> list[tuple[RunId, str, str]]:
        sql, params = only.unclaimable(self.dialect.NOW, limit)
        return [(RunId(r[0]), r[1], r[2]) for r in await self._call(lambda c: c.all(sql, params))]

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
        now = self.dialect.NOW
        sql = (
            f"UPDATE runs SET owner = CASE WHEN lease_until IS NULL OR owner LIKE '{LOCAL}%' "
            f"THEN ? ELSE ? END, lease_epoch = lease_epoch + 1, lease_until = {now} + ? "
            f"WHERE run_id = ? AND (lease_until IS NULL OR lease_until <= {now} "
            "OR lease_epoch = ?) RETURNING lease_epoch, owner"
        )
        params = (
            holder.owner(LOCAL),
            holder.owner(QUEUED),
            lease_seconds,
            run_id,
            -1 if takeover is None else takeover,
        )

        def body(cur: Cursor, _: RunStatus) -> Claim:
            row = cur.one(sql, params)
            if row is not None:
                return Claim(run_id=run_id, epoch=int(row[0]), owner=str(row[1]))
            held = cur.one(
                f"SELECT owner, lease_until, lease_epoch, {now} FROM runs WHERE run_id = ?",
                (run_id,),
            )
            raise run_held(run_id, held[0], held[1], int(held[2]), float(held[3]))

        # Not fsynced on its own: the first write made under the lease is, and it makes
        # this commit durable too (the WAL is ordered); lost before that, nothing was lost.
        return await self._write(run_id, body, sync=False)

    async def heartbeat(self, run_id: RunId, epoch: int, lease_seconds: float) -> None:
        check_lease_seconds(lease_seconds)
        self._unfenced("heartbeat")
        sql = f"UPDATE runs SET lease_until = {self.dialect.NOW} + ? "
        sql += "WHERE run_id = ? AND lease_epoch = ?"

        def body(cur: Cursor) -> None:
            if cur.run(sql, (lease_seconds, run_id, epoch)) != 1:
                row = cur.one("SELECT lease_epoch, owner FROM runs WHERE run_id = ?", (run_id,))
                if row is None:
                    raise self._not_found(run_id)
                Fence(run_id=run_id, epoch=epoch).check_epoch(row[0], row[1])

        # Not fsynced: a heartbeat lost to a power cut only shortens the lease.
        await self._call(body, "write", sync=False)

    async def release(self, run_id: RunId, epoch: int) -> bool:
        self._unfenced("release leases")
        sql = (
            "UPDATE runs SET owner = NULL, lease_epoch = lease_epoch + 1, "
            f"lease_until = CASE WHEN owner LIKE '{LOCAL}%' THEN NULL ELSE 0 END "
            "WHERE run_id = ? AND lease_epoch = ? RETURNING status"
        )

        def body(cur: Cursor) -> bool:
            row = cur.one(sql, (run_id, epoch))
            if row is None:
                return False
            if row[0] == "waiting":
                self._wake(cur, run_id, time.time())
            elif row[0] == "running":
                self._notify(cur, run_id)
            return True

        return await self._call(body, "write")

