"""looplab's model may retry differently, within the postconditions: a retry's ``act`` may
wait ``backoff_s`` before it acts (``Allowlist.vary``), while its attempt, tool, guard and
price stay the rules' (so the verify_stuck tripwire and the budget count it) and the
skill's schema bounds the wait.

The model is the scripted provider (a real local HTTP server, OpenAI protocol) behind a
real in-process gateway, replaying the rules' own patch of each event (taken from a
rules-only run) with the retry changed."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lk_models import TOKEN, gateway_for
from loopkernel.client import Client
from loopkernel.testing import ScriptedProvider
from loopkernel_apps.looplab import EXPECTED
from loopkernel_apps.looplab.tools import record_entries

pytestmark = pytest.mark.slow

RETRY = "act:2.2"  # baseline: "transform" passes its verification at the second attempt


async def _run(db: Path, lab: Path, script: list[str] | None) -> dict[str, Any]:
    overrides: dict[str, Any] = {"scenario": "baseline"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOOPLAB_DIR", str(lab))
        if script is None:
            return await _execute(db, overrides)
        async with (
            ScriptedProvider(script, default="[]") as p,
            gateway_for(p, db.parent) as (gw, _client),
        ):
            assert gw.server is not None
            mp.setenv("LOOPKERNEL_GATEWAY", str(gw.server.address))
            mp.setenv("LOOPKERNEL_GATEWAY_TOKEN", TOKEN)
            return await _execute(db, {**overrides, "planner": "llm"})


async def _execute(db: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    async with Client(str(db)) as client:
        await client.start("looplab", overrides=overrides, run_id="lab")
        await client.execute("lab")
        return (await client.inspect("lab", journal=True)).to_json()


def _script(rules: dict[str, Any], change: dict[str, Any]) -> list[str]:
    """The rules' patch of each event, the retry's ``add`` changed by ``change``."""
    out = []
    for p in rules["patches"]:
        ops = copy.deepcopy(p["ops"])
        for op in ops:
            if op["op"] == "add" and op.get("task_id") == RETRY:
                op["input"] = {**op["input"], **change}
        out.append(json.dumps(ops, separators=(",", ":")))
    return out


def _task(got: dict[str, Any], task_id: str) -> dict[str, Any]:
    return next(t for t in got["tasks"] if t["task_id"] == task_id)


def _retry_patch(got: dict[str, Any]) -> dict[str, Any]:
    return next(
        p
        for p in got["patches"]
        if any(op["op"] == "add" and op.get("task_id") == RETRY for op in p["ops"])
    )


def test_the_model_may_retry_differently_within_the_postconditions(tmp_path: Path) -> None:
    rules = asyncio.run(_run(tmp_path / "rules.db", tmp_path / "lab-rules", None))
    assert _task(rules, RETRY)["input"].get("backoff_s") is None

    script = _script(rules, {"backoff_s": 0.3})
    got = asyncio.run(_run(tmp_path / "llm.db", tmp_path / "lab-llm", script))
    assert got["status"] == "succeeded"
    assert got["verdict"] == {k: EXPECTED["baseline"][k] for k in ("steps_done", "spent_usd")}
    assert _retry_patch(got)["planner"] == "llm"  # admitted: only the wait differs
    assert _task(got, RETRY)["input"]["backoff_s"] == 0.3
    entries = record_entries(tmp_path / "lab-llm", "lab")
    assert "attempt 2 of step 2 waits 0.3 s first" in entries
    assert "attempt 2 of step 2 waits 0.3 s first" not in record_entries(
        tmp_path / "lab-rules", "lab"
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"backoff_s": 600}, "bad_input"),  # past the schema's bound
        ({"attempt": 1}, "off_path"),  # a retry that would not count against the tripwire
        ({"tool": "publish"}, "off_path"),  # another tool than the guard's
        ({"est_cost_usd": 0.0}, "off_path"),  # a cheaper price than the step's
    ],
)
def test_a_different_retry_outside_the_bounds_is_refused(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    rules = asyncio.run(_run(tmp_path / "rules.db", tmp_path / "lab-rules", None))
    got = asyncio.run(_run(tmp_path / "llm.db", tmp_path / "lab-llm", _script(rules, change)))
    assert got["status"] == "succeeded" and got["digest"] == rules["digest"]
    patch = _retry_patch(got)
    # the rule broken, named (a bad_input is re-asked once; the detail keeps the first)
    said = f"{patch['proposal']['reason']} {patch['proposal']['detail']}"
    assert patch["planner"] == "fallback" and reason in said, said
    assert _task(got, RETRY)["input"] == _task(rules, RETRY)["input"]
