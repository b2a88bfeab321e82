"""Real crashes: a subprocess SIGKILLs itself at a named point, a new process resumes it,
and the final state digest must equal an uninterrupted run's, with no finished task re-run.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import cli_env
from loopkernel.testing import read_trace, run_cli, was_killed

pytestmark = pytest.mark.slow

RUN = "crash-run"


def cli(db: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, db=db, env=cli_env(**env))


def inspect(db: Path) -> dict[str, Any]:
    out = cli(db, "inspect", RUN, "--json")
    assert out.returncode != 2, out.stderr  # inspect exits with the run status code
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def running_at_crash(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT task_id FROM tasks WHERE state = 'running'")}


def terminal_at_crash(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {
            r[0]
            for r in conn.execute(
                "SELECT task_id FROM tasks WHERE state IN ('succeeded','failed','cancelled')"
            )
        }


def assert_each_event_planned_once(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        events = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM events WHERE kind != 'run_finished' ORDER BY seq"
            )
        ]
        patches = [r[0] for r in conn.execute("SELECT event_seq FROM patches ORDER BY event_seq")]
    assert patches == events


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = tmp_path_factory.mktemp("ref") / "runs.db"
    out = cli(db, "run", "speculation", "--scenario", "fast", "--run-id", RUN, "--quiet")
    assert out.returncode == 0, out.stderr
    return str(inspect(db)["digest"])


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


@pytest.mark.parametrize(("point", "n"), CRASHES, ids=[f"{p}:{n}" for p, n in CRASHES])
def test_a_run_killed_at_a_crash_point_resumes_to_the_same_digest(
    tmp_path: Path, reference: str, point: str, n: int
) -> None:
    db, trace = tmp_path / "runs.db", tmp_path / "trace.txt"
    crashed = cli(
        db,
        "run",
        "speculation",
        "--scenario",
        "fast",
        "--run-id",
        RUN,
        "--quiet",
        LOOPKERNEL_CRASH_AT=f"{point}:{n}",
        LOOPKERNEL_TRACE=str(trace),
    )
    assert was_killed(crashed), (crashed.stdout, crashed.stderr)
    in_flight, finished = running_at_crash(db), terminal_at_crash(db)
    assert inspect(db)["status"] == "running"

    resumed = cli(db, "resume", RUN, "--quiet", LOOPKERNEL_TRACE=str(trace))
    assert resumed.returncode == 0, resumed.stderr
    assert inspect(db)["digest"] == reference

    starts = {tid: c for (what, tid), c in read_trace(trace).items() if what == "start"}
    for tid in finished:
        assert starts.get(tid, 0) <= 1, f"{tid} finished before the crash but ran again"
    for tid, count in starts.items():
        assert count <= (2 if tid in in_flight else 1), (tid, count, in_flight)
    assert_each_event_planned_once(db)


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
    starts = read_trace(tmp_path / "b" / "t")
    assert starts[("start", "prep")] == 1


def test_the_db_file_alone_is_a_complete_resumable_copy_when_waiting(tmp_path: Path) -> None:
    db = tmp_path / "live" / "runs.db"
    db.parent.mkdir()
    first = cli(db, "run", "lk_testapps:gate", "--run-id", RUN, "--quiet")
    assert first.returncode == 3
    copy = tmp_path / "copy" / "runs.db"
    copy.parent.mkdir()
    shutil.copyfile(db, copy)  # the .db alone: no -wal, no -shm
    assert not (copy.parent / "runs.db-wal").exists()
    assert cli(copy, "approve", RUN, "gate").returncode == 0
    done = cli(copy, "resume", RUN, "--quiet")
    assert done.returncode == 0, done.stderr
    assert inspect(copy)["status"] == "succeeded"


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
