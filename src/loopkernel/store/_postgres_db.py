"""psycopg plumbing for the PostgreSQL store: connections, the pool, fetch helpers, redaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import psycopg
from psycopg.abc import Params
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg.types.string import TextLoader
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from loopkernel.errors import StoreUnavailable

__all__ = [
    "IDLE_TX_TIMEOUT_MS",
    "Conn",
    "configure",
    "connect",
    "execute_many",
    "fetch_each",
    "fetch_one",
    "fetch_rows",
    "open_pool",
    "redact",
]

Conn: TypeAlias = psycopg.AsyncConnection[TupleRow]


def redact(url: str) -> str:
    """``url`` without its password, for messages: ``postgresql://user@host:port/db``."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://?"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


async def fetch_one(conn: Conn, query: str, params: Params) -> TupleRow | None:
    return await (await conn.execute(query, params)).fetchone()


async def fetch_rows(conn: Conn, query: str, params: Params) -> list[TupleRow]:
    return await (await conn.execute(query, params)).fetchall()


async def fetch_each(conn: Conn, queries: Sequence[str], params: Params) -> list[list[TupleRow]]:
    """Every query's rows, in order."""
    cursors = [await conn.execute(query, params) for query in queries]
    return [await cur.fetchall() for cur in cursors]


async def execute_many(conn: Conn, query: str, rows: Sequence[Params]) -> None:
    """One statement for many rows (psycopg pipelines them: not a round trip per row)."""
    if rows:
        async with conn.cursor() as cur:
            await cur.executemany(query, rows)


IDLE_TX_TIMEOUT_MS = 5000
"""The server ends a transaction of ours that sits idle this long. The store never waits
for anything but the server inside a transaction, so only a stopped process (SIGSTOP, a
frozen VM) hits this; ending its transaction frees the run's row lock, which a takeover
needs, and its late writes then fail."""


async def configure(conn: Conn) -> None:
    """JSON columns come back as their exact text; ``_codec.loads`` parses it, as for SQLite.
    A transaction left idle by a stopped process is ended (``IDLE_TX_TIMEOUT_MS``)."""
    conn.adapters.register_loader("json", TextLoader)
    await conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_TX_TIMEOUT_MS}")


async def connect(url: str, where: str, connect_timeout: float) -> Conn:
    """One autocommit connection, or ``StoreUnavailable`` with the server's words."""
    try:
        return await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=max(1, round(connect_timeout))
        )
    except psycopg.OperationalError as exc:
        message = " ".join(str(exc).split())
        raise StoreUnavailable(
            f"cannot connect to PostgreSQL at {where}: {message}", url=where
        ) from None


async def open_pool(
    url: str, where: str, min_size: int, max_size: int, connect_timeout: float
) -> AsyncConnectionPool[Conn]:
    """An open pool of ``configure``d autocommit connections, ``min_size`` of them ready."""
    pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True},
        configure=configure,
        open=False,
        name="loopkernel",
    )
    try:
        await pool.open(wait=True, timeout=connect_timeout)
    except BaseException as exc:
        await pool.close()
        if not isinstance(exc, PoolTimeout):
            raise
        raise StoreUnavailable(
            f"PostgreSQL at {where} accepted one connection but not a pool of "
            f"{min_size} within {connect_timeout}s (max_connections?)",
            url=where,
        ) from None
    return pool
