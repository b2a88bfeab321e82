"""A follow-up investigation across real SIGKILLs: submitted on a finished run (which was
bounded to four calls, so the follow-up reuses those and reads the rest itself), killed at
a task boundary or inside a tool call and resumed in a new process, it ends with the
report of an uninterrupted follow-up, sends none of the reused calls, and sends each of its
own once (the one in flight at a ``tool_returned`` kill again, with the same key). Two
boundaries here (a call answered and not journaled; a patch journaled); every one of them:
``python -m bench.sre_followup_crash``."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lk_sre import incident
from loopkernel.testing import run_cli, was_killed

pytestmark = pytest.mark.slow

CASE = "oom-payments"
PARENT, FOLLOW = "inv", "fu"


def _cli(tmp: Path, args: list[str], crash_at: str | None = None) -> Any:
    env = {"LOOPKERNEL_SRE_AUDIT": str(tmp / "audit.jsonl")}
    return run_cli(args, db=tmp / "runs.db", crash_at=crash_at, env=env)


def _audit(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _call(a: dict[str, Any]) -> str:
    return a["tool"] + " " + json.dumps(a["args"], sort_keys=True)


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("parent")
    case = incident(CASE)
    done = _cli(
        tmp,
        [
            "investigate",
            case["question"],
            "--dump",
            case["dump"],
            "--namespace",
            case["namespace"],
            "--run-id",
            PARENT,
            "--set",
            "max_tool_calls=4",
            "--json",
        ],
    )
    assert done.returncode == 0, done.stderr
    assert len(_audit(tmp)) == 4
    return tmp


def _follow_up(tmp: Path, parent: Path) -> None:
    shutil.copy(parent / "runs.db", tmp / "runs.db")  # the .db alone is the whole run
    asked = _cli(
        tmp,
        [
            "investigate",
            "and what do its logs say?",
            "--follow-up",
            PARENT,
            "--run-id",
            FOLLOW,
            "--user",
            "alice",
        ],
    )
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.strip() == FOLLOW


def _report(tmp: Path) -> dict[str, Any]:
    from loopkernel.client import Client

    async def go() -> dict[str, Any]:
        async with Client(str(tmp / "runs.db"), create=False) as client:
            shown = await client.inspect(FOLLOW)
        assert shown.info.status.value == "succeeded", shown.info.verdict
        result: dict[str, Any] = next(t for t in shown.tasks if t["task_id"] == "report")[
            "result"
        ]
        return result

    return asyncio.run(go())


@pytest.fixture(scope="module")
def submitted(parent: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The follow-up submitted, not run yet: every case starts from a copy of this .db."""
    tmp = tmp_path_factory.mktemp("submitted")
    _follow_up(tmp, parent)
    return tmp / "runs.db"


def _from(submitted: Path, tmp: Path) -> None:
    shutil.copy(submitted, tmp / "runs.db")


@pytest.fixture(scope="module")
def baseline(submitted: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("baseline")
    _from(submitted, tmp)
    done = _cli(tmp, ["resume", FOLLOW, "--quiet"])
    assert done.returncode == 0, done.stderr
    report = _report(tmp)
    reused = {_call(r) for r in report["reused"]}
    sent = _audit(tmp)
    assert len(reused) == 4 and len(sent) > 0  # both kinds: reused and read anew
    assert not reused & {_call(a) for a in sent}
    return {"digest": report["digest"], "reused": reused, "sent": sorted(_call(a) for a in sent)}


SAMPLE = ["tool_returned:2", "patch_committed:3"]
"""A call answered and its answer not journaled (re-sent, same key); a patch journaled."""


@pytest.mark.parametrize("point", SAMPLE)
def test_a_follow_up_killed_and_resumed_repeats_no_tool_call(
    tmp_path: Path, submitted: Path, baseline: dict[str, Any], point: str
) -> None:
    _from(submitted, tmp_path)
    killed = _cli(tmp_path, ["resume", FOLLOW, "--quiet"], crash_at=point)
    assert was_killed(killed), (killed.returncode, killed.stderr)
    resumed = _cli(tmp_path, ["resume", FOLLOW, "--quiet"])
    assert resumed.returncode == 0, resumed.stderr
    report = _report(tmp_path)
    assert report["digest"] == baseline["digest"]
    sent = _audit(tmp_path)
    assert not baseline["reused"] & {_call(a) for a in sent}, "a reused call was sent"
    keys = Counter(a["key"] for a in sent)
    twice = [k for k, n in keys.items() if n > 1]
    # in flight at a tool_returned kill: re-sent once with the same key; nothing else twice
    assert len(twice) == (1 if point.startswith("tool_returned") else 0), keys.most_common(3)
    assert sorted(set(map(_call, sent))) == sorted(set(baseline["sent"]))
