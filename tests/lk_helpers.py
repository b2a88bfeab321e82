"""Helpers shared by the tests (importable: ``tests`` is on the pytest pythonpath)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOPKERNEL = [sys.executable, "-m", "loopkernel"]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a ``loopkernel`` subprocess (tests dir importable for test apps)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env
