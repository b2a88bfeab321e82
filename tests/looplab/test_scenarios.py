"""The four looplab scenarios on LoopKernel: outcome, spend, digest and durable record are
fixed. The digests change only if the app, its tools or the store's canonical dump change."""

from __future__ import annotations

from pathlib import Path

import pytest

from lk_looplab import run_inprocess
from loopkernel.tools import read_ledger
from loopkernel_apps.looplab import EXPECTED
from loopkernel_apps.looplab.tools import applied, record_entries, world_path

DIGESTS = {
    "baseline": "d98bbacfc09e5aba25468fc5f9c666582ae55454b8f935087a009c3120c0d205",
    "overspend": "aadc4ed5b0e21f97c502e632007583cda329f5e1837470e8c083e23dd9e7f5e4",
    "verify_stuck": "2665bfa52d98b6a247c1e3f2df2028960bb9f9b2ea02288a0b064ed77e4e8ef8",
    "irreversible": "c6ae46c06c493fb1f3433e871e1301ee4af7d6bd3a3087bc0c5eec6e3fdaf323",
}

RECORDS = {
    "baseline": [
        "step 1 (fetch) done after 1 attempt(s)",
        "step 2 (transform) done after 2 attempt(s)",
        "step 3 (report) done after 1 attempt(s)",
    ],
    "overspend": [
        "step 1 (fetch) done after 1 attempt(s)",
        "step 2 (transform) done after 1 attempt(s)",
        "escalated at step 3 (train): spending 0.5000 USD on top of 0.7000 USD would pass "
        "max_usd=1 (total 1.2000); raise Budget.max_usd to allow it",
    ],
    "verify_stuck": [
        "step 1 (fetch) done after 1 attempt(s)",
        "escalated at step 2 (transform): verification failed 3 times in a row "
        "(verify_stuck_after=3); the loop is stuck, a human must look",
    ],
}

APPLIED = {
    "baseline": ["fetch#1", "transform#1", "transform#2", "report#1"],
    "overspend": ["fetch#1", "transform#1"],
    "verify_stuck": ["fetch#1", "transform#1", "transform#2", "transform#3"],
}


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
