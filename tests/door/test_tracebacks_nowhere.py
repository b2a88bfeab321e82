"""Tracebacks nowhere at the door (issue 32, item 5): an export to a place that cannot be
written, random bytes in a dump's ``pods.json``, an unwritable gateway ledger and a
gateway address in use are each one line and exit 2 (a bad configuration)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, ROOT, cli_env

pytestmark = pytest.mark.slow

GATEWAY = ["gateway", "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1"]
GATEWAY += ["--model", "m"]


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(**env), capture_output=True, text=True, timeout=120
    )


def one_line(out: subprocess.CompletedProcess[str], code: int = 2) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == code and len(lines) == 1, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    return lines[0]


def test_an_export_to_a_place_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    ran = cli("--db", db, "run", "speculation", "--scenario", "fast", "--run-id", "s")
    assert ran.returncode == 0, ran.stderr
    for place in ("/proc/copy.db", "/sys/copy.db"):
        line = one_line(cli("--db", db, "export", "s", "--to", place))
        assert f"cannot write the export {place}" in line
        assert not Path(place).exists()


def test_random_bytes_in_a_dumps_pods_json_are_one_line(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    shutil.copytree(ROOT / "examples" / "incidents" / "cert-expired" / "dump", dump)
    (dump / "prod" / "pods.json").write_bytes(bytes(range(256)) * 8)
    out = cli(
        "--db", str(tmp_path / "runs.db"), "investigate", "why?", "--dump", str(dump),
        "--namespace", "prod",
    )  # fmt: skip
    assert "pods.json is not UTF-8 text" in one_line(out)


def test_an_unwritable_ledger_and_a_taken_address_are_a_bad_configuration(
    tmp_path: Path,
) -> None:
    token = {"LOOPKERNEL_GATEWAY_TOKEN": "t" * 40}
    for ledger in ("/proc/nope/ledger.db", "/sys/ledger.db"):
        out = cli(*GATEWAY, "--listen", "127.0.0.1:0", "--ledger", ledger, **token)
        assert f"cannot write the gateway ledger {ledger}" in one_line(out)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ledger = str(tmp_path / "ledger.db")
        out = cli(*GATEWAY, "--listen", f"127.0.0.1:{port}", "--ledger", ledger, **token)
        assert "cannot listen" in one_line(out)
