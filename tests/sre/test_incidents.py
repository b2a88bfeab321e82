"""Every example incident is diagnosed with no model: the right detector ranked first, its key
fact cited from evidence that contains it, and the distractors (stale events, healthy pods,
misleading logs) never stated as the cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lk_sre import NAMES, incident, investigate
from loopkernel_apps.sre import REPORT_FIELDS

pytestmark = pytest.mark.slow


def _cited(report: dict[str, Any], refs: list[str]) -> list[str]:
    by_ref = {e["ref"]: e["content"] for e in report["evidence"]}
    return [by_ref[r] for r in refs]


@pytest.mark.parametrize("name", NAMES)
def test_each_incident_is_diagnosed_without_a_model(tmp_path: Path, name: str) -> None:
    expected = incident(name)["expected"]
    result = investigate(tmp_path / "runs.db", name)
    report = result["report"]
    assert set(REPORT_FIELDS) <= set(report)
    verified = report["verified_causes"]
    detectors = [v["detector"] for v in verified]
    for wrong in expected["not_causes"]:
        assert wrong not in detectors, f"{wrong} stated as a cause: {detectors}"
    if expected["detector"] is None:
        assert verified == []
        assert report["summary"].startswith("No failure found")
        return
    top = verified[0]
    assert top["detector"] == expected["detector"], report["summary"]
    assert top["pod"].startswith(expected["pod_prefix"])
    # the key fact: in the claim, and in an evidence item the claim cites
    fact = expected["fact"]
    assert fact in top["text"] + top["quote"]
    assert any(fact in content for content in _cited(report, top["evidence"])), top
    for ident in expected["identifiers"]:
        assert ident in top["text"], (ident, top["text"])
    # every citation left in the report supports its claim
    for cause in verified:
        for content in _cited(report, cause["evidence"]):
            assert cause["quote"] in content or cause["pod"] in content
    for action in report["proposed_remediation"]:
        assert action["requires_approval"] is True and action["executable"] is False
    if "refused_namespace" in expected:
        refused = report["coverage"]["refused_requests"]
        assert [r["args"].get("namespace") for r in refused] == [expected["refused_namespace"]]
        assert all(e["args"].get("namespace") in (None, "prod") for e in report["evidence"])
