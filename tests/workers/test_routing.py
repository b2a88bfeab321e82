"""Versions that route, with real worker processes on both stores: a worker claims only
runs of the apps and versions it can execute, so a worker of a version that cannot resume
the submitted runs never claims them (and says so), and a compatible worker started after
it runs every one."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_workers import reaped, start_worker, until

if TYPE_CHECKING:
    from lk_stores import Backend

pytestmark = [pytest.mark.slow]

APP = "lk_workers:versioned"
RUNS = 4


def submit(db: str, run_id: str, version: str) -> None:
    done = subprocess.run(
        [*LOOPKERNEL, "--db", db, "submit", APP, "--run-id", run_id],
        env=cli_env(LK_APP_VERSION=version),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done


def statuses(backend: Backend) -> dict[str, str]:
    return dict(backend.sql("SELECT run_id, status FROM runs"))  # type: ignore[arg-type]


def test_an_incompatible_worker_never_claims_and_never_starves_a_compatible_one(
    backend: Backend, tmp_path: Path
) -> None:
    db = backend.url
    for i in range(RUNS):
        submit(db, f"v1-{i}", "1")
    log = tmp_path / "workers.log"
    new = {"LK_APP_VERSION": "2", "LK_APP_COMPAT": ""}  # resumes runs of version 2 only
    with reaped([start_worker(db, "new", log, env=new, apps=(APP,))]) as procs:
        until(
            "the new worker to say it has no worker for version 1",
            lambda: (
                "v1-0 waits: no worker here for app lk_workers:versioned version 1"
                in log.read_text()
            ),
            60,
            0.2,
        )
        assert set(statuses(backend).values()) == {"running"}
        procs.append(start_worker(db, "old", log, env={"LK_APP_VERSION": "1"}, apps=(APP,)))
        until(
            "every run to end",
            lambda: set(statuses(backend).values()) == {"succeeded"},
            90,
            0.2,
        )
        submit(db, "v2-0", "2")  # the new worker's own version: it runs it
        until("v2-0 to end", lambda: statuses(backend).get("v2-0") == "succeeded", 60, 0.2)
    text = log.read_text()
    assert "worker new: executes lk_workers:versioned 2 (resumes no other)" in text, text
    assert "worker new: claimed v1-" not in text, text
    assert all(f"worker old: claimed v1-{i}" in text for i in range(RUNS)), text
    owners = dict(backend.sql("SELECT run_id, app_version FROM runs"))  # type: ignore[arg-type]
    assert owners == {**{f"v1-{i}": "1" for i in range(RUNS)}, "v2-0": "2"}
