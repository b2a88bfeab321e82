"""Kernel overhead: durable task completions per second on SQLite, and time per event as runs grow.

    python -m bench.kernel_overhead            # everything (the 100,000-task run takes a while)
    python -m bench.kernel_overhead --quick    # up to 10,000 tasks

Workers do nothing, so what is measured is the kernel: journaling each completion, planning
it, committing the patch (one fsync per step with synchronous=FULL), starting the next task.
Prints a markdown table and writes bench/results/kernel_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._results import write_results
from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    Snapshot,
    SQLiteStore,
    TaskContext,
    TaskSpec,
)


class ChainPlanner(BasePlanner):
    def __init__(self, n: int) -> None:
        self.n = n

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="t0", skill="noop"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        i = int((event.task_id or "t0")[1:]) + 1
        if i == self.n:
            return GraphPatch().finish("succeeded")
        return GraphPatch().add(TaskSpec(task_id=f"t{i}", skill="noop"), after=[f"t{i - 1}"])


class FanOutPlanner(BasePlanner):
    def __init__(self, n: int) -> None:
        self.n = n
        self.done = 0

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        patch = GraphPatch()
        for i in range(self.n):
            patch = patch.add(TaskSpec(task_id=f"t{i}", skill="noop"))
        return patch

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        self.done += 1
        return GraphPatch().finish("succeeded") if self.done == self.n else GraphPatch()


async def noop(ctx: TaskContext) -> Any:
    return ctx.task_id


async def measure(shape: str, n: int, synchronous: str, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        store = SQLiteStore(Path(tmp) / "runs.db", synchronous=synchronous)  # type: ignore[arg-type]
        await store.open()
        planner = ChainPlanner(n) if shape == "chain" else FanOutPlanner(n)
        kernel = Kernel(store, planner, {"noop": noop}, max_concurrency=concurrency)
        started = await kernel.start(app="bench", max_events=4 * n + 10)
        t0 = time.perf_counter()
        outcome = await kernel.run(started.run_id)
        elapsed = time.perf_counter() - t0
        events = (await store.get_run(started.run_id)).last_seq
        await store.close()
        size = (Path(tmp) / "runs.db").stat().st_size
    assert outcome.status.value == "succeeded", outcome
    return {
        "shape": shape,
        "tasks": n,
        "synchronous": synchronous,
        "concurrency": concurrency,
        "seconds": round(elapsed, 4),
        "completions_per_s": round(n / elapsed, 1),
        "us_per_task": round(elapsed / n * 1e6, 1),
        "events": events,
        "us_per_event": round(elapsed / events * 1e6, 1),
        "db_bytes": size,
        "db_bytes_per_task": round(size / n, 1),
    }


def fsync_floor(samples: int = 300) -> float:
    """µs for one 4 KiB append + fdatasync in the benchmark's temp dir: the disk's floor."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        fd = os.open(Path(tmp) / "floor", os.O_WRONLY | os.O_CREAT)
        page = b"x" * 4096
        t0 = time.perf_counter()
        for _ in range(samples):
            os.write(fd, page)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - t0
        os.close(fd)
    return round(elapsed / samples * 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 100,000-task run")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []

    def run(shape: str, n: int, sync: str, concurrency: int = 16) -> None:
        row = asyncio.run(measure(shape, n, sync, concurrency))
        print(f"  {shape:<8} n={n:<7} sync={sync:<6} {row['us_per_task']:>8} µs/task", flush=True)
        rows.append(row)

    print("throughput (1,000 tasks):")
    for sync in ("full", "normal"):
        run("chain", 1000, sync)
        run("fanout", 1000, sync, concurrency=64)
    print("scaling (chain, synchronous=FULL):")
    sizes = [100, 1000, 10_000] + ([] if args.quick else [100_000])
    for n in sizes:
        run("chain", n, "full")

    floor = fsync_floor()
    print(f"fsync floor: {floor} µs per 4 KiB append + fdatasync")
    print()
    print(
        "| shape | tasks | synchronous | completions/s | µs per task | µs per event "
        "| db bytes/task |"
    )
    print("|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['tasks']:,} | {r['synchronous'].upper()} | "
            f"{r['completions_per_s']:,.0f} | {r['us_per_task']} | {r['us_per_event']} | "
            f"{r['db_bytes_per_task']} |"
        )
    write_results(
        "kernel_overhead",
        {
            "fsync_floor_us": floor,
            "rows": rows,
        },
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
