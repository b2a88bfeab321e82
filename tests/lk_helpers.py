"""Helpers shared by the tests (importable: ``tests`` is on the pytest pythonpath)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOPKERNEL = [sys.executable, "-m", "loopkernel"]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a ``loopkernel`` subprocess (tests dir importable for test apps)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` (``64k``, ``2m``) mounted at ``where``: a disk a test can
    fill to its last page. Skips the test where mounting is impossible (not root)."""
    import pytest

    where.mkdir(exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
