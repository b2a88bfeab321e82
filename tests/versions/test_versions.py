"""A run started by one version of its app and resumed by another (issue 24, section 2):
real processes, a SIGKILL between the two versions, a "deploy" being a different module
on ``PYTHONPATH`` under the same app name."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from lk_helpers import cli_env
from loopkernel import App
from loopkernel.testing import read_trace, run_cli, was_killed


def deploy(tmp_path: Path, version: int) -> dict[str, str]:
    """The environment of a process running version ``version`` as ``steps_app:app``."""
    where = tmp_path / f"v{version}"
    where.mkdir(exist_ok=True)
    (where / "steps_app.py").write_text(f"from lk_versionapps import v{version} as app\n")
    env = cli_env()
    env["PYTHONPATH"] = f"{where}:{env['PYTHONPATH']}"
    return env


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql))


def test_a_run_killed_under_v1_is_refused_by_incompatible_versions_and_finished_by_v2(
    tmp_path: Path,
) -> None:
    db, trace = tmp_path / "runs.db", tmp_path / "trace"
    run = ["run", "steps_app:app", "--run-id", "r"]
    # v1 is killed once b's completion is journaled and c is marked running.
    killed = run_cli(run, db=db, env=deploy(tmp_path, 1), trace=trace, crash_at="patch_committed:3")
    assert was_killed(killed), killed.stderr
    before = rows(db, "SELECT seq FROM events ORDER BY seq")

    # v3 dropped the skill of c, which still has to run: refused, one line, exit 10.
    out = run_cli(["resume", "r"], db=db, env=deploy(tmp_path, 3), trace=trace)
    assert out.returncode == 10, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "skill(s) three, which version 3 of its app no longer registers" in line
    # v4 declares it resumes only its own runs: refused the same way.
    out = run_cli(["resume", "r"], db=db, env=deploy(tmp_path, 4), trace=trace)
    assert out.returncode == 10, out.stderr
    assert "started by version 1 of its app; version 4 resumes only runs of versions 4" in (
        out.stderr
    )
    assert rows(db, "SELECT seq FROM events ORDER BY seq") == before  # nothing written
    assert rows(db, "SELECT status FROM runs") == [("running",)]

    # v2 goes on: journaled patches are not replanned, a and b do not run again.
    done = run_cli(["resume", "r"], db=db, env=deploy(tmp_path, 2), trace=trace)
    assert done.returncode == 0, done.stderr
    starts = read_trace(trace)
    assert (starts[("start", "a")], starts[("start", "b")], starts[("start", "c")]) == (1, 1, 1)
    assert rows(db, "SELECT app_version, verdict FROM runs") == [("1", '{"by":"2"}')]
    versions = rows(db, "SELECT event_seq, app_version FROM patches ORDER BY event_seq")
    assert [v for _, v in versions] == ["1", "1", "1", "2"]


def test_an_app_version_defaults_to_its_distribution_or_0() -> None:
    bare = App(name="x", description="x", build=lambda p: None)  # type: ignore[arg-type,return-value]
    assert bare.app_version() == "0"  # defined in a test module: no distribution
    assert App(name="x", description="x", build=bare.build, version="7").app_version() == "7"
