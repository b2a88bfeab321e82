"""Store locations for tests: a fresh SQLite file or a fresh PostgreSQL schema.

The fixtures that hand them out (``backend``, ``pg_backend``, ``lite_backend``,
``pg_database``) live in ``tests/conftest.py``; this module is importable from any test
(``tests`` is on the pytest pythonpath) for the ``Backend`` type and the URL helpers.

PostgreSQL comes from ``LOOPKERNEL_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``, the server ``.ci/start-postgres``
starts). The session creates one database, ``loopkernel_test_<pid>``, and drops it at
the end; each test gets a fresh schema in it (``search_path`` in the store's URL), so it
starts from an empty store.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from loopkernel.store import Store, open_store

T = TypeVar("T")

PG_ADMIN_URL = os.environ.get("LOOPKERNEL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
"""The server the postgres tests use; the session makes its own database there."""

_schemas = itertools.count(1)


def pg_url(base: str, *, dbname: str, schema: str | None = None) -> str:
    """``base`` pointing at ``dbname``, its tables in ``schema`` when given."""
    parts = urlsplit(base)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    if schema is not None:
        query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(path=f"/{dbname}", query=urlencode(query)))


def redacted(url: str) -> str:
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{user}{parts.hostname or ''}{port}{parts.path}"


def fresh_pg_schema(database_url: str) -> str:
    """A new empty schema in the session's database; the URL of a store that lives in it."""
    import psycopg

    schema = f"t{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return pg_url(database_url, dbname=urlsplit(database_url).path.lstrip("/"), schema=schema)


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One empty store location, and ways to use it from a sync test."""

    kind: Literal["sqlite", "postgres"]
    url: str
    """A path (SQLite) or a ``postgresql://`` URL; ``open_store`` routes it."""

    def store(self) -> Store:
        return open_store(self.url)

    def run(self, body: Callable[[Store], Awaitable[T]]) -> T:
        """Open a store, ``await body(store)``, close it: one ``asyncio.run``."""

        async def main() -> T:
            store = self.store()
            await store.open()
            try:
                return await body(store)
            finally:
                await store.close()

        return asyncio.run(main())

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        """Run one raw statement outside any store (to tamper with the schema, say)."""
        if self.kind == "sqlite":
            db = sqlite3.connect(self.url, isolation_level=None)
            try:
                return db.execute(query).fetchall()
            finally:
                db.close()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(query)
            return cur.fetchall() if cur.description else []


def sqlite_backend(tmp_path: Path, name: str = "runs.db") -> Backend:
    return Backend(kind="sqlite", url=str(tmp_path / name))
