"""The embedded store: one SQLite file, WAL while running, whole again at every quiet point.

Every statement runs on the store's one connection (the engine, ``_engine``), and the
event loop never waits for SQLite: reads, fsynced commits, checkpoints and bulk copies
run on the store's one thread; a small write that cannot wait runs on the loop itself
when that thread is idle (a thread hop costs more than such a write). It cannot wait
because SQLite's busy handler is off (a held lock fails at once; the engine retries with
an async backoff for ``lock_wait_s`` seconds in all), its commit is not fsynced
(``synchronous`` NORMAL, or a write that is not synced on its own), and automatic
checkpoints are off: the thread folds the WAL in once it passes 4 MiB, and at every
quiet point.

Durability: ``synchronous="full"`` (the default) fsyncs the WAL at every patch commit.
A step is usually one such commit (``commit_step``: its events, tasks and patches). An
event commit of its own (``append_events``) is not fsynced: the WAL is ordered, so the
patch commit that follows it makes both durable with one fsync. ``kill -9`` loses
nothing; a power cut between the two loses the event, which is the same as a crash just
before it (the task runs again, its tool calls replayed from the effect journal).

Many runs in one process share those fsyncs: the steps' commits that queue up while the
thread commits one are committed together, one transaction and one fsync for all, and
each step is answered only once the commit holding it is durable (group commit:
``_writer``).

Faults that pass (the write lock held past ``lock_wait_s``, a full disk, an I/O error)
come out of every method as ``StoreUnavailable``, the transaction rolled back; a corrupt
or read-only file as ``NotADatabase``. The checkpoints at quiet points and at ``close``
are best effort: a WAL that could not be folded in is complete on its own and is folded
in at the next open.

A new database file is made ``0600`` (it holds results and tool outputs). An existing
*empty* file given as the database is made ``0600`` before anything is written to it, or
refused if that cannot be done (``NotADatabase``): it would otherwise stay readable by
everyone.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import time
import warnings
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from loopkernel.errors import NotADatabase, StoreError, StoreUnavailable, UsageError
from loopkernel.graph import Task
from loopkernel.ids import RunId, TaskId
from loopkernel.store._codec import TASK_COLUMNS, task_from_row
from loopkernel.store._damage import Check, check_of_env, content_damage, damaged, walk
from loopkernel.store._engine import (
    Cursor,
    Dialect,
    DuplicateKey,
    How,
    LockHeld,
    SQLStore,
    check_version,
    migrate,
    transact,
)
from loopkernel.store._kb import SQLITE_TEXT, KnowledgeRows
from loopkernel.store._lockwait import DEFAULT_LOCK_WAIT_S
from loopkernel.store._protocol import Reclaimed
from loopkernel.store._reader import SQLiteReader
from loopkernel.store._schema import SQLITE_MIGRATIONS, SQLITE_VERSION, TABLES
from loopkernel.store._writer import CommitStats, Write, Writer

__all__ = ["APPLICATION_ID", "SQLiteStore"]

T = TypeVar("T")

APPLICATION_ID = 0x4C4B524E
"""``PRAGMA application_id`` of a LoopKernel database ("LKRN"): how ``open`` knows a file
is ours before it writes anything to it."""

_INCREMENTAL = 2
"""``PRAGMA auto_vacuum``'s incremental mode: free pages kept until an incremental vacuum."""

_WAL_LIMIT = 4 * 1024 * 1024
"""Bytes of WAL past which the thread checkpoints (SQLite's automatic checkpoint, which
is off, is at 1,000 pages: 4 MiB at the default page size)."""
_WAL_LOOK = 64
"""Every this-many-th write that could run on the loop looks at the WAL's size, and goes
to the thread (which folds the WAL in after it) if it is past ``_WAL_LIMIT``."""

# Primary result codes of faults that pass: retrying later is right (sqlite.org/rescode.html).
_TRANSIENT = {
    5: "the database is locked by another process",  # SQLITE_BUSY
    6: "a table is locked",  # SQLITE_LOCKED
    7: "out of memory",  # SQLITE_NOMEM
    10: "disk I/O error",  # SQLITE_IOERR
    13: "the disk is full",  # SQLITE_FULL
    15: "the file lock protocol failed",  # SQLITE_PROTOCOL
}
# Extended codes whose primary code hides the cause. SHMSIZE: the -shm file cannot be
# grown to its first 32 KiB, which a connection to a WAL database needs before it reads;
# a database closed cleanly has none left, so on a full disk even a read stops here.
_TRANSIENT_EXTENDED = {
    4874: "the disk is full: no room for the database's shared-memory file (-shm)",
}
_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_READONLY = 8

Synchronous = Literal["full", "normal"]


def transient(exc: BaseException) -> str | None:
    """Why ``exc`` is a passing SQLite fault (locked, full, I/O), or ``None``."""
    if not isinstance(exc, sqlite3.OperationalError | sqlite3.InternalError):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        text = str(exc)
        return "the database is locked by another process" if "locked" in text else None
    return _TRANSIENT_EXTENDED.get(code) or _TRANSIENT.get(code & 0xFF)


def _prepare_file(path: Path, *, create: bool) -> bool:
    """Check what is at ``path`` before SQLite touches it; make a new file 0600 when
    ``create``. True if the database is new."""
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
            try:
                if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:  # an empty file given
                    os.fchmod(fd, 0o600)
            finally:
                os.close(fd)
        except OSError as exc:
            raise NotADatabase(
                f"cannot make {path} a private (0600) database: {exc.strerror}", path=str(path)
            ) from None
        return True
    # Whether it is a SQLite file at all is SQLite's to say (``_check_ours``): a file this
    # process opens and closes itself drops every POSIX lock the process holds on it, the
    # locks of its other connections included (sqlite.org/howtocorrupt.html 2.2). Another
    # process then takes itself for the last connection and resets the WAL under them.
    if not os.access(path, os.R_OK):
        raise NotADatabase(f"cannot read {path}: permission denied", path=str(path))
    return False


def _check_ours(db: sqlite3.Connection, path: Path, *, create: bool) -> None:
    """Refuse a SQLite file of another application before anything is written to it."""
    try:
        (app_id,) = db.execute("PRAGMA application_id").fetchone()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", None) == "SQLITE_NOTADB":
            raise NotADatabase(f"{path} is not a SQLite database", path=str(path)) from None
        raise
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


class SQLiteDialect(Dialect):
    NOW: ClassVar[str] = "((julianday('now') - 2440587.5) * 86400.0)"
    OBJECT_AGG: ClassVar[str] = "json_group_object"
    SEQ_WITH_LOCK: ClassVar[bool] = True

    def __init__(self, path: Path, url: str, synchronous: Synchronous) -> None:
        self.path = path
        self.url = url
        self.synchronous = synchronous

    def begin(self, how: Literal["write", "snapshot"], sync: bool) -> list[str]:
        if how == "snapshot":
            return ["BEGIN"]
        if not sync and self.synchronous == "full":
            return ["PRAGMA synchronous = NORMAL", "BEGIN IMMEDIATE"]
        return ["BEGIN IMMEDIATE"]

    def after(self, how: Literal["write", "snapshot"], sync: bool) -> list[str]:
        if how == "write" and not sync and self.synchronous == "full":
            return ["PRAGMA synchronous = FULL"]
        return []

    def classify(self, exc: Exception) -> Exception | None:
        if not isinstance(exc, sqlite3.Error):
            return None
        return self.meaning(exc)

    def meaning(self, exc: sqlite3.Error) -> Exception:
        if isinstance(exc, sqlite3.IntegrityError) and "UNIQUE constraint failed" in str(exc):
            return DuplicateKey(str(exc).split(":", 1)[1].strip().split(".", 1)[0])
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        why = transient(exc)
        text = " ".join(str(exc).split())
        if code == 5 or (code == 0 and why is not None and "locked" in why):
            return LockHeld(text)
        if why is not None:
            return StoreUnavailable(f"SQLite {self.path}: {why} ({text})", url=self.url, reason=why)
        if code == _READONLY or "readonly" in text:
            text = "read-only (LoopKernel needs to write to it and to its directory)"
        elif code in _CORRUPT or "malformed" in text or "not a database" in text:
            return damaged(self.path, text)
        else:
            return exc
        return NotADatabase(
            f"{self.path} is not a usable LoopKernel database: {text}", path=str(self.path)
        )


class SQLiteStore(KnowledgeRows, SQLStore):
    """A ``Store`` in one SQLite file (``runs.db`` by default)."""

    dialect: SQLiteDialect
    text_search = SQLITE_TEXT

    def __init__(
        self,
        path: str | os.PathLike[str] = "runs.db",
        *,
        synchronous: Synchronous = "full",
        lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
        create: bool = True,
        fsync_delay_seconds: float = 0.0,
        busy_timeout: float | None = None,
    ):
        """``lock_wait_s``: seconds, in all, a write waits for another process's write lock
        (``busy_timeout=``, its name before, still works with a ``DeprecationWarning``).
        ``fsync_delay_seconds``: a simulated slow disk for benchmarks only -- the writer
        thread sleeps that long after each fsynced commit (``_writer``); 0 in real use."""
        if synchronous not in ("full", "normal"):
            raise UsageError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        if busy_timeout is not None:
            warnings.warn(
                "SQLiteStore(busy_timeout=) is now lock_wait_s=",
                DeprecationWarning,
                stacklevel=2,
            )
            lock_wait_s = busy_timeout
        if not lock_wait_s >= 0:
            raise UsageError(f"lock_wait_s must be >= 0 seconds, not {lock_wait_s!r}")
        self.path = Path(path)
        self.create = create
        """Whether ``open`` may make a new database; ``False``: only open an existing one."""
        self.url = f"sqlite:///{self.path}"
        self.where = str(self.path)
        self.synchronous = synchronous
        self.lock_wait_s = lock_wait_s
        self.dialect = SQLiteDialect(self.path, self.url, synchronous)
        self.check = check_of_env()
        """How ``open`` walks an existing file for damage (``_damage``)."""
        self.damage: NotADatabase | None = None
        """The damage found, once found: every later call is refused with it."""
        self._walked = False
        self.checkpoint_error: str | None = None
        """Why the last best-effort checkpoint failed (the WAL then holds the rest)."""
        self._db: sqlite3.Connection | None = None
        self._writer = Writer(
            self.dialect,
            durable=lambda sync: sync and self.synchronous == "full",
            after=self._fold_wal,
            fsync_delay_seconds=fsync_delay_seconds,
        )
        """The one thread the connection is used on, and its group commit (a fenced view
        shares it)."""
        self._watch: sqlite3.Connection | None = None
        self._watch_seen: int | None = None
        """``data_version`` when ``wait_for_journal`` last returned."""
        self._reader: sqlite3.Connection | None = None
        self._wal = self.path.with_name(self.path.name + "-wal")
        self._writes = 0
        self.wal_folds = 0
        """How many times the thread folded the WAL in as it grew (``_fold_wal``)."""

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- the connection and its thread -----------------------------------------------------

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise UsageError("the store is not open; call `await store.open()` first")
        return self._db

    def _on_thread(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        return self._writer.submit(fn)

    async def _submit(
        self, body: Callable[[Cursor], T], how: How, sync: bool, bulk: bool = False
    ) -> T:
        db = self._conn

        def work() -> T:
            if self.damage is not None:
                raise self.damage
            try:
                return transact(db, self.dialect, body, how, sync)
            except (sqlite3.Error, StoreError, UnicodeError, ValueError) as exc:
                judged = self._judged(db, exc)
                if judged is exc:
                    raise
                raise judged from exc

        if how != "write":
            return await self._on_thread(work)
        self._writes += 1
        if (
            not bulk
            and not (sync and self.synchronous == "full")
            and (self._writes % _WAL_LOOK or not self._wal_full())
        ):
            # A write that cannot wait runs on the loop: no lock wait (the busy handler is
            # off: a held lock is LockHeld at once, and the engine waits asynchronously),
            # no fsync (synchronous NORMAL for this commit), no checkpoint (automatic ones
            # are off: the thread folds the WAL in, below). Only if the thread is idle, so
            # that calls stay in order.
            done, out = self._writer.inline(work)
            if done:
                return out  # type: ignore[return-value]

        # Off the loop: committed alone, or with the other runs' writes queued beside it
        # (group commit, ``_writer``); answered only once its commit is durable.
        written: T = await self._writer.submit_write(Write(db=db, body=body, sync=sync))
        return written

    def commit_stats(self) -> CommitStats:
        """What the writer thread committed so far: writes, commits, fsynced commits."""
        return self._writer.stats()

    def _judged(self, db: sqlite3.Connection, exc: Exception) -> Exception:
        """What an error of a call means: the damage (kept: nothing is read or written
        after it), or ``exc`` itself. SQLite's own word (malformed, not a database) and a
        stored value that cannot be read are damage; the first other SQLite error of the
        store (an I/O error, one the dialect does not know) is judged by a walk of the file,
        on the thread the call ran on. A held lock, a duplicate key and the store's own
        refusals are not walked for."""
        if isinstance(exc, LockHeld | DuplicateKey) or (
            isinstance(exc, StoreError) and not isinstance(exc, NotADatabase | StoreUnavailable)
        ):
            return exc
        why = content_damage(exc)
        found: NotADatabase | None = None
        if isinstance(exc, NotADatabase) and exc.attrs.get("reason") == "damaged":
            found = exc
        elif why is not None:
            found = walk(db, self.path, Check.QUICK) or damaged(self.path, why)
        elif isinstance(exc, sqlite3.Error | StoreUnavailable) and not self._walked:
            self._walked = True
            found = walk(db, self.path, Check.QUICK)
        if found is None:
            return exc
        self.damage = found
        return found

    def _wal_full(self) -> bool:
        """Whether the WAL file is past ``_WAL_LIMIT`` (a stat: the loop may look)."""
        try:
            return os.stat(self._wal).st_size > _WAL_LIMIT
        except OSError:
            return False

    def _fold_wal(self, db: sqlite3.Connection) -> None:
        """On the thread, after a write: a PASSIVE checkpoint once the WAL file passes
        ``_WAL_LIMIT`` (what SQLite's automatic checkpoint does, off the loop). The next
        commit writes the WAL again from its start and cuts the file back to the limit
        (``journal_size_limit``), so a fold comes once per limit's worth of journal, not
        at every write. Best effort: what is not folded in now is at the next one."""
        if self._wal_full():
            self.wal_folds += 1
            with suppress(sqlite3.Error):
                db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` in this thread, its SQLite errors translated as the engine's."""
        if self.damage is not None:
            raise self.damage
        try:
            return fn(self._conn)
        except sqlite3.Error as exc:
            meant = self.dialect.meaning(exc)
            raise self._locked(meant) if isinstance(meant, LockHeld) else meant from exc

    def _locked(self, held: LockHeld) -> StoreUnavailable:
        """A held lock met by a call in the caller's thread, where no backoff waits it out."""
        why = "the database is locked by another process"
        return StoreUnavailable(
            f"SQLite {self.path}: {why} ({held.detail})", url=self.url, reason=why
        )

    async def open(self) -> None:
        if self._db is not None:
            return
        await self._retrying(lambda: self._on_thread(self._open))

    def open_sync(self) -> None:
        """``open`` in the calling thread (which then must not run the loop's store calls
        at the same time)."""
        if self._db is None:
            try:
                self._open()
            except LockHeld as exc:
                raise self._locked(exc) from None

    def _open(self) -> None:
        fresh = _prepare_file(self.path, create=self.create)
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise NotADatabase(f"cannot open {self.path}: {exc}", path=str(self.path)) from None
        try:
            db.execute("PRAGMA busy_timeout = 0")  # lock waits are the engine's, async
            # Checkpoints are the thread's (_fold_wal, quiet points), never a commit's:
            # a commit may run on the loop, and a checkpoint fsyncs.
            db.execute("PRAGMA wal_autocheckpoint = 0")
            db.execute(f"PRAGMA journal_size_limit = {_WAL_LIMIT}")
            if fresh:  # before the first table: pruned runs' pages can go back (_reclaim)
                db.execute(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
            else:
                _check_ours(db, self.path, create=self.create)
                found = None if self.check is Check.OFF else walk(db, self.path, self.check)
                if found is not None:  # before anything is written to it
                    raise found
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            if self._version(lambda sql: db.execute(sql).fetchone()) != SQLITE_VERSION:
                transact(db, self.dialect, self._migrate, "write", True)
        except BaseException as exc:
            db.close()
            if isinstance(exc, sqlite3.Error):
                meant = self.dialect.meaning(exc)
                if isinstance(meant, StoreError | LockHeld):
                    raise meant from None
                raise NotADatabase(
                    f"{self.path} is not a usable LoopKernel database: {exc}", path=str(self.path)
                ) from None
            raise
        self._db = db

    def _version(self, one: Callable[[str], Any]) -> int:
        """The schema version ``meta`` holds (0: no ``meta`` yet), read with ``one(sql)``."""
        if one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'") is None:
            return 0
        row = one("SELECT value FROM meta WHERE key = 'schema_version'")
        try:
            version = int(row[0]) if row else 0
        except (TypeError, ValueError):
            version = -1
        if version < 0:
            raise NotADatabase(
                f"{self.path} has a damaged meta table (schema_version {row[0]!r})",
                path=str(self.path),
            )
        return check_version(self.where, version, SQLITE_VERSION)

    def _migrate(self, cur: Cursor) -> None:
        cur.run("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        version = self._version(cur.one)  # again, under the write lock
        if cur.one("PRAGMA application_id")[0] != APPLICATION_ID:
            cur.run(f"PRAGMA application_id = {APPLICATION_ID}")
        migrate(cur, self.where, SQLITE_MIGRATIONS, version)

    async def close(self) -> None:
        if self._db is None or self._fence is not None:  # a view leaves it to its store
            return
        try:
            await self._on_thread(self._checkpoint_quietly)
        finally:
            db, self._db = self._db, None
            self._writer.stop()
            db.close()
            for conn in (self._watch, self._reader):
                if conn is not None:
                    conn.close()
            self._watch = self._reader = None
            self._watch_seen = None

    # -- checkpoints -----------------------------------------------------------------------

    async def checkpoint(self) -> None:
        await self._on_thread(self.checkpoint_sync)

    def checkpoint_sync(self) -> None:
        """Fold the WAL into the main file, so that copying the .db alone loses nothing."""
        self._sync(lambda db: db.execute("PRAGMA wal_checkpoint(TRUNCATE)"))

    async def reclaim(self, *, full: bool = False) -> Reclaimed | None:
        return await self._on_thread(lambda: self._reclaim(full))

    def _reclaim(self, full: bool) -> Reclaimed:
        """Free pages back to the file system, then the WAL folded in and truncated. A file
        made since auto_vacuum was set is incremental: its free pages go at once, in a
        moment. An older file needs ``full``: one ``VACUUM`` rewrites it (readers go on;
        writers wait for its length) and makes it incremental from then on."""
        before = self._bytes()

        def body(db: sqlite3.Connection) -> str:
            if db.execute("PRAGMA auto_vacuum").fetchone()[0] == _INCREMENTAL:
                # stepped to its end: execute() would stop after its first page
                db.executescript("PRAGMA incremental_vacuum;")
                how = "incremental vacuum"
            elif full:
                db.execute(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
                db.execute("VACUUM")
                how = "vacuum"
            else:
                how = "none: an older file (prune --vacuum rewrites it once)"
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            return how

        how = self._sync(body)
        return Reclaimed(before=before, after=self._bytes(), how=how)

    def _bytes(self) -> int:
        """The database's bytes on disk: the main file and its WAL."""
        total = 0
        for path in (self.path, self.path.with_name(self.path.name + "-wal")):
            with suppress(FileNotFoundError):
                total += path.stat().st_size
        return total

    def _checkpoint_quietly(self) -> None:
        """The checkpoint of a quiet point: a failure (a full disk, a reader) is no fault of
        the run, whose commit is already durable in the WAL; it is kept in
        ``checkpoint_error`` and the WAL is folded in at a later checkpoint or open. A
        damaged file is not written to, a checkpoint's pages included."""
        if self.damage is not None:
            return
        try:
            self.checkpoint_sync()
        except StoreUnavailable as exc:
            self.checkpoint_error = " ".join(str(exc).split())
        else:
            self.checkpoint_error = None

    async def _call_quiet(self) -> None:
        if self._db is not None:
            await self._on_thread(self._checkpoint_quietly)

    # -- what only SQLite has --------------------------------------------------------------

    async def export(self, run_id: RunId, to: str | os.PathLike[str]) -> None:
        """``export_sync`` off the loop."""
        await self._on_thread(lambda: self.export_sync(run_id, to))

    def export_sync(self, run_id: RunId, to: str | os.PathLike[str]) -> None:
        """Write a consistent copy holding ``run_id`` alone, with the SQLite backup API:
        every table of ``TABLES`` keeps that run's rows only."""
        target = Path(to)
        if target.exists():
            raise UsageError(f"{target} exists; export writes a new file")
        if not target.parent.is_dir():
            raise UsageError(f"no directory {target.parent} for the export {target}")
        key = (run_id,)
        found = self._sync(lambda db: db.execute("SELECT 1 FROM runs WHERE run_id = ?", key))
        if found.fetchone() is None:
            raise self._not_found(run_id)
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:  # a read-only place, a full disk: the target's fault
            raise UsageError(f"cannot write the export {target}: {exc.strerror}") from None

        def copy(db: sqlite3.Connection) -> None:
            try:
                dest = sqlite3.connect(target, isolation_level=None)
                try:
                    db.backup(dest)
                    dest.execute("BEGIN")
                    for table in TABLES:
                        dest.execute(f"DELETE FROM {table.name} WHERE run_id != ?", key)
                    dest.execute("COMMIT")
                    dest.execute("PRAGMA journal_mode = DELETE")
                    dest.execute("VACUUM")
                finally:
                    dest.close()
            except sqlite3.Error as exc:  # the source was walked on open: the copy's
                text = " ".join(str(exc).split())
                raise UsageError(f"cannot write the export {target}: {text}") from None

        try:
            self._sync(copy)
        except BaseException:
            target.unlink(missing_ok=True)
            raise

    def reader(self) -> SQLiteReader:
        """A read-only view on a connection and a thread of its own (``_reader``): what it
        reads never waits behind, nor holds up, this store's writer thread."""
        return SQLiteReader(self)

    def archive(self, run_id: RunId) -> SQLiteArchive:
        """The run's tasks read back synchronously, for an executor that evicts finished
        tasks from memory, on a read connection of its own (a WAL reader takes no lock)."""
        return SQLiteArchive(self, run_id)

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        """Rows read on the caller's thread, on the archive's own read connection (a WAL
        reader is rarely told the database is locked: at recovery)."""
        self._conn  # noqa: B018 -- an open store only
        try:
            if self._reader is None:
                self._reader = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=0
                )
            return self._reader.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            meant = self.dialect.meaning(exc)
            raise self._locked(meant) if isinstance(meant, LockHeld) else meant from exc

    async def wait_for_journal(self, seconds: float) -> None:
        """Poll ``PRAGMA data_version`` every 20 ms on a connection of its own: it changes
        when any other connection (this store's included) commits. It reads a counter in
        shared memory and takes no lock, so a writer is never held up. A commit between
        two calls counts: the wait is from the version the last call returned at, so a
        caller that read the journal after one wake-up and then waits again is woken at
        once by what was committed while it read (not ``seconds`` later)."""
        if self._watch is None:
            self._conn  # noqa: B018 -- an open store only
            self._watch = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        watch = self._watch
        now = watch.execute("PRAGMA data_version").fetchone()[0]
        start = now if self._watch_seen is None else self._watch_seen
        deadline = time.monotonic() + seconds
        while now == start and time.monotonic() < deadline:
            await asyncio.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
            now = watch.execute("PRAGMA data_version").fetchone()[0]
        self._watch_seen = now

    async def wait_for_work(self, seconds: float) -> None:
        """SQLite has no notifications: this is the polling interval."""
        await asyncio.sleep(seconds)


class SQLiteArchive:
    """``Archive`` on a ``SQLiteStore``: what the store committed of one run's tasks."""

    def __init__(self, store: SQLiteStore, run_id: RunId) -> None:
        self._store = store
        self._run_id = run_id

    def _rows(self, sql: str, *args: object) -> list[Any]:
        return self._store._read(sql, (self._run_id, *args))

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
