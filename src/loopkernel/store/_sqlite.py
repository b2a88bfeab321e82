"""The embedded store: one SQLite file, WAL while running, whole again at every quiet point.

Durability: ``synchronous="full"`` (the default) fsyncs the WAL at every patch commit.
A step is usually one such commit (``commit_step``: its events, tasks and patches). An
event commit of its own (``append_events``) is not fsynced: the WAL is ordered, so the
patch commit that follows it makes both durable with one fsync. ``kill -9`` loses
nothing; a power cut between the two loses the event, which is the same as a crash just
before it (the task runs again, its tool calls replayed from the effect journal).

Faults that pass (the write lock held past ``busy_timeout``, a full disk, an I/O error)
come out of every method as ``StoreUnavailable``, the transaction rolled back; the
executor retries, then leaves the run resumable. The checkpoints at quiet points and at
``close`` are best effort: a WAL that could not be folded in is complete on its own and
is folded in at the next open.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from loopkernel.errors import (
    ApprovalRefused,
    NotADatabase,
    ReplayDivergence,
    RunNotFound,
    SchemaTooNew,
    StoreError,
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
from loopkernel.store import _sqlite_lease as _lease
from loopkernel.store._codec import (
    DUMP_EFFECT_COLUMNS,
    DUMP_TASK_COLUMNS,
    EFFECT_COLUMNS,
    EVIDENCE_COLUMNS,
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
from loopkernel.store._fork import Fork, fork_statements
from loopkernel.store._lease import Fence, Holder, check_lease_seconds, run_held
from loopkernel.store._protocol import (
    Claim,
    EffectRecord,
    LoadedRun,
    NewEvent,
    PatchRecord,
    RunInfo,
)
from loopkernel.store._sqlite_schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["APPLICATION_ID", "SQLiteStore"]

APPLICATION_ID = 0x4C4B524E
"""``PRAGMA application_id`` of a LoopKernel database ("LKRN"): how ``open`` knows a file
is ours before it writes anything to it."""

_SQLITE_HEADER = b"SQLite format 3\x00"


def _prepare_file(path: Path, *, create: bool) -> bool:
    """Check what is at ``path`` before SQLite touches it; make a new file 0600 (it will
    hold results and tool outputs) when ``create``. True if the database is new."""
    if path.is_dir():
        raise NotADatabase(f"{path} is a directory, not a LoopKernel database", path=str(path))
    wal = path.with_name(path.name + "-wal")
    empty = path.is_file() and path.stat().st_size == 0
    if not path.exists() or (empty and not (wal.is_file() and wal.stat().st_size > 0)):
        if not create:
            raise NotADatabase(f"no LoopKernel database at {path}", path=str(path))
        if not path.parent.is_dir():
            raise UsageError(f"no directory {path.parent} for the database {path}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError as exc:
            raise NotADatabase(f"cannot create {path}: {exc.strerror}", path=str(path)) from None
        os.close(fd)
        return True
    try:
        with open(path, "rb") as f:
            header = f.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise NotADatabase(f"cannot read {path}: {exc.strerror}", path=str(path)) from None
    if header != _SQLITE_HEADER and not empty:
        raise NotADatabase(f"{path} is not a SQLite database", path=str(path))
    return False


def _check_ours(db: sqlite3.Connection, path: Path, *, create: bool) -> None:
    """Refuse a SQLite file of another application before anything is written to it."""
    (app_id,) = db.execute("PRAGMA application_id").fetchone()
    if app_id == APPLICATION_ID:
        return
    tables = {
        name
        for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    if app_id == 0 and "meta" in tables and "runs" in tables:
        return  # written before LoopKernel set its application_id
    if app_id == 0 and not tables:
        if create:
            return
        raise NotADatabase(f"no LoopKernel database at {path} (empty)", path=str(path))
    shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    raise NotADatabase(
        f"{path} is another application's SQLite database "
        f"({f'tables: {shown}' if tables else f'application_id {app_id:#x}'}); "
        "LoopKernel leaves it untouched",
        path=str(path),
    )


def _not_usable(path: Path, exc: sqlite3.DatabaseError) -> StoreError:
    """What a SQLite error while opening means: the database is busy or the disk is in
    trouble (``StoreUnavailable``: try again), or the file cannot serve (``NotADatabase``)."""
    text = str(exc)
    why = transient(exc)
    if why is not None or any(word in text for word in ("locked", "busy", "disk I/O", "full")):
        return StoreUnavailable(f"{path}: {why or text} ({text})", path=str(path), reason=why)
    if "readonly" in text or "read-only" in text:
        text = "read-only: LoopKernel needs to write to it and to its directory"
    elif "not a database" in text or "malformed" in text:
        text = f"corrupt ({text})"
    return NotADatabase(f"{path} is not a usable LoopKernel database: {text}", path=str(path))


Synchronous = Literal["full", "normal"]

DEFAULT_BUSY_TIMEOUT = 10.0
"""Seconds a write waits for another process's write lock before it is ``StoreUnavailable``."""

# Primary result codes of faults that pass: retrying later is right (sqlite.org/rescode.html).
_TRANSIENT = {
    5: "the database is locked by another process",  # SQLITE_BUSY
    6: "a table is locked",  # SQLITE_LOCKED
    7: "out of memory",  # SQLITE_NOMEM
    10: "disk I/O error",  # SQLITE_IOERR
    13: "the disk is full",  # SQLITE_FULL
    15: "the file lock protocol failed",  # SQLITE_PROTOCOL
}

_P = ParamSpec("_P")
_R = TypeVar("_R")


def transient(exc: BaseException) -> str | None:
    """Why ``exc`` is a passing SQLite fault (locked, full, I/O), or ``None``."""
    if not isinstance(exc, sqlite3.OperationalError | sqlite3.InternalError):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        text = str(exc)
        return "the database is locked by another process" if "locked" in text else None
    return _TRANSIENT.get(code & 0xFF)


def _guarded(
    method: Callable[Concatenate[SQLiteStore, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[SQLiteStore, _P], Coroutine[Any, Any, _R]]:
    """Turn a passing SQLite fault inside ``method`` into ``StoreUnavailable``."""

    @functools.wraps(method)
    async def guarded(self: SQLiteStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc

    return guarded


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
        self,
        path: str | os.PathLike[str] = "runs.db",
        *,
        synchronous: Synchronous = "full",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ):
        if synchronous not in ("full", "normal"):
            raise UsageError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        if not busy_timeout >= 0:
            raise UsageError(f"busy_timeout must be >= 0 seconds, not {busy_timeout!r}")
        self.path = Path(path)
        self.create = create
        """Whether ``open`` may make a new database; ``False``: only open an existing one."""
        self.url = f"sqlite:///{self.path}"
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.checkpoint_error: str | None = None
        """Why the last best-effort checkpoint failed (the WAL then holds the rest)."""
        self._db: sqlite3.Connection | None = None
        self._fence: Fence | None = None
        self._watch: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- connection ------------------------------------------------------------------------

    def _unavailable(self, exc: sqlite3.Error) -> Exception:
        """``StoreUnavailable`` for a passing fault, ``NotADatabase`` for a file that cannot
        be written (read-only, immutable); any other SQLite error as it is."""
        why = transient(exc)
        if why is None:
            if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == 8:  # SQLITE_READONLY
                return NotADatabase(
                    f"{self.path} is not a usable LoopKernel database: read-only (LoopKernel "
                    "needs to write to it and to its directory)",
                    path=str(self.path),
                )
            return exc
        return StoreUnavailable(
            f"SQLite {self.path}: {why} ({' '.join(str(exc).split())})",
            url=self.url,
            reason=why,
        )

    async def open(self) -> None:
        try:
            self.open_sync()
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc

    def open_sync(self) -> None:
        if self._db is not None:
            return
        fresh = _prepare_file(self.path, create=self.create)
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise NotADatabase(f"cannot open {self.path}: {exc}", path=str(self.path)) from None
        try:
            db.execute(f"PRAGMA busy_timeout = {round(self.busy_timeout * 1000)}")
            if not fresh:
                _check_ours(db, self.path, create=self.create)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            self._db = db
            self._migrate()
        except sqlite3.DatabaseError as exc:
            db.close()
            self._db = None
            raise _not_usable(self.path, exc) from None
        except BaseException:
            db.close()
            self._db = None
            raise

    def _migrate(self) -> None:
        db = self._conn
        with self._tx():
            db.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            try:
                version = int(row[0]) if row else 0
            except (TypeError, ValueError):
                raise NotADatabase(
                    f"{self.path} has a damaged meta table (schema_version {row[0]!r})",
                    path=str(self.path),
                ) from None
            if version < 0:
                raise NotADatabase(
                    f"{self.path} has a damaged meta table (schema_version {version})",
                    path=str(self.path),
                )
            if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                # Only when it differs: an open writes nothing (a full disk still reads).
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
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
        try:
            self._checkpoint_quietly()
        finally:
            db, self._db = self._db, None
            db.close()
            if self._watch is not None:
                self._watch.close()
                self._watch = None

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
            db.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (a full disk, an I/O error); the
            # original error is the one to report.
            if db.in_transaction:
                with suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        finally:
            if deferred:
                with suppress(sqlite3.Error):
                    db.execute("PRAGMA synchronous = FULL")

    @_guarded
    async def checkpoint(self) -> None:
        self.checkpoint_sync()

    def checkpoint_sync(self) -> None:
        """Fold the WAL into the main file, so that copying the .db alone loses nothing."""
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _checkpoint_quietly(self) -> None:
        """The checkpoint of a quiet point: a failure (a full disk, a reader) is no fault of
        the run, whose commit is already durable in the WAL; it is kept in
        ``checkpoint_error`` and the WAL is folded in at a later checkpoint or open."""
        try:
            self.checkpoint_sync()
        except sqlite3.Error as exc:
            if transient(exc) is None:
                raise
            self.checkpoint_error = " ".join(str(exc).split())
        else:
            self.checkpoint_error = None

    # -- runs ------------------------------------------------------------------------------

    @_guarded
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

    @_guarded
    async def get_run(self, run_id: RunId) -> RunInfo:
        db = self._conn
        return self._info(db, self._run_row(db, run_id))

    @_guarded
    async def list_runs(
        self,
        limit: int = 100,
        *,
        status: RunStatus | None = None,
        app: str | None = None,
        before: tuple[float, str] | None = None,
    ) -> list[RunInfo]:
        db = self._conn
        where, params = run_page_filter(status, app, before, "?")
        rows = db.execute(
            f"SELECT {RUN_COLUMNS} FROM runs{where} ORDER BY created_at DESC, run_id DESC LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [self._info(db, tuple(r)) for r in rows]

    @_guarded
    async def delete_run(self, run_id: RunId) -> None:
        if self._fence is not None:
            raise UsageError(f"a store view fenced to run {self._fence.run_id} deletes no run")
        with self._tx() as db:
            row = db.execute(
                "SELECT owner, lease_until, lease_epoch FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id} in {self.path}", run_id=run_id)
            now = time.time()
            if row[0] is not None and row[1] is not None and row[1] > now:
                raise run_held(run_id, row[0], row[1], int(row[2]), now)
            tables = [
                str(name)
                for (name,) in db.execute(
                    "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c "
                    "WHERE m.type = 'table' AND c.name = 'run_id' AND m.name != 'runs' "
                    "ORDER BY m.name"
                )
            ]
            for table in tables:  # every table that holds rows of runs, found, not listed
                db.execute(f'DELETE FROM "{table}" WHERE run_id = ?', (run_id,))
            db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        self._checkpoint_quietly()  # the .db alone stays a complete copy

    @_guarded
    async def token_hash(self, run_id: RunId) -> str:
        row = self._conn.execute(
            "SELECT token_hash FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id} in {self.path}", run_id=run_id)
        return str(row[0])

    @_guarded
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
            state.link(
                db.execute(
                    "SELECT src, dst FROM edges WHERE run_id = ? ORDER BY src, dst", (run_id,)
                )
            )
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

    @_guarded
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
            self._checkpoint_quietly()

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

    @_guarded
    async def last_seq(self, run_id: RunId) -> int:
        return self._last_seq(self._conn, run_id)

    @_guarded
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

    @_guarded
    async def commit_patches(
        self,
        run_id: RunId,
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None = None,
    ) -> Event | None:
        return (await self.commit_step(run_id, (), records, delta, final))[1]

    @_guarded
    async def commit_step(
        self,
        run_id: RunId,
        journal: Sequence[Event],
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None = None,
    ) -> tuple[list[Event], Event | None]:
        now = time.time()
        with self._tx(run_id) as db:
            out = self._append(db, run_id, [as_new(e) for e in journal], now) if journal else []
            records, delta = rebase_step(journal, out, records, delta)
            final_event = self._write_patches(db, run_id, records, delta, final, now)
        if delta.finish is not None:
            self._checkpoint_quietly()
        return out, final_event

    def _write_patches(
        self,
        db: sqlite3.Connection,
        run_id: RunId,
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None,
        now: float,
    ) -> Event | None:
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
        if delta.finish is None:
            return None
        status, verdict = delta.finish
        db.execute(
            "UPDATE runs SET status = ?, verdict = ?, updated_at = ? WHERE run_id = ?",
            (status.value, dumps(verdict), now, run_id),
        )
        return None if final is None else self._append(db, run_id, [final], now)[0]

    @_guarded
    async def events(self, run_id: RunId, after: int = 0) -> list[Event]:
        return [
            event_from_row(run_id, row)
            for row in self._conn.execute(
                "SELECT seq, kind, task_id, data FROM events WHERE run_id = ? AND seq > ? "
                "ORDER BY seq",
                (run_id, after),
            )
        ]

    @_guarded
    async def patches(self, run_id: RunId, after: int = 0) -> list[PatchRecord]:
        return [
            patch_from_row(r)
            for r in self._conn.execute(
                f"SELECT {PATCH_COLUMNS} FROM patches WHERE run_id = ? AND event_seq > ? "
                "ORDER BY event_seq",
                (run_id, after),
            )
        ]

    @_guarded
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

    @_guarded
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

    @_guarded
    async def get_effect(self, run_id: RunId, key: str) -> EffectRecord | None:
        row = self._conn.execute(
            f"SELECT {EFFECT_COLUMNS} FROM effects WHERE run_id = ? AND idem_key = ?",
            (run_id, key),
        ).fetchone()
        return None if row is None else effect_from_row(row)

    @_guarded
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

    @_guarded
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

    @_guarded
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

    @_guarded
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

    @_guarded
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

    @_guarded
    async def origin(self, run_id: RunId) -> tuple[RunId, int] | None:
        row = self._conn.execute(
            "SELECT source_run, source_seq FROM forks WHERE run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None else (RunId(row[0]), int(row[1]))

    # -- reading back evicted tasks (Kernel(keep_finished=...)) -----------------------------

    def archive(self, run_id: RunId) -> SQLiteArchive:
        """The run's tasks read back synchronously, for an executor that evicts finished
        tasks from memory: SQLite answers in the executor's own thread."""
        return SQLiteArchive(self, run_id)

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

    @_guarded
    async def enqueue(self, run_id: RunId) -> None:
        with self._tx(run_id) as db:
            status = RunStatus(self._run_row(db, run_id)[3])
            if status in TERMINAL_RUN:
                raise UsageError(f"run {run_id} is already {status}; nothing is left to run")
            _lease.enqueue(db, run_id)

    @_guarded
    async def claim_run(self, worker_id: str, lease_seconds: float) -> Claim | None:
        check_lease_seconds(lease_seconds)
        with self._tx() as db:
            return _lease.claim(db, worker_id, lease_seconds)

    @_guarded
    async def acquire(
        self,
        run_id: RunId,
        holder: Holder,
        lease_seconds: float,
        *,
        takeover: int | None = None,
    ) -> Claim:
        check_lease_seconds(lease_seconds)
        # Not fsynced on its own: the first write made under the lease is, and it makes
        # this commit durable too (the WAL is ordered); lost before that, nothing was lost.
        with self._tx(sync=False) as db:
            got = _lease.acquire(db, run_id, holder, lease_seconds, takeover)
        if got is None:
            raise RunNotFound(f"no run {run_id} in {self.path}", run_id=run_id)
        return got

    @_guarded
    async def heartbeat(self, run_id: RunId, epoch: int, lease_seconds: float) -> None:
        check_lease_seconds(lease_seconds)
        # Not fsynced: a heartbeat lost to a power cut only shortens the lease.
        with self._tx(sync=False) as db:
            if not _lease.extend(db, run_id, epoch, lease_seconds):
                self._check_fence(db, Fence(run_id=run_id, epoch=epoch), run_id)

    @_guarded
    async def release(self, run_id: RunId, epoch: int) -> bool:
        with self._tx() as db:
            return _lease.release(db, run_id, epoch)

    async def wait_for_journal(self, seconds: float) -> None:
        """Poll ``PRAGMA data_version`` every 20 ms on a connection of its own: it changes
        when any other connection (this store's included) commits. It reads a counter in
        shared memory and takes no lock, so a writer is never held up."""
        if self._watch is None:
            self._conn  # noqa: B018 -- an open store only
            self._watch = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        watch = self._watch
        start = watch.execute("PRAGMA data_version").fetchone()[0]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
            if watch.execute("PRAGMA data_version").fetchone()[0] != start:
                return

    async def wait_for_work(self, seconds: float) -> None:
        """SQLite has no notifications: this is the polling interval."""
        await asyncio.sleep(seconds)

    def export_sync(self, run_id: RunId, to: str | os.PathLike[str]) -> None:
        """Write a consistent copy holding ``run_id`` alone, with the SQLite backup API."""
        target = Path(to)
        if target.exists():
            raise UsageError(f"{target} exists; export writes a new file")
        if not target.parent.is_dir():
            raise UsageError(f"no directory {target.parent} for the export {target}")
        self._run_row(self._conn, run_id)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
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


class SQLiteArchive:
    """``Archive`` on a ``SQLiteStore``: what the store committed of one run's tasks."""

    def __init__(self, store: SQLiteStore, run_id: RunId) -> None:
        self._store = store
        self._run_id = run_id

    def _rows(self, sql: str, *args: object) -> list[Any]:
        try:
            return self._store._conn.execute(sql, (self._run_id, *args)).fetchall()
        except sqlite3.Error as exc:
            raise self._store._unavailable(exc) from exc

    def task(self, task_id: TaskId) -> Task | None:
        rows = self._rows(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ? AND task_id = ?", task_id
        )
        return task_from_row(rows[0]) if rows else None

    def tasks(self) -> list[Task]:
        sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ? ORDER BY task_id"
        return [task_from_row(row) for row in self._rows(sql)]

    def edges(self, task_id: TaskId) -> tuple[list[TaskId], list[TaskId]]:
        # By destination there is no index (a step would pay for it): a scan of the run's
        # edges, for the rare read of an evicted task's predecessors.
        sql = "SELECT {0} FROM edges WHERE run_id = ? AND {1} = ? ORDER BY {0}"
        before = self._rows(sql.format("src", "dst"), task_id)
        after = self._rows(sql.format("dst", "src"), task_id)
        return [TaskId(r[0]) for r in before], [TaskId(r[0]) for r in after]

    def all_edges(self) -> list[tuple[TaskId, TaskId]]:
        rows = self._rows("SELECT src, dst FROM edges WHERE run_id = ? ORDER BY src, dst")
        return [(TaskId(a), TaskId(b)) for a, b in rows]
