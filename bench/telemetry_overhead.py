"""Tracing overhead: time per durable step with OpenTelemetry off, and on.

    python -m bench.telemetry_overhead            # 1,000-task chain, 5 rounds
    python -m bench.telemetry_overhead --quick    # 300 tasks, 3 rounds (writes nothing)

Each round runs the same chain (bench.kernel_overhead's, SQLite synchronous=NORMAL so the
disk does not drown the difference) three ways, interleaved: tracing off (``tracer()`` is
``None``: the cost is one check per call site); on, with the SDK's batch processor and an
exporter that drops every span (LoopKernel's instrumentation plus the SDK's span
bookkeeping); on, exporting over OTLP/HTTP to a receiver on 127.0.0.1 (the whole path).
Each step makes four spans: a plan span, a task span, and their share of the run's.
Prints a table with medians and ratios to "off"; writes bench/results/telemetry_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench._results import write_results
from bench.kernel_overhead import ChainPlanner, noop
from loopkernel import Kernel, SQLiteStore, telemetry


class Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


async def chain(n: int) -> float:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        store = SQLiteStore(Path(tmp) / "runs.db", synchronous="normal")
        await store.open()
        kernel = Kernel(store, ChainPlanner(n), {"noop": noop})
        started = await kernel.start(app="bench", max_events=4 * n + 10)
        t0 = time.perf_counter()
        await kernel.run(started.run_id)
        elapsed = time.perf_counter() - t0
        await store.close()
    return elapsed / n * 1e6


def one(mode: str, n: int, endpoint: str) -> float:
    telemetry.reset()
    provider = None
    if mode != "off":
        provider = TracerProvider()
        exporter = Drop() if mode == "on, spans dropped" else OTLPSpanExporter(endpoint=endpoint)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        telemetry.configure(provider)
    try:
        return asyncio.run(chain(n))
    finally:
        if provider is not None:
            provider.shutdown()  # flushes: the export is part of the cost
        telemetry.reset()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n, rounds = (300, 3) if args.quick else (1000, 5)
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}/v1/traces"
    modes = ["off", "on, spans dropped", "on, OTLP/HTTP to 127.0.0.1"]
    samples: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(rounds):
        for mode in modes:
            samples[mode].append(one(mode, n, endpoint))
        print(f"round {r + 1}/{rounds} done", flush=True)
    sink.shutdown()
    base = statistics.median(samples["off"])
    rows = []
    print(f"\n{n}-task chain, SQLite NORMAL, median of {rounds}\n")
    print("| tracing | µs/step | vs off |\n|---|---:|---:|")
    for mode in modes:
        med = statistics.median(samples[mode])
        rows.append({"mode": mode, "us_per_step": round(med, 1), "ratio": round(med / base, 3)})
        print(f"| {mode} | {med:,.0f} | {med / base:.2f}x |")
    if args.quick:
        print("\n(--quick: results not written)")
        return
    write_results("telemetry_overhead", {"tasks": n, "rounds": rounds, "rows": rows})


if __name__ == "__main__":
    main()
