"""Faults of the store itself, with real processes: the SQLite write lock held past the busy
timeout, a full disk (a real, small tmpfs). The executor retries for ``--store-retry``
seconds, then stops with exit 8 and one line naming the cause and the resume command,
leaving the run ``running``; once the fault has passed, ``resume`` finishes it with the
digest of an uninterrupted run. A bug inside the executor is still a ``failed`` run."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import cli_env, tmpfs
from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    KernelParts,
    RunStatus,
    Snapshot,
    TaskSpec,
)
from loopkernel.store import SQLiteStore
from loopkernel.testing import read_trace, run_cli, was_killed

pytestmark = pytest.mark.slow

SPEC = ["--set", "delays=[0.01, 0.02, 2.0]", "--set", "distill_delay=3.0"]


def cli(db: Path, *args: str, crash_at: str | None = None, **env: str) -> Any:
    return run_cli(list(args), db=db, env=cli_env(**env), crash_at=crash_at)


def digest(db: Path, run: str) -> str:
    out = cli(db, "inspect", run, "--json")
    assert out.returncode != 2, out.stderr
    return str(json.loads(out.stdout)["digest"])


def status(db: Path, run: str) -> str:
    with sqlite3.connect(db, timeout=30) as conn:
        return str(conn.execute("SELECT status FROM runs WHERE run_id = ?", (run,)).fetchone()[0])


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    db = tmp_path_factory.mktemp("ref") / "runs.db"
    assert cli(db, "run", "speculation", "--run-id", "slow", "--quiet", *SPEC).returncode == 0
    fast = ["run", "speculation", "--scenario", "fast", "--quiet"]
    assert cli(db, *fast, "--run-id", "fast").returncode == 0
    return {"slow": digest(db, "slow"), "fast": digest(db, "fast")}


@pytest.mark.parametrize("busy_timeout", ["0.2", "30"])
def test_a_write_lock_held_past_the_busy_timeout_leaves_the_run_resumable(
    tmp_path: Path, reference: dict[str, str], busy_timeout: str
) -> None:
    # With a 30 s busy timeout, --store-retry 1 still ends the wait: the bound is the
    # total time of the retries, lock waits included (it was one busy timeout per try).
    db, trace = tmp_path / "runs.db", tmp_path / "trace.txt"
    env = cli_env(LOOPKERNEL_SQLITE_LOCK_WAIT_S=busy_timeout, LOOPKERNEL_TRACE=str(trace))
    args = ["run", "speculation", "--run-id", "slow", "--quiet", "--store-retry", "1", *SPEC]
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopkernel", "--db", str(db), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    locker = None
    try:
        deadline = time.monotonic() + 60
        while ("start", "distill") not in read_trace(trace, missing_ok=True):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        locker = sqlite3.connect(db, isolation_level=None, timeout=30)
        locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        held = time.monotonic()
        _, err = proc.communicate(timeout=60)
        waited = time.monotonic() - held
    finally:
        if locker is not None:
            locker.execute("ROLLBACK")
            locker.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 8, err
    assert waited < 20  # not the 30 s busy timeout: --store-retry 1 is the whole wait
    line = one_line(err)
    assert "store unavailable" in line and "the database is locked" in line
    assert f"run slow is left resumable: loopkernel --db {db} resume slow" in line
    assert status(db, "slow") == "running"  # not failed: nothing was concluded
    resumed = cli(db, "resume", "slow", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert digest(db, "slow") == reference["slow"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs: a disk that can be filled to the last page."""
    with tmpfs(tmp_path / "disk", "2m") as where:
        yield where


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` but for ``leave`` bytes; the filler file, to delete to free it."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def test_a_full_disk_stops_runs_resumably_and_resume_finishes_them_once_freed(
    small_disk: Path, reference: dict[str, str]
) -> None:
    db = small_disk / "runs.db"
    runs = ["b", "c"]
    for run in runs:
        fast = ["run", "speculation", "--scenario", "fast", "--run-id", run, "--quiet"]
        assert was_killed(cli(db, *fast, crash_at="patch_committed:2"))
    filler = fill(small_disk, 24 * 1024)  # room for a step or two, not for a whole run
    for run in runs:
        stopped = cli(db, "resume", run, "--quiet", "--store-retry", "0.5")
        assert stopped.returncode == 8, stopped.stderr
        line = one_line(stopped.stderr)
        assert "store unavailable" in line and "disk is full" in line
        assert f"loopkernel --db {db} resume {run}" in line
    # Reading still works on the full disk; closing (whose checkpoint fails) is no error.
    listed = cli(db, "runs")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""
    assert [line.split()[2] for line in listed.stdout.splitlines()] == ["running", "running"]
    assert cli(db, "inspect", "b").returncode == 6  # running
    filler.unlink()
    for run in runs:
        done = cli(db, "resume", run, "--quiet")
        assert done.returncode == 0, done.stderr
        assert digest(db, run) == reference["fast"]


def test_a_run_that_ended_before_the_disk_filled_is_whole_and_readable_once_freed(
    small_disk: Path, reference: dict[str, str]
) -> None:
    """Issue 25's open chaos case, reduced: ``run`` exits 0, its database closed cleanly (the
    WAL folded in, no -wal or -shm left), then the disk fills. A new connection must size
    a -shm file before it reads (SQLITE_IOERR_SHMSIZE), so every command, reads included,
    is exit 8 naming the full disk -- never "no run", and never a traceback. Nothing was
    lost: once space is freed the run reads back whole, with the uninterrupted digest."""
    db = small_disk / "runs.db"
    fast = ["run", "speculation", "--scenario", "fast", "--run-id", "fast", "--quiet"]
    assert cli(db, *fast).returncode == 0
    assert sorted(p.name for p in small_disk.iterdir()) == ["runs.db"]  # closed cleanly
    filler = fill(small_disk, 0)
    for args in (["inspect", "fast"], ["runs"], ["resume", "fast", "--store-retry", "0"]):
        out = cli(db, *args)
        assert out.returncode == 8, (args, out.stderr)
        line = one_line(out.stderr)
        assert "store unavailable" in line and "the disk is full" in line, line
        assert "no run" not in line
    filler.unlink()
    assert digest(db, "fast") == reference["fast"]
    assert cli(db, "inspect", "fast").returncode == 0


def test_a_full_disk_at_the_start_is_one_line_and_exit_8(small_disk: Path) -> None:
    db = small_disk / "runs.db"
    fill(small_disk, 0)
    out = cli(db, "run", "speculation", "--scenario", "fast", "--quiet", "--store-retry", "0")
    assert out.returncode == 8, out.stderr
    assert "disk is full" in one_line(out.stderr) or "disk I/O error" in one_line(out.stderr)


class Boom(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="a", skill="noop"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", None)


def test_a_bug_inside_the_executor_is_a_failed_run_with_its_verdict(tmp_path: Path) -> None:
    def observer(event: Event, state: Any, record: Any) -> None:
        if event.task_id == "a":
            raise KeyError("a bug in an observer")

    async def noop(ctx: Any) -> Any:
        return 1

    async def scenario() -> Any:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        kernel = Kernel(store, Boom(), {"noop": noop}, parts=KernelParts(observer=observer))
        started = await kernel.start(app="bug")
        with pytest.raises(KeyError):
            await kernel.run(started.run_id)
        info = await store.get_run(started.run_id)
        await store.close()
        return info

    info = asyncio.run(scenario())
    assert info.status is RunStatus.FAILED
    assert info.verdict["kind"] == "executor_error" and info.verdict["type"] == "KeyError"


LAB_BASELINE_DIGEST = "6b02b22f6da538bbb48d2ca18dc45ba153666183c8046d42d71437d28ef6e0c9"


def test_a_tool_whose_disk_is_full_leaves_the_run_resumable_and_applies_effects_once(
    tmp_path: Path, small_disk: Path
) -> None:
    from loopkernel.tools import read_ledger
    from loopkernel_apps.looplab.tools import applied, record_path, world_path

    db, lab = tmp_path / "runs.db", small_disk / "lab"
    lab.mkdir()
    filler = fill(small_disk, 0)  # the tool server's records cannot grow by a byte
    first = cli(db, "run", "looplab", "--run-id", "lab", "--quiet", LOOPLAB_DIR=str(lab))
    assert first.returncode == 6, first.stderr  # running: a fault that may pass
    line = one_line(first.stderr)
    assert "stopped on a fault that may pass" in line and "No space left on device" in line
    assert f"loopkernel --db {db} resume lab" in line
    assert status(db, "lab") == "running"
    filler.unlink()
    done = cli(db, "resume", "lab", "--quiet", LOOPLAB_DIR=str(lab))
    assert done.returncode == 0, done.stderr
    assert digest(db, "lab") == LAB_BASELINE_DIGEST
    assert applied(lab, "lab") == ["fetch#1", "transform#1", "transform#2", "report#1"]
    for path in (record_path(lab, "lab"), world_path(lab, "lab")):
        keys = [e["key"] for e in read_ledger(path)]
        assert len(keys) == len(set(keys)), keys


def test_a_checkpoint_that_fails_at_close_does_not_change_the_exit_code(
    small_disk: Path, reference: dict[str, str]
) -> None:
    db = small_disk / "runs.db"
    fast = ["run", "speculation", "--scenario", "fast", "--quiet"]
    assert cli(db, *fast, "--run-id", "a").returncode == 0
    # Another connection stays open throughout (a last close would fold the WAL in), and
    # holds a snapshot while b runs, so b's checkpoints cannot fold b into runs.db.
    other = sqlite3.connect(db, isolation_level=None)
    try:
        other.execute("BEGIN")
        other.execute("SELECT COUNT(*) FROM events").fetchall()
        quick = {"LOOPKERNEL_SQLITE_LOCK_WAIT_S": "0.2"}
        for run in ("b", "c", "d", "e", "f", "g"):  # more than the free room in runs.db's pages
            assert cli(db, *fast, "--run-id", run, **quick).returncode == 0
        other.execute("COMMIT")
        wal = db.with_name("runs.db-wal")
        assert wal.stat().st_size > 0  # run b lives in the WAL alone
        fill(small_disk, 0)  # folding it into runs.db now needs pages the disk does not have
        for args in (["resume", "b", "--quiet"], ["inspect", "b"]):
            out = cli(db, *args)
            assert out.returncode == 0, out.stderr  # succeeded: the run, not the checkpoint
            assert out.stderr == ""
        assert wal.stat().st_size > 0  # still in the WAL, complete, folded in later
    finally:
        other.close()
    assert digest(db, "b") == reference["fast"]
