"""Shared fixtures. Store locations: every test that takes ``backend`` runs on SQLite and
on PostgreSQL (``lk_stores``); with no PostgreSQL server reachable the postgres tests are
skipped, and the terminal summary says so in red."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lk_stores import PG_ADMIN_URL, Backend, fresh_pg_schema, pg_url, redacted, sqlite_backend

ROOT = Path(__file__).resolve().parent.parent
# Hermetic: no model or cloud credentials leak into a test, and no crash point from outside.
for var in list(os.environ):
    if var.endswith(("_API_KEY", "_TOKEN")) or var in {
        "LOOPKERNEL_CRASH_AT",
        "LOOPKERNEL_DB",
        "LOOPKERNEL_TRACE",
    }:
        del os.environ[var]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


_pg_skip_reason: list[str] = []


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """The URL of this session's own database; skips when no server answers."""
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        reason = "psycopg is not installed (pip install -e '.[dev]'): PostgreSQL tests SKIPPED"
        _pg_skip_reason.append(reason)
        pytest.skip(reason)
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        reason = (
            f"PostgreSQL NOT REACHABLE at {redacted(PG_ADMIN_URL)} ({' '.join(str(exc).split())}): "
            "PostgreSQL tests SKIPPED. Run .ci/start-postgres or set LOOPKERNEL_TEST_PG."
        )
        _pg_skip_reason.append(reason)
        pytest.skip(reason)
    name = f"loopkernel_test_{os.getpid()}"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with admin:
        admin.execute(drop)
        try:
            # A locale that does not sort by bytes, so that a missing COLLATE "C" shows.
            admin.execute(
                sql.SQL(
                    "CREATE DATABASE {} TEMPLATE template0 LOCALE_PROVIDER icu "
                    "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
                ).format(sql.Identifier(name))
            )
        except psycopg.Error:  # no ICU, or no C.UTF-8: the server's default will do
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield pg_url(PG_ADMIN_URL, dbname=name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(drop)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """An empty store location: a fresh SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return sqlite_backend(tmp_path)
    return Backend(kind="postgres", url=fresh_pg_schema(request.getfixturevalue("pg_database")))


@pytest.fixture
def lite_backend(tmp_path: Path) -> Backend:
    """A fresh SQLite store location alone, to compare with PostgreSQL."""
    return sqlite_backend(tmp_path)


@pytest.fixture
def pg_backend(pg_database: str) -> Backend:
    """A fresh PostgreSQL store location alone, for postgres-only tests."""
    return Backend(kind="postgres", url=fresh_pg_schema(pg_database))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _pg_skip_reason:
        terminalreporter.write_sep("!", "PostgreSQL store tests were SKIPPED", red=True, bold=True)
        terminalreporter.write_line(_pg_skip_reason[0], red=True)
