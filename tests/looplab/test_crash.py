"""looplab across real process deaths: SIGKILL at the tool boundary, in the middle of a slow
tool call, and after an approval. Each resumed run reaches the digest of an uninterrupted
one, and the durable run record and the world hold every effect exactly once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lk_looplab import APPLIED, DIGESTS, RECORDS
from lk_recovery import assert_no_rerun, at_crash
from lk_workers import until
from loopkernel.testing import read_trace, run_cli, was_killed
from loopkernel.tools import read_ledger
from loopkernel_apps.looplab.tools import (
    applied,
    calls_path,
    record_entries,
    record_path,
    world_path,
)

pytestmark = pytest.mark.slow

RUN = "lab"
# baseline with --set act_delay=3.0 --set slow_step=2 (params enter the digest)
SLOW_DIGEST = "c222fc4d648af728b21f9d479622ebb7bb14d517d11d2db9ff6f091a0f15e153"


def cli(
    db: Path, lab: Path, *args: str, crash_at: str | None = None, trace: Path | None = None
) -> Any:
    return run_cli(list(args), db=db, crash_at=crash_at, trace=trace, env={"LOOPLAB_DIR": str(lab)})


def inspect(db: Path, lab: Path) -> dict[str, Any]:
    out = cli(db, lab, "inspect", RUN, "--json", "--journal")
    assert out.returncode != 2, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def assert_once(lab: Path) -> None:
    for path in (record_path(lab, RUN), world_path(lab, RUN)):
        keys = [e["key"] for e in read_ledger(path)]
        assert len(keys) == len(set(keys)), f"{path.name} holds a key twice: {keys}"


CRASHES = [("tool_returned", 2), ("tool_sent", 5), ("tool_returned", 12)]


@pytest.mark.parametrize(("point", "n"), CRASHES, ids=[f"{p}:{n}" for p, n in CRASHES])
def test_a_crash_at_the_tool_boundary_applies_each_effect_once(
    tmp_path: Path, point: str, n: int
) -> None:
    db, lab = tmp_path / "runs.db", tmp_path / "lab"
    before, after = tmp_path / "crashed.trace", tmp_path / "resumed.trace"
    args = ["run", "looplab", "--run-id", RUN, "--quiet"]
    killed = cli(db, lab, *args, crash_at=f"{point}:{n}", trace=before)
    assert was_killed(killed), killed.stderr
    crash = at_crash(db, RUN)
    resumed = cli(db, lab, "resume", RUN, "--quiet", trace=after)
    assert resumed.returncode == 0, resumed.stderr
    assert inspect(db, lab)["digest"] == DIGESTS["baseline"]
    assert_no_rerun(db, RUN, crash, read_trace(before), read_trace(after))
    assert record_entries(lab, RUN) == RECORDS["baseline"]
    assert applied(lab, RUN) == APPLIED["baseline"]
    assert_once(lab)


def test_sigkill_in_the_middle_of_a_slow_tool_call_resumes_to_the_same_state(
    tmp_path: Path,
) -> None:
    db, lab = tmp_path / "runs.db", tmp_path / "lab"
    env = {**os.environ, "LOOPLAB_DIR": str(lab)}
    env.pop("LOOPKERNEL_CRASH_AT", None)
    args = ["run", "looplab", "--run-id", RUN, "--quiet"]
    slow = ["--set", "act_delay=3.0", "--set", "slow_step=2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopkernel", "--db", str(db), *args, *slow],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    request = f"{RUN}/act:2.1/0"  # the idempotency key of the slow call
    try:
        # The tool's own log shows the request arrived; the call sleeps 3 s before it
        # answers, and the kill comes as soon as the request is seen.
        def sent() -> bool:
            assert proc.poll() is None, "the run ended before the slow call was sent"
            return request in _requests(lab)

        until(f"the tool to log the request {request}", sent, timeout=60, step=0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # Proof that the kill landed mid-call: the request reached the tool, no result is
    # journaled, and the world holds no effect of it yet.
    assert _effect_status(db, "act:2.1") == "intended"
    assert "transform#1" not in applied(lab, RUN)
    resumed = cli(db, lab, "resume", RUN, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    got = inspect(db, lab)
    assert got["status"] == "succeeded"
    assert got["digest"] == SLOW_DIGEST
    assert applied(lab, RUN) == APPLIED["baseline"]
    assert _requests(lab).count(request) == 2  # re-sent once, with the same key
    assert_once(lab)


def _requests(lab: Path) -> list[str]:
    path = calls_path(lab, RUN)
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [str(json.loads(line)["key"]) for line in lines if line.endswith("}")]


def _effect_status(db: Path, task_id: str) -> str | None:
    with sqlite3.connect(db, timeout=5) as conn:
        row = conn.execute(
            "SELECT status FROM effects WHERE task_id = ? AND call_index = 0", (task_id,)
        ).fetchone()
    return None if row is None else str(row[0])


@pytest.mark.parametrize("crash", [None, "tool_returned:1"], ids=["clean", "crash-after-send"])
def test_approval_from_another_process_lets_the_irreversible_step_finish(
    tmp_path: Path, crash: str | None
) -> None:
    db, lab = tmp_path / "runs.db", tmp_path / "lab"
    first = cli(db, lab, "run", "looplab", "--scenario", "irreversible", "--run-id", RUN, "--quiet")
    assert first.returncode == 3, first.stderr  # waiting
    parked = inspect(db, lab)
    waiting = [t for t in parked["tasks"] if t["state"] == "waiting"]
    assert [t["task_id"] for t in waiting] == ["act:3.1"]
    assert applied(lab, RUN) == ["fetch#1", "transform#1"]  # halted before the deploy
    reasons = [e["data"]["reason"] for e in parked["journal"] if e["kind"] == "approval_required"]
    assert reasons == ["publish is irreversible; a human must approve it before it is sent"]

    ok = cli(db, lab, "approve", RUN, "act:3.1", "--payload", '{"by": "ops"}')
    assert ok.returncode == 0, ok.stderr
    if crash:
        killed = cli(db, lab, "resume", RUN, "--quiet", crash_at=crash)
        assert was_killed(killed), killed.stderr
    done = cli(db, lab, "resume", RUN, "--quiet")
    assert done.returncode == 0, done.stderr
    got = inspect(db, lab)
    assert got["digest"] == DIGESTS["irreversible"]
    assert applied(lab, RUN) == ["fetch#1", "transform#1", "deploy#1"]
    entries = record_entries(lab, RUN)
    assert sum(e.startswith("approval requested at step 3 (deploy)") for e in entries) == 1
    assert entries[-1] == "step 3 (deploy) done after 1 attempt(s)"
    assert_once(lab)


def test_an_escalation_is_written_once_across_a_crash(tmp_path: Path) -> None:
    db, lab = tmp_path / "runs.db", tmp_path / "lab"
    # call 8 is guard:3 writing the escalation to the record; die before it is journaled
    args = ["run", "looplab", "--scenario", "overspend", "--run-id", RUN, "--quiet"]
    killed = cli(db, lab, *args, crash_at="tool_returned:8")
    assert was_killed(killed), killed.stderr
    resumed = cli(db, lab, "resume", RUN, "--quiet")
    assert resumed.returncode == 4, resumed.stderr  # escalated
    got = inspect(db, lab)
    assert got["digest"] == DIGESTS["overspend"]
    assert record_entries(lab, RUN) == RECORDS["overspend"]
    assert [p["reason"] for p in got["patches"]].count("tripwire") == 1
    finished = [e for e in got["journal"] if e["kind"] == "run_finished"]
    assert len(finished) == 1 and finished[0]["data"]["verdict"]["limit"] == "max_usd"
    assert_once(lab)
