"""The investigator across real SIGKILLs: killed at every task boundary (and inside a tool
call), resumed in a new process, it reaches the run digest and the report digest of an
uninterrupted run, and the tools server's audit log shows no tool call sent twice except
the one call that was in flight at the kill (re-sent with the same idempotency key)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import sweep
from lk_sre import incident
from loopkernel.testing import run_cli, was_killed

pytestmark = pytest.mark.slow

CASE = "scope-refusal"  # 10 tasks, a refused request, two plan/act rounds
RUN = "inv"


def _args() -> list[str]:
    case = incident(CASE)
    return [
        "investigate",
        case["question"],
        "--dump",
        case["dump"],
        "--namespace",
        case["namespace"],
        "--run-id",
        RUN,
        "--json",
    ]


def _cli(tmp: Path, args: list[str], crash_at: str | None = None) -> Any:
    env = {"LOOPKERNEL_SRE_AUDIT": str(tmp / "audit.jsonl")}
    return run_cli(args, db=tmp / "runs.db", crash_at=crash_at, env=env)


def _state(tmp: Path) -> dict[str, Any]:
    out = _cli(tmp, ["inspect", RUN, "--json"])
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    report = next(t for t in got["tasks"] if t["task_id"] == "report")["result"]
    audit = [json.loads(line) for line in (tmp / "audit.jsonl").read_text().splitlines()]
    with sqlite3.connect(tmp / "runs.db") as conn:
        effects = conn.execute("SELECT task_id, call_index, status FROM effects").fetchall()
    return {
        "digest": got["digest"],
        "report": report["digest"],
        "audit": audit,
        "effects": sorted(effects),
    }


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("baseline")
    done = _cli(tmp, _args())
    assert done.returncode == 0, done.stderr
    state = _state(tmp)
    assert json.loads(done.stdout)["verified_causes"][0]["detector"] == "oomkilled"
    return state


# Every boundary of the run with LOOPKERNEL_TEST_SWEEP=full; the suite takes both ends and
# the middle of each kind (lk_helpers.sweep).
POINTS = sweep([f"task_returned:{n}" for n in range(1, 11)], keep=3) + sweep(
    [f"patch_committed:{n}" for n in range(1, 12)], keep=3
)


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_a_task_boundary_resumes_to_the_same_report(
    tmp_path: Path, baseline: dict[str, Any], point: str
) -> None:
    killed = _cli(tmp_path, _args(), crash_at=point)
    assert was_killed(killed), (killed.returncode, killed.stderr)
    resumed = _cli(tmp_path, ["resume", RUN, "--quiet"])
    assert resumed.returncode == 0, resumed.stderr
    state = _state(tmp_path)
    assert state["digest"] == baseline["digest"]
    assert state["report"] == baseline["report"]
    assert state["effects"] == baseline["effects"]
    keys = Counter(a["key"] for a in state["audit"])
    assert max(keys.values()) == 1, f"a tool call was sent twice: {keys.most_common(2)}"
    assert sorted(keys) == sorted(a["key"] for a in baseline["audit"])


@pytest.mark.parametrize("point", ["tool_sent:3", "tool_returned:3"])
def test_kill_inside_a_tool_call_resends_only_that_call(
    tmp_path: Path, baseline: dict[str, Any], point: str
) -> None:
    killed = _cli(tmp_path, _args(), crash_at=point)
    assert was_killed(killed), (killed.returncode, killed.stderr)
    resumed = _cli(tmp_path, ["resume", RUN, "--quiet"])
    assert resumed.returncode == 0, resumed.stderr
    state = _state(tmp_path)
    assert state["digest"] == baseline["digest"]
    assert state["report"] == baseline["report"]
    keys = Counter(a["key"] for a in state["audit"])
    twice = [k for k, n in keys.items() if n > 1]
    # sent but not journaled at the kill: re-sent once, with the same key; nothing else
    assert twice == ([f"{RUN}/logs/1"] if point.startswith("tool_returned") else [])
