"""Waits say what they wait for: a run asleep on a timer is reported as a timer, with its
wake-up time, by ``run``, ``wait`` (which waits through it unless ``--stop-at-timer``, and
exits 11 when it returns during one), ``runs``, ``inspect`` and a worker's log; a run that
waits for a human is still reported as one."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel.client import Client
from loopkernel.ids import RunId
from loopkernel.worker import RunWorker, WorkerConfig

if TYPE_CHECKING:
    from lk_stores import Backend

NAP = "lk_timerapps:nap"


def cli(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, "--db", db, *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_wait_runs_and_inspect_report_a_timer_as_a_timer(db_path: Path) -> None:
    db = str(db_path)
    ran = cli(db, "run", NAP, "--set", "seconds=3600", "--run-id", "r1", "--quiet")
    assert ran.returncode == 3, ran
    assert "waiting for a timer: task nap wakes at " in ran.stdout, ran.stdout
    assert "(in 3" in ran.stdout and ": a nap" in ran.stdout, ran.stdout
    assert "approve" not in ran.stdout and "waiting for a human" not in ran.stdout, ran.stdout

    stopped = cli(db, "wait", "r1", "--stop-at-timer")
    assert stopped.returncode == 11, stopped
    assert "waiting for a timer: task nap wakes at" in stopped.stdout, stopped.stdout
    assert "approve" not in stopped.stdout

    began = time.monotonic()
    waited = cli(db, "wait", "r1", "--timeout", "1.5", "--json")
    assert time.monotonic() - began >= 1.5  # it waited through the timer, then gave up
    assert waited.returncode == 11, waited
    (wait,) = json.loads(waited.stdout)["waiting"]
    assert wait["kind"] == "timer" and wait["task_id"] == "nap"
    assert wait["until"] > time.time() + 3000

    listed = cli(db, "runs").stdout
    assert "[timer at " in listed, listed
    assert "timer:   wakes at " in cli(db, "inspect", "r1").stdout

    human = cli(db, "run", "lk_testapps:gate", "--run-id", "g1", "--quiet")
    assert human.returncode == 3
    assert "waiting for a human: task gate: ship it?" in human.stdout, human.stdout
    gate = cli(db, "wait", "g1", "--timeout", "5")
    assert gate.returncode == 3 and "waiting for a human: task gate" in gate.stdout, gate


def test_a_worker_logs_a_timer_wait_as_a_timer(backend: Backend) -> None:
    async def go() -> list[str]:
        store = backend.store()
        await store.open()
        lines: list[str] = []
        try:
            client = Client(store=store)
            await client.start(NAP, overrides={"seconds": 3600.0}, run_id="w1")
            await store.enqueue(RunId("w1"))
            config = WorkerConfig(poll_seconds=0.05, apps=frozenset({NAP}))
            worker = RunWorker(store, config, log=lines.append)
            serving = asyncio.create_task(worker.serve())
            try:
                for _ in range(1500):
                    if worker.stats.parked:
                        break
                    await asyncio.sleep(0.02)
            finally:
                worker.stop()
                await asyncio.wait_for(serving, 30)
        finally:
            await store.close()
        return lines

    lines = asyncio.run(go())
    (parked,) = [line for line in lines if "lease released" in line]
    assert "w1 waiting for a timer: task nap wakes at " in parked, lines
    assert "human" not in parked
