"""No run left behind, with real processes on both stores: a ``loopkernel run`` SIGKILLed
mid-task is shown as "owner lost" once its lease runs out, is never taken by a plain worker,
and is adopted by a worker started with ``--adopt-orphans``, which finishes it with the
digest of an uninterrupted run. A ``loopkernel run`` sent SIGTERM mid-task stops at once
with exit 143 and the resume command, gives its lease back, and ``resume`` finishes it
exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_workers import cli, reaped, start_worker, until
from loopkernel.ids import RunId
from loopkernel.store import Store, digest_of

if TYPE_CHECKING:
    from lk_stores import Backend

pytestmark = [pytest.mark.slow]

TAG = "same"
"""Every process executes with the same ``LK_WORKER_TAG``: results must not say who ran."""
DELAYS = json.dumps({"a": 0.05, "b": 4.0, "c": 0.05})


def run_cmd(db: str, run_id: str) -> subprocess.Popen[str]:
    args = ["--db", db, "run", "lk_workers:relay", "--set", f"delays={DELAYS}"]
    return subprocess.Popen(
        [*LOOPKERNEL, *args, "--run-id", run_id, "--quiet"],
        env=cli_env(LK_WORKER_TAG=TAG),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def reference(tmp_path: Path) -> str:
    """The digest of the same run, never interrupted."""
    db = str(tmp_path / "ref.db")
    proc = run_cmd(db, "r1")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    return digest(db)


def digest(db: str) -> str:
    async def body(store: Store) -> str:
        return digest_of(await store.dump(RunId("r1")))

    from lk_stores import Backend as _Backend

    kind = "postgres" if db.startswith("postgresql://") else "sqlite"
    return _Backend(kind=kind, url=db).run(body)


def b_running(backend: Backend) -> bool:
    try:
        rows = backend.sql("SELECT state FROM tasks WHERE run_id = 'r1' AND task_id = 'b'")
    except Exception:  # not made yet: the run process is still starting
        return False
    return rows == [("running",)]


def lease(backend: Backend) -> tuple[object, ...]:
    (row,) = backend.sql("SELECT status, owner, lease_until FROM runs WHERE run_id = 'r1'")
    return tuple(row)


def test_a_killed_run_is_shown_lost_and_adopted_by_a_worker_that_opts_in(
    backend: Backend, tmp_path: Path
) -> None:
    want = reference(tmp_path)
    db = backend.url
    log = tmp_path / "worker.log"
    run = run_cmd(db, "r1")
    with reaped([run]) as procs:  # type: ignore[list-item]
        until("task b running", lambda: b_running(backend) or run.poll() is not None, 60)
        assert run.poll() is None, run.communicate()
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        plain = start_worker(db, "plain", log, env={"LK_WORKER_TAG": TAG})
        procs.append(plain)
        # The run's lease (10 s) runs out: shown as lost, still not a plain worker's.
        shown = until(
            "runs to say the owner is lost",
            lambda: (lambda out: out if "owner lost at" in out else None)(cli(db, "runs").stdout),
            60,
            0.5,
        )
        assert "r1" in shown and "running" in shown, shown
        inspected = cli(db, "inspect", "r1").stdout
        assert "owner:   owner lost at" in inspected and "adopt-orphans" in inspected, inspected
        waited = cli(db, "wait", "r1", "--timeout", "0.2", "--json")
        assert waited.returncode == 6 and json.loads(waited.stdout)["owner_lost_at"], waited
        assert "claimed r1" not in log.read_text()
        adopter = start_worker(
            db, "adopter", log, env={"LK_WORKER_TAG": TAG}, flags=["--adopt-orphans"]
        )
        procs.append(adopter)
        done = until(
            "the adopted run to end",
            lambda: lease(backend)[0] if lease(backend)[0] != "running" else None,
            90,
            0.2,
        )
        assert done == "succeeded", log.read_text()
    text = log.read_text()
    assert "worker adopter: claimed r1" in text, text
    assert "worker plain: claimed r1" not in text, text
    assert digest(db) == want


def test_sigterm_stops_a_run_gives_its_lease_back_and_it_resumes_exact(
    backend: Backend, tmp_path: Path
) -> None:
    want = reference(tmp_path)
    db = backend.url
    run = run_cmd(db, "r1")
    try:
        until("task b running", lambda: b_running(backend) or run.poll() is not None, 60)
        assert run.poll() is None, run.communicate()
        os.killpg(run.pid, signal.SIGTERM)
        out, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 143, (out, err)
    assert "terminated (SIGTERM); resume with: loopkernel --db " in err, err
    assert err.rstrip().endswith("resume r1"), err
    status, owner, lease_until = lease(backend)
    assert (status, owner, lease_until) == ("running", None, None)  # given back, not expired
    resumed = subprocess.run(
        [*LOOPKERNEL, "--db", db, "resume", "r1", "--quiet"],
        env=cli_env(LK_WORKER_TAG=TAG),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed
    assert digest(db) == want
