"""What a trace viewer shows red, and what it shows at all: a failed run's ``execute``
span is an error with its exception recorded, an approval is not an error but a span of
its own (linked to the run's), tool calls are CLIENT spans that name their run and task,
and an OTLP endpoint that is down costs one line."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

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
from loopkernel.client import Answerer, Client
from loopkernel.store import SQLiteStore
from loopkernel.testing import run_cli


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def test_an_approval_is_not_an_error_and_is_a_span_of_the_run(
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
    assert [s.name for s in got if s.status.status_code is StatusCode.ERROR] == []
    parked = [s for s in named(got, "tool ") if s.attributes.get("loopkernel.outcome") == "waiting"]
    assert parked and [e.name for e in parked[0].events] == ["approval required"]
    for tool in named(got, "tool "):
        assert tool.kind is SpanKind.CLIENT
        assert tool.attributes["loopkernel.run_id"] == "lab"
        assert str(tool.attributes["loopkernel.task_id"]) in str(tool.attributes["loopkernel.key"])
    (approval,) = named(got, "approval ")
    (run,) = named(got, "run ")
    # its own span, linked to the run's (not a child of a span that ended long before)
    assert approval.parent is None
    assert [link.context.span_id for link in approval.links] == [run.context.span_id]
    assert approval.attributes["loopkernel.decision"] == "approve"
    assert approval.attributes["loopkernel.by"] == "local"


class Boom(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="boom", skill="boom"))


async def boom(ctx: TaskContext) -> None:
    raise ValueError("the disk is full")


def test_a_failed_run_is_an_error_with_its_exception_recorded(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async def go() -> RunStatus:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        try:
            kernel = Kernel(store, Boom(), {"boom": boom})
            started = await kernel.start(app="boom-test", run_id="b")
            return (await kernel.run(started.run_id)).status
        finally:
            await store.close()

    assert asyncio.run(go()) is RunStatus.FAILED
    got = list(spans.get_finished_spans())
    (execute,) = named(got, "execute ")
    assert execute.status.status_code is StatusCode.ERROR
    (task,) = named(got, "task ")
    assert task.status.status_code is StatusCode.ERROR
    (exc,) = [e for e in task.events if e.name == "exception"]
    assert exc.attributes is not None and exc.attributes["exception.type"] == "ValueError"
    assert "the disk is full" in str(exc.attributes["exception.message"])


def test_an_otlp_endpoint_that_is_down_costs_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("LOOPLAB_DIR", str(tmp_path / "lab"))
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
    }
    done = run_cli(
        ["run", "speculation", "--scenario", "fast", "--quiet"], db=tmp_path / "r.db", env=env
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and "traces could not be sent" in said[0], done.stderr
    assert "Traceback" not in done.stderr
