"""``loopkernel tools list|call`` against any stdio MCP server: ours, a third party's, a
command that is missing, a program that does not speak MCP."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from loopkernel.cli import main

pytestmark = pytest.mark.slow

FAULTS = f"{shlex.quote(sys.executable)} -m loopkernel.tools.testkit.faults"
THIRD = f"{shlex.quote(sys.executable)} {Path(__file__).parent / 'servers' / 'third_party.py'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_tools_and_effects(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "tools", "list", "--server-cmd", FAULTS)
    assert code == 0, err
    lines = {line.split()[0]: line.split()[1] for line in out.splitlines()}
    assert lines["echo"] == "read_only" and lines["fail"] == "idempotent"


def test_list_json_of_a_third_party_server(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tools", "list", "--json", "--server-cmd", THIRD)
    assert code == 0
    tools = {t["name"]: t for t in json.loads(out)}
    assert tools["forecast"]["effect"] == "read_only"
    assert tools["forecast"]["inputSchema"]["properties"]["city"]["type"] == "string"


def test_call_prints_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "tools", "call", "shout", "--args", '{"text": "ok"}', "--server-cmd", THIRD
    )
    assert code == 0 and json.loads(out) == {"result": "OK"}


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (
            ["list", "--server-cmd", "no-such-mcp-server --stdio"],
            1,
            "ToolUnavailable(cannot_start)",
        ),
        (["list", "--server-cmd", "echo hello"], 1, "ToolUnavailable(not_mcp)"),
        (["call", "wrong_type", "--server-cmd", FAULTS], 1, "ToolError(invalid_output)"),
        (
            [
                "call",
                "slow",
                "--args",
                '{"seconds": 9}',
                "--timeout",
                "0.3",
                "--server-cmd",
                FAULTS,
            ],
            1,
            "ToolTimeout(timeout)",
        ),
        (["call", "echo", "--args", "{oops", "--server-cmd", FAULTS], 2, "not JSON"),
        (["call", "echo", "--args", "[1]", "--server-cmd", FAULTS], 2, "JSON object"),
        (["list", "--server-cmd", "  "], 2, "--server-cmd is empty"),
        (["list"], 2, "--server-cmd"),
    ],
    ids=[
        "missing",
        "not-mcp",
        "bad-output",
        "timeout",
        "args-not-json",
        "args-not-object",
        "empty-cmd",
        "no-cmd",
    ],
)
def test_failures_exit_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    got, out, err = run(capsys, "tools", *argv)
    assert got == code and message in err and out == ""
    if code == 1:
        assert len(err.strip().splitlines()) == 1, err


def test_the_installed_command_runs_tools_list() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loopkernel",
            "tools",
            "call",
            "echo",
            "--args",
            '{"text": "via -m"}',
            "--server-cmd",
            FAULTS,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"text": "via -m"}
