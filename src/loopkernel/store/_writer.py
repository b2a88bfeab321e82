"""The SQLite store's one writer thread, and its group commit.

Every call the store sends off the loop runs here, in the order it was submitted, and is
answered on the loop that asked. A durable write (a step's commit) is a ``Write``: while
the thread commits one, the writes of other runs queue up behind it; the thread then
takes **every write already waiting** and commits them as one SQLite transaction, one
fsync for all (group commit, DESIGN.md §15). It never waits for more to arrive: a write
that finds the queue empty commits alone, exactly as before, with no added latency.

Inside a group each write runs under a savepoint of its own, so a write that fails for a
reason of its own -- a fenced view whose lease moved on (``LeaseLost``), a key already
there (``DuplicateKey``), a run not found -- rolls back its own statements and fails its
own future only; the others commit. A fault of the transaction itself (the write lock
held, a full disk, an I/O error, a failed ``COMMIT``) rolls the whole group back, and
then each write runs again alone, as an unbatched store would have run it: every caller
sees what it would have seen without batching.

The barrier: no write's future is resolved before the ``COMMIT`` that holds it has
returned (fsynced at ``synchronous=FULL``). The executor awaits ``commit_step`` before it
acknowledges a step or starts the tasks it readied, so nothing a later task does can
become visible or durable ahead of the commit that added it. Two crash points
(``loopkernel._hooks``) sit on the group's path: ``batch_written`` (every write's
statements ran, before ``COMMIT``: nothing of the group is durable) and
``batch_committed`` (after ``COMMIT``, before any future resolves: all of it is).

``fsync_delay_seconds`` (a benchmark's simulation of a slow disk, ``bench/throughput.py``)
sleeps on this thread after each fsynced commit, as a disk whose fsync takes that long
would hold the writer.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any, TypeVar

from loopkernel._hooks import crashpoint
from loopkernel.errors import NotADatabase, StoreUnavailable
from loopkernel.store._engine import Cursor, Dialect, LockHeld, transact

__all__ = ["CommitStats", "Write", "Writer"]

T = TypeVar("T")

GROUP_MAX = 512
"""The most writes one group commit holds (a bound on one transaction's length)."""

_SPOILS_GROUP = (StoreUnavailable, NotADatabase, LockHeld, sqlite3.Error)
"""Errors of the transaction, not of one write: the group is rolled back and each write
runs alone."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Write:
    """A write transaction the thread may commit together with others queued behind it."""

    db: sqlite3.Connection
    """The connection it runs on."""
    body: Callable[[Cursor], Any]
    """The transaction's statements (the engine's body)."""
    sync: bool
    """Whether its commit must be durable on return (fsynced at ``synchronous=FULL``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CommitStats:
    """What the writer thread committed since the store was made (counted there)."""

    writes: int
    """Write transactions asked of the thread (each a body: a step, an effect ...)."""
    commits: int
    """``COMMIT`` statements that succeeded on the thread: a group counts once."""
    synced_commits: int
    """Of those, commits that fsynced the WAL (``synchronous=FULL`` and a durable write)."""
    grouped_writes: int
    """Writes that shared their commit with at least one other."""
    largest_group: int
    """The most writes one commit held."""


_Outcome = tuple[Any, BaseException | None]
"""A call's result, or the error it raised."""


@dataclass(slots=True)
class _Item:
    fn: Callable[[], Any]
    future: asyncio.Future[Any]
    write: Write | None


_STOP = object()


class _GroupSpoiled(Exception):
    """A write's failure took the whole transaction with it (SQLite rolled it back)."""


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Writer:
    """The store's one thread: it runs what it is given in order, and answers each on the
    loop that asked. (Leaner than a ``ThreadPoolExecutor``: one queue put and one
    ``call_soon_threadsafe`` a call, half its cost per step.) ``inline`` runs a call in the
    caller's thread instead, when nothing is queued or running here (so the order of calls
    is kept). Writes queued together are committed together (the module docstring)."""

    def __init__(
        self,
        dialect: Dialect,
        *,
        durable: Callable[[bool], bool],
        after: Callable[[sqlite3.Connection], None],
        fsync_delay_seconds: float = 0.0,
    ) -> None:
        self._dialect = dialect
        self._durable = durable
        """Whether a commit of ``sync`` fsyncs (the store's ``synchronous``)."""
        self._after = after
        """Run on the thread after each commit (the store folds its WAL in)."""
        self._delay = fsync_delay_seconds
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0
        """Calls submitted and not yet run to their end on the thread."""
        self._writes = self._commits = self._synced = self._grouped = self._largest = 0

    def stats(self) -> CommitStats:
        return CommitStats(
            writes=self._writes,
            commits=self._commits,
            synced_commits=self._synced,
            grouped_writes=self._grouped,
            largest_group=self._largest,
        )

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """``fn()`` on the thread, in order."""
        return self._put(_Item(fn, self._future(), None))

    def submit_write(self, write: Write) -> asyncio.Future[Any]:
        """``write`` committed on the thread, alone or with the writes queued beside it."""
        return self._put(_Item(lambda: self._alone(write), self._future(), write))

    def _future(self) -> asyncio.Future[Any]:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="loopkernel-sqlite", daemon=True
            )
            self._thread.start()
        return asyncio.get_running_loop().create_future()

    def _put(self, item: _Item) -> asyncio.Future[Any]:
        with self._lock:
            self._pending += 1
        self._queue.put(item)
        return item.future

    def inline(self, fn: Callable[[], T]) -> tuple[bool, T | None]:
        """``(True, fn())`` run here if the thread is idle, else ``(False, None)``. Only the
        thread that submits may call it (no call can be submitted while ``fn`` runs)."""
        with self._lock:
            if self._pending:
                return False, None
        return True, fn()

    def _serve(self) -> None:
        held: Any = None
        while (item := held if held is not None else self._queue.get()) is not _STOP:
            held = None
            group = [item]
            if item.write is not None:
                while len(group) < GROUP_MAX:
                    try:
                        more = self._queue.get_nowait()
                    except Empty:
                        break
                    if more is _STOP or more.write is None or more.write.db is not item.write.db:
                        held = more
                        break
                    group.append(more)
            if len(group) == 1:
                try:
                    self._answer(group, [(item.fn(), None)])
                except BaseException as exc:
                    self._answer(group, [(None, exc)])
            else:
                self._answer(group, self._group(group))

    def _answer(self, items: Sequence[_Item], outcomes: Sequence[_Outcome]) -> None:
        """Resolve each item's future on its loop (only ever after its commit returned)."""
        with self._lock:
            self._pending -= len(items)
        for item, (result, error) in zip(items, outcomes, strict=True):
            with suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
                item.future.get_loop().call_soon_threadsafe(_settle, item.future, result, error)

    # -- commits ---------------------------------------------------------------------------

    def _alone(self, write: Write) -> Any:
        """One write as its own transaction (the unbatched path)."""
        self._writes += 1
        out = transact(write.db, self._dialect, write.body, "write", write.sync)
        self._committed(write.db, write.sync, 1)
        return out

    def _committed(self, db: sqlite3.Connection, sync: bool, writes: int) -> None:
        self._commits += 1
        if writes > 1:
            self._grouped += writes
        self._largest = max(self._largest, writes)
        if self._durable(sync):
            self._synced += 1
            if self._delay:
                time.sleep(self._delay)  # the simulated slow disk (module docstring)
        self._after(db)

    def _group(self, items: Sequence[_Item]) -> list[_Outcome]:
        """Commit the items' writes as one transaction, each under its own savepoint; on a
        fault of the transaction, each alone. Never raises: each write's outcome is
        returned."""
        writes = [item.write for item in items if item.write is not None]
        try:
            outcomes = self._together(items, writes)
        except (_GroupSpoiled, *_SPOILS_GROUP):
            outcomes = None
        except BaseException as exc:
            return [(None, exc)] * len(items)
        if outcomes is not None:
            crashpoint("batch_committed")
            return outcomes
        alone: list[_Outcome] = []
        for write in writes:
            try:
                alone.append((self._alone(write), None))
            except BaseException as exc:
                alone.append((None, exc))
        return alone

    def _together(self, items: Sequence[_Item], writes: Sequence[Write]) -> list[_Outcome]:
        db = writes[0].db
        sync = any(w.sync for w in writes)
        cur = Cursor(db, self._dialect)
        outcomes: list[_Outcome] = []
        try:
            for sql in self._dialect.begin("write", sync):
                cur.run(sql)
            for write in writes:
                self._writes += 1
                outcomes.append(_in_savepoint(cur, db, write))
            crashpoint("batch_written")
            cur.run("COMMIT")
        except BaseException:
            with suppress(Exception):
                cur.run("ROLLBACK")
            raise
        finally:
            for sql in self._dialect.after("write", sync):
                with suppress(Exception):
                    cur.run(sql)
        self._committed(db, sync, len(writes))
        return outcomes

    def stop(self) -> None:
        """After what was submitted has run; ``submit`` starts the thread again."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None


def _in_savepoint(cur: Cursor, db: sqlite3.Connection, write: Write) -> _Outcome:
    """``write``'s body under a savepoint: its own failure undoes its statements alone
    (and is its outcome); a failure of the transaction is raised."""
    cur.run("SAVEPOINT lk_write")
    try:
        out = write.body(cur)
    except _SPOILS_GROUP:
        raise
    except Exception as exc:
        if not db.in_transaction:
            raise _GroupSpoiled from exc
        cur.run("ROLLBACK TO lk_write")
        cur.run("RELEASE lk_write")
        return None, exc
    cur.run("RELEASE lk_write")
    return out, None
