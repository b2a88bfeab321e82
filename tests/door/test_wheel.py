"""The wheel (issue 24, section 5): built from the clone as an index would serve it,
installed alone into a fresh virtual environment, it runs. So the day LoopKernel is
published, ``pip install loopkernel`` works as the clone does."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from lk_helpers import ROOT

pytestmark = pytest.mark.slow


def test_the_wheel_installs_alone_and_runs(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("loopkernel-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "loopkernel/py.typed",
        "loopkernel/sync.py",
        "loopkernel/cli/_housekeeping.py",
        "loopkernel_apps/speculation.py",
    ):
        assert needed in names, needed
    assert not any(n.startswith(("tests/", "bench/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "loopkernel = loopkernel.cli:main" in text.replace("  ", " ")
    assert "[loopkernel.apps]" in text and "speculation" in text

    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # nothing of this checkout
    where = subprocess.run(
        [str(python), "-c", "import loopkernel, loopkernel.sync; print(loopkernel.__file__)"],
        capture_output=True, text=True, timeout=60, env=clean, cwd=tmp_path,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(env_dir)), where.stdout
    command = env_dir / "bin" / "loopkernel"
    version = subprocess.run(
        [str(command), "--version"], capture_output=True, text=True, timeout=60, env=clean
    )
    assert version.returncode == 0 and version.stdout.startswith("loopkernel 0."), version
    run = subprocess.run(
        [str(command), "--db", str(tmp_path / "runs.db"), "run", "speculation", "--scenario",
         "fast", "--quiet"],
        capture_output=True, text=True, timeout=120, env=clean, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr  # the core needs no dependency at all
    assert "succeeded" in run.stdout
