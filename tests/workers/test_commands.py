"""``loopkernel worker``, ``submit`` and ``wait`` as a user runs them, on one SQLite file:
workers need no server on one machine. SIGTERM gives unfinished runs back."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest

from lk_workers import cli, reaped, start_worker, until

pytestmark = pytest.mark.slow


def rows(db: str, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(query).fetchall()


def test_submit_wait_and_a_worker_on_one_sqlite_file_and_sigterm_gives_runs_back(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "runs.db")
    fast = cli(db, "submit", "speculation", "--scenario", "fast")
    assert fast.returncode == 0 and "approval token (shown once)" in fast.stderr
    submitted = cli(db, "submit", "lk_workers:relay", "--set", "hang=b", "--json")
    hung = json.loads(submitted.stdout)["run_id"]
    assert set(json.loads(submitted.stdout)) == {"run_id", "token"}
    log = tmp_path / "one.log"
    one = start_worker(db, "one", log, lease=5, poll=0.1)
    with reaped([one]):
        done = cli(db, "wait", fast.stdout.strip(), "--timeout", "30")
        assert done.returncode == 0 and "succeeded" in done.stdout, done.stdout + done.stderr
        until(
            "b to hang",
            lambda: rows(
                db,
                f"SELECT 1 FROM tasks WHERE run_id = '{hung}' AND task_id = 'b' "
                "AND state = 'running'",
            ),
        )
        assert cli(db, "wait", hung, "--timeout", "0.3").returncode == 6  # still running
        one.send_signal(signal.SIGTERM)
        assert one.wait(15) == 0
    assert f"released {hung} at shutdown" in log.read_text()
    assert rows(db, f"SELECT status, owner FROM runs WHERE run_id = '{hung}'") == [
        ("running", None)
    ]
    two = start_worker(db, "two", tmp_path / "two.log", lease=5, poll=0.1)
    with reaped([two]):
        done = cli(db, "wait", hung, "--timeout", "30", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["verdict"] == {"a": "one", "b": "two", "c": "two"}


def test_wait_for_an_unknown_run_is_a_usage_error(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    out = cli(db, "wait", "nope")
    assert out.returncode == 9 and "no LoopKernel database" in out.stderr  # and none made
    assert not (tmp_path / "runs.db").exists()
    assert cli(db, "submit", "speculation", "--scenario", "fast").returncode == 0
    out = cli(db, "wait", "nope")
    assert out.returncode == 2 and "no run nope" in out.stderr
