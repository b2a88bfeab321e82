"""The credential boundary, proven with real processes: a provider key given to the gateway
is nowhere in the runtime (its /proc/self/environ, its database file, its logs, ``inspect``)
nor in the tool servers it spawns, even when the runtime was started with the key in its
environment. And the gateway process's own command line refuses bad configurations."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lk_helpers import ROOT
from loopkernel.testing import GatewayProcess, ScriptedProvider, run_cli

KEY = "sk-proj-BOUNDARY-7c1e0f9a2b4d"
OTHER = "sk-ant-OTHER-55d0c2e1"


def runtime_env(gw: GatewayProcess, **extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT / "tests"),
        **gw.runtime_env(),
        **extra,
    }


@pytest.mark.slow
def test_a_provider_key_never_reaches_the_runtime_its_store_logs_or_tools(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    environ_out = tmp_path / "environ.bin"
    with (
        ScriptedProvider(default="hello from the provider", api_key=KEY).running() as p,
        (
            GatewayProcess(
                ["--provider", "openai", "--base-url", p.base_url, "--model", "scripted-model"],
                env={"OPENAI_API_KEY": KEY},
                ledger=tmp_path / "ledger.db",
            )
        ) as gw,
    ):
        env = runtime_env(gw, OPENAI_API_KEY=KEY, ANTHROPIC_API_KEY=OTHER)
        ran = run_cli(
            [
                "run",
                "lk_modelapps:boundary",
                "--run-id",
                "b1",
                "--set",
                f"environ_out={environ_out}",
            ],
            db=db,
            env=env,
        )
        assert ran.returncode == 0, ran.stderr
        inspected = [
            run_cli(["inspect", "b1", *flags], db=db, env=env)
            for flags in ([], ["--json"], ["--journal"])
        ]
        gateway_log = gw.log
    # the key did its job: the provider saw it, from the gateway
    assert p.requests[0].headers["authorization"] == f"Bearer {KEY}"
    # the runtime warned once, by name, and never printed a value
    warnings = [line for line in ran.stderr.splitlines() if "removed" in line]
    assert len(warnings) == 1 and "ANTHROPIC_API_KEY, OPENAI_API_KEY" in warnings[0]
    result = json.loads(inspected[1].stdout)
    assert result["status"] == "succeeded"
    tool_env = result["verdict"]["tool_env"]
    assert "PATH" in tool_env and not any(n.endswith("_API_KEY") for n in tool_env)
    assert result["verdict"]["text"] == "hello from the provider"
    # nowhere: the runtime's own /proc/self/environ, its database, its output, inspect
    environ = environ_out.read_bytes()
    assert b"LOOPKERNEL_GATEWAY_TOKEN=" in environ  # the file is the real environ block
    places = {
        "/proc/self/environ of the runtime": environ,
        "the database": b"".join(f.read_bytes() for f in tmp_path.glob("runs.db*")),
        "the runtime's stdout": ran.stdout.encode(),
        "the runtime's stderr": ran.stderr.encode(),
        "the gateway's log": gateway_log.encode(),
        **{f"inspect {i}": r.stdout.encode() + r.stderr.encode() for i, r in enumerate(inspected)},
    }
    for secret in (KEY, OTHER):
        for where, data in places.items():
            assert secret.encode() not in data, f"the key is in {where}"
            assert secret[8:].encode() not in data, f"part of the key is in {where}"


@pytest.mark.slow
def test_the_gateway_refuses_bad_configurations_with_exit_2_and_writes_nothing(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.db"
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    os.chmod(key_file, 0o644)
    base = [sys.executable, "-m", "loopkernel", "gateway", "--ledger", str(ledger)]
    token = {"LOOPKERNEL_GATEWAY_TOKEN": "a-token-long-enough-123"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOOPKERNEL_")}
    cases = [
        ([], token, "name a model"),
        (["--provider", "openai"], token, "needs --model"),
        (
            ["--provider", "openai", "--model", "m", "--base-url", "https://api.example.com/v1"],
            token,
            "OPENAI_API_KEY",
        ),
        (["--provider", "openai", "--model", "m", "--key-file", str(key_file)], token, "chmod 600"),
        (["--local", "smollm2"], {}, "LOOPKERNEL_GATEWAY_TOKEN"),
        (["--local", "smollm2", "--listen", "0.0.0.0:8000"], token, "loopback"),
        (["--provider", "anthropic", "--model", "m", "--run-usd", "1"], token, "no price"),
    ]
    for args, env, words in cases:
        done = subprocess.run(
            [*base, *args], env={**clean, **env}, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, (args, done.stderr)
        assert words in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not ledger.exists(), args
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o644


@pytest.mark.slow
def test_a_key_file_that_only_its_owner_reads_is_used(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    os.chmod(key_file, 0o600)
    with (
        ScriptedProvider(["keyed"], api_key=KEY).running() as p,
        GatewayProcess(
            [
                "--provider",
                "openai",
                "--base-url",
                p.base_url,
                "--model",
                "m",
                "--key-file",
                str(key_file),
            ],
            ledger=tmp_path / "ledger.db",
            listen=f"unix:{tmp_path / 'gw.sock'}",
        ) as gw,
    ):
        assert gw.address == f"unix:{tmp_path / 'gw.sock'}"
        ran = run_cli(
            ["run", "lk_modelapps:one_ask", "--run-id", "k1"],
            db=tmp_path / "runs.db",
            env=runtime_env(gw),
        )
        assert ran.returncode == 0, ran.stderr
        assert "removed" not in ran.stderr
    assert p.calls == 1
    assert stat.S_IMODE(os.stat(tmp_path / "ledger.db").st_mode) == 0o600
