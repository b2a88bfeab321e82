"""The boundary, closed on the same machine: every provider credential variable (the
providers' documented names and a pattern list) is scrubbed from the runtime, each tested;
the gateway process is non-dumpable and holds its key in neither ``os.environ`` nor the
environment block ``/proc/PID/environ`` shows; a command line never echoes a rejected
value that looks like a secret. Real processes for the last three."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, ROOT, cli_env
from loopkernel.models._scrub import PROVIDER_VARIABLES, credential_names, looks_secret
from loopkernel.testing import GatewayProcess, ScriptedProvider, run_cli

KEY = "sk-proj-HARDEN-3b9d0c7e1f2a8b4c"
PATTERNED = [
    "OPENAI_KEY",  # a provider prefix and KEY
    "HF_API_TOKEN",
    "MISTRAL_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
    "GROQ_SECRET",
    "MYCORP_API_KEY",  # suffixes
    "MYCORP_API_KEYS",
    "MYCORP_APIKEY",
    "DJANGO_SECRET_KEY",
    "MYCORP_AUTH_TOKEN",
    "MYCORP_API_TOKEN",
    "MYCORP_ACCESS_TOKEN",
    "MYCORP_SESSION_TOKEN",
    "MYCORP_CLIENT_SECRET",
    "API_KEY",
    "openai_api_key",  # any case
]
KEPT = [
    "LOOPKERNEL_GATEWAY_TOKEN",
    "LOOPKERNEL_GATEWAY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "ANTHROPIC_BASE_URL",
    "HF_HOME",
    "MAX_TOKENS",
    "PATH",
    "KEYBOARD",
]


@pytest.mark.parametrize("name", sorted(PROVIDER_VARIABLES) + PATTERNED)
def test_every_credential_variable_is_named(name: str) -> None:
    assert credential_names({name: "x", "PATH": "/bin"}) == [name]


@pytest.mark.parametrize("name", KEPT)
def test_what_is_not_a_credential_stays(name: str) -> None:
    assert credential_names({name: "x"}) == []


@pytest.mark.slow
def test_the_runtime_process_holds_none_of_them(tmp_path: Path) -> None:
    """The real runtime re-executes itself without them: its /proc/self/environ lacks them."""
    names = ["ANTHROPIC_AUTH_TOKEN", "OPENAI_KEY", "HF_TOKEN", "AWS_SESSION_TOKEN"]
    out = tmp_path / "environ.bin"
    with (
        ScriptedProvider(default="hi", api_key=KEY).running() as p,
        GatewayProcess(
            ["--provider", "openai", "--base-url", p.base_url, "--model", "m"],
            env={"OPENAI_API_KEY": KEY},
            ledger=tmp_path / "ledger.db",
        ) as gw,
    ):
        env = {
            "PYTHONPATH": str(ROOT / "tests"),
            **gw.runtime_env(),
            **{n: f"value-of-{n}-9f8e7d" for n in names},
        }
        args = ["run", "lk_modelapps:boundary", "--set", f"environ_out={out}"]
        ran = run_cli(args, db=tmp_path / "runs.db", env=env)
    assert ran.returncode == 0, ran.stderr
    environ = out.read_bytes()
    assert b"LOOPKERNEL_GATEWAY_TOKEN=" in environ  # the real block
    for n in names:
        assert n.encode() not in environ and f"value-of-{n}".encode() not in environ, n
        assert f"value-of-{n}" not in ran.stderr
    (warning,) = [line for line in ran.stderr.splitlines() if "removed" in line]
    assert all(n in warning for n in names)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl: Linux")
def test_the_gateway_is_non_dumpable_and_its_key_is_not_in_its_environ(tmp_path: Path) -> None:
    with (
        ScriptedProvider(default="answered", api_key=KEY).running() as p,
        GatewayProcess(
            ["--provider", "openai", "--base-url", p.base_url, "--model", "m"],
            env={"OPENAI_API_KEY": KEY},
            ledger=tmp_path / "ledger.db",
        ) as gw,
    ):
        assert gw.proc is not None
        proc = Path(f"/proc/{gw.proc.pid}")
        environ = (proc / "environ").read_bytes()  # as root: a same-user reader gets EACCES
        import asyncio

        from loopkernel.models import Message, ModelClient

        client = ModelClient(gw.address or "", gw.token)
        health = asyncio.run(client.health())
        reply = asyncio.run(
            client.complete([Message(role="user", content="hi")], key="h/0", run_id="h")
        )
    assert KEY.encode() not in environ
    assert gw.token.encode() not in environ
    assert b"OPENAI_API_KEY=" in environ and b"PATH=" in environ  # the block, wiped in place
    assert health["process"]["dumpable"] is False
    # the key still did its job: read before it was dropped, the provider got it
    assert reply.text == "answered"
    assert p.requests[0].headers["authorization"] == f"Bearer {KEY}"


SECRETS = [KEY, "sk-ant-api03-Q2w3E4r5T6y7U8i9O0pAsDfGh", "hf_AbCdEfGhIjKlMnOpQrStUvWx"]


@pytest.mark.parametrize("secret", SECRETS)
def test_a_command_line_never_echoes_a_rejected_secret(tmp_path: Path, secret: str) -> None:
    assert looks_secret(secret)
    db = tmp_path / "runs.db"
    for args in (
        ["gateway", "--provider", secret],
        ["gateway", "--listen", secret],
        ["runs", secret],
        ["run", "speculation", "--planner", secret],
        ["inspect"],  # a missing argument: nothing to hide, the message stays useful
    ):
        out = run_cli(args, db=db)
        assert out.returncode == 2, (args, out.stderr)
        assert secret not in out.stderr and secret not in out.stdout, args
    shown = run_cli(["gateway", "--provider", secret], db=db).stderr
    assert "looks like a secret" in shown and "choose from 'openai', 'anthropic'" in shown


@pytest.mark.parametrize(
    "args",
    [
        ["--provider", "openai-ish"],
        ["--no-such-flag"],
        ["--listen", "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz"],
        ["--run-usd", "lots"],
        ["stray"],
    ],
)
def test_a_refused_gateway_command_line_is_one_line_and_exit_2(args: list[str]) -> None:
    """As every other command's refusals (``cli._door.Parser``): no usage block, no echo of
    a value that looks like a secret; both spellings of the command."""
    for prog, argv in (
        ("loopkernel gateway", [*LOOPKERNEL, "gateway", *args]),
        ("python -m loopkernel.gateway", [sys.executable, "-m", "loopkernel.gateway", *args]),
    ):
        out = subprocess.run(argv, env=cli_env(), capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (argv, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith(f"{prog}: error: "), lines[0]
        assert "usage:" not in out.stderr and "Traceback" not in out.stderr
        assert "sk-proj-" not in out.stderr
        assert out.stdout == ""


def test_looks_secret_leaves_ordinary_values_alone() -> None:
    for value in (
        "runs.db",
        "speculation",
        "delays=[0.01, 0.02, 600]",
        "127.0.0.1:8765",
        "examples/incidents/oom-payments/dump",
        "postgresql://postgres@127.0.0.1/lk",
        json.dumps({"a": 1}),
    ):
        assert not looks_secret(value), value
