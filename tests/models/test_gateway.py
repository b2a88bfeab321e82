"""The gateway against a scripted provider (a real local HTTP server speaking the OpenAI
and Anthropic protocols): auth, the ledger, retries, deadlines, budgets, structured output."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from lk_models import PROVIDER_KEY, TOKEN, ask, gateway_for
from loopkernel.errors import BudgetExceeded, ModelError, ModelTimeout, ModelUnavailable
from loopkernel.gateway import Limits
from loopkernel.models import Ask, Message, ModelClient
from loopkernel.models._http import Address, request
from loopkernel.testing import ScriptedProvider, ScriptedReply

SCHEMA = {
    "type": "object",
    "properties": {"op": {"enum": ["add", "finish"]}},
    "required": ["op"],
    "additionalProperties": False,
}


def test_a_call_reaches_the_provider_with_the_gateways_key_and_comes_back_priced(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with (
            ScriptedProvider(
                [ScriptedReply(text="hi there", input_tokens=120, output_tokens=30)]
            ) as p,
            gateway_for(p, tmp_path, price_in=2.0, price_out=10.0) as (_gw, client),
        ):
            reply = await client.complete(
                [Message(role="system", content="be brief"), *ask("hello?")],
                key="run-1/t1/model/0",
                run_id="run-1",
                task_id="t1",
                ask=Ask(max_tokens=64),
            )
            assert reply.text == "hi there"
            assert (reply.input_tokens, reply.output_tokens) == (120, 30)
            assert reply.cost_usd == pytest.approx((120 * 2.0 + 30 * 10.0) / 1e6)
            assert reply.model == "scripted-model" and reply.replayed is False
            [seen] = p.requests
            assert seen.path == "/v1/chat/completions"
            assert seen.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
            assert seen.body["model"] == "scripted-model"
            assert seen.body["max_tokens"] == 64
            assert seen.body["messages"] == [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hello?"},
            ]
            assert "response_format" not in seen.body

    asyncio.run(scenario())


def test_a_request_without_the_gateway_token_gets_401(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with ScriptedProvider(["never"]) as p, gateway_for(p, tmp_path) as (_gw, client):
            body = json.dumps(
                {"messages": [{"role": "user", "content": "x"}], "key": "k", "run_id": "r"}
            ).encode()
            bare = await request(client.address, "POST", "/v1/complete", body=body)
            assert bare.status == 401
            wrong = await request(
                client.address, "GET", "/v1/health", headers={"Authorization": "Bearer nope"}
            )
            assert wrong.status == 401
            with pytest.raises(ModelError) as err:
                await ModelClient(client.address, "not-the-token").complete(
                    ask(), key="k", run_id="r"
                )
            assert err.value.attrs["kind"] == "unauthorized"
            assert p.calls == 0
            assert (await client.health())["status"] == "ok"

    asyncio.run(scenario())


def test_a_repeated_key_is_answered_from_the_ledger_even_after_a_gateway_restart(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.db"

    async def scenario() -> None:
        async with ScriptedProvider(["first answer", "second answer"]) as p:
            async with gateway_for(p, tmp_path, ledger=ledger) as (_gw, client):
                a = await client.complete(ask(), key="run-1/t/model/0", run_id="run-1")
                b = await client.complete(ask(), key="run-1/t/model/0", run_id="run-1")
                assert (a.text, a.replayed) == ("first answer", False)
                assert (b.text, b.replayed) == ("first answer", True)
                assert b.latency_ms == a.latency_ms
            assert stat.S_IMODE(os.stat(ledger).st_mode) == 0o600
            async with gateway_for(p, tmp_path, ledger=ledger) as (gw, client):
                c = await client.complete(ask(), key="run-1/t/model/0", run_id="run-1")
                assert (c.text, c.replayed) == ("first answer", True)
                assert gw.provider_calls == 0
            assert p.calls == 1

    asyncio.run(scenario())


def test_two_calls_with_one_key_at_once_make_one_provider_call(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with ScriptedProvider(["only once"]) as p, gateway_for(p, tmp_path) as (_, client):
            replies = await asyncio.gather(
                *(client.complete(ask(), key="k-same", run_id="r") for _ in range(3))
            )
            assert {r.text for r in replies} == {"only once"}
            assert p.calls == 1

    asyncio.run(scenario())


def test_a_key_reused_for_another_request_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with ScriptedProvider(["a"]) as p, gateway_for(p, tmp_path) as (_gw, client):
            await client.complete(ask("one"), key="k", run_id="r")
            with pytest.raises(ModelError) as err:
                await client.complete(ask("two"), key="k", run_id="r")
            assert err.value.attrs["kind"] == "key_reused"
            assert p.calls == 1

    asyncio.run(scenario())


def test_429_and_5xx_are_retried_with_backoff_then_answered(tmp_path: Path) -> None:
    script = [
        ScriptedReply(status=429, retry_after=0),
        ScriptedReply(status=503),
        ScriptedReply(status=500),
        "made it",
    ]

    async def scenario() -> None:
        async with ScriptedProvider(script) as p, gateway_for(p, tmp_path) as (gw, client):
            reply = await client.complete(ask(), key="k", run_id="r")
            assert reply.text == "made it"
            assert p.calls == 4 and gw.provider_calls == 4

    asyncio.run(scenario())
    assert (tmp_path / "gateway.log").read_text().count("gateway: retry key=k") == 3


def test_retries_run_out_as_model_unavailable_and_the_key_may_try_again(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        script = [ScriptedReply(status=502)] * 3
        async with (
            ScriptedProvider(script) as p,
            gateway_for(p, tmp_path, retries=2) as (
                _gw,
                client,
            ),
        ):
            with pytest.raises(ModelUnavailable) as err:
                await client.complete(ask(), key="k", run_id="r")
            assert err.value.attrs["status"] == 502
            assert p.calls == 3
            p.push("later")
            assert (await client.complete(ask(), key="k", run_id="r")).text == "later"

    asyncio.run(scenario())


def test_a_4xx_is_a_model_error_answered_once_and_replayed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            ScriptedProvider([ScriptedReply(status=400)]) as p,
            gateway_for(p, tmp_path) as (_gw, client),
        ):
            for _ in range(2):
                with pytest.raises(ModelError) as err:
                    await client.complete(ask(), key="k", run_id="r")
                assert err.value.attrs == {"kind": "provider_rejected", "status": 400}
            assert p.calls == 1

    asyncio.run(scenario())


def test_a_call_past_its_deadline_is_a_model_timeout(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            ScriptedProvider([ScriptedReply(hang=True), "on time"]) as p,
            gateway_for(p, tmp_path) as (_gw, client),
        ):
            with pytest.raises(ModelTimeout) as err:
                await client.complete(ask(), key="k", run_id="r", ask=Ask(timeout_s=0.3))
            assert err.value.attrs["kind"] == "deadline"
            # nothing is known of the timed-out call: the same key may be sent again
            assert (await client.complete(ask(), key="k", run_id="r")).text == "on time"

    asyncio.run(scenario())


def test_the_gateway_down_is_model_unavailable(tmp_path: Path) -> None:
    client = ModelClient(Address(path=str(tmp_path / "nobody.sock")), TOKEN)
    with pytest.raises(ModelUnavailable) as err:
        asyncio.run(client.complete(ask(), key="k", run_id="r"))
    assert err.value.attrs["kind"] == "gateway_unreachable"


def test_run_budget_reserves_max_tokens_and_refuses_before_calling(tmp_path: Path) -> None:
    # 1,000 USD per million tokens in, 2,000 out: 0.001 and 0.002 USD a token
    limits = Limits(run_usd=0.2)
    script = [ScriptedReply(text="a", input_tokens=10, output_tokens=5)] * 2

    async def scenario() -> None:
        async with (
            ScriptedProvider(script) as p,
            gateway_for(p, tmp_path, limits=limits, price_in=1000.0, price_out=2000.0) as (
                gw,
                client,
            ),
        ):
            first = await client.complete(
                ask("hi"), key="r1/0", run_id="r1", ask=Ask(max_tokens=50)
            )
            assert first.cost_usd == pytest.approx(0.02)
            # reserve: (2 bytes + 8) x 0.001 + 90 x 0.002 = 0.19; 0.02 spent -> 0.21 > 0.2
            with pytest.raises(BudgetExceeded) as err:
                await client.complete(ask("hi"), key="r1/1", run_id="r1", ask=Ask(max_tokens=90))
            assert err.value.attrs["limit"] == "gateway.run_usd"
            assert p.calls == 1
            # another run has its own budget; the refused key was not recorded
            await client.complete(ask("hi"), key="r2/0", run_id="r2", ask=Ask(max_tokens=90))
            assert gw.ledger is not None
            assert gw.ledger.spent(run_id="r1")["cost_usd"] == pytest.approx(0.02)
            assert gw.ledger.get("r1/1") is None

    asyncio.run(scenario())


def test_day_budget_counts_every_run_and_run_tokens_count_tokens(tmp_path: Path) -> None:
    script = [ScriptedReply(text="a", input_tokens=10, output_tokens=5)] * 4

    async def scenario() -> None:
        async with ScriptedProvider(script) as p:
            async with gateway_for(
                p,
                tmp_path,
                limits=Limits(day_usd=0.05),
                price_in=1000.0,
                price_out=2000.0,
                ledger=tmp_path / "day.db",
            ) as (_gw, client):
                await client.complete(ask("x"), key="a/0", run_id="a", ask=Ask(max_tokens=10))
                with pytest.raises(BudgetExceeded) as err:
                    await client.complete(ask("x"), key="b/0", run_id="b", ask=Ask(max_tokens=20))
                assert err.value.attrs["limit"] == "gateway.day_usd"
            async with gateway_for(
                p, tmp_path, limits=Limits(run_tokens=60), ledger=tmp_path / "tokens.db"
            ) as (_gw, client):
                await client.complete(ask("x"), key="c/0", run_id="c", ask=Ask(max_tokens=10))
                # 15 used + (1 + 8 + 40) reserved = 64 > 60
                with pytest.raises(BudgetExceeded) as err:
                    await client.complete(ask("x"), key="c/1", run_id="c", ask=Ask(max_tokens=40))
                assert err.value.attrs["limit"] == "gateway.run_tokens"
            assert p.calls == 2

    asyncio.run(scenario())


def test_a_response_schema_is_passed_through_and_the_reply_validated(tmp_path: Path) -> None:
    script = [
        '{"op": "add"}',
        '{"op": "delete"}',
        ScriptedReply(text='{"op": "ad', finish_reason="length"),
    ]

    async def scenario() -> None:
        async with ScriptedProvider(script) as p, gateway_for(p, tmp_path) as (_gw, client):
            ok = await client.complete(ask(), key="k0", run_id="r", ask=Ask(response_schema=SCHEMA))
            assert json.loads(ok.text) == {"op": "add"}
            assert p.requests[0].body["response_format"] == {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": SCHEMA},
            }
            with pytest.raises(ModelError) as err:
                await client.complete(ask(), key="k1", run_id="r", ask=Ask(response_schema=SCHEMA))
            assert err.value.attrs["kind"] == "invalid_output"
            assert "op" in err.value.message
            with pytest.raises(ModelError) as err:
                await client.complete(ask(), key="k2", run_id="r", ask=Ask(response_schema=SCHEMA))
            assert "cut off at max_tokens" in err.value.message
            # an invalid reply is an answer: asked again, the same error, no new call
            with pytest.raises(ModelError):
                await client.complete(ask(), key="k1", run_id="r", ask=Ask(response_schema=SCHEMA))
            assert p.calls == 3

    asyncio.run(scenario())


def test_a_bad_request_is_refused_with_a_named_problem(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with ScriptedProvider([]) as p, gateway_for(p, tmp_path) as (_gw, client):
            headers = {"Authorization": f"Bearer {TOKEN}"}
            for body, words in [
                (b"{not json", "not JSON"),
                (json.dumps({"messages": [], "key": "k", "run_id": "r"}), "non-empty"),
                (
                    json.dumps(
                        {"messages": [{"role": "tool", "content": "x"}], "key": "k", "run_id": "r"}
                    ),
                    "role",
                ),
                (
                    json.dumps(
                        {
                            "messages": [{"role": "user", "content": "x"}],
                            "key": "k",
                            "run_id": "r",
                            "temperature": 2,
                        }
                    ),
                    "unknown field",
                ),
                (
                    json.dumps(
                        {
                            "messages": [{"role": "user", "content": "x"}],
                            "key": "k",
                            "run_id": "r",
                            "response_schema": {"type": 7},
                        }
                    ),
                    "JSON Schema",
                ),
            ]:
                raw = body if isinstance(body, bytes) else body.encode()
                resp = await request(
                    client.address, "POST", "/v1/complete", body=raw, headers=headers
                )
                assert resp.status == 400, body
                assert words in resp.json()["error"]["message"], body
            assert p.calls == 0

    asyncio.run(scenario())


def test_the_anthropic_protocol_with_system_prompt_and_output_format(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            ScriptedProvider(['{"op": "finish"}'], api_key=PROVIDER_KEY) as p,
            gateway_for(p, tmp_path, kind="anthropic") as (_gw, client),
        ):
            reply = await client.complete(
                [Message(role="system", content="json only"), *ask("go")],
                key="k",
                run_id="r",
                ask=Ask(max_tokens=32, response_schema=SCHEMA),
            )
            assert json.loads(reply.text) == {"op": "finish"}
            assert (reply.input_tokens, reply.output_tokens) == (11, 7)
            [seen] = p.requests
            assert seen.path == "/v1/messages"
            assert PROVIDER_KEY in (
                seen.headers.get("x-api-key"),
                seen.headers.get("authorization", "").removeprefix("Bearer "),
            )
            assert seen.body["system"] == "json only"
            assert seen.body["messages"] == [{"role": "user", "content": "go"}]
            assert seen.body["output_config"] == {
                "format": {"type": "json_schema", "schema": SCHEMA}
            }

    asyncio.run(scenario())


def test_a_unix_socket_gateway_is_0600(tmp_path: Path) -> None:
    sock = tmp_path / "gw.sock"

    async def scenario() -> None:
        async with (
            ScriptedProvider(["over the socket"]) as p,
            gateway_for(p, tmp_path, listen=Address(path=str(sock))) as (_gw, client),
        ):
            assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
            assert str(client.address) == f"unix:{sock}"
            assert (await client.complete(ask(), key="k", run_id="r")).text == "over the socket"
        assert not sock.exists()

    asyncio.run(scenario())


def test_concurrent_calls_reserve_before_they_are_sent(tmp_path: Path) -> None:
    # each call reserves (1 + 8) x 0.001 + 40 x 0.002 = 0.089 USD: two fit in 0.2, three not
    script = [ScriptedReply(text="x", input_tokens=1, output_tokens=1)] * 3

    async def scenario() -> None:
        async with (
            ScriptedProvider(script) as p,
            gateway_for(
                p, tmp_path, limits=Limits(run_usd=0.2), price_in=1000.0, price_out=2000.0
            ) as (_gw, client),
        ):
            results = await asyncio.gather(
                *(
                    client.complete(ask("x"), key=f"r/{i}", run_id="r", ask=Ask(max_tokens=40))
                    for i in range(3)
                ),
                return_exceptions=True,
            )
            refused = [r for r in results if isinstance(r, BudgetExceeded)]
            assert len(refused) == 1 and p.calls == 2

    asyncio.run(scenario())


def test_a_reservation_left_by_a_killed_gateway_is_dropped_at_start(tmp_path: Path) -> None:
    from loopkernel.gateway._ledger import Ledger

    path = str(tmp_path / "ledger.db")
    ledger = Ledger(path)
    ledger.reserve(
        key="r/0",
        request_hash="h",
        run_id="r",
        task_id=None,
        provider="p",
        usd=5.0,
        tokens=10,
        limits=Limits(),
    )
    ledger.close()  # as a SIGKILL would leave it: reserved, never settled
    again = Ledger(path)
    assert again.released_at_start == 1
    assert again.get("r/0") is None
    assert again.spent(run_id="r")["reserved_usd"] == 0
    again.close()


def test_a_config_file_names_several_providers_and_a_call_picks_one(tmp_path: Path) -> None:
    from loopkernel.errors import UsageError
    from loopkernel.gateway import Gateway, load_config

    async def scenario() -> None:
        async with ScriptedProvider(["from a"]) as a, ScriptedProvider(["from b"]) as b:
            config_file = tmp_path / "gateway.toml"
            config_file.write_text(
                f"""
listen = "127.0.0.1:0"
ledger = "{tmp_path / "ledger.db"}"
retries = 0

[limits]
run_usd = 1.0

[[providers]]
name = "a"
kind = "openai"
base_url = "{a.base_url}"
model = "model-a"
price_in = 1.0
price_out = 1.0

[[providers]]
name = "b"
kind = "anthropic"
base_url = "{b.anthropic_url}"
model = "model-b"
key_env = "B_KEY"
price_in = 3.0
price_out = 15.0
"""
            )
            config = load_config(str(config_file))
            assert config.limits.run_usd == 1.0 and config.retries == 0
            gw = Gateway(
                config,
                token=TOKEN,
                env={"OPENAI_API_KEY": "ka", "B_KEY": "kb"},
                log=(tmp_path / "log").open("w"),
            )
            client = ModelClient(await gw.start(), TOKEN)
            try:
                assert (await client.complete(ask(), key="1", run_id="r")).text == "from a"
                reply = await client.complete(ask(), key="2", run_id="r", ask=Ask(model="b"))
                assert reply.text == "from b"
                assert reply.cost_usd == pytest.approx((11 * 3.0 + 7 * 15.0) / 1e6)
                assert b.requests[0].body["model"] == "model-b"
                assert b.requests[0].headers["authorization"] == "Bearer kb"
                with pytest.raises(UsageError, match="no model 'c'"):
                    await client.complete(ask(), key="3", run_id="r", ask=Ask(model="c"))
            finally:
                await gw.close()
                gw.log.close()
        bad = tmp_path / "bad.toml"
        bad.write_text('[[providers]]\nname = "x"\nkind = "openai"\nmodel = "m"\ncolour = 1\n')
        with pytest.raises(UsageError, match="colour"):
            load_config(str(bad))

    asyncio.run(scenario())


def test_a_handler_that_breaks_answers_500_which_the_client_calls_unavailable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loopkernel.models._http import HttpRequest, HttpResponse, HttpServer

    async def broken(req: HttpRequest) -> HttpResponse:
        raise OSError("disk I/O error")

    async def scenario() -> None:
        async with HttpServer(broken, Address(host="127.0.0.1", port=0)) as server:
            with pytest.raises(ModelUnavailable, match="disk I/O error"):
                await ModelClient(server.address, TOKEN).complete(ask(), key="k", run_id="r")

    asyncio.run(scenario())
    assert "internal error: OSError: disk I/O error" in capsys.readouterr().err
