"""Shared fixtures. Store locations: every test that takes ``backend`` runs on SQLite and
on PostgreSQL (``lk_stores``). With no PostgreSQL server reachable the postgres tests
fail, unless ``LOOPKERNEL_TEST_PG=skip`` says to skip them knowingly; the terminal summary
then lists, in red, what was not tested (``lk_helpers.unavailable``: the same rule for any
real peer a test needs, e.g. ``LOOPKERNEL_TEST_BROWSER=skip`` for the browser tests)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import NOT_TESTED_TAG, unavailable
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


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """The URL of this session's own database; fails when no server answers (see above)."""
    if os.environ.get("LOOPKERNEL_TEST_PG") == "skip":
        unavailable("PostgreSQL", "LOOPKERNEL_TEST_PG", "PostgreSQL was not tried")
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        unavailable(
            "PostgreSQL",
            "LOOPKERNEL_TEST_PG",
            "psycopg is not installed (pip install -e '.[dev]')",
        )
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        problem = (
            f"PostgreSQL NOT REACHABLE at {redacted(PG_ADMIN_URL)} "
            f"({' '.join(str(exc).split())}). Run .ci/start-postgres, or point "
            "LOOPKERNEL_TEST_PG at a server."
        )
    else:
        problem = ""
    if problem:  # outside the except: the failure needs no chained traceback
        unavailable("PostgreSQL", "LOOPKERNEL_TEST_PG", problem)
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


_not_tested: dict[str, list[str]] = {}


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background by a non-interactive shell (``bash scripts/test &``)
    # inherits SIGINT ignored, and so would every loopkernel process a test starts: its
    # Ctrl-C would then do nothing. Caught here, the signal is back to its default in them.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# Modules whose tests take minutes each (the bundled local model answering on the CPU):
# run first, so that on two cores they overlap the rest of the suite instead of being its
# tail. The rest keep xdist's own order (largest module first); scripts/test turns that
# reorder off (--no-loadscope-reorder) so that this order is the one the workers get.
LONG_MODULES = ("tests/planner/test_llm_apps.py", "tests/sre/test_model.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sizes: dict[str, int] = {}
    for item in items:
        sizes[_module_of(item)] = sizes.get(_module_of(item), 0) + 1

    def rank(item: pytest.Item) -> tuple[int, int]:
        module = _module_of(item)
        if module in LONG_MODULES:
            return (LONG_MODULES.index(module), 0)
        return (len(LONG_MODULES), -sizes[module])

    items.sort(key=rank)  # stable: a module's tests keep their order


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if NOT_TESTED_TAG in reason:
            what = reason[reason.index(NOT_TESTED_TAG) + len(NOT_TESTED_TAG) :].strip()
            _not_tested.setdefault(what, []).append(report.nodeid)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for what, nodeids in _not_tested.items():
        terminalreporter.write_sep("!", f"{len(nodeids)} tests NOT TESTED", red=True, bold=True)
        terminalreporter.write_line(what, red=True)
        files: dict[str, int] = {}
        for nodeid in nodeids:
            files[nodeid.split("::")[0]] = files.get(nodeid.split("::")[0], 0) + 1
        for file, count in sorted(files.items()):
            terminalreporter.write_line(f"  {count:4d}  {file}", red=True)
