"""A run that lasts days is not one root span of 0.1 ms with children hanging after it:
each execution is a trace of its own, as long as the execution and linked to the run's
span; an approval and a fork link to it too; a tool server's start-up, a fired timer and
an approval are spans of their own."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopkernel import (
    BasePlanner,
    Event,
    ExecutionConfig,
    GraphPatch,
    Kernel,
    KernelParts,
    RunStatus,
    Snapshot,
    TaskContext,
    TaskSpec,
)
from loopkernel.client import Answerer, Client
from loopkernel.store import SQLiteStore


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def linked_to(span: ReadableSpan) -> list[tuple[int, int]]:
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def ids(span: ReadableSpan) -> tuple[int, int]:
    return span.context.trace_id, span.context.span_id


def assert_every_root_spans_its_trace(got: list[ReadableSpan]) -> None:
    traces: dict[int, list[ReadableSpan]] = defaultdict(list)
    for s in got:
        traces[s.context.trace_id].append(s)
    for members in traces.values():
        (root,) = [s for s in members if s.parent is None]
        assert root.start_time is not None and root.end_time is not None
        for s in members:
            assert s.start_time is not None and s.end_time is not None
            assert root.start_time <= s.start_time and s.end_time <= root.end_time, (
                f"{s.name} outlives the root {root.name} of its trace"
            )


def test_each_execution_is_a_trace_of_its_own_linked_to_the_run(
    tmp_path: Path, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPLAB_DIR", str(tmp_path / "lab"))

    async def go() -> None:
        async with Client(str(tmp_path / "runs.db")) as client:
            await client.start("looplab", scenario="irreversible", run_id="lab")
            assert (await client.execute("lab")).status is RunStatus.WAITING
            (parked,) = await client.waiting("lab")
            await client.decide("lab", parked.task_id, "approve", answerer=Answerer(local=True))
            assert (await client.execute("lab")).status is RunStatus.SUCCEEDED

    asyncio.run(go())
    got = list(spans.get_finished_spans())
    assert_every_root_spans_its_trace(got)
    (run,) = named(got, "run ")
    first, second = sorted(named(got, "execute "), key=lambda s: s.start_time or 0)
    for execute in (first, second):
        assert execute.parent is None and execute.context.trace_id != run.context.trace_id
        assert linked_to(execute) == [ids(run)]
    assert first.context.trace_id != second.context.trace_id
    tasks = named(got, "task ")
    assert tasks and all(t.context.trace_id in {ids(first)[0], ids(second)[0]} for t in tasks)
    (approval,) = named(got, "approval ")
    assert approval.parent is None and linked_to(approval) == [ids(run)]
    assert approval.attributes is not None
    assert (approval.attributes["loopkernel.by"], approval.attributes["loopkernel.decision"]) == (
        "local",
        "approve",
    )
    starts = named(got, "start server ")
    assert starts, [s.name for s in got]
    for start in starts:
        assert start.attributes is not None and start.attributes["loopkernel.tool_server"]
        # inside the call that needed the server, in that execution's trace
        assert start.context.trace_id in {ids(first)[0], ids(second)[0]}
        assert start.parent is not None


def test_a_fork_links_to_the_trace_of_its_source(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async def go() -> None:
        async with Client(str(tmp_path / "runs.db")) as client:
            await client.start("speculation", scenario="fast", run_id="src")
            await client.execute("src")
            await client.fork("src", at=3, new_run_id="copy")
            await client.execute("copy")

    asyncio.run(go())
    got = list(spans.get_finished_spans())
    assert_every_root_spans_its_trace(got)
    runs = {s.attributes["loopkernel.run_id"]: s for s in named(got, "run ") if s.attributes}
    source, fork = runs["src"], runs["copy"]
    assert fork.parent is None and linked_to(fork) == [ids(source)]
    assert fork.attributes is not None
    assert (
        fork.attributes["loopkernel.fork.source_run"],
        fork.attributes["loopkernel.fork.at_seq"],
    ) == (
        "src",
        3,
    )
    (resumed,) = [
        s
        for s in named(got, "execute ")
        if s.attributes and s.attributes["loopkernel.run_id"] == "copy"
    ]
    assert linked_to(resumed) == [ids(fork)]


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Nap(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="nap", skill="work")).sleep("nap", seconds=30)

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", None)


async def work(ctx: TaskContext) -> Any:
    return None


def test_a_fired_timer_is_a_span_of_the_execution_that_fired_it(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    clock = FakeClock(1_000.0)

    async def go() -> None:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        try:
            kernel = Kernel(
                store,
                Nap(),
                {"work": work},
                config=ExecutionConfig(poll_s=0.01),
                parts=KernelParts(clock=clock),
            )
            await kernel.start(app="nap", run_id="nap")
            assert (await kernel.run("nap")).status is RunStatus.WAITING
            clock.now = 1_042.0
            assert (await kernel.run("nap")).status is RunStatus.SUCCEEDED
        finally:
            await store.close()

    asyncio.run(go())
    got = list(spans.get_finished_spans())
    assert_every_root_spans_its_trace(got)
    (timer,) = named(got, "timer ")
    _, second = sorted(named(got, "execute "), key=lambda s: s.start_time or 0)
    assert timer.parent is not None and timer.parent.span_id == second.context.span_id
    assert timer.attributes is not None
    assert timer.attributes["loopkernel.task_id"] == "nap"
    assert timer.attributes["loopkernel.timer"] == "sleep"
    assert timer.attributes["loopkernel.timer.due"] == 1_030.0
    assert timer.attributes["loopkernel.timer.late_seconds"] == 12.0
