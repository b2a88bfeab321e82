from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh LOOPLAB_DIR for the looplab tool server's durable run records."""
    monkeypatch.setenv("LOOPLAB_DIR", str(tmp_path / "lab"))
    return tmp_path / "lab"
