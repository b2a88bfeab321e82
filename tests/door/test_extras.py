"""A missing optional extra is one line naming the install command, never a hang nor a
traceback (issue 8, section 3). The ``mcp`` SDK is made unimportable in the subprocesses
by a ``sitecustomize`` on their path, as if the ``tools`` extra were not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env

pytestmark = pytest.mark.slow

BLOCK = """
import sys

class _NoMCP:
    def find_spec(self, name, path=None, target=None):
        if name == "mcp" or name.startswith("mcp."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoMCP())
"""


@pytest.fixture
def no_mcp(tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(BLOCK)
    env = cli_env()
    env["PYTHONPATH"] = f"{shim}:{env['PYTHONPATH']}"
    check = subprocess.run([sys.executable, "-c", "import mcp"], env=env, capture_output=True)
    assert check.returncode != 0  # the shim works
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=env, capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_tools_list_without_the_tools_extra_says_so_at_once(
    no_mcp: dict[str, str], tmp_path: Path
) -> None:
    server = f"{sys.executable} -m loopkernel.tools.testkit.faults"
    out = run(["tools", "list", "--server-cmd", server], no_mcp, tmp_path)  # hung forever
    assert out.returncode == 2, out.stderr
    assert "pip install -e '.[tools]' in a clone" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_run_looplab_without_the_tools_extra_is_one_line_and_writes_nothing(
    no_mcp: dict[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    out = run(["--db", str(db), "run", "looplab"], no_mcp, tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "loopkernel: the tool layer needs the tools extra: pip install -e '.[tools]' in a clone "
        "(or the built wheel with [tools]) (No module named 'mcp')"
    ]
    assert not db.exists()


def test_a_tool_server_without_the_sdk_exits_with_one_line(
    no_mcp: dict[str, str], tmp_path: Path
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "loopkernel.tools.testkit.faults"],
        env=no_mcp, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 2
    assert "pip install -e '.[tools]' in a clone" in out.stderr and "Traceback" not in out.stderr
