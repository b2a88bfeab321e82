"""``ctx.complete`` inside runs: journaled in the effect journal like a tool call, replayed
without a call or a charge, re-sent with the same key when it was in flight; budgets
escalate the run. On SQLite and on PostgreSQL (the ``backend`` fixture)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lk_models import ask, gateway_for
from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    KernelParts,
    RunStatus,
    Snapshot,
    TaskContext,
    TaskSpec,
    UsageError,
)
from loopkernel.errors import ReplayDivergence
from loopkernel.executor import TaskServices
from loopkernel.gateway import Limits
from loopkernel.graph import GraphState, Task
from loopkernel.ids import RunId, TaskId
from loopkernel.models import Ask, ModelClient, ModelLayer, model_key
from loopkernel.store import EffectRecord, Store
from loopkernel.testing import ScriptedProvider, ScriptedReply

if TYPE_CHECKING:
    from lk_stores import Backend


class One(BasePlanner):
    """One ``ask`` task; finish with its result."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="ask", skill="ask"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", snapshot.task("ask").result)


async def ask_twice(ctx: TaskContext) -> Any:
    a = await ctx.complete(ask("one"), max_tokens=16)
    b = await ctx.complete(ask("two"), max_tokens=32)
    return {"texts": [a.text, b.text], "cost_usd": a.cost_usd + b.cost_usd}


def ctx_for(store: Store, client: ModelClient, run_id: str = "r") -> TaskContext:
    tid = TaskId("ask")
    state = GraphState(
        run_id=RunId(run_id), app="t", params=None, tasks={tid: Task(task_id=tid, skill="ask")}
    )
    return TaskContext(
        state=state,
        task_id=tid,
        attempt=1,
        upto_seq=0,
        services=TaskServices(models=ModelLayer(store, client)),
    )


def test_model_calls_of_a_run_are_journaled_with_their_cost(
    backend: Backend, tmp_path: Path
) -> None:
    async def body(store: Store) -> None:
        script = [ScriptedReply(text="A", output_tokens=4), ScriptedReply(text="B")]
        async with (
            ScriptedProvider(script) as p,
            gateway_for(p, tmp_path, price_in=1000.0, price_out=1000.0) as (_gw, client),
        ):
            kernel = Kernel(
                store,
                One(),
                {"ask": ask_twice},
                parts=KernelParts(models=ModelLayer(store, client)),
            )
            await kernel.start(app="t", run_id="r")
            outcome = await kernel.run("r")
            assert outcome.status is RunStatus.SUCCEEDED
            assert outcome.verdict == {"texts": ["A", "B"], "cost_usd": pytest.approx(0.033)}
            effects = await store.effects(RunId("r"))
            assert [(e.key, e.call_index, e.tool, e.status) for e in effects] == [
                ("r/ask/model/0", 0, "model", "done"),
                ("r/ask/model/1", 1, "model", "done"),
            ]
            assert effects[0].arguments == {
                "messages": [{"role": "user", "content": "one"}],
                "max_tokens": 16,
                "response_schema": None,
            }
            assert effects[0].result["cost_usd"] == pytest.approx(0.015)
            assert effects[0].result["text"] == "A"
            assert p.calls == 2

    backend.run(body)


def test_a_journaled_answer_is_replayed_without_a_call_or_a_charge(
    backend: Backend, tmp_path: Path
) -> None:
    async def body(store: Store) -> None:
        await _run_row(store)
        async with ScriptedProvider(["A", "B"]) as p, gateway_for(p, tmp_path) as (gw, client):
            first = await ask_twice(ctx_for(store, client))
            again = ctx_for(store, client)  # the task runs again (a crash, an approval)
            a = await again.complete(ask("one"), max_tokens=16)
            b = await again.complete(ask("two"), max_tokens=32)
            assert (a.text, a.replayed, b.text, b.replayed) == ("A", True, "B", True)
            assert first["texts"] == ["A", "B"]
            assert p.calls == 2 and gw.replayed == 0  # the gateway was not even asked
            assert again._models is not None and again._models.sent == 0  # type: ignore[attr-defined]

    backend.run(body)


def test_a_task_that_asks_something_else_on_replay_diverges(
    backend: Backend, tmp_path: Path
) -> None:
    async def body(store: Store) -> None:
        await _run_row(store)
        async with ScriptedProvider(["A"]) as p, gateway_for(p, tmp_path) as (_gw, client):
            await ctx_for(store, client).complete(ask("one"), max_tokens=16)
            with pytest.raises(ReplayDivergence):
                await ctx_for(store, client).complete(ask("not one"), max_tokens=16)
            assert p.calls == 1

    backend.run(body)


def test_a_call_in_flight_at_a_crash_is_re_sent_and_the_ledger_answers_it(
    backend: Backend, tmp_path: Path
) -> None:
    async def body(store: Store) -> None:
        await _run_row(store)
        async with (
            ScriptedProvider(["answered before the crash"]) as p,
            gateway_for(p, tmp_path) as (gw, client),
        ):
            key = model_key("r", "ask", 0)
            # the state a crash after the gateway answered leaves: intended, never finished
            await store.intend_effect(
                EffectRecord(
                    run_id=RunId("r"),
                    key=key,
                    task_id=TaskId("ask"),
                    call_index=0,
                    tool="model",
                    effect="model",
                    arguments={
                        "messages": [{"role": "user", "content": "one"}],
                        "max_tokens": 16,
                        "response_schema": None,
                    },
                    status="intended",
                )
            )
            await client.complete(
                ask("one"), key=key, run_id="r", task_id="ask", ask=Ask(max_tokens=16)
            )
            reply = await ctx_for(store, client).complete(ask("one"), max_tokens=16)
            assert reply.text == "answered before the crash"
            assert reply.replayed is True  # by the gateway's ledger
            assert p.calls == 1 and gw.replayed == 1
            [effect] = await store.effects(RunId("r"))
            assert effect.status == "done"

    backend.run(body)


def test_an_exhausted_gateway_budget_escalates_the_run_with_its_verdict(
    backend: Backend, tmp_path: Path
) -> None:
    async def body(store: Store) -> None:
        async with (
            ScriptedProvider(["A", "B"]) as p,
            gateway_for(
                p, tmp_path, limits=Limits(run_usd=0.03), price_in=1000.0, price_out=1000.0
            ) as (_gw, client),
        ):
            kernel = Kernel(
                store,
                One(),
                {"ask": ask_twice},
                parts=KernelParts(models=ModelLayer(store, client)),
            )
            await kernel.start(app="t", run_id="r")
            outcome = await kernel.run("r")
            assert outcome.status is RunStatus.ESCALATED
            assert outcome.verdict["limit"] == "gateway.run_usd"
            assert outcome.verdict["type"] == "BudgetExceeded"
            assert p.calls == 1
            effects = await store.effects(RunId("r"))
            assert [e.status for e in effects] == ["done", "failed"]
            assert (await store.get_run(RunId("r"))).verdict == outcome.verdict

    backend.run(body)


def test_without_a_gateway_ctx_complete_names_the_fix(backend: Backend) -> None:
    async def body(store: Store) -> None:
        kernel = Kernel(store, One(), {"ask": ask_twice})
        await kernel.start(app="t", run_id="r")
        outcome = await kernel.run("r")
        assert outcome.status is RunStatus.FAILED
        assert "LOOPKERNEL_GATEWAY" in outcome.verdict["message"]

    backend.run(body)
    with pytest.raises(UsageError, match="LOOPKERNEL_GATEWAY_TOKEN"):
        ModelClient.from_env({"LOOPKERNEL_GATEWAY": "127.0.0.1:1"})
    assert ModelClient.from_env({}) is None


async def _run_row(store: Store) -> None:
    """A run row for the effects to belong to."""
    kernel = Kernel(store, One(), {"ask": ask_twice})
    await kernel.start(app="t", run_id="r")


def test_the_client_never_shows_its_token() -> None:
    client = ModelClient("127.0.0.1:9", "secret-token-value-123")
    assert "secret-token-value-123" not in repr(client)
    assert asyncio.iscoroutinefunction(client.complete)


def test_a_model_call_is_a_span_under_its_task_and_its_trace_reaches_the_gateway(
    tmp_path: Path,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopkernel import telemetry
    from loopkernel.store import SQLiteStore

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(provider)

    async def scenario() -> None:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        async with ScriptedProvider(["A", "B"]) as p, gateway_for(p, tmp_path) as (_gw, client):
            kernel = Kernel(
                store,
                One(),
                {"ask": ask_twice},
                parts=KernelParts(models=ModelLayer(store, client)),
            )
            await kernel.start(app="t", run_id="r")
            assert (await kernel.run("r")).status is RunStatus.SUCCEEDED
        await store.close()

    try:
        asyncio.run(scenario())
    finally:
        telemetry.reset()
        provider.shutdown()
    got = exporter.get_finished_spans()
    [task] = [s for s in got if s.name == "task ask"]
    models = [s for s in got if s.name == "model"]
    assert len(models) == 2
    for span in models:
        assert span.parent is not None and span.parent.span_id == task.context.span_id
        assert span.attributes["loopkernel.model"] == "scripted-model"
        assert span.attributes["loopkernel.replayed"] is False
    assert models[0].attributes["loopkernel.key"] == "r/ask/model/0"
    trace_id = format(task.context.trace_id, "032x")
    assert (tmp_path / "gateway.log").read_text().count(f"trace={trace_id}") == 2


def test_a_wrong_gateway_token_is_not_journaled_as_the_calls_answer(
    backend: Backend, tmp_path: Path
) -> None:
    from loopkernel.errors import ModelError

    async def body(store: Store) -> None:
        await _run_row(store)
        async with ScriptedProvider(["A"]) as p, gateway_for(p, tmp_path) as (_gw, client):
            wrong = ModelClient(client.address, "a-wrong-token-0123456789")
            with pytest.raises(ModelError, match="token"):
                await ctx_for(store, wrong).complete(ask("one"), max_tokens=16)
            [effect] = await store.effects(RunId("r"))
            assert effect.status == "intended"
            # fixed configuration, the task runs again: the call is sent, with the same key
            reply = await ctx_for(store, client).complete(ask("one"), max_tokens=16)
            assert (reply.text, p.calls) == ("A", 1)

    backend.run(body)
