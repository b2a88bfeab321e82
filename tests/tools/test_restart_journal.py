"""A tool server that dies mid-call is restarted once, and the restart is in the journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lk_helpers import cli_env
from loopkernel.testing import run_cli

pytestmark = pytest.mark.slow


def test_a_restart_is_journaled_as_an_event_and_planned_like_any_other(tmp_path: Path) -> None:
    db, marker = tmp_path / "runs.db", tmp_path / "marker"
    out = run_cli(
        ["run", "lk_testapps:restart", "--run-id", "r", "--set", f"marker={marker}"],
        db=db,
        env=cli_env(),
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(run_cli(["inspect", "r", "--json"], db=db).stdout)
    assert data["verdict"] == {"survived": True}
    restarts = [e for e in data["journal"] if e["kind"] == "tool_restarted"]
    assert len(restarts) == 1 and restarts[0]["data"]["source"] == "faults"
    planned = {p["event_seq"] for p in data["patches"]}
    assert restarts[0]["seq"] in planned
