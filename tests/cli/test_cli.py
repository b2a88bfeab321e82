"""The ``loopkernel`` command, as a user runs it: real processes, exit codes, messages."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import SQLiteStore

pytestmark = pytest.mark.slow


def cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args],
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_demo_shows_progress_and_succeeds_in_runs_db_of_the_working_directory(
    tmp_path: Path,
) -> None:
    out = cli("demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "cancel r3" in out.stdout and "late_result_discarded" in out.stdout
    assert "succeeded" in out.stdout
    assert (tmp_path / "runs.db").exists()


def test_run_json_and_inspect_json_carry_status_verdict_and_digest(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    out = cli("--db", db, "run", "speculation", "--scenario", "fast", "--run-id", "a", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "succeeded"
    ins = cli("inspect", "a", "--json", LOOPKERNEL_DB=db)  # the database from the environment
    data = json.loads(ins.stdout)
    assert data["status"] == "succeeded" and len(data["digest"]) == 64
    assert data["verdict"]["answer"]
    assert data["journal"][0]["kind"] == "run_started"
    text = cli("--db", db, "inspect", "a", "--journal")
    assert "cancel r3" in text.stdout and "[ancestors]" in text.stdout


def test_waiting_exit_code_then_approval_from_another_process(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    first = cli("--db", db, "run", "lk_testapps:gate", "--run-id", "g")
    assert first.returncode == 3, first.stderr
    assert "gate: ship it?" in first.stdout
    assert f"loopkernel --db {db} approve g gate" in first.stdout  # pasted, it works
    token = next(line.split(": ")[1] for line in first.stdout.splitlines() if "token" in line)
    bad = cli("--db", db, "approve", "g", "gate", "--token", "wrong")
    assert bad.returncode == 2 and "does not match" in bad.stderr
    # --token=...: a url-safe token may begin with "-", which argparse would take for an option
    ok = cli("--db", db, "approve", "g", "gate", f"--token={token}", "--payload", '{"by": "me"}')
    assert ok.returncode == 0, ok.stderr
    again = cli("--db", db, "approve", "g", "gate", f"--token={token}")
    assert again.returncode == 2 and "already answered" in again.stderr
    done = cli("--db", db, "resume", "g", "--json")
    assert done.returncode == 0, done.stderr


def test_cancel_a_waiting_run(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    assert cli("--db", db, "run", "lk_testapps:gate", "--run-id", "g").returncode == 3
    out = cli("--db", db, "cancel", "g", "--reason", "not today")
    assert out.returncode == 5, out.stderr
    data = json.loads(cli("--db", db, "inspect", "g", "--json").stdout)
    assert data["verdict"] == {"kind": "cancelled", "reason": "not today"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nope"], "no app 'nope'"),
        (["run", "speculation", "--scenario", "zzz"], "no scenario 'zzz'"),
        (["run", "speculation", "--set", "colour=red"], "no parameter 'colour'"),
        (["run", "speculation", "--set", "quorum=9"], "quorum must be"),
        (["inspect", "missing-run"], "no run missing-run"),
        (["approve", "missing-run", "t"], "no run missing-run"),
        (["run", "speculation", "--max-events", "1"], "max_events must be at least 2"),
    ],
)
def test_usage_errors_exit_2_with_a_message_that_names_the_problem(
    tmp_path: Path, args: list[str], message: str
) -> None:
    db = tmp_path / "x.db"
    _empty_database(db)
    out = cli("--db", str(db), *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def _empty_database(db: Path) -> None:
    """A LoopKernel database with no runs in it."""

    async def go() -> None:
        store = SQLiteStore(db)
        await store.open()
        await store.close()

    asyncio.run(go())


def test_runaway_exit_code_and_verdict(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    out = cli(
        "--db",
        db,
        "run",
        "speculation",
        "--scenario",
        "fast",
        "--max-events",
        "3",
        "--json",
        "--run-id",
        "r",
    )
    assert out.returncode == 1
    assert json.loads(out.stdout)["verdict"]["kind"] == "runaway"


def test_keep_finished_runs_to_the_same_digest(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    digests, counts = [], []
    # The relay app runs a -> b -> c one after the other: each event is planned alone, in
    # the same order every time, so the progress lines cannot depend on timing (the race
    # of speculation's researchers can put two completions in one step on a loaded
    # machine, and its counters with them).
    for app in (["speculation", "--scenario", "fast"], ["lk_workers:relay"]):
        name = app[0].replace(":", "-")
        for run, keep in ((f"{name}-all", []), (f"{name}-evicting", ["--keep-finished", "0"])):
            out = cli("--db", db, "run", *app, "--run-id", run, *keep)
            assert out.returncode == 0, out.stderr
            ins = cli("--db", db, "inspect", run, "--json")
            digests.append(json.loads(ins.stdout)["digest"])
            # the progress lines' "[done/total done]", which count evicted tasks unread
            counts.append(
                [line.rsplit("[", 1)[1] for line in out.stdout.splitlines() if "done]" in line]
            )
    assert digests[0] == digests[1] and digests[2] == digests[3]
    assert counts[1][-1] == "5/5 done]", counts  # speculation: the cancelled one counts
    assert counts[2] == counts[3] and counts[2][-1] == "3/3 done]", counts
    bad = cli("--db", db, "run", "speculation", "--keep-finished", "-1")
    assert bad.returncode == 2 and "--keep-finished: must be at least 0" in bad.stderr


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "app",
    [
        ["looplab", "--scenario", "baseline"],  # tools over MCP
        ["looplab", "--scenario", "overspend"],  # the policy guard sums every task's spend
        [  # typed evidence, and tasks that see their ancestors
            "sre",
            "--set",
            "question=Why is the payments deployment restarting?",
            "--set",
            f"dump={ROOT / 'examples/incidents/oom-payments/dump'}",
            "--set",
            "namespace=prod",
        ],
    ],
    ids=["looplab-baseline", "looplab-overspend", "sre"],
)
def test_the_apps_evicting_every_finished_task_end_as_they_do_keeping_them(
    tmp_path: Path, app: list[str]
) -> None:
    db = str(tmp_path / "x.db")
    ends = []
    for run, keep in (("all", []), ("evicting", ["--keep-finished", "0"])):
        out = cli("--db", db, "run", *app, "--run-id", run, "--quiet", *keep)
        ins = json.loads(cli("--db", db, "inspect", run, "--json").stdout)
        ends.append((out.returncode, ins["status"], ins["verdict"], ins["digest"]))
    assert ends[0] == ends[1]
    assert ends[0][1] in ("succeeded", "escalated"), ends[0]


def test_hints_spell_the_command_as_it_was_started_when_it_is_not_on_path(
    tmp_path: Path,
) -> None:
    """After ``bash scripts/demo`` the virtualenv is not activated: a printed hint names the
    program by its path, so that it works pasted; on PATH it is plain ``loopkernel``."""
    script = Path(sys.executable).parent / "loopkernel"

    def gate(run: str, path: str) -> str:
        out = subprocess.run(
            [str(script), "--db", "r.db", "run", "lk_testapps:gate", "--run-id", run],
            env=cli_env(PATH=path),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert out.returncode == 3, out.stderr
        return out.stdout

    hidden = gate("g1", "/usr/bin:/bin")
    assert f"  {script} --db r.db approve g1 gate" in hidden
    assert f"then: {script} --db r.db resume g1" in hidden
    shown = gate("g2", f"{script.parent}:/usr/bin:/bin")
    assert "  loopkernel --db r.db approve g2 gate" in shown
    assert "then: loopkernel --db r.db resume g2" in shown
