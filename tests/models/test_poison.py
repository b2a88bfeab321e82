"""No reply can poison a key: a reply far over ``max_tokens`` (1 MB to 64) or over the
gateway's cap (20 MB), usage that lies, an empty ``choices`` are provider faults: never
stored as an answer, each request charged at most its reservation, the call resumable
under the same key. A provider down (503 for a minute) or slow costs a run seconds: the
breaker opens after repeated failures, the run's model time budget cuts deadlines.

A real in-process gateway in front of the scripted provider (a real local HTTP server)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from lk_models import ask, gateway_for
from lk_stores import sqlite_backend
from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    RunStatus,
    Snapshot,
    TaskContext,
    TaskSpec,
)
from loopkernel.errors import BudgetExceeded, ModelTimeout, ModelUnavailable, TransientFault
from loopkernel.executor import KernelParts
from loopkernel.gateway import Limits
from loopkernel.gateway._guard import MAX_REPLY_BYTES, reply_cap
from loopkernel.ids import RunId
from loopkernel.models import Ask, ModelLayer
from loopkernel.store import Store
from loopkernel.testing import ScriptedProvider, ScriptedReply

PRICES = {"price_in": 1000.0, "price_out": 2000.0}  # 0.001 / 0.002 USD a token


def _reservation(prompt: str, max_tokens: int) -> float:
    return (len(prompt.encode()) + 8) * 0.001 + max_tokens * 0.002


def test_a_20_mb_reply_is_a_provider_fault_never_an_answer(tmp_path: Path) -> None:
    huge = ScriptedReply(text="x" * (20 * 1024 * 1024), output_tokens=100)
    assert len(huge.text) > MAX_REPLY_BYTES

    async def scenario() -> None:
        async with (
            ScriptedProvider([huge, huge, "ok"]) as p,
            gateway_for(p, tmp_path, retries=1, **PRICES) as (gw, client),
        ):
            with pytest.raises(ModelUnavailable) as err:
                await client.complete(ask("hi"), key="r/0", run_id="r", ask=Ask(max_tokens=65_536))
            assert err.value.attrs["kind"] == "provider_fault"
            assert err.value.attrs["fault"] == "too_large"
            assert gw.ledger is not None
            assert gw.ledger.get("r/0") is None  # not stored: the key may ask again
            rows = gw.ledger.requests("r/0")
            assert [r["status"] for r in rows] == ["lost", "lost"]
            cap = _reservation("hi", 65_536)
            assert all(r["cost_usd"] == pytest.approx(cap) for r in rows)
            # the provider recovered: the same key is answered, the ledger holds that
            reply = await client.complete(
                ask("hi"), key="r/0", run_id="r", ask=Ask(max_tokens=65_536)
            )
            assert reply.text == "ok" and not reply.replayed
            again = await client.complete(
                ask("hi"), key="r/0", run_id="r", ask=Ask(max_tokens=65_536)
            )
            assert again.replayed and again.text == "ok"
            assert p.calls == 3

    asyncio.run(scenario())
    assert "provider fault key=r/0 too_large" in (tmp_path / "gateway.log").read_text()


def test_1_mb_to_max_tokens_64_is_refused_and_billed_no_more_than_the_cap(
    tmp_path: Path,
) -> None:
    big = ScriptedReply(text="y" * 1_000_000, output_tokens=64)
    assert len(big.text) > reply_cap(64)

    async def scenario() -> None:
        cap = _reservation("hi", 64)
        limits = Limits(run_usd=cap * 3)
        async with (
            ScriptedProvider(default=big) as p,
            gateway_for(p, tmp_path, limits=limits, retries=4, **PRICES) as (gw, client),
        ):
            for i in range(5):
                with pytest.raises((ModelUnavailable, BudgetExceeded)):
                    await client.complete(
                        ask("hi"), key=f"r/{i}", run_id="r", ask=Ask(max_tokens=64)
                    )
            assert gw.ledger is not None
            spent = gw.ledger.spent(run_id="r")
            assert spent["cost_usd"] == 0 and spent["calls"] == 0  # no answer stored
            assert spent["lost_usd"] <= limits.run_usd + 1e-9  # never past the cap
            # each request was charged its reservation: the cap admitted three of them
            assert p.calls == 3

    asyncio.run(scenario())


def test_usage_that_lies_is_checked_against_the_request(tmp_path: Path) -> None:
    over = ScriptedReply(text="z", input_tokens=10, output_tokens=50_000)
    inflated_prompt = ScriptedReply(text="z", input_tokens=5_000_000, output_tokens=1)
    under = ScriptedReply(text="w" * 1600, input_tokens=0, output_tokens=0)

    async def scenario() -> None:
        async with (
            ScriptedProvider([over, inflated_prompt, under]) as p,
            gateway_for(p, tmp_path, retries=0, **PRICES) as (gw, client),
        ):
            with pytest.raises(ModelUnavailable) as err:
                await client.complete(ask("hi"), key="a", run_id="r", ask=Ask(max_tokens=64))
            assert err.value.attrs["fault"] == "over_max_tokens"
            with pytest.raises(ModelUnavailable) as err:
                await client.complete(ask("hi"), key="b", run_id="r", ask=Ask(max_tokens=64))
            assert err.value.attrs["fault"] == "implausible_usage"
            # under-reported: charged what the gateway measured (1,600 bytes / 16)
            reply = await client.complete(ask("hi"), key="c", run_id="r", ask=Ask(max_tokens=200))
            assert reply.output_tokens == 100 and reply.input_tokens == 1
            assert reply.cost_usd == pytest.approx(1 * 0.001 + 100 * 0.002)
            assert gw.ledger is not None
            spent = gw.ledger.spent(run_id="r")
            # the two lies were charged their reservations, nothing like 50,000 tokens
            assert spent["lost_usd"] == pytest.approx(2 * _reservation("hi", 64))
            assert p.calls == 3

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_empty_choices_are_a_provider_fault_the_same_key_answers_later(
    tmp_path: Path, kind: str
) -> None:
    async def scenario() -> None:
        async with (
            ScriptedProvider([ScriptedReply(empty=True), "fine"]) as p,
            gateway_for(p, tmp_path, kind=kind, retries=0) as (gw, client),
        ):
            with pytest.raises(ModelUnavailable) as err:
                await client.complete(ask(), key="k", run_id="r")
            assert err.value.attrs["fault"] == "empty"
            assert err.value.retryable
            assert gw.ledger is not None and gw.ledger.get("k") is None
            assert (await client.complete(ask(), key="k", run_id="r")).text == "fine"

    asyncio.run(scenario())


def test_a_provider_down_for_a_minute_costs_the_run_seconds(tmp_path: Path) -> None:
    # 503 for as long as anyone asks (a minute or more); three tries in a row fail, then
    # the breaker answers every call of the run at once, without a provider request
    down = ScriptedReply(status=503, retry_after=0.2)

    async def scenario() -> None:
        async with (
            ScriptedProvider(default=down) as p,
            gateway_for(p, tmp_path, breaker_after=3, breaker_seconds=60.0) as (gw, client),
        ):
            t0 = time.monotonic()
            outcomes: list[str] = []
            for i in range(20):  # twenty calls a run might make during the outage
                try:
                    await client.complete(ask(), key=f"r/{i}", run_id="r", ask=Ask(timeout_s=1.0))
                except (ModelTimeout, ModelUnavailable) as err:
                    outcomes.append(str(err.attrs.get("kind")))
            elapsed = time.monotonic() - t0
            assert outcomes[3:] == ["breaker_open"] * 17
            assert elapsed < 6.0  # three 1 s deadlines, then nothing: not 20 x 30 s
            requests_before = p.calls
            with pytest.raises(ModelUnavailable):
                await client.complete(ask(), key="r/x", run_id="r")
            assert p.calls == requests_before  # nothing more was sent
            # another run is not punished for this one
            p.push("ok")
            p.default = None
            assert (await client.complete(ask(), key="s/0", run_id="s")).text == "ok"
            assert gw.ledger is not None and gw.ledger.get("r/5") is None

    asyncio.run(scenario())


def test_a_slow_provider_is_cut_by_the_runs_model_time_budget(tmp_path: Path) -> None:
    slow = ScriptedReply(text="late", delay=20.0)

    async def scenario() -> None:
        limits = Limits(run_model_seconds=1.5)
        async with (
            ScriptedProvider(default=slow) as p,
            gateway_for(p, tmp_path, limits=limits, retries=0) as (_gw, client),
        ):
            t0 = time.monotonic()
            with pytest.raises(ModelTimeout):  # asked for 30 s, cut to the 1.5 s left
                await client.complete(ask(), key="r/0", run_id="r", ask=Ask(timeout_s=30.0))
            assert time.monotonic() - t0 < 4.0
            with pytest.raises(BudgetExceeded) as err:
                await client.complete(ask(), key="r/1", run_id="r", ask=Ask(timeout_s=30.0))
            assert err.value.attrs["limit"] == "gateway.run_model_seconds"
            assert p.calls == 1
            assert time.monotonic() - t0 < 5.0

    asyncio.run(scenario())


class _One(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="ask", skill="ask"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", snapshot.task("ask").result)


async def _ask(ctx: TaskContext) -> Any:
    reply = await ctx.complete(ask("one"), max_tokens=64)
    return {"text": reply.text}


def test_a_poisoned_reply_leaves_the_run_resumable_and_the_resume_finishes(
    tmp_path: Path,
) -> None:
    backend = sqlite_backend(tmp_path)
    huge = ScriptedReply(text="q" * (20 * 1024 * 1024))

    async def body(store: Store) -> None:
        async with (
            ScriptedProvider([huge, "answer"]) as p,
            gateway_for(p, tmp_path, retries=0) as (_gw, client),
        ):
            kernel = Kernel(
                store, _One(), {"ask": _ask}, parts=KernelParts(models=ModelLayer(store, client))
            )
            await kernel.start(app="t", run_id="r")
            with pytest.raises(TransientFault):
                await kernel.run("r")
            effects = await store.effects(RunId("r"))
            assert [e.status for e in effects] == ["intended"]  # not answered, not failed
            outcome = await Kernel(
                store, _One(), {"ask": _ask}, parts=KernelParts(models=ModelLayer(store, client))
            ).run("r")
            assert outcome.status is RunStatus.SUCCEEDED
            assert outcome.verdict == {"text": "answer"}
            assert p.calls == 2

    backend.run(body)
