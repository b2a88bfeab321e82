"""The PostgreSQL store: SQLite's tables and rules (one engine, ``_engine``), for many
processes on many machines.

Every method is one transaction on a connection of a psycopg ``ConnectionPool``
(autocommit connections; the engine issues ``BEGIN``/``COMMIT``), run on a thread of the
store's own, one per pooled connection: the loop never waits for the server. Writes that
touch a run first lock its row (``SELECT ... FOR UPDATE``): that serializes, per run,
what SQLite's one writer serializes for the whole file -- seq allocation above all --
while different runs commit in parallel. The MAX(seq) that follows is a statement of its
own: under READ COMMITTED each statement takes a fresh snapshot, so it sees what the
lock's previous holder committed. The executor's step (``commit_step``) is one
statement, a call of the server function ``loopkernel_commit_step`` (schema 7) that does
the same in the same order: one round trip instead of five. Multi-statement reads
(``load_run``, ``dump``) run in one ``REPEATABLE READ`` snapshot.

Durability mirrors SQLite's: ``append_events`` commits with ``synchronous_commit = off``
(the WAL is ordered, so the synchronous patch commit that follows flushes both); every
other write waits for its WAL flush. A client crash loses nothing; a server crash may
lose the last events, which is a crash just before them.

Leases: a claim is one statement, ``UPDATE ... WHERE run_id = (SELECT ... FOR UPDATE
SKIP LOCKED)``, so claimers never wait for each other; lease times are the server's
clock, so machines whose clocks disagree still agree on when a lease ends. Whatever makes
a run claimable sends ``NOTIFY loopkernel_runnable``, every journal append ``NOTIFY
loopkernel_journal``, delivered at commit (``Listener``).

``open`` on a database without LoopKernel's tables creates them only when the store may
create (``create=True``: ``run``, workers); reading commands (``create=False``) write
nothing and are told there is no LoopKernel database. Tables of another application with
LoopKernel's names are refused, never migrated over.

Only this module imports psycopg: ``import loopkernel.store`` does not.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import ClassVar, Literal, TypeAlias, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.errors import IdleInTransactionSessionTimeout, UniqueViolation
from psycopg.rows import TupleRow
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool, PoolTimeout

from loopkernel.errors import NotADatabase, StoreUnavailable, UsageError
from loopkernel.graph import Delta, Event
from loopkernel.ids import RunId
from loopkernel.store._codec import dumps, patch_params, task_params
from loopkernel.store._engine import (
    Cursor,
    Dialect,
    DuplicateKey,
    How,
    SQLStore,
    migrate,
    transact,
)
from loopkernel.store._kb import POSTGRES_TEXT, KnowledgeRows
from loopkernel.store._lease import CHANNEL
from loopkernel.store._lockwait import lock_wait_s_bound
from loopkernel.store._protocol import NewEvent, PatchRecord
from loopkernel.store._reader import refuse_write
from loopkernel.store._schema import (
    LEASE_LOST,
    NO_RUN,
    POSTGRES_MIGRATIONS,
    TABLES,
)

__all__ = ["IDLE_TX_TIMEOUT_MS", "Listener", "PostgresStore", "redact"]

T = TypeVar("T")
Conn: TypeAlias = psycopg.Connection[TupleRow]

MIGRATION_LOCK = 0x4C4B_5343_4845_4D41
"""The advisory lock key migrations run under (``LKSCHEMA`` in ASCII), per database."""

IDLE_TX_TIMEOUT_MS = 5000
"""The server ends a transaction of ours that sits idle this long. The store never waits
for anything but the server inside a transaction, so only a stopped process (SIGSTOP, a
frozen VM) hits this; ending its transaction frees the run's row lock, which a takeover
needs, and its late writes then fail."""

_COMMIT_STEP = "SELECT loopkernel_commit_step(?, ?, ?, ?::jsonb)"
"""``commit_step`` as one statement: the run, the fence's epoch (or NULL), the time, and
the step's rows as one JSON document (``_step_json``), parsed once on the server."""


RECONNECTS = 3
"""Times one call runs again, on a new connection, after the server dropped the one it ran
on (a terminated backend, a restart, a cut network), within the call's wait bound: a
statement in flight is not a task's failure."""

_XACT_STATUS = "SELECT pg_xact_status(%s::xid8)"
_XACT_ID = "SELECT pg_current_xact_id()::text"


class _Attempt:
    """One try of a call on one connection: the write's transaction id (known before its
    COMMIT is sent), whether the COMMIT was sent, and the body's result."""

    __slots__ = ("committing", "out", "xid")

    def __init__(self) -> None:
        self.xid: str | None = None
        self.committing = False
        self.out: object = None


def _transact(
    conn: Conn, dialect: PostgresDialect, body: Callable[[Cursor], T], how: How, sync: bool,
    attempt: _Attempt,
) -> T:  # fmt: skip
    """``transact``; a write also takes its transaction id, in the round trip of its
    ``BEGIN`` (the simple protocol runs several statements), and says when its COMMIT goes:
    if the connection drops then, the id tells whether it landed."""
    if how != "write":
        return transact(conn, dialect, body, how, sync)
    cur = Cursor(conn, dialect)
    try:
        result = conn.execute("; ".join([*dialect.begin(how, sync), _XACT_ID]))
        while result.nextset():
            pass
        attempt.xid = str(result.fetchone()[0])  # type: ignore[index]
    except psycopg.Error as exc:
        meant = dialect.classify(exc)
        if meant is None:
            raise
        raise meant from exc
    try:
        out = attempt.out = body(cur)
    except BaseException:
        with suppress(Exception):
            cur.run("ROLLBACK")
        raise
    attempt.committing = True
    cur.run("COMMIT")
    return out


class _QuietPool(logging.Filter):
    """The pool's warnings about a lost server (``error connecting in 'loopkernel'``, once
    per reconnect try; ``discarding closed connection``) are not printed: the call that
    gives up says so in one line (``StoreUnavailable``), a server back in time is no news."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            return True
        text = record.getMessage()
        return "'loopkernel'" not in text and not text.startswith("discarding closed connection")


logging.getLogger("psycopg.pool").addFilter(_QuietPool())


def redact(url: str) -> str:
    """``url`` without its password, for messages: ``postgresql://user@host:port/db``."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://?"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def _configure(conn: Conn) -> None:
    """JSON columns come back as their exact text; ``_codec.loads`` parses it, as for SQLite.
    A transaction left idle by a stopped process is ended (``IDLE_TX_TIMEOUT_MS``)."""
    conn.adapters.register_loader("json", TextLoader)
    conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_TX_TIMEOUT_MS}")


class PostgresDialect(Dialect):
    NOW: ClassVar[str] = "extract(epoch FROM clock_timestamp())::double precision"
    LOCK: ClassVar[str] = " FOR UPDATE"
    SKIP_LOCKED: ClassVar[str] = " FOR UPDATE SKIP LOCKED"
    OBJECT_AGG: ClassVar[str] = "json_object_agg"

    def __init__(self, where: str) -> None:
        self.where = where
        self._sql: dict[str, str] = {}

    def sql(self, text: str) -> str:
        out = self._sql.get(text)
        if out is None:
            out = self._sql[text] = text.replace("%", "%%").replace("?", "%s")
        return out

    def begin(self, how: Literal["write", "snapshot"], sync: bool) -> list[str]:
        if how == "snapshot":
            return ["BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"]
        return ["BEGIN"] if sync else ["BEGIN", "SET LOCAL synchronous_commit = off"]

    def classify(self, exc: Exception) -> Exception | None:
        if isinstance(exc, UniqueViolation):
            return DuplicateKey(exc.diag.table_name or "")
        if isinstance(exc, psycopg.OperationalError | IdleInTransactionSessionTimeout):
            return self.unavailable(exc)
        return None

    def unavailable(self, exc: Exception, waited: float | None = None) -> StoreUnavailable:
        """``waited``: how long the call waited for a connection (counted by the retries)."""
        message = " ".join(str(exc).split())
        where = f"PostgreSQL at {self.where}: {message}"
        if waited is None:
            return StoreUnavailable(where, url=self.where)
        return StoreUnavailable(where, url=self.where, waited=waited)

    def notify(self, cur: Cursor, channel: str, run_id: RunId) -> None:
        cur.one("SELECT pg_notify(?, ?)", (channel, run_id))


class PostgresStore(KnowledgeRows, SQLStore):
    """A ``Store`` in a PostgreSQL database (``postgresql://user@host:port/dbname``).

    ``min_size``/``max_size`` bound the connection pool; ``connect_timeout`` is how long
    ``open()`` waits for the server. Put the tables in their own schema with
    ``?options=-csearch_path%3Dloopkernel`` in the URL (the schema must exist).
    """

    dialect: PostgresDialect
    text_search = POSTGRES_TEXT

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 30.0,
        create: bool = True,
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
        self.create = create
        self.dialect = PostgresDialect(self.where)
        self._pool: ConnectionPool[Conn] | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._listener = Listener(url)
        self._journal = Listener(url, "loopkernel_journal")

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"

    # -- connection ------------------------------------------------------------------------

    def _on_thread(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.max_size, thread_name_prefix="loopkernel-pg")
        return asyncio.get_running_loop().run_in_executor(self._threads, fn)

    async def _submit(
        self, body: Callable[[Cursor], T], how: How, sync: bool, bulk: bool = False
    ) -> T:
        pool = self._pool
        if pool is None:
            raise UsageError("the store is not open; call `await store.open()` first")

        # --store-retry is a total: a call waits for a connection as long as what is left
        # of it (lock_wait_at_most's bound, read here: the thread does not see the loop's
        # context), not connect_timeout (a server back after 30 s of 60 would restart the
        # task in flight), and says how long it waited, so that the retries count it in.
        bound = lock_wait_s_bound()
        timeout = self.connect_timeout if bound is None else bound
        return await self._on_thread(lambda: self._work(pool, body, how, sync, timeout))

    def _work(
        self, pool: ConnectionPool[Conn], body: Callable[[Cursor], T], how: How, sync: bool,
        timeout: float,
    ) -> T:  # fmt: skip
        """``body`` on a pooled connection; on a new one when the server dropped it under
        the call (``RECONNECTS``), unless its COMMIT was sent: then ``_landed`` asks."""
        began = time.monotonic()
        for left in range(RECONNECTS, -1, -1):
            attempt = _Attempt()
            try:
                wait = max(0.05, timeout - (time.monotonic() - began))
                with pool.connection(timeout=wait) as conn:
                    try:
                        return _transact(conn, self.dialect, body, how, sync, attempt)
                    except StoreUnavailable:
                        if not left or not (conn.broken or conn.closed):
                            raise
                if attempt.committing and self._landed(pool, attempt, began + timeout):
                    return attempt.out  # type: ignore[return-value]
            except PoolTimeout as exc:
                raise self.dialect.unavailable(exc, time.monotonic() - began) from exc
        raise AssertionError("unreachable: the last attempt raises")

    def _landed(self, pool: ConnectionPool[Conn], attempt: _Attempt, deadline: float) -> bool:
        """Whether the transaction whose COMMIT was cut off committed, asked on another
        connection (``pg_xact_status``). ``in progress``: its backend has not ended yet
        (a cut network: at most ``IDLE_TX_TIMEOUT_MS``), asked again."""
        wait = max(0.05, deadline - time.monotonic())
        with pool.connection(timeout=wait) as conn:
            while True:
                row = conn.execute(_XACT_STATUS, (attempt.xid,)).fetchone()
                status = None if row is None else row[0]
                if status in ("committed", "aborted"):
                    return bool(status == "committed")
                if status is None or time.monotonic() >= deadline:
                    raise StoreUnavailable(
                        f"PostgreSQL at {self.where}: the connection dropped during a COMMIT "
                        f"whose outcome is {status or 'no longer known'}",
                        url=self.where,
                    )
                time.sleep(0.05)

    async def open(self) -> None:
        if self._pool is None:
            self._pool = await self._on_thread(self._open)

    def _open(self) -> ConnectionPool[Conn]:
        # Migrate on a connection of its own first: a wrong URL or a missing database fails
        # here at once with the server's words, instead of as a pool timeout.
        try:
            conn = psycopg.Connection.connect(
                self.url, autocommit=True, connect_timeout=max(1, round(self.connect_timeout))
            )
        except psycopg.OperationalError as exc:
            message = " ".join(str(exc).split())
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {self.where}: {message}", url=self.where
            ) from None
        with conn:
            _configure(conn)
            transact(conn, self.dialect, self._migrate, "write", True)
        pool: ConnectionPool[Conn] = ConnectionPool(
            self.url,
            min_size=self.min_size,
            max_size=self.max_size,
            kwargs={"autocommit": True},
            configure=_configure,
            # A connection the server dropped while it sat in the pool (a restart, a
            # pg_terminate_backend, a proxy's idle cut) is replaced when it is taken out,
            # not met by the call's first statement: one empty round trip per call.
            check=ConnectionPool.check_connection,
            open=False,
            name="loopkernel",
        )
        try:
            pool.open(wait=True, timeout=self.connect_timeout)
        except BaseException as exc:
            pool.close()
            if not isinstance(exc, PoolTimeout):
                raise
            raise StoreUnavailable(
                f"PostgreSQL at {self.where} accepted one connection but not a pool of "
                f"{self.min_size} within {self.connect_timeout}s (max_connections?)",
                url=self.where,
            ) from None
        return pool

    def _migrate(self, cur: Cursor) -> None:
        """Bring the schema the connection sees (its ``search_path``) to the current
        version, under a transaction-scoped advisory lock: processes starting at once take
        turns, and the later ones find the schema current. DDL is transactional, so a
        migration that fails leaves the previous version whole."""
        cur.one("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
        names = ["meta", *(t.name for t in TABLES)]
        found = {
            row[0]
            for row in cur.all(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = ANY(?)",
                (names,),
            )
        }
        if "meta" not in found:
            if found:
                shown = ", ".join(sorted(found))
                raise NotADatabase(
                    f"{self.where} already has tables LoopKernel did not make ({shown}); "
                    "LoopKernel leaves them untouched: give it a database or a schema of its "
                    "own (?options=-csearch_path%3Dloopkernel)",
                    path=self.where,
                )
            if not self.create:
                raise NotADatabase(f"no LoopKernel database at {self.where}", path=self.where)
            cur.run("CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)")
        row = cur.one("SELECT value FROM meta WHERE key = 'schema_version'")
        migrate(cur, self.where, POSTGRES_MIGRATIONS, int(row[0]) if row else 0)

    async def close(self) -> None:
        if self._pool is None or self._fence is not None:  # a view leaves it to its store
            return
        pool, self._pool = self._pool, None
        await self._listener.close()
        await self._journal.close()
        await self._on_thread(pool.close)
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False)

    def fenced(self, run_id: RunId, epoch: int) -> PostgresStore:
        view: PostgresStore = super().fenced(run_id, epoch)
        view._listener = Listener(self.url)
        return view

    def reader(self) -> PostgresStore:
        """A read-only view with a pool of one connection of its own (and its own
        ``LISTEN``): a reader never takes a connection this store's writes wait for."""
        return PostgresReader(self.url, min_size=1, max_size=1, create=False)

    # -- the step in one round trip ----------------------------------------------------------

    async def commit_step(
        self,
        run_id: RunId,
        journal: Sequence[Event],
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None = None,
    ) -> tuple[list[Event], Event | None]:
        """One statement: ``loopkernel_commit_step`` (schema migration 7) locks the run,
        checks a fenced view's epoch, numbers the events after the last seq (moving the
        records' and tasks' seqs if another process appended: ``rebase_step``) and writes
        it all, in the implicit transaction of an autocommit statement."""
        fence = self._fence
        if fence is not None:
            fence.check_run(run_id)
        params = (run_id, None if fence is None else fence.epoch, time.time())
        step = _step_json(run_id, journal, records, delta, final)
        try:
            row = await self._call(lambda cur: cur.one(_COMMIT_STEP, (*params, step)), "write")
        except DuplicateKey:
            raise self._planned_twice(run_id, records) from None
        except psycopg.DatabaseError as exc:
            if exc.sqlstate == NO_RUN:
                raise self._not_found(run_id) from None
            if exc.sqlstate == LEASE_LOST and fence is not None:
                # The detail is {"epoch": <the run's lease_epoch>, "owner": <its owner>}.
                held = json.loads(exc.diag.message_detail or "{}")
                fence.check_epoch(held.get("epoch"), held.get("owner"))
            raise
        top = int(row[0])
        out = [
            Event(run_id=run_id, seq=top + i, kind=e.kind, task_id=e.task_id, data=e.data)
            for i, e in enumerate(journal, 1)
        ]
        if delta.finish is None or final is None:
            return out, None
        seq = top + len(journal) + 1
        return out, Event(
            run_id=run_id, seq=seq, kind=final.kind, task_id=final.task_id, data=final.data
        )

    async def wait_for_journal(self, seconds: float) -> None:
        await self._journal.wait(seconds)

    async def wait_for_work(self, seconds: float) -> None:
        await self._listener.wait(seconds)


_step_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_STEP_PATCH = ("seq", "ops", "outcome", "reason", "planner", "proposal", "version")
"""The step function's names (frozen in its migrations) for ``PATCH_COLUMNS``, in order."""
_STEP_TASK = (
    *("id", "skill", "input", "scope", "state", "result", "error", "attempts"),
    *("wait_reason", "human", "wait_epoch", "done", "wake"),
)
"""The step function's names for ``TASK_COLUMNS``, in their order."""


class PostgresReader(PostgresStore):
    """``PostgresStore.reader()``: the same queries, writes refused."""

    async def _submit(
        self, body: Callable[[Cursor], T], how: How, sync: bool, bulk: bool = False
    ) -> T:
        refuse_write(how)
        return await super()._submit(body, how, sync, bulk)

    def reader(self) -> PostgresStore:
        return PostgresReader(self.url, min_size=1, max_size=1, create=False)


def _step_json(
    run_id: RunId,
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
                dict(zip(_STEP_PATCH, patch_params(run_id, r, 0.0)[1:-1], strict=True))
                for r in records
            ],
            "tasks": [
                dict(zip(_STEP_TASK, task_params(run_id, t)[1:], strict=True))
                for t in {t.task_id: t for t in delta.tasks}.values()
            ],
            "edges": [{"src": src, "dst": dst} for src, dst in delta.edges],
            "finish": finish,
            "final": None
            if finish is None or final is None
            else {"kind": final.kind.value, "task": final.task_id, "data": dumps(final.data)},
        }
    )


class Listener:
    """``LISTEN channel`` (``loopkernel_runnable`` unless told) on an async connection of
    its own, opened at the first wait.

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
        self._conn: psycopg.AsyncConnection[TupleRow] | None = None
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
