"""Azure OpenAI, Gemini and Ollama behind the gateway, each against the scripted provider
speaking that protocol (a real local HTTP server): the path, the auth header, how
``max_tokens`` and the schema travel, the usage fields, error statuses and an empty
answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lk_models import PROVIDER_KEY, ask, gateway_for
from loopkernel.errors import ModelError, ModelUnavailable
from loopkernel.models import Ask
from loopkernel.testing import ScriptedProvider, ScriptedReply

KINDS = ["azure", "gemini", "ollama"]
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_speaks_the_providers_protocol(tmp_path: Path, kind: str) -> None:
    reply = ScriptedReply(text='{"ok": true}', input_tokens=40, output_tokens=5, model="m-1")

    async def scenario() -> None:
        key = None if kind == "ollama" else PROVIDER_KEY  # Ollama has no key of its own
        async with (
            ScriptedProvider([reply], api_key=key) as p,
            gateway_for(p, tmp_path, kind=kind, price_in=1.0, price_out=2.0) as (_gw, client),
        ):
            got = await client.complete(
                ask("hi"), key="k", run_id="r", ask=Ask(max_tokens=50, response_schema=SCHEMA)
            )
            assert got.text == '{"ok": true}'
            assert (got.input_tokens, got.output_tokens) == (40, 5)
            assert got.cost_usd == pytest.approx((40 * 1.0 + 5 * 2.0) / 1e6)
            (req,) = p.requests
            assert req.protocol == kind
            body, headers = req.body, req.headers
            if kind == "azure":
                assert req.path == "/openai/deployments/scripted-model/chat/completions"
                assert headers["api-key"] == PROVIDER_KEY
                assert body["max_tokens"] == 50
                assert body["response_format"]["json_schema"]["schema"] == SCHEMA
            elif kind == "gemini":
                assert req.path == "/v1beta/models/scripted-model:generateContent"
                assert headers["x-goog-api-key"] == PROVIDER_KEY
                assert body["generationConfig"]["maxOutputTokens"] == 50
                assert body["generationConfig"]["responseJsonSchema"] == SCHEMA
                assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
            else:
                assert req.path == "/api/chat"
                assert body["stream"] is False and body["options"]["num_predict"] == 50
                assert body["format"] == SCHEMA and body["model"] == "scripted-model"
            assert PROVIDER_KEY not in str(body)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_errors_map_as_the_sdk_providers_do(tmp_path: Path, kind: str) -> None:
    script = [
        ScriptedReply(status=429),
        ScriptedReply(status=503),
        "fine",
        ScriptedReply(status=400),
        ScriptedReply(text="cut", finish_reason="length", output_tokens=3),
        *[ScriptedReply(empty=True)] * 3,  # the first try and both retries
    ]

    async def scenario() -> None:
        async with (
            ScriptedProvider(script) as p,
            gateway_for(p, tmp_path, kind=kind, retries=2) as (_gw, client),
        ):
            assert (await client.complete(ask(), key="a", run_id="r")).text == "fine"
            with pytest.raises(ModelError) as rejected:
                await client.complete(ask(), key="b", run_id="r")
            assert rejected.value.attrs["kind"] == "provider_rejected"
            assert rejected.value.attrs["status"] == 400
            cut = await client.complete(ask(), key="c", run_id="r")
            assert cut.finish_reason == "length"
            with pytest.raises(ModelUnavailable) as empty:
                await client.complete(ask(), key="d", run_id="r", ask=Ask(timeout_s=5.0))
            assert empty.value.attrs["fault"] == "empty"
            assert p.calls == len(script)

    asyncio.run(scenario())


def test_a_wrong_key_is_the_providers_refusal_never_echoed(tmp_path: Path) -> None:
    async def scenario() -> None:
        for kind in ("azure", "gemini"):
            async with (
                ScriptedProvider(["x"], api_key="another-key-entirely") as p,
                gateway_for(p, tmp_path / kind, kind=kind) as (_gw, client),
            ):
                with pytest.raises(ModelError) as err:
                    await client.complete(ask(), key="k", run_id="r")
                assert err.value.attrs["status"] == 401
                assert PROVIDER_KEY not in str(err.value)

    for kind in ("azure", "gemini"):
        (tmp_path / kind).mkdir()
    asyncio.run(scenario())
