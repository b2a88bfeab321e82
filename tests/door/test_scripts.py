"""The scripts and benchmarks leave each other alone (issue 8, section 5)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lk_helpers import ROOT


def test_demo_and_test_scripts_do_not_reinstall_each_others_venv(tmp_path: Path) -> None:
    """``_venv.sh`` with a ``.venv/bin/python`` that logs what it is asked to do: each
    extras set installs once, however the scripts alternate, and again only when
    ``pyproject.toml`` changes."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "_venv.sh", tmp_path / "scripts" / "_venv.sh")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    log = tmp_path / "pip.log"
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    python.chmod(0o755)

    def script(extras: str) -> None:
        subprocess.run(
            ["bash", "-c", f'LK_EXTRAS="{extras}"; source scripts/_venv.sh'],
            cwd=tmp_path, check=True, capture_output=True,
            env={**os.environ, "PYTHON": "python3"},
        )  # fmt: skip

    def installs() -> list[str]:
        lines = log.read_text().splitlines() if log.exists() else []
        return [line.rsplit(" ", 1)[-1] for line in lines if "install" in line and "-e" in line]

    for extras in ["tools", "dev", "tools", "dev", "tools"]:
        script(extras)
    assert installs() == [".[tools]", ".[dev]"]
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\nversion = '2'\n")
    script("dev")
    script("dev")
    assert installs() == [".[tools]", ".[dev]", ".[dev]"]


def test_quick_benchmark_results_never_overwrite_the_committed_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ lives in the checkout, not the package
    from bench import scoreboard
    from bench._results import QUICK_RESULTS, RESULTS, write_results

    committed = {p.name: p.read_bytes() for p in RESULTS.iterdir()}
    out = write_results("kernel_overhead", {"rows": []}, quick=True)
    try:
        assert out.parent == QUICK_RESULTS and RESULTS not in out.parents
        assert {p.name: p.read_bytes() for p in RESULTS.iterdir()} == committed
    finally:
        out.unlink()
    assert "--quick" in (ROOT / "bench" / "scoreboard.py").read_text()
    assert scoreboard.results_dir(True) == QUICK_RESULTS


def test_nothing_under_src_imports_bench() -> None:
    for path in (ROOT / "src").rglob("*.py"):
        text = path.read_text()
        assert "import bench" not in text and "from bench" not in text, path
        assert '"bench.' not in text, path
