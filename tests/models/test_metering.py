"""Metering that cannot be gamed: a reply without ``usage`` is charged its whole
reservation; concurrent calls settle against the limit atomically and are refused once it
is spent; every provider request is in the ledger with its cost (a key re-sent after a
timeout makes two); ``run_tokens`` reserves an estimate of tokens, not prompt bytes.

A real in-process gateway in front of the scripted provider (a real local HTTP server)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lk_models import ask, gateway_for
from loopkernel.errors import BudgetExceeded, ModelTimeout
from loopkernel.gateway import Limits
from loopkernel.gateway._server import BYTES_PER_TOKEN
from loopkernel.models import Ask
from loopkernel.testing import ScriptedProvider, ScriptedReply

# 1,000 USD per million tokens in, 2,000 out: 0.001 and 0.002 USD a token
PRICES = {"price_in": 1000.0, "price_out": 2000.0}


def test_a_reply_without_usage_is_charged_its_whole_reservation(tmp_path: Path) -> None:
    # each call reserves (2 bytes + 8) x 0.001 + 10 x 0.002 = 0.03 USD; 0.1 admits three
    script = [ScriptedReply(text="a", usage=False)] * 20

    async def scenario() -> None:
        async with (
            ScriptedProvider(script) as p,
            gateway_for(p, tmp_path, limits=Limits(run_usd=0.1), **PRICES) as (gw, client),
        ):
            answered, refused = 0, 0
            for i in range(20):
                try:
                    await client.complete(
                        ask("hi"), key=f"r/{i}", run_id="r", ask=Ask(max_tokens=10)
                    )
                    answered += 1
                except BudgetExceeded:
                    refused += 1
            assert (answered, refused) == (3, 17)
            assert p.calls == 3
            assert gw.ledger is not None
            assert gw.ledger.spent(run_id="r")["cost_usd"] == pytest.approx(0.09)

    asyncio.run(scenario())
    assert "no usage from the provider" in (tmp_path / "gateway.log").read_text()


def test_concurrent_calls_that_cost_more_than_reserved_are_refused_once_spent(
    tmp_path: Path,
) -> None:
    # Each reserves (1 + 8) x 0.001 + 4 x 0.002 = 0.017 USD; the provider then says each
    # took 1,000 input tokens (1 USD). Ten at once against 0.05: the reservations admit
    # two; the first to settle passes the limit and is withheld, as is every later one.
    script = [ScriptedReply(text="x", input_tokens=1000, output_tokens=1)] * 10

    async def scenario() -> None:
        async with (
            ScriptedProvider(script) as p,
            gateway_for(p, tmp_path, limits=Limits(run_usd=0.05), **PRICES) as (gw, client),
        ):
            results = await asyncio.gather(
                *(
                    client.complete(ask("x"), key=f"r/{i}", run_id="r", ask=Ask(max_tokens=4))
                    for i in range(10)
                ),
                return_exceptions=True,
            )
            answered = [r for r in results if not isinstance(r, BaseException)]
            assert all(isinstance(r, BudgetExceeded) for r in results if r not in answered)
            assert answered == []  # no answer over the limit reaches the runtime
            settled = [r for r in results if getattr(r, "attrs", {}).get("settled")]
            assert 1 <= len(settled) == p.calls <= 2
            assert gw.ledger is not None
            spent = gw.ledger.spent(run_id="r")
            assert spent["reserved_usd"] == 0
            assert spent["cost_usd"] == pytest.approx(1.002 * p.calls)  # recorded: it was spent
            with pytest.raises(BudgetExceeded):  # and the run is spent from now on
                await client.complete(ask("x"), key="r/after", run_id="r", ask=Ask(max_tokens=4))
            assert p.calls == len(settled)

    asyncio.run(scenario())


def test_a_key_re_sent_after_a_timeout_is_two_provider_requests_in_the_ledger(
    tmp_path: Path,
) -> None:
    script = [ScriptedReply(hang=True), ScriptedReply(text="late", input_tokens=5, output_tokens=4)]

    async def scenario() -> None:
        async with (
            ScriptedProvider(script) as p,
            gateway_for(p, tmp_path, **PRICES) as (gw, client),
        ):
            with pytest.raises(ModelTimeout):
                await client.complete(
                    ask("x"), key="r/0", run_id="r", ask=Ask(max_tokens=4, timeout_s=0.5)
                )
            reply = await client.complete(ask("x"), key="r/0", run_id="r", ask=Ask(max_tokens=4))
            assert reply.text == "late" and p.calls == 2
            assert gw.ledger is not None
            rows = gw.ledger.requests("r/0")
            assert [r["status"] for r in rows] == ["lost", "answered"]
            # the lost one is charged its reservation ((1 + 8) x 0.001 + 4 x 0.002)
            assert rows[0]["cost_usd"] == pytest.approx(0.017)
            assert rows[1]["cost_usd"] == pytest.approx(5 * 0.001 + 4 * 0.002)
            spent = gw.ledger.spent(run_id="r")
            assert spent["provider_requests"] == 2
            assert spent["lost_usd"] == pytest.approx(0.017)

    asyncio.run(scenario())


def test_retries_are_provider_requests_too(tmp_path: Path) -> None:
    script = [ScriptedReply(status=503), ScriptedReply(status=429), "ok"]

    async def scenario() -> None:
        async with ScriptedProvider(script) as p, gateway_for(p, tmp_path) as (gw, client):
            await client.complete(ask(), key="k", run_id="r")
            assert gw.ledger is not None
            assert [r["status"] for r in gw.ledger.requests("k")] == [
                "failed",
                "failed",
                "answered",
            ]
            assert p.calls == 3

    asyncio.run(scenario())


def test_run_tokens_reserve_an_estimate_of_tokens_not_prompt_bytes(tmp_path: Path) -> None:
    prompt = "word " * 480  # 2,400 bytes; a BPE tokenizer makes about 500 tokens of it
    estimate = -(-len(prompt.encode()) // BYTES_PER_TOKEN) + 8 + 10
    script = [ScriptedReply(text="a", input_tokens=500, output_tokens=3)] * 3

    async def scenario() -> None:
        # a limit the bytes (2,418) would refuse, and the estimate (818) admits
        limits = Limits(run_tokens=1500)
        async with (
            ScriptedProvider(script) as p,
            gateway_for(p, tmp_path, limits=limits) as (
                gw,
                client,
            ),
        ):
            await client.complete(ask(prompt), key="t/0", run_id="t", ask=Ask(max_tokens=10))
            assert gw.ledger is not None
            assert gw.ledger.spent(run_id="t")["tokens"] == 503  # settled at the real count
            # 503 used + 818 reserved = 1,321 <= 1,500: admitted; then 503 x 2 + 818 > 1,500
            await client.complete(ask(prompt), key="t/1", run_id="t", ask=Ask(max_tokens=10))
            with pytest.raises(BudgetExceeded) as err:
                await client.complete(ask(prompt), key="t/2", run_id="t", ask=Ask(max_tokens=10))
            assert err.value.attrs["limit"] == "gateway.run_tokens"
            assert err.value.attrs["observed"] == 503 * 2 + estimate
            assert p.calls == 2

    asyncio.run(scenario())
