"""psycopg plumbing for the PostgreSQL store: connection setup, fetch helpers, redaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import psycopg
from psycopg.abc import Params
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg.types.string import TextLoader

__all__ = [
    "Conn",
    "configure",
    "execute_many",
    "fetch_each",
    "fetch_one",
    "fetch_rows",
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


async def configure(conn: Conn) -> None:
    """JSON columns come back as their exact text; ``_codec.loads`` parses it, as for SQLite."""
    conn.adapters.register_loader("json", TextLoader)
