"""The embedded store: one SQLite file, WAL while running, whole again at every quiet point.

Durability: ``synchronous="full"`` (the default) fsyncs the WAL at every patch commit.
An event commit is not fsynced on its own: the WAL is ordered, so the patch commit that
follows it makes both durable with one fsync. ``kill -9`` loses nothing; a power cut
between the two loses the event, which is the same as a crash just before it (the task
runs again, its tool calls replayed from the effect journal).
"""

from __future__ import annotations

import asyncio
import copy
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from loopkernel.errors import (
    ApprovalRefused,
    ReplayDivergence,
    RunNotFound,
    SchemaTooNew,
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
from loopkernel.store import _sqlite_lease as _lease
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
    patch_from_row,
    patch_params,
    run_info_from_row,
    run_params,
    task_from_row,
    task_params,
    waiting_epoch,
    with_done_seq,
)
from loopkernel.store._fork import Fork, fork_statements
from loopkernel.store._lease import Fence, check_lease_seconds
from loopkernel.store._protocol import (
    Claim,
    EffectRecord,
    LoadedRun,
    NewEvent,
    PatchRecord,
    RunInfo,
)
from loopkernel.store._sqlite_schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["SQLiteStore"]

Synchronous = Literal["full", "normal"]

_UPSERT_TASK = (
    f"INSERT INTO tasks (run_id, {TASK_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (run_id, task_id) DO UPDATE SET state=excluded.state, "
    "result=excluded.result, error=excluded.error, attempts=excluded.attempts, "
    "wait_reason=excluded.wait_reason, human_input=excluded.human_input, "
    "wait_epoch=excluded.wait_epoch, done_seq=excluded.done_seq"
)


_EVIDENCE_BY_KEY = f"SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE run_id = ? AND ev_key = ?"


class SQLiteStore:
    """A ``Store`` in one SQLite file (``runs.db`` by default)."""

    def __init__(
        self, path: str | os.PathLike[str] = "runs.db", *, synchronous: Synchronous = "full"
    ):
        if synchronous not in ("full", "normal"):
            raise UsageError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self.synchronous = synchronous
        self._db: sqlite3.Connection | None = None
        self._fence: Fence | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- connection ------------------------------------------------------------------------

    async def open(self) -> None:
        self.open_sync()

    def open_sync(self) -> None:
        if self._db is not None:
            return
        if self.path.parent and not self.path.parent.exists():
            raise UsageError(f"no directory {self.path.parent} for the database {self.path}")
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout = 10000")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        self._db = db
        self._migrate()

    def _migrate(self) -> None:
        db = self._conn
        with self._tx():
            db.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"{self.path} has schema version {version}; this LoopKernel knows up to "
                    f"{SCHEMA_VERSION}. Upgrade loopkernel to open it.",
                    found=version,
                    known=SCHEMA_VERSION,
                )
            for statements in MIGRATIONS[version:]:
                for sql in statements:
                    db.execute(sql)
            if version < SCHEMA_VERSION:
                db.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(SCHEMA_VERSION),),
                )

    async def close(self) -> None:
        if self._db is None or self._fence is not None:  # a view leaves it to its store
            return
        self.checkpoint_sync()
        self._db.close()
        self._db = None

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise UsageError("the store is not open; call `await store.open()` first")
        return self._db

    @contextmanager
    def _tx(
        self, run_id: RunId | None = None, *, sync: bool = True
    ) -> Iterator[sqlite3.Connection]:
        """One write transaction, for ``run_id`` when it writes a run (a fenced view checks
        its lease epoch first, under the write lock). ``sync=False`` skips this commit's
        fsync (see module doc)."""
        db = self._conn
        deferred = not sync and self.synchronous == "full"
        if deferred:
            db.execute("PRAGMA synchronous = NORMAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            if self._fence is not None:
                self._check_fence(db, self._fence, run_id)
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        else:
            db.execute("COMMIT")
        finally:
            if deferred:
                db.execute("PRAGMA synchronous = FULL")

    async def checkpoint(self) -> None:
        self.checkpoint_sync()

    def checkpoint_sync(self) -> None:
        """Fold the WAL into the main file, so that copying the .db alone loses nothing."""
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

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
        with self._tx(run_id) as db:
            try:
                db.execute(
                    "INSERT INTO runs (run_id, app, params, status, verdict, max_events, "
                    "token_hash, created_at, updated_at, trace) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    run_params(run_id, app, params, max_events, token_hash, now, trace),
                )
            except sqlite3.IntegrityError:
                raise UsageError(
                    f"run {run_id} already exists in {self.path}; resume it or pick another id",
                    run_id=run_id,
                ) from None
            return self._append(
                db, run_id, [NewEvent(kind=EventKind.RUN_STARTED, data={"app": app})], now
            )[0]

    def _run_row(self, db: sqlite3.Connection, run_id: RunId) -> tuple[Any, ...]:
        row = db.execute(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id} in {self.path}", run_id=run_id)
        return tuple(row)

    def _info(self, db: sqlite3.Connection, row: tuple[Any, ...]) -> RunInfo:
        run_id = RunId(row[0])
        counts = dict(
            db.execute(
                "SELECT state, COUNT(*) FROM tasks WHERE run_id = ? GROUP BY state", (run_id,)
            ).fetchall()
        )
        return run_info_from_row(row, last_seq=self._last_seq(db, run_id), task_counts=counts)

    async def get_run(self, run_id: RunId) -> RunInfo:
        db = self._conn
        return self._info(db, self._run_row(db, run_id))

    async def list_runs(self, limit: int = 100) -> list[RunInfo]:
        db = self._conn
        rows = db.execute(
            f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [self._info(db, tuple(r)) for r in rows]

    async def token_hash(self, run_id: RunId) -> str:
        row = self._conn.execute(
            "SELECT token_hash FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id} in {self.path}", run_id=run_id)
        return str(row[0])

    async def load_run(self, run_id: RunId) -> LoadedRun:
        db = self._conn
        db.execute("BEGIN")  # one read snapshot
        try:
            info = self._info(db, self._run_row(db, run_id))
            state = GraphState(
                run_id=run_id,
                app=info.app,
                params=info.params,
                status=info.status,
                verdict=info.verdict,
            )
            for row in db.execute(
                f"SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ? ORDER BY task_id", (run_id,)
            ):
                task = task_from_row(row)
                state.tasks[task.task_id] = task
            for src, dst in db.execute(
                "SELECT src, dst FROM edges WHERE run_id = ? ORDER BY src, dst", (run_id,)
            ):
                state.succs.setdefault(TaskId(src), []).append(TaskId(dst))
                state.preds.setdefault(TaskId(dst), []).append(TaskId(src))
            unplanned = tuple(
                event_from_row(run_id, row)
                for row in db.execute(
                    "SELECT e.seq, e.kind, e.task_id, e.data FROM events e "
                    "LEFT JOIN patches p ON p.run_id = e.run_id AND p.event_seq = e.seq "
                    "WHERE e.run_id = ? AND p.event_seq IS NULL ORDER BY e.seq",
                    (run_id,),
                )
            )
        finally:
            db.execute("COMMIT")
        return LoadedRun(info=info, state=state, unplanned=unplanned)

    async def set_status(self, run_id: RunId, status: RunStatus, verdict: JSON = None) -> None:
        if status in TERMINAL_RUN:
            raise UsageError("a run ends through a finish patch, not set_status")
        with self._tx(run_id) as db:
            self._run_row(db, run_id)
            db.execute(
                "UPDATE runs SET status = ?, verdict = ?, updated_at = ? WHERE run_id = ?",
                (status.value, dumps(verdict), time.time(), run_id),
            )
        if status is RunStatus.WAITING:
            self.checkpoint_sync()

    # -- the journal -----------------------------------------------------------------------

    def _last_seq(self, db: sqlite3.Connection, run_id: RunId) -> int:
        row = db.execute("SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0] or 0)

    def _append(
        self, db: sqlite3.Connection, run_id: RunId, events: Sequence[NewEvent], now: float
    ) -> list[Event]:
        exists, last = db.execute(
            "SELECT (SELECT 1 FROM runs WHERE run_id = ?), "
            "(SELECT MAX(seq) FROM events WHERE run_id = ?)",
            (run_id, run_id),
        ).fetchone()
        if exists is None:
            raise RunNotFound(f"no run {run_id} in {self.path}", run_id=run_id)
        seq = int(last or 0)
        out: list[Event] = []
        rows = []
        for ev in events:
            seq += 1
            rows.append((run_id, seq, ev.kind.value, ev.task_id, dumps(ev.data), now))
            out.append(
                Event(run_id=run_id, seq=seq, kind=ev.kind, task_id=ev.task_id, data=ev.data)
            )
        db.executemany(
            "INSERT INTO events (run_id, seq, kind, task_id, data, created_at) "
            "VALUES (?,?,?,?,?,?)",
            rows,
        )
        return out

    async def last_seq(self, run_id: RunId) -> int:
        return self._last_seq(self._conn, run_id)

    async def append_events(
        self, run_id: RunId, events: Sequence[NewEvent], tasks: Sequence[Task] = ()
    ) -> list[Event]:
        now = time.time()
        with self._tx(run_id, sync=False) as db:
            out = self._append(db, run_id, events, now)
            db.executemany(
                _UPSERT_TASK, [task_params(run_id, t) for t in with_done_seq(tasks, out)]
            )
        return out

    async def commit_patches(
        self,
        run_id: RunId,
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None = None,
    ) -> Event | None:
        now = time.time()
        final_event: Event | None = None
        with self._tx(run_id) as db:
            try:
                db.executemany(
                    f"INSERT INTO patches (run_id, {PATCH_COLUMNS}, created_at) "
                    "VALUES (?,?,?,?,?,?,?,?)",
                    [patch_params(run_id, r, now) for r in records],
                )
            except sqlite3.IntegrityError:
                raise ReplayDivergence(
                    f"run {run_id}: an event in seqs {[r.event_seq for r in records]} already "
                    "has a patch; another executor is planning this run",
                    run_id=run_id,
                ) from None
            if delta.tasks:
                db.executemany(_UPSERT_TASK, [task_params(run_id, t) for t in delta.tasks])
            if delta.edges:
                db.executemany(
                    "INSERT INTO edges (run_id, src, dst) VALUES (?,?,?)",
                    [(run_id, s, d) for s, d in delta.edges],
                )
            if delta.finish is not None:
                status, verdict = delta.finish
                db.execute(
                    "UPDATE runs SET status = ?, verdict = ?, updated_at = ? WHERE run_id = ?",
                    (status.value, dumps(verdict), now, run_id),
                )
                if final is not None:
                    final_event = self._append(db, run_id, [final], now)[0]
        if delta.finish is not None:
            self.checkpoint_sync()
        return final_event

    async def events(self, run_id: RunId, after: int = 0) -> list[Event]:
        return [
            event_from_row(run_id, row)
            for row in self._conn.execute(
                "SELECT seq, kind, task_id, data FROM events WHERE run_id = ? AND seq > ? "
                "ORDER BY seq",
                (run_id, after),
            )
        ]

    async def patches(self, run_id: RunId) -> list[PatchRecord]:
        return [
            patch_from_row(r)
            for r in self._conn.execute(
                f"SELECT {PATCH_COLUMNS} FROM patches WHERE run_id = ? ORDER BY event_seq",
                (run_id,),
            )
        ]

    async def add_human_input(
        self,
        run_id: RunId,
        task_id: TaskId,
        *,
        decision: Literal["approve", "reject"],
        payload: JSON,
    ) -> Event:
        check_decision(decision)
        with self._tx(run_id) as db:
            run = self._run_row(db, run_id)
            if RunStatus(run[3]) in TERMINAL_RUN:
                raise ApprovalRefused(f"run {run_id} is already {run[3]}", run_id=run_id)
            row = db.execute(
                "SELECT state, wait_epoch FROM tasks WHERE run_id = ? AND task_id = ?",
                (run_id, task_id),
            ).fetchone()
            epoch = waiting_epoch(run_id, task_id, row)
            event = self._append(
                db, run_id, [human_input_event(task_id, decision, payload, epoch)], time.time()
            )[0]
            try:
                db.execute(
                    "INSERT INTO approvals (run_id, task_id, wait_epoch, decision, event_seq) "
                    "VALUES (?,?,?,?,?)",
                    (run_id, task_id, epoch, decision, event.seq),
                )
            except sqlite3.IntegrityError:
                raise ApprovalRefused(
                    f"task {task_id!r} wait #{epoch} was already answered; a replayed approval "
                    "is refused",
                    run_id=run_id,
                    task_id=task_id,
                ) from None
            _lease.wake(db, run_id)
        return event

    async def request_cancel(self, run_id: RunId, reason: str) -> Event:
        with self._tx(run_id) as db:
            run = self._run_row(db, run_id)
            if RunStatus(run[3]) in TERMINAL_RUN:
                raise UsageError(f"run {run_id} is already {run[3]}", run_id=run_id)
            event = self._append(
                db,
                run_id,
                [NewEvent(kind=EventKind.CANCEL_REQUESTED, data={"reason": reason})],
                time.time(),
            )[0]
            _lease.wake(db, run_id)
        return event

    # -- effects ---------------------------------------------------------------------------

    async def get_effect(self, run_id: RunId, key: str) -> EffectRecord | None:
        row = self._conn.execute(
            f"SELECT {EFFECT_COLUMNS} FROM effects WHERE run_id = ? AND idem_key = ?",
            (run_id, key),
        ).fetchone()
        return None if row is None else effect_from_row(row)

    async def intend_effect(self, record: EffectRecord) -> EffectRecord:
        now = time.time()
        # Not fsynced on its own: the key is a function of (run, task, index), so a lost
        # intent changes nothing a re-send does; the result commit that follows is fsynced.
        with self._tx(record.run_id, sync=False) as db:
            db.execute(
                f"INSERT INTO effects ({EFFECT_COLUMNS}, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (run_id, idem_key) DO NOTHING",
                effect_params(record, now),
            )
            row = db.execute(
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE run_id = ? AND idem_key = ?",
                (record.run_id, record.key),
            ).fetchone()
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
        with self._tx(run_id) as db:
            cur = db.execute(
                "UPDATE effects SET status = ?, result = ?, error = ?, updated_at = ? "
                "WHERE run_id = ? AND idem_key = ? AND status = 'intended'",
                (status, dumps(result), dumps(error), time.time(), run_id, key),
            )
            if cur.rowcount != 1:
                raise ReplayDivergence(
                    f"effect {key} of run {run_id} is not intended (missing or already finished)",
                    run_id=run_id,
                    key=key,
                )

    async def effects(self, run_id: RunId) -> list[EffectRecord]:
        return [
            effect_from_row(r)
            for r in self._conn.execute(
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE run_id = ? "
                "ORDER BY task_id, call_index",
                (run_id,),
            )
        ]

    # -- evidence --------------------------------------------------------------------------

    async def add_evidence(
        self, run_id: RunId, item: NewEvidence, *, max_item_chars: int, max_run_chars: int
    ) -> Evidence:
        with self._tx(run_id) as db:
            row = db.execute(_EVIDENCE_BY_KEY, (run_id, item.key)).fetchone()
            if row is None:
                self._run_row(db, run_id)
                n, used = db.execute(
                    "SELECT COALESCE(MAX(n), 0), COALESCE(SUM(LENGTH(content)), 0) "
                    "FROM evidence WHERE run_id = ?",
                    (run_id,),
                ).fetchone()
                params = evidence_params(
                    run_id,
                    n + 1,
                    item,
                    item_cap=max_item_chars,
                    room=max_run_chars - used,
                    now=time.time(),
                )
                db.execute(
                    f"INSERT INTO evidence (run_id, ev_key, {EVIDENCE_COLUMNS}, created_at) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    params,
                )
                row = db.execute(_EVIDENCE_BY_KEY, (run_id, item.key)).fetchone()
        return evidence_from_row(row)

    async def evidence(self, run_id: RunId) -> list[Evidence]:
        return [
            evidence_from_row(r)
            for r in self._conn.execute(
                f"SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE run_id = ? ORDER BY n", (run_id,)
            )
        ]

    # -- whole-run views -------------------------------------------------------------------

    async def dump(self, run_id: RunId) -> dict[str, JSON]:
        db = self._conn
        db.execute("BEGIN")
        try:
            run = self._run_row(db, run_id)
            tasks = db.execute(
                f"SELECT {DUMP_TASK_COLUMNS} FROM tasks WHERE run_id = ? ORDER BY task_id",
                (run_id,),
            ).fetchall()
            edges = db.execute(
                "SELECT src, dst FROM edges WHERE run_id = ? ORDER BY src, dst", (run_id,)
            ).fetchall()
            effects = db.execute(
                f"SELECT {DUMP_EFFECT_COLUMNS} FROM effects WHERE run_id = ? "
                "ORDER BY task_id, call_index",
                (run_id,),
            ).fetchall()
        finally:
            db.execute("COMMIT")
        return dump_of(run, tasks, edges, effects)

    # -- forks (docs/fork.md) --------------------------------------------------------------

    async def fork_run(self, fork: Fork) -> RunInfo:
        with self._tx(fork.run_id) as db:
            self._run_row(db, fork.source.run_id)
            try:
                for sql, rows in fork_statements(fork, time.time()):
                    db.executemany(sql, rows)
            except sqlite3.IntegrityError:
                raise UsageError(
                    f"run {fork.run_id} already exists in {self.path}; pick another id",
                    run_id=fork.run_id,
                ) from None
        return await self.get_run(fork.run_id)

    async def origin(self, run_id: RunId) -> tuple[RunId, int] | None:
        row = self._conn.execute(
            "SELECT source_run, source_seq FROM forks WHERE run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None else (RunId(row[0]), int(row[1]))

    # -- workers: leases and fencing (docs/workers.md) --------------------------------------

    def fenced(self, run_id: RunId, epoch: int) -> SQLiteStore:
        view = copy.copy(self)
        view._fence = Fence(run_id=run_id, epoch=epoch)
        return view

    def _check_fence(self, db: sqlite3.Connection, fence: Fence, run_id: RunId | None) -> None:
        if run_id is None:
            raise UsageError(f"a store view fenced to run {fence.run_id} writes that run only")
        fence.check_run(run_id)
        found = _lease.lease_of(db, run_id)
        if found is None:
            raise RunNotFound(f"no run {run_id} in {self.path}", run_id=run_id)
        fence.check_epoch(*found)

    async def enqueue(self, run_id: RunId) -> None:
        with self._tx(run_id) as db:
            status = RunStatus(self._run_row(db, run_id)[3])
            if status in TERMINAL_RUN:
                raise UsageError(f"run {run_id} is already {status}; nothing is left to run")
            _lease.enqueue(db, run_id)

    async def claim_run(self, worker_id: str, lease_seconds: float) -> Claim | None:
        check_lease_seconds(lease_seconds)
        with self._tx() as db:
            return _lease.claim(db, worker_id, lease_seconds)

    async def heartbeat(self, run_id: RunId, epoch: int, lease_seconds: float) -> None:
        check_lease_seconds(lease_seconds)
        # Not fsynced: a heartbeat lost to a power cut only shortens the lease.
        with self._tx(sync=False) as db:
            if not _lease.extend(db, run_id, epoch, lease_seconds):
                self._check_fence(db, Fence(run_id=run_id, epoch=epoch), run_id)

    async def release(self, run_id: RunId, epoch: int) -> bool:
        with self._tx() as db:
            return _lease.release(db, run_id, epoch)

    async def wait_for_work(self, seconds: float) -> None:
        """SQLite has no notifications: this is the polling interval."""
        await asyncio.sleep(seconds)

    def export_sync(self, run_id: RunId, to: str | os.PathLike[str]) -> None:
        """Write a consistent copy holding ``run_id`` alone, with the SQLite backup API."""
        target = Path(to)
        if target.exists():
            raise UsageError(f"{target} exists; export writes a new file")
        self._run_row(self._conn, run_id)
        dest = sqlite3.connect(target, isolation_level=None)
        try:
            self._conn.backup(dest)
            dest.execute("BEGIN")
            for table in (
                "runs",
                "tasks",
                "edges",
                "events",
                "patches",
                "approvals",
                "effects",
                "forks",
            ):
                dest.execute(f"DELETE FROM {table} WHERE run_id != ?", (run_id,))
            dest.execute("COMMIT")
            dest.execute("PRAGMA journal_mode = DELETE")
            dest.execute("VACUUM")
        finally:
            dest.close()
