"""A real OTLP/HTTP export: the CLI in its own processes, configured only by the standard
``OTEL_*`` variables, sends its spans to a receiver this test runs on 127.0.0.1, which
decodes the protobuf requests. A run that waits, is approved and resumed in a second
process is one trace."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from loopkernel.testing import run_cli

pytestmark = pytest.mark.slow


class Receiver:
    """An OTLP/HTTP trace receiver: every span it was sent, with its resource."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.paths.append(self.path)
                request = ExportTraceServiceRequest.FromString(body)
                for rs in request.resource_spans:
                    resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for span in ss.spans:
                            receiver.spans.append(_span(span, resource))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


def _span(span: Any, resource: dict[str, str]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        attributes[a.key] = getattr(a.value, kind) if kind else None
    return {
        "name": span.name,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent": span.parent_span_id.hex() or None,
        "links": [(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
        "attributes": attributes,
        "resource": resource,
    }


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()


def test_cli_runs_export_linked_traces_over_otlp_http(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPLAB_DIR", str(tmp_path / "lab"))
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    db = tmp_path / "runs.db"
    first = run_cli(
        ["run", "looplab", "--scenario", "irreversible", "--run-id", "lab", "--quiet"],
        db=db,
        env=env,
    )
    assert first.returncode == 3, first.stderr
    assert run_cli(["approve", "lab", "act:3.1"], db=db, env=env).returncode == 0
    second = run_cli(["resume", "lab", "--quiet"], db=db, env=env)
    assert second.returncode == 0, second.stderr

    spans = receiver.spans
    assert set(receiver.paths) == {"/v1/traces"}
    assert {s["resource"]["service.name"] for s in spans} == {"loopkernel"}
    (run,) = [s for s in spans if s["name"] == "run looplab"]
    executes = [s for s in spans if s["name"] == "execute lab"]
    assert [e["attributes"]["loopkernel.status"] for e in executes] == ["waiting", "succeeded"]
    # each execution a trace of its own, linked to the run's span
    assert [(e["parent"], e["links"]) for e in executes] == [
        (None, [(run["trace_id"], run["span_id"])])
    ] * 2
    (approval,) = [s for s in spans if s["name"].startswith("approval ")]
    assert approval["links"] == [(run["trace_id"], run["span_id"])]
    traces = {e["trace_id"] for e in executes}
    assert len(traces) == 2 and run["trace_id"] not in traces
    assert {s["trace_id"] for s in spans} == traces | {run["trace_id"], approval["trace_id"]}
    by_id = {s["span_id"]: s for s in spans}
    tools = [s for s in spans if s["name"].startswith("tool ")]
    assert tools
    for tool in tools:
        task = by_id[tool["parent"]]
        assert task["name"].startswith("task ")
        assert by_id[task["parent"]]["name"] == "execute lab"
        assert tool["attributes"]["loopkernel.key"].startswith("lab/")
    plans = [s for s in spans if s["name"].startswith("plan ")]
    assert sorted(p["attributes"]["loopkernel.event.seq"] for p in plans) == list(
        range(1, len(plans) + 1)
    )
