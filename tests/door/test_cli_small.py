"""Small things that misled a user of the ``loopkernel`` command (issue 8, section 5)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, ROOT, cli_env

pytestmark = pytest.mark.slow


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(), capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_ctrl_c_prints_the_resume_command_with_the_run_id(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    args = ["--db", db, "run", "lk_workers:relay", "--set", "hang=b", "--run-id", "hc"]
    proc = subprocess.Popen(
        [*LOOPKERNEL, *args], env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    for line in proc.stdout:  # wait for a's completion: b is hanging now
        if re.search(r"task_completed\s+a\b", line):
            break
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(30) == 130
    assert err.strip().splitlines()[-1] == (
        f"loopkernel: interrupted; resume with: loopkernel --db {db} resume hc"
    )
    assert "Traceback" not in err


def test_run_json_keeps_the_token_and_names_the_waiting_task(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    out = cli("--db", db, "run", "lk_testapps:gate", "--run-id", "g", "--json")
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    assert data["waiting"] == [
        {"task_id": "gate", "reason": "ship it?", "kind": "human", "until": None}
    ]
    token = data["token"]
    assert cli("--db", db, "approve", "g", "gate", "--token", token).returncode == 0


def test_wait_names_the_waiting_task(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    assert cli("--db", db, "run", "lk_testapps:gate", "--run-id", "g").returncode == 3
    out = cli("--db", db, "wait", "g")
    assert out.returncode == 3
    assert "task gate: ship it?" in out.stdout
    assert f"loopkernel --db {db} approve g gate" in out.stdout
    data = json.loads(cli("--db", db, "wait", "g", "--json").stdout)
    assert data["waiting"] == [
        {"task_id": "gate", "reason": "ship it?", "kind": "human", "until": None}
    ]


def test_the_demo_counts_a_cancelled_task_as_done(tmp_path: Path) -> None:
    out = cli("demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any("cancel r3" in line and "[4/5 done]" in line for line in lines)
    assert lines[-3].endswith("[5/5 done]"), lines[-3]  # run_finished: everything is done


def _shape(text: str) -> list[str]:
    """The demo's lines without what changes from run to run: times, ids, tokens, hashes."""
    text = re.sub(r"\d+\.\d\ds", "T", text)
    text = re.sub(r"run-[0-9a-f]{12}", "RUN", text)
    text = re.sub(r"\(shown once\): \S+", "(shown once): TOKEN", text)
    text = re.sub(r"finding [0-9a-f]{8}", "finding H", text)
    text = re.sub(r"\(running: [^)]*\)", "(running: …)", text)
    return [line.rstrip() for line in text.strip().splitlines()]


def test_the_readme_demo_transcript_is_what_the_demo_prints(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## What the demo shows", 1)[1].split("```", 2)[1]
    shown = block.split("\n", 1)[1]
    assert shown.startswith("$ bash scripts/demo\n")
    out = cli("demo", cwd=tmp_path)
    assert _shape(shown.removeprefix("$ bash scripts/demo\n")) == _shape(out.stdout)


def test_an_mcp_servers_multi_line_error_is_printed_on_one_line() -> None:
    server = f"{sys.executable} {ROOT / 'tests' / 'lk_leaky.py'}"
    out = cli("tools", "call", "explain", "--server-cmd", server)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "loopkernel tools: ToolError(handler_error): explain: ValueError: three things went "
        "wrong: | - the first | - the second"
    ]


def test_runs_limit_must_be_positive_and_cancel_reason_has_help(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    out = cli("--db", db, "runs", "--limit", "-1")
    assert out.returncode == 2 and "must be at least 1" in out.stderr
    assert "list at most N runs" in cli("runs", "--help").stdout
    assert "kept in the run's verdict" in cli("cancel", "--help").stdout
    resume = cli("resume", "--help").stdout
    assert "--quiet" in resume and "--json" in resume and "--concurrency" in resume
