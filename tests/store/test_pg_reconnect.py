"""A PostgreSQL connection that dies under a statement (issue 32, item 4): the store runs
the statement again on a new connection, and a COMMIT whose reply was lost is looked up
(``pg_xact_status``), never repeated and never failed up to the executor. Against the real
server: a backend terminated while its statement waits on a lock, and a proxy that cuts a
connection just after the server received its COMMIT."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lk_helpers import LOOPKERNEL, ROOT, cli_env
from lk_stores import fresh_pg_schema
from loopkernel.graph import EventKind
from loopkernel.ids import RunId
from loopkernel.store import NewEvent, NewRun, open_store

if TYPE_CHECKING:
    from collections.abc import Iterator

    from bench._pgproxy import Proxy

    from lk_stores import Backend

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def proxy(pg_backend: Backend) -> Iterator[Proxy]:
    """A proxy in front of the server (``bench/_pgproxy.py``: bench/ lives in the checkout)."""
    sys.path.insert(0, str(ROOT))
    from bench._pgproxy import Proxy

    made = Proxy.to(pg_backend.url)
    yield made
    made.stop()


async def _append_through_a_cut(proxy: Proxy, url: str) -> tuple[int, list[Any]]:
    """A run, then one append whose COMMIT reaches the server and whose reply does not:
    how many events the append returned, and the journal's data as it is afterwards."""
    store = open_store(proxy.url(url))
    await store.open()
    try:
        run_id = RunId("cut")
        await store.create_run(
            NewRun(run_id=run_id, app="demo", params={}, max_events=100, token_hash="h")
        )
        proxy.cut_at_commit()
        note = NewEvent(kind=EventKind.HUMAN_INPUT, data={"n": 1})
        appended = await store.append_events(run_id, [note])
        return len(appended), [e.data for e in await store.events(run_id)]
    finally:
        await store.close()


def test_a_commit_whose_reply_was_lost_is_looked_up_not_repeated(
    pg_backend: Backend, proxy: Proxy
) -> None:
    """The server commits an append and the connection is cut before its reply: the call
    returns the events it wrote, and they are in the journal once."""
    appended, data = asyncio.run(_append_through_a_cut(proxy, pg_backend.url))
    assert proxy.commits_cut == 1  # the cut happened, at a COMMIT
    assert appended == 1
    assert data.count({"n": 1}) == 1  # landed once: not lost, not appended again
    assert len(data) == 2  # run_started and the append


def _blocked_backend(admin: Any, dbname: str, side: int) -> int | None:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s "
        "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'",
        (dbname, side),
    ).fetchall()
    return int(rows[0][0]) if rows else None


def _run(url: str, run_id: str, starts: Path) -> subprocess.Popen[str]:
    env = {**cli_env(), "LK_TEST_SLOW_STARTS": str(starts)}
    return subprocess.Popen(
        [*LOOPKERNEL, "--db", url, "run", "lk_doorapps:slow", "--set", "seconds=2",
         "--run-id", run_id, "--json", "--store-retry", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _digest(url: str, run_id: str) -> str:
    out = subprocess.run(
        [*LOOPKERNEL, "--db", url, "inspect", run_id, "--json"],
        env=cli_env(), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return str(json.loads(out.stdout)["digest"])


def test_a_statement_killed_mid_way_does_not_restart_its_task(
    pg_backend: Backend, pg_database: str, tmp_path: Path
) -> None:
    """While the run's task works, a side transaction holds the run's row lock; the
    executor's next write waits on it, and its backend is terminated there. The task ran
    once, and the run ends with an uninterrupted run's digest."""
    import psycopg

    reference = fresh_pg_schema(pg_database)
    ref = _run(reference, "mid", tmp_path / "ref.starts")
    assert ref.communicate(timeout=120) and ref.returncode == 0
    dbname = pg_database.rsplit("/", 1)[1].split("?")[0]
    starts = tmp_path / "starts"
    proc = _run(pg_backend.url, "mid", starts)
    with (
        psycopg.connect(pg_backend.url) as side,
        psycopg.connect(pg_database, autocommit=True) as admin,
    ):
        while not starts.exists() and proc.poll() is None:  # the task is working
            time.sleep(0.05)
        side.execute("SELECT 1 FROM runs WHERE run_id = 'mid' FOR UPDATE")
        victim = None
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            victim = _blocked_backend(admin, dbname, side.info.backend_pid)
        assert victim is not None, proc.communicate()
        (killed,) = admin.execute("SELECT pg_terminate_backend(%s)", (victim,)).fetchone() or (0,)
        assert killed
        time.sleep(0.5)
        side.rollback()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out)["status"] == "succeeded"
    assert starts.read_text().splitlines() == ["2"]  # the task started once
    (attempts,) = pg_backend.sql("SELECT attempts FROM tasks WHERE run_id = 'mid'")[0]
    assert attempts == 1
    assert _digest(pg_backend.url, "mid") == _digest(reference, "mid")
