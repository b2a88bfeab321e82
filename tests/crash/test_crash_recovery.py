"""Real crashes: a subprocess SIGKILLs itself at a named point, a new process resumes it,
and the final state digest must equal an uninterrupted run's. The digest leaves attempt
counts out, so the execution trace and the journal are the witnesses that no settled task
ran again and nothing was journaled after ``run_finished`` (``lk_recovery``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import cli_env
from lk_recovery import (
    AtCrash,
    assert_journal_ends_at_run_finished,
    assert_no_rerun,
    at_crash,
    cancelled_by_recovery,
    starts,
)
from loopkernel.testing import read_trace, run_cli, was_killed

pytestmark = pytest.mark.slow

RUN = "crash-run"


def cli(db: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, db=db, env=cli_env(**env))


def inspect(db: Path) -> dict[str, Any]:
    out = cli(db, "inspect", RUN, "--json")
    assert out.returncode != 2, out.stderr  # inspect exits with the run status code
    return json.loads(out.stdout)  # type: ignore[no-any-return]


AWAITING = "lk_testapps:speculation_awaiting"
"""The same app with a planner that awaits: each step's events commit before they are
planned, so a crash can leave one unplanned, and the patch the resume writes for it can
cancel a task the crash left running (the one-transaction step of ``speculation`` never
leaves an event unplanned)."""


def reference_digest(db: Path, app: str) -> str:
    out = cli(db, "run", app, "--scenario", "fast", "--run-id", RUN, "--quiet")
    assert out.returncode == 0, out.stderr
    return str(inspect(db)["digest"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    return reference_digest(tmp_path_factory.mktemp("ref") / "runs.db", "speculation")


@pytest.fixture(scope="module")
def reference_awaiting(tmp_path_factory: pytest.TempPathFactory) -> str:
    return reference_digest(tmp_path_factory.mktemp("ref") / "runs.db", AWAITING)


CRASHES = [
    ("task_returned", 1),
    ("task_returned", 2),
    ("task_returned", 4),
    ("event_committed", 1),
    ("event_committed", 3),
    ("before_patch", 1),
    ("before_patch", 3),
    ("before_patch", 4),
    ("patch_committed", 2),
    ("patch_committed", 4),
    ("patch_committed", 5),
]

CRASHES_AWAITING = [
    ("event_committed", 2),
    # The quorum's event (r2 done) is journaled, r3 still running: the resume plans it,
    # cancels r3, and r3 must not start again.
    ("event_committed", 3),
    ("before_patch", 4),
    ("patch_committed", 4),
]


def crash_and_resume(tmp_path: Path, app: str, reference: str, point: str, n: int) -> AtCrash:
    """Kill a run of ``app`` at the n-th pass through ``point``, resume it in a new
    process: the reference digest, and nothing settled at the crash ran again. Returns
    the store as the crash left it."""
    db, before, after = tmp_path / "runs.db", tmp_path / "crashed.trace", tmp_path / "resumed.trace"
    crashed = cli(
        db,
        "run",
        app,
        "--scenario",
        "fast",
        "--run-id",
        RUN,
        "--quiet",
        LOOPKERNEL_CRASH_AT=f"{point}:{n}",
        LOOPKERNEL_TRACE=str(before),
    )
    assert was_killed(crashed), (crashed.stdout, crashed.stderr)
    crash = at_crash(db, RUN)
    assert inspect(db)["status"] == "running"

    resumed = cli(db, "resume", RUN, "--quiet", LOOPKERNEL_TRACE=str(after))
    assert resumed.returncode == 0, resumed.stderr
    assert inspect(db)["digest"] == reference
    assert_no_rerun(
        db, RUN, crash, read_trace(before, missing_ok=True), read_trace(after, missing_ok=True)
    )
    return crash


@pytest.mark.parametrize(("point", "n"), CRASHES, ids=[f"{p}:{n}" for p, n in CRASHES])
def test_a_run_killed_at_a_crash_point_resumes_to_the_same_digest_without_rerunning_settled_work(
    tmp_path: Path, reference: str, point: str, n: int
) -> None:
    crash_and_resume(tmp_path, "speculation", reference, point, n)


@pytest.mark.parametrize(
    ("point", "n"), CRASHES_AWAITING, ids=[f"{p}:{n}" for p, n in CRASHES_AWAITING]
)
def test_a_crash_between_an_event_and_its_plan_cancels_without_rerunning(
    tmp_path: Path, reference_awaiting: str, point: str, n: int
) -> None:
    crash = crash_and_resume(tmp_path, AWAITING, reference_awaiting, point, n)
    if (point, n) == ("event_committed", 3):  # the case is what it is meant to be
        cancelled, _ = cancelled_by_recovery(tmp_path / "runs.db", RUN, crash)
        assert crash.states["r3"] == "running" and "r3" in cancelled, (crash, cancelled)


def test_an_uninterrupted_run_journals_nothing_after_run_finished(tmp_path: Path) -> None:
    db, trace = tmp_path / "runs.db", tmp_path / "trace"
    out = cli(
        db,
        "run",
        "speculation",
        "--scenario",
        "fast",
        "--run-id",
        RUN,
        "--quiet",
        LOOPKERNEL_TRACE=str(trace),
    )
    assert out.returncode == 0, out.stderr
    assert_journal_ends_at_run_finished(db, RUN)
    assert starts(read_trace(trace)) == {"plan": 1, "r1": 1, "r2": 1, "r3": 1, "distill": 1}


def test_a_crash_after_an_approval_resumes_without_rerunning_work_above_the_pause(
    tmp_path: Path,
) -> None:
    def approved_run(db: Path, trace: Path, crash: str | None) -> dict[str, Any]:
        first = cli(
            db, "run", "lk_testapps:gate", "--run-id", RUN, "--quiet", LOOPKERNEL_TRACE=str(trace)
        )
        assert first.returncode == 3, first.stderr  # waiting
        ok = cli(db, "approve", RUN, "gate", "--payload", '{"by": "ops"}')
        assert ok.returncode == 0, ok.stderr
        if crash:
            killed = cli(
                db, "resume", RUN, "--quiet", LOOPKERNEL_CRASH_AT=crash, LOOPKERNEL_TRACE=str(trace)
            )
            assert was_killed(killed)
        done = cli(db, "resume", RUN, "--quiet", LOOPKERNEL_TRACE=str(trace))
        assert done.returncode == 0, done.stderr
        return inspect(db)

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    clean = approved_run(tmp_path / "a" / "runs.db", tmp_path / "a" / "t", None)
    crashed = approved_run(tmp_path / "b" / "runs.db", tmp_path / "b" / "t", "patch_committed:1")
    assert crashed["digest"] == clean["digest"]
    assert crashed["verdict"]["approved_by"] is None  # ship ran after gate; gate saw the human
    gate = next(t for t in crashed["tasks"] if t["task_id"] == "gate")
    assert gate["result"]["approved_by"] == "ops"
    assert starts(read_trace(tmp_path / "b" / "t"))["prep"] == 1


def copy_db_alone(db: Path, to: Path) -> Path:
    """Copy the .db file alone, as a backup script that knows nothing of -wal would."""
    to.mkdir()
    shutil.copyfile(db, to / db.name)
    assert not (to / f"{db.name}-wal").exists()
    return to / db.name


def test_the_db_file_alone_is_a_complete_resumable_copy_when_waiting(tmp_path: Path) -> None:
    db = tmp_path / "live" / "runs.db"
    db.parent.mkdir()
    # Killed where the run has just parked, before close() could checkpoint: only the
    # checkpoint at the quiet point can have put the run into the .db file.
    first = cli(
        db,
        "run",
        "lk_testapps:gate",
        "--run-id",
        RUN,
        "--quiet",
        LOOPKERNEL_CRASH_AT="run_returned",
    )
    assert was_killed(first), first.stderr
    assert (tmp_path / "live" / "runs.db-wal").exists()  # the writer never closed
    copy = copy_db_alone(db, tmp_path / "copy")
    assert inspect(copy)["status"] == "waiting"
    assert cli(copy, "approve", RUN, "gate").returncode == 0
    done = cli(copy, "resume", RUN, "--quiet")
    assert done.returncode == 0, done.stderr
    assert inspect(copy)["status"] == "succeeded"


def test_the_db_file_alone_holds_a_finished_run_before_its_writer_closes(
    tmp_path: Path, reference: str
) -> None:
    db = tmp_path / "live" / "runs.db"
    db.parent.mkdir()
    args = ["run", "speculation", "--scenario", "fast", "--run-id", RUN, "--quiet"]
    killed = cli(db, *args, LOOPKERNEL_CRASH_AT="run_returned")
    assert was_killed(killed), killed.stderr
    copy = copy_db_alone(db, tmp_path / "copy")
    got = inspect(copy)
    assert (got["status"], got["digest"]) == ("succeeded", reference)


def test_the_db_file_alone_holds_a_finished_run_and_export_copies_one_run(
    tmp_path: Path, reference: str
) -> None:
    db = tmp_path / "runs.db"
    assert (
        cli(db, "run", "speculation", "--scenario", "fast", "--run-id", RUN, "--quiet").returncode
        == 0
    )
    assert (
        cli(
            db, "run", "speculation", "--scenario", "fast", "--run-id", "other", "--quiet"
        ).returncode
        == 0
    )
    copy = tmp_path / "copy.db"
    shutil.copyfile(db, copy)
    assert inspect(copy)["digest"] == reference
    exported = tmp_path / "export.db"
    out = cli(db, "export", RUN, "--to", str(exported))
    assert out.returncode == 0, out.stderr
    assert inspect(exported)["digest"] == reference
    assert cli(exported, "inspect", "other").returncode == 2
    assert cli(db, "export", RUN, "--to", str(exported)).returncode == 2  # never overwrites
