"""Read-only views of a store on a connection of their own, for readers that must never
slow the runs they read (the web inspector's per-run hubs, its pages).

- **SQLite** (``SQLiteReader``): a second connection to the same file, ``PRAGMA
  query_only`` on, used on a thread of its own. In WAL mode a reader takes no lock a
  writer waits for, so what it reads costs the store's writer thread nothing: the run
  commits its steps at the speed it commits them unread. Each read is its own
  transaction, so it sees every commit that returned before it started.
- **PostgreSQL** (``PostgresReader``): a pool of one connection of its own (and its own
  ``LISTEN loopkernel_journal``), so a reader never takes a connection the run's writes
  wait for.

Both refuse writes (``UsageError``), and closing one closes only its own connection.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from loopkernel.errors import UsageError
from loopkernel.store._engine import Cursor, How, SQLStore, transact

if TYPE_CHECKING:
    from loopkernel.store._sqlite import SQLiteDialect, SQLiteStore

__all__ = ["SQLiteReader", "refuse_write"]

T = TypeVar("T")


def refuse_write(how: How) -> None:
    if how == "write":
        raise UsageError("a read-only view of the store cannot write")


class SQLiteReader(SQLStore):
    """The reads of a ``SQLiteStore`` (the engine's queries) on a query-only connection
    and a thread of their own; ``open`` it after its store."""

    dialect: SQLiteDialect

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self.dialect = store.dialect
        self.where = store.where
        self.url = store.url
        self.lock_wait_s = store.lock_wait_s
        self._db: sqlite3.Connection | None = None
        self._thread: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"SQLiteReader({str(self._store.path)!r})"

    def _on_thread(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="loopkernel-sqlite-read")
        return asyncio.get_running_loop().run_in_executor(self._thread, fn)

    async def open(self) -> None:
        if self._db is None:
            self._db = await self._on_thread(self._connect)

    def _connect(self) -> sqlite3.Connection:
        # ``mode=rw``: never make the file (the store made it); no ``open``/``close`` of
        # the file outside SQLite, whose locks a plain close would drop (POSIX).
        uri = f"{self._store.path.resolve().as_uri()}?mode=rw"
        db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout = 0")  # a WAL reader is rarely told "locked"
        db.execute("PRAGMA query_only = ON")
        return db

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await self._on_thread(db.close)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=False)

    async def _submit(
        self, body: Callable[[Cursor], T], how: How, sync: bool, bulk: bool = False
    ) -> T:
        refuse_write(how)
        db = self._db
        if db is None:
            raise UsageError("the reader is not open; call `await reader.open()` first")
        store = self._store

        def work() -> T:
            if store.damage is not None:
                raise store.damage
            try:
                return transact(db, self.dialect, body, how, sync)
            except sqlite3.Error as exc:
                meant = self.dialect.meaning(exc)
                if meant is exc:
                    raise
                raise meant from exc

        return await self._on_thread(work)

    async def wait_for_journal(self, seconds: float) -> None:
        """The store's own (``PRAGMA data_version`` on a connection of its own)."""
        await self._store.wait_for_journal(seconds)

    async def wait_for_work(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def reader(self) -> SQLiteReader:
        return SQLiteReader(self._store)
