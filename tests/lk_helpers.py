"""Helpers shared by the tests (importable: ``tests`` is on the pytest pythonpath)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOOPKERNEL = [sys.executable, "-m", "loopkernel"]
T = TypeVar("T")


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a ``loopkernel`` subprocess (tests dir importable for test apps)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` (``64k``, ``2m``) mounted at ``where``: a disk a test can
    fill to its last page. Where mounting is impossible (not root) the test fails, unless
    ``LOOPKERNEL_TEST_ROOT=skip`` says to skip it knowingly (``unavailable``)."""
    where.mkdir(exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        unavailable(
            "root-only (a full disk, an immutable file)",
            "LOOPKERNEL_TEST_ROOT",
            f"cannot mount a tmpfs here: {mounted.stderr.strip()}",
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


NOT_TESTED_TAG = "NOT TESTED:"
"""Starts the reason of every knowing skip, so ``conftest.py`` can count and report them."""


def unavailable(component: str, switch: str, problem: str) -> NoReturn:
    """A real peer the tests need (PostgreSQL, Chromium …) is missing: fail the test.

    Only ``<switch>=skip`` in the environment turns that into a skip, which the terminal
    summary then reports loudly as not tested. CI never sets a switch. Used by the
    PostgreSQL fixtures (``LOOPKERNEL_TEST_PG=skip``) and meant for the browser tests
    (``LOOPKERNEL_TEST_BROWSER=skip``) and any other real peer that may be absent.
    """
    if os.environ.get(switch) == "skip":
        pytest.skip(f"{NOT_TESTED_TAG} {component} ({switch}=skip): {problem}")
    pytest.fail(
        f"{problem}\nThe {component} tests need it. To run the rest of the suite without "
        f"them, knowingly, set {switch}=skip (they are then reported as NOT TESTED).",
        pytrace=False,
    )


def sweep(points: Sequence[T], *, keep: int) -> list[T]:
    """The kill points (or cases) of a sweep the suite runs: ``keep`` of them spread evenly
    from the first to the last, always both ends (a boundary's first and last occurrence
    are where a resume differs most); all of them with ``LOOPKERNEL_TEST_SWEEP=full``
    (``docs/testing.md``). The sample is fixed, so a failure names a point that fails again.
    """
    every = list(points)
    if os.environ.get("LOOPKERNEL_TEST_SWEEP") == "full" or keep >= len(every):
        return every
    if keep < 2:
        raise ValueError("a sweep keeps at least its two ends")
    step = (len(every) - 1) / (keep - 1)
    return [every[round(i * step)] for i in range(keep)]
