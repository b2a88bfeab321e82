"""The spans a run produces, with the SDK's in-memory exporter: structure, parents,
attributes, trace context on the MCP wire, and every execution linked to the run's span
across a resume (tests/telemetry/test_linked_traces.py has the rest)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

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
    telemetry,
)
from loopkernel.client import Answerer, Client
from loopkernel.store import SQLiteStore
from loopkernel.tools import ToolLayer, allow_all
from loopkernel.tools.testkit import faults_source


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_a_speculation_execution_is_one_trace_of_plans_and_tasks(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async def go() -> None:
        async with Client(str(tmp_path / "runs.db")) as client:
            await client.start("speculation", scenario="fast", run_id="spec")
            await client.execute("spec")

    asyncio.run(go())
    got = list(spans.get_finished_spans())
    (run,) = by_name(got, "run ")
    (execute,) = by_name(got, "execute ")
    assert run.name == "run speculation"
    assert {s.context.trace_id for s in got if s is not run} == {execute.context.trace_id}
    assert execute.parent is None
    assert [link.context.span_id for link in execute.links] == [run.context.span_id]
    assert execute.attributes["loopkernel.status"] == "succeeded"
    assert execute.attributes["loopkernel.resumed"] is False

    plans = sorted(by_name(got, "plan "), key=lambda s: s.attributes["loopkernel.event.seq"])
    assert [p.attributes["loopkernel.event.seq"] for p in plans] == [1, 2, 3, 4, 5, 6]
    assert all(parent_of(p) == execute.context.span_id for p in plans)
    fanout = plans[1].attributes
    assert (fanout["loopkernel.event.kind"], fanout["loopkernel.planner"]) == (
        "task_completed",
        "planner",
    )
    assert sorted(fanout["loopkernel.patch.ops"].split(",")) == ["add"] * 3 + ["connect"] * 3

    tasks = {s.attributes["loopkernel.task_id"]: s for s in by_name(got, "task ")}
    assert set(tasks) == {"plan", "r1", "r2", "r3", "distill"}
    assert all(parent_of(t) == execute.context.span_id for t in tasks.values())
    assert tasks["r3"].attributes["loopkernel.outcome"] == "cancelled"
    assert tasks["r1"].attributes["loopkernel.outcome"] == "succeeded"
    assert tasks["r1"].attributes["loopkernel.skill"] == "research"


class OneCall(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="call", skill="call"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", snapshot.task("call").result)


def test_a_tool_call_is_a_span_of_its_task_and_carries_the_trace_to_the_server(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async def call(ctx: TaskContext) -> Any:
        first = await ctx.call_tool("request_meta", {})
        return {"meta": first["meta"]}

    async def go() -> Any:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        try:
            async with ToolLayer(store, [faults_source()], policy_hook=allow_all) as tools:
                kernel = Kernel(store, OneCall(), {"call": call}, parts=KernelParts(tools=tools))
                started = await kernel.start(app="tools-test", run_id="t")
                outcome = await kernel.run(started.run_id)
                assert outcome.status is RunStatus.SUCCEEDED
                # A second execution finds the call journaled: replayed, not sent.
                return outcome.verdict
        finally:
            await store.close()

    verdict = asyncio.run(go())
    got = list(spans.get_finished_spans())
    (task,) = by_name(got, "task ")
    (tool,) = by_name(got, "tool ")
    assert parent_of(tool) == task.context.span_id
    assert tool.attributes["loopkernel.tool"] == "request_meta"
    assert tool.attributes["loopkernel.effect"] == "read_only"
    assert tool.attributes["loopkernel.key"] == "t/call/0"
    assert tool.attributes["loopkernel.replayed"] is False
    meta = verdict["meta"]
    assert meta["loopkernel/idempotency_key"] == "t/call/0"
    _, trace_id, span_id, _ = meta["traceparent"].split("-")
    assert int(trace_id, 16) == tool.context.trace_id
    assert int(span_id, 16) == tool.context.span_id


def test_a_resumed_run_links_each_execution_to_the_run(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async def go() -> None:
        async with Client(str(tmp_path / "runs.db")) as client:
            await client.start("looplab", scenario="irreversible", run_id="lab")
            assert (await client.execute("lab")).status is RunStatus.WAITING
            (parked,) = await client.waiting("lab")
            await client.decide("lab", parked.task_id, "approve", answerer=Answerer(local=True))
            assert (await client.execute("lab")).status is RunStatus.SUCCEEDED

    asyncio.run(go())
    got = list(spans.get_finished_spans())
    (run,) = by_name(got, "run ")
    first, second = sorted(by_name(got, "execute "), key=lambda s: s.start_time or 0)
    assert parent_of(first) is None and parent_of(second) is None
    for execute in (first, second):
        assert [link.context.span_id for link in execute.links] == [run.context.span_id]
    assert first.attributes["loopkernel.status"] == "waiting"
    assert (second.attributes["loopkernel.resumed"], second.attributes["loopkernel.status"]) == (
        True,
        "succeeded",
    )
    outcomes = [s.attributes["loopkernel.outcome"] for s in by_name(got, "task act:")]
    assert outcomes.count("waiting") == 1
    tools = by_name(got, "tool ")
    assert {t.attributes["loopkernel.effect"] for t in tools} >= {"irreversible", "read_only"}


def test_without_otel_variables_nothing_imports_opentelemetry(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from loopkernel.client import Client\n"
        "async def go():\n"
        f"    async with Client({str(tmp_path / 'r.db')!r}) as c:\n"
        "        await c.start('speculation', scenario='fast', run_id='x')\n"
        "        await c.execute('x')\n"
        "asyncio.run(go())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_the_standard_variables_turn_tracing_on(env: dict[str, str], on: bool) -> None:
    assert telemetry.enabled_by_env(env) is on
