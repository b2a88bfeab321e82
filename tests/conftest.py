from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Hermetic: no model or cloud credentials leak into a test, and no crash point from outside.
for var in list(os.environ):
    if var.endswith(("_API_KEY", "_TOKEN")) or var in {
        "LOOPKERNEL_CRASH_AT",
        "LOOPKERNEL_DB",
        "LOOPKERNEL_TRACE",
    }:
        del os.environ[var]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"
