"""Kill a process whose runs share their commits (SQLite group commit) at the group's
crash points, resume in a new process, and compare each run with its run executed alone
(``bench/chaos_batch.py``, the chaos suite's many-runs-per-process case)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lk_helpers import ROOT, cli_env

pytestmark = pytest.mark.slow


def test_a_kill_at_any_point_of_a_group_commit_leaves_each_run_as_alone(tmp_path: Path) -> None:
    out = tmp_path / "batch.json"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "bench.chaos_batch", "--quick", "--seed", "20261203"),
            *("--runs", "12", "--steps", "15", "--cases", "6"),
            *("--work", str(tmp_path / "work"), "--out", str(out)),
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["reference_grouped_writes"] == 0  # the reference shares no commit
    totals = result["totals"]
    assert totals["exact"] == 12 * 6
    assert totals["lost"] == totals["doubled"] == totals["divergent"] == 0
    # Every case with a crash point landed its kill (the time case may come too late).
    for case in result["cases"]:
        if not case["trigger"].startswith("time"):
            assert case["kills"] >= 1, case
