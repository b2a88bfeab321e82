"""Tool layer overhead: one call through the layer against a bare MCP call, and cold start.

    python -m bench.tools_overhead            # 2,000 calls per row, 7 cold starts
    python -m bench.tools_overhead --quick    # 300 calls per row, 3 cold starts

Rows, all calling ``echo`` of the fault tool set (``loopkernel.tools.testkit.faults``) over
stdio, one call at a time, after 50 warm-up calls:

- ``bare``: the SDK alone, ``ClientSession.call_tool`` on a session of our own;
- ``session``: ``SourceSession.call``, i.e. the SDK plus our argument and output checks
  and error mapping (no journal);
- ``layer``: ``ToolLayer.call`` through a ``TaskContext``, i.e. the above plus the effect
  journal (a lookup, ``intended`` before the send, ``done`` after) on SQLite, once with
  ``synchronous=FULL`` (one fsync per call, at the result) and once with ``NORMAL``.

Cold start: the wall time of a fresh ``python`` process that imports the tool layer,
spawns the server, runs the MCP handshake and ``tools/list``, makes one call and exits
(``cold_process``); and, inside a running process, spawn + handshake + first call alone
(``cold_session``). Prints a markdown table and writes bench/results/tools_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from bench._results import write_results

WARMUP = 50
ARGS = {"text": "hello"}

ONE_SHOT = """
import asyncio
from loopkernel.tools import SourceSession
from loopkernel.tools.testkit import faults_source
async def main():
    async with SourceSession(faults_source()) as s:
        assert await s.call("echo", {"text": "x"}, key=None, time_limit=30) == {"text": "x"}
asyncio.run(main())
"""


def summary(name: str, samples: list[float], **extra: Any) -> dict[str, Any]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "row": name,
        "calls": len(samples),
        "median_us": round(statistics.median(samples) * 1e6, 1),
        "p99_us": round(p99 * 1e6, 1),
        "mean_us": round(statistics.fmean(samples) * 1e6, 1),
        **extra,
    }


Once = Callable[[int], Awaitable[Any]]


@asynccontextmanager
async def bare() -> AsyncIterator[Once]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    source = _faults()
    params = StdioServerParameters(command=source.command[0], args=list(source.command[1:]))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()

        async def once(i: int) -> Any:
            result = await session.call_tool("echo", ARGS)
            assert result.structured_content == ARGS

        yield once


@asynccontextmanager
async def session_only() -> AsyncIterator[Once]:
    from loopkernel.tools import SourceSession
    from loopkernel.tools._source import check_arguments

    async with SourceSession(_faults()) as s:
        tool = s.tool("echo")

        async def once(i: int) -> Any:
            check_arguments(s.schemas, tool, ARGS)
            assert await s.call("echo", ARGS, key=f"r/t/{i}", time_limit=30) == ARGS

        yield once


@asynccontextmanager
async def layer(synchronous: str, tmp: str) -> AsyncIterator[Once]:
    from loopkernel.executor import TaskContext, TaskServices
    from loopkernel.graph import GraphState, Task
    from loopkernel.ids import RunId, TaskId
    from loopkernel.store import SQLiteStore
    from loopkernel.tools import ToolLayer, allow_all

    store = SQLiteStore(Path(tmp) / f"{synchronous}.db", synchronous=synchronous)  # type: ignore[arg-type]
    await store.open()
    tid = TaskId("t")
    state = GraphState(
        run_id=RunId("bench"), app="bench", params=None, tasks={tid: Task(task_id=tid, skill="w")}
    )
    try:
        async with ToolLayer(store, [_faults()], policy_hook=allow_all) as tools:
            ctx = TaskContext(
                state=state, task_id=tid, attempt=1, upto_seq=0, services=TaskServices(tools=tools)
            )

            async def once(i: int) -> Any:
                assert await ctx.call_tool("echo", ARGS) == ARGS

            yield once
    finally:
        await store.close()


async def measure_calls(n: int) -> list[dict[str, Any]]:
    """Every path open at once; calls interleaved round-robin, one in flight at a time, so
    a change in the machine's load falls on all rows alike."""
    names = [
        "bare ClientSession.call_tool",
        "SourceSession.call (checks, no journal)",
        "ToolLayer.call (checks + journal, SQLite FULL)",
        "ToolLayer.call (checks + journal, SQLite NORMAL)",
    ]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        async with AsyncExitStack() as stack:
            paths = [
                await stack.enter_async_context(bare()),
                await stack.enter_async_context(session_only()),
                await stack.enter_async_context(layer("full", tmp)),
                await stack.enter_async_context(layer("normal", tmp)),
            ]
            for i in range(WARMUP):
                for once in paths:
                    await once(i)
            samples: list[list[float]] = [[] for _ in paths]
            clock = time.perf_counter
            for i in range(WARMUP, WARMUP + n):
                for once, out in zip(paths, samples, strict=True):
                    t0 = clock()
                    await once(i)
                    out.append(clock() - t0)
    return [summary(name, s) for name, s in zip(names, samples, strict=True)]


async def cold_session(runs: int) -> dict[str, Any]:
    from loopkernel.tools import SourceSession

    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        async with SourceSession(_faults()) as s:
            await s.call("echo", ARGS, key=None, time_limit=30)
            samples.append(time.perf_counter() - t0)
    return _cold("cold_session: spawn + handshake + first call", samples)


def cold_process(runs: int) -> dict[str, Any]:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", ONE_SHOT], check=True)
        samples.append(time.perf_counter() - t0)
    return _cold("cold_process: python start + import + spawn + handshake + call + exit", samples)


def _cold(name: str, samples: list[float]) -> dict[str, Any]:
    return {
        "row": name,
        "runs": len(samples),
        "median_ms": round(statistics.median(samples) * 1e3, 1),
        "max_ms": round(max(samples) * 1e3, 1),
    }


def _faults() -> Any:
    from loopkernel.tools.testkit import faults_source

    return faults_source()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 calls per row, 3 cold starts")
    args = parser.parse_args()
    n, cold_runs = (300, 3) if args.quick else (2000, 7)

    calls = asyncio.run(measure_calls(n))
    base = calls[0]["median_us"]
    for row in calls:
        row["overhead_us"] = round(row["median_us"] - base, 1)
    cold = [asyncio.run(cold_session(cold_runs)), cold_process(cold_runs)]

    print(f"\none call, {n} sequential calls after {WARMUP} warm-up calls:\n")
    print("| path | median µs | p99 µs | median over bare µs |")
    print("|---|---:|---:|---:|")
    for r in calls:
        print(f"| {r['row']} | {r['median_us']:,} | {r['p99_us']:,} | {r['overhead_us']:+,} |")
    print(f"\ncold start, {cold_runs} runs:\n")
    print("| what | median ms | max ms |")
    print("|---|---:|---:|")
    for r in cold:
        print(f"| {r['row']} | {r['median_ms']:,} | {r['max_ms']:,} |")

    write_results(
        "tools_overhead",
        {
            "mcp": _mcp_version(),
            "calls_per_row": n,
            "calls": calls,
            "cold_start": cold,
        },
        quick=args.quick,
        load_avg_1m=round(os.getloadavg()[0], 2),
    )


def _mcp_version() -> str:
    from importlib.metadata import version

    return version("mcp")


if __name__ == "__main__":
    main()
