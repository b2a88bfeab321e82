"""Recorded databases and journals from earlier versions must still open, replay and resume.

``tests/golden/*.db`` were written by LoopKernel 0.1 (schema 1). A schema change that
strands them fails here: add a migration instead.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import GraphPatch
from loopkernel.graph import GraphState, TaskState, validate
from loopkernel.ids import RunId, TaskId

GOLDEN = Path(__file__).parent / "golden"


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, "--db", str(db), *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def recorded() -> dict[str, Any]:
    return json.loads((GOLDEN / "speculation_v1.json").read_text())  # type: ignore[no-any-return]


def test_a_recorded_database_opens_with_the_same_digest_and_journal(
    tmp_path: Path, recorded: dict[str, Any]
) -> None:
    db = tmp_path / "old.db"
    shutil.copyfile(GOLDEN / "speculation_v1.db", db)
    now = json.loads(cli(db, "inspect", "golden-spec", "--json").stdout)
    assert now["digest"] == recorded["digest"]
    assert now["journal"] == recorded["journal"]
    assert now["patches"] == recorded["patches"]


def test_the_recorded_patches_replay_to_the_recorded_graph(recorded: dict[str, Any]) -> None:
    state = GraphState(run_id=RunId("golden-spec"), app="speculation", params=None)
    final = {t["task_id"]: t for t in recorded["tasks"]}
    skills = {t["skill"] for t in recorded["tasks"]}
    events = {e["seq"]: e for e in recorded["journal"]}
    for record in recorded["patches"]:
        event = events[record["event_seq"]]
        if event["kind"] == "task_completed":  # the world's part: the task's recorded result
            tid = TaskId(event["task_id"])
            done = replace(
                state.tasks[tid], state=TaskState.SUCCEEDED, result=final[tid]["result"]
            )
            state.tasks[tid] = done
            for task in state.promotions(state.successors(tid), {}):
                state.tasks[task.task_id] = task
        if record["outcome"] == "applied":
            state.apply(validate(state, GraphPatch.from_json(record["ops"]), skills))
    assert {t: v.state.value for t, v in state.tasks.items()} == {
        t: v["state"] for t, v in final.items()
    }
    assert sorted([s, d] for d, ps in state.preds.items() for s in ps) == recorded["edges"]
    assert state.status.value == recorded["status"]


def test_a_recorded_waiting_run_is_approved_and_resumed_by_this_version(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copyfile(GOLDEN / "gate_waiting_v1.db", db)
    assert cli(db, "approve", "golden-gate", "gate", "--payload", '{"by": "ops"}').returncode == 0
    done = cli(db, "resume", "golden-gate", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"]["saw"] == ["gate", "prep"]
