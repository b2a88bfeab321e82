"""The four looplab scenarios on LoopKernel: outcome, spend, digest and durable record are
fixed. The digests change only if the app, its tools or the store's canonical dump change."""

from __future__ import annotations

from pathlib import Path

import pytest

from lk_looplab import APPLIED, DIGESTS, RECORDS, run_inprocess
from loopkernel.tools import read_ledger
from loopkernel_apps.looplab import EXPECTED
from loopkernel_apps.looplab.tools import applied, record_entries, world_path


@pytest.mark.parametrize("scenario", sorted(RECORDS))
def test_each_scenario_reaches_its_fixed_outcome(tmp_path: Path, lab: Path, scenario: str) -> None:
    run = f"lab-{scenario}"
    got = run_inprocess(tmp_path / "runs.db", run, scenario)
    want = EXPECTED[scenario]
    assert got["status"] == want["status"]
    if want["status"] == "succeeded":
        assert got["verdict"] == {
            "steps_done": want["steps_done"],
            "spent_usd": want["spent_usd"],
        }
    acts = [t for t in got["tasks"] if t["skill"] == "act" and t["state"] == "succeeded"]
    assert round(sum(t["result"]["cost_usd"] for t in acts), 6) == want["spent_usd"]
    assert record_entries(lab, run) == RECORDS[scenario]
    assert applied(lab, run) == APPLIED[scenario]
    keys = [e["key"] for e in read_ledger(world_path(lab, run))]
    assert len(keys) == len(set(keys))
    assert got["digest"] == DIGESTS[scenario]


def test_overspend_stops_before_the_action_that_would_pass_the_budget(
    tmp_path: Path, lab: Path
) -> None:
    got = run_inprocess(tmp_path / "runs.db", "o", "overspend")
    v = got["verdict"]
    assert (v["kind"], v["limit"], v["observed"], v["task_id"]) == (
        "budget_exceeded",
        "max_usd",
        1.2,
        "guard:3",
    )
    assert not any(t["task_id"].startswith("act:3") for t in got["tasks"])
    assert [p["planner"] for p in got["patches"]].count("kernel") == 1  # the one escalation


def test_verify_stuck_escalates_after_the_retry_limit(tmp_path: Path, lab: Path) -> None:
    got = run_inprocess(tmp_path / "runs.db", "v", "verify_stuck")
    v = got["verdict"]
    assert (v["tripwire"], v["observed"], v["task_id"]) == ("verify_stuck", 3, "verify:2.3")
    verifies = [t["task_id"] for t in got["tasks"] if t["skill"] == "verify"]
    assert verifies == ["verify:1.1", "verify:2.1", "verify:2.2", "verify:2.3"]


def test_a_tighter_policy_from_parameters_escalates_earlier(tmp_path: Path, lab: Path) -> None:
    policy = {"max_usd": 1.0, "verify_stuck_after": 1}
    got = run_inprocess(tmp_path / "runs.db", "t", "baseline", policy=policy)
    assert got["status"] == "escalated"
    assert got["verdict"]["tripwire"] == "verify_stuck"  # transform fails verify once


def test_an_exception_in_loop_code_fails_the_run_and_says_why(tmp_path: Path, lab: Path) -> None:
    got = run_inprocess(tmp_path / "runs.db", "i", "baseline", inject="plan")
    assert got["status"] == "failed"
    v = got["verdict"]
    assert (v["task_id"], v["type"], v["message"]) == (
        "plan:2",
        "RuntimeError",
        "injected: plan of step 2 raised",
    )


@pytest.mark.parametrize(
    ("fault", "error", "kind"),
    [("wrong_type", "ToolError", "invalid_output"), ("raise", "ToolError", "handler_error")],
)
def test_a_fault_at_the_tool_boundary_fails_the_run_with_the_tool_error(
    tmp_path: Path, lab: Path, fault: str, error: str, kind: str
) -> None:
    got = run_inprocess(tmp_path / "runs.db", "f", "baseline", fault=fault)
    assert got["status"] == "failed"
    assert (got["verdict"]["type"], got["verdict"]["kind"]) == (error, kind)
    assert got["verdict"]["task_id"] == "act:1.1"
