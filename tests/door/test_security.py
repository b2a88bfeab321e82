"""Security defaults: files with run data are private, workers run only registered apps,
and output closed early is not an error (issue 8, sections 3-4)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import RunStatus, SQLiteStore
from loopkernel.client import Client
from loopkernel.ids import RunId
from loopkernel.store import NewRun
from loopkernel.worker import RunWorker, WorkerConfig

pytestmark = pytest.mark.slow


def cli(*args: str, umask: int | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args],
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("command", [["runs"], ["inspect", "r1", "--json"], ["inspect", "r1"]])
def test_output_closed_early_prints_no_broken_pipe(tmp_path: Path, command: list[str]) -> None:
    db = str(tmp_path / "runs.db")
    for i in range(3):
        args = ["--db", db, "run", "speculation", "--scenario", "fast", "--run-id", f"r{i}"]
        assert cli(*args, "--quiet").returncode == 0
    proc = subprocess.Popen(
        [*LOOPKERNEL, "--db", db, *command],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line is written
    with proc.stderr:
        err = proc.stderr.read().decode()
    proc.wait(60)
    assert "BrokenPipe" not in err and "Traceback" not in err and "Exception ignored" not in err
    assert proc.returncode == 141, err


def test_files_with_run_data_are_private_whatever_the_umask(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    lab = tmp_path / "lab"
    trace = tmp_path / "trace.log"
    out = cli(
        "--db", str(db), "run", "looplab", "--run-id", "r1", "--quiet", umask=0o022,
        LOOPLAB_DIR=str(lab), LOOPKERNEL_TRACE=str(trace),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert mode(db) == 0o600
    copy = tmp_path / "copy.db"
    assert cli("--db", str(db), "export", "r1", "--to", str(copy), umask=0o022).returncode == 0
    assert mode(copy) == 0o600
    ledgers = sorted(lab.glob("*.jsonl"))
    assert {p.name.rsplit(".", 2)[1] for p in ledgers} == {"record", "world", "calls"}
    assert all(mode(p) == 0o600 for p in ledgers), [(p.name, oct(mode(p))) for p in ledgers]
    out = cli("--db", str(db), "run", "speculation", "--scenario", "fast", "--quiet",
              umask=0o022, LOOPKERNEL_TRACE=str(trace))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert trace.exists() and mode(trace) == 0o600


def test_the_wal_and_shm_of_a_live_database_are_private(tmp_path: Path) -> None:
    code = (
        "import asyncio, os, sys\n"
        "from loopkernel import SQLiteStore\n"
        "from loopkernel.store import NewRun\n"
        "async def go():\n"
        "    s = SQLiteStore(sys.argv[1]); await s.open()\n"
        "    await s.create_run(NewRun(run_id='r', app='a', params=None, max_events=9,"
        " token_hash='x'))\n"
        "    print(oct(os.stat(sys.argv[1] + '-wal').st_mode & 0o777),"
        " oct(os.stat(sys.argv[1] + '-shm').st_mode & 0o777))\n"
        "    await s.close()\n"
        "os.umask(0o022); asyncio.run(go())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "runs.db")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["0o600", "0o600"]


async def _serve_until(
    store: SQLiteStore, run_id: str, config: WorkerConfig, lines: list[str] | None = None
) -> RunStatus:
    worker = RunWorker(store, config, log=(lines if lines is not None else []).append)
    serving = asyncio.create_task(worker.serve())
    try:
        for _ in range(500):
            info = await store.get_run(RunId(run_id))
            if info.status is not RunStatus.RUNNING:
                return info.status
            await asyncio.sleep(0.02)
        raise AssertionError(f"{run_id} still running")
    finally:
        worker.stop()
        await asyncio.wait_for(serving, 10)


async def _left_alone(store: SQLiteStore, run_id: str, config: WorkerConfig) -> list[str]:
    """Serve until the worker says it cannot run ``run_id``; its log lines."""
    lines: list[str] = []
    worker = RunWorker(store, config, log=lines.append)
    serving = asyncio.create_task(worker.serve())
    try:
        for _ in range(500):
            if any(f"{run_id} waits: no worker here" in line for line in lines):
                break
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(serving, 10)
    info = await store.get_run(RunId(run_id))
    assert info.status is RunStatus.RUNNING and info.owner is None, info
    assert worker.stats.claimed == 0
    return lines


def test_a_worker_leaves_an_app_it_was_not_given_to_others_and_never_imports_it(
    tmp_path: Path,
) -> None:
    canary = tmp_path / "canary.py"
    canary.write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\napp = None\n")
    sys.path.insert(0, str(tmp_path))

    async def go() -> None:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        for run_id, app in [("mod", "canary:app"), ("gone", "no_such_app")]:
            await store.create_run(
                NewRun(run_id=RunId(run_id), app=app, params={}, max_events=10, token_hash="x")
            )
            await store.enqueue(RunId(run_id))
            lines = await _left_alone(store, run_id, WorkerConfig(poll_seconds=0.05))
            said = f"{run_id} waits: no worker here for app {app} version 0"
            assert any(said in line for line in lines), lines
        assert not (tmp_path / "imported").exists()  # the module was never imported
        # Named with --app, a module:attribute app runs; one that cannot load is left alone.
        await Client(store=store).start("lk_testapps:gate", run_id="named")
        await store.enqueue(RunId("named"))
        config = WorkerConfig(poll_seconds=0.05, apps=frozenset({"lk_testapps:gate"}))
        assert await _serve_until(store, "named", config) is RunStatus.WAITING
        await store.create_run(
            NewRun(
                run_id=RunId("broken"), app="nowhere:app", params={}, max_events=10, token_hash="x"
            )
        )
        await store.enqueue(RunId("broken"))
        config = WorkerConfig(poll_seconds=0.05, apps=frozenset({"nowhere:app"}))
        lines = await _left_alone(store, "broken", config)
        assert any("cannot load app 'nowhere:app'" in line for line in lines), lines
        # A row written past the door, with parameters the app refuses: failed, once.
        params = {"delays": [0.01, "x"], "quorum": 2, "distill_delay": 0.0}
        await store.create_run(
            NewRun(
                run_id=RunId("bad"), app="speculation", params=params, max_events=10, token_hash="x"
            )
        )
        await store.enqueue(RunId("bad"))
        assert await _serve_until(store, "bad", WorkerConfig(poll_seconds=0.05)) is (
            RunStatus.FAILED
        )
        verdict = (await store.get_run(RunId("bad"))).verdict
        assert verdict == {
            "kind": "bad_params",
            "message": 'parameter delays[1] must be a number, not "x"',
        }
        await store.close()

    try:
        asyncio.run(go())
    finally:
        sys.path.remove(str(tmp_path))
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        finished = conn.execute(
            "SELECT run_id, COUNT(*) FROM events WHERE kind = 'run_finished' GROUP BY run_id"
        ).fetchall()
    conn.close()
    assert dict(finished) == {"bad": 1}
