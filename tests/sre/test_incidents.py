"""Every example incident is diagnosed with no model: the right detector ranked first, its key
fact cited from evidence that contains it, no verified cause that is not the incident's, and
the distractors (stale events, healthy pods, misleading logs, consequences) never stated as
the cause. ``examples/incidents/_expect.py`` holds the checks (the bench uses the same)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from lk_sre import INCIDENTS, NAMES, incident, investigate
from loopkernel_apps.sre import REPORT_FIELDS

pytestmark = pytest.mark.slow


def _check() -> Any:
    spec = importlib.util.spec_from_file_location("_expect", INCIDENTS / "_expect.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check


check = _check()


def test_there_are_at_least_thirty_incidents() -> None:
    assert len(NAMES) >= 30


def test_a_held_out_set_of_another_author_with_incidents_that_have_no_verified_cause() -> None:
    """``examples/incidents/_heldout.py``: written apart from ``_make.py``; some have no
    cause the dump shows, and there the report must verify nothing."""
    held = [n for n in NAMES if n.startswith("heldout-")]
    assert len(held) >= 12
    assert sum(bool(incident(n)["expected"].get("unexplained")) for n in held) >= 3


@pytest.mark.parametrize("name", NAMES)
def test_each_incident_is_diagnosed_without_a_model(tmp_path: Path, name: str) -> None:
    expected = incident(name)["expected"]
    result = investigate(tmp_path / "runs.db", name)
    report = {**result["report"], "markdown": result["markdown"]}
    assert set(REPORT_FIELDS) <= set(report)
    verdict = check(report, expected)
    assert verdict["false_verified"] == [], verdict
    assert verdict["problems"] == [], verdict
    assert verdict["main_cause"], report["summary"]
    if expected["detector"] is None:
        assert report["verified_causes"] == []
