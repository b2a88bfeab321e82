"""Throughput: many chain runs in one process, their steps sharing the store's commits.

    python -m bench.throughput            # 1, 8, 64, 256 runs of 200 steps
    python -m bench.throughput --quick    # 1, 8, 64 runs of 40 steps (a smoke run)

For each store setting -- SQLite ``synchronous`` FULL, NORMAL, and FULL on a *simulated
slow disk* (``SQLiteStore(fsync_delay_seconds=0.002)``: the writer thread sleeps 2 ms
after each fsynced commit, as a cloud block device's fsync would hold it; a simulation,
not a real device) -- ``N`` chain runs execute at once in one process, and the same
kind of runs one at a time (a sample of ``SEQUENTIAL`` runs: one at a time, the rate does
not depend on how many). Side by side, in the same run:

- aggregate durable steps per second (steps whose commit returned, over the wall time);
- fsyncs per step: commits the writer thread made at ``synchronous=FULL`` for a durable
  write, counted by the store (``SQLiteStore.commit_stats``; ``tests/store/
  test_group_commit.py`` checks with ``strace`` that each of them is an ``fdatasync``);
- p50 / p99 step latency: between a run's consecutive task starts (a step's commit, its
  planning and the next task's start);
- CPU per step (the whole process: loop and writer thread);
- the fsync floor: commits of one row per second on the same disk.

PostgreSQL (``LOOPKERNEL_BENCH_PG``, default the local server; one line "skipped" if
the ``postgres`` extra or a server is missing): the same runs in one worker process and
in four, each with its share of the runs at once; fsyncs per step there are the server's
``pg_stat_wal.wal_sync`` (shared by every database of the server: other load counts too).

Goals (issue 30): at 64 runs on FULL, >= 3x the aggregate steps/s of one at a time; fsyncs
per step <= 0.1; p99 step latency <= 2x the single run's; on the slow disk >= 5x.
Prints a table and writes bench/results/throughput.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._chains import ChainPlanner  # noqa: E402
from bench._results import write_results  # noqa: E402
from bench.kernel_overhead import commit_floor, drop_pg, pg_database  # noqa: E402
from loopkernel import Kernel, SQLiteStore, Store, TaskContext  # noqa: E402

SEQUENTIAL = 8
"""Runs executed one at a time for the baseline of each setting."""
SLOW_FSYNC_SECONDS = 0.002
GOALS = {"ratio_64_full": 3.0, "fsyncs_per_step": 0.1, "p99_to_single": 2.0, "ratio_64_slow": 5.0}


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One measured setting."""

    setting: str
    """``full``, ``normal``, ``slow-disk`` (SQLite) or ``pg-1w`` / ``pg-4w``."""
    runs: int
    """Runs measured."""
    together: bool
    """All at once; ``False``: one at a time (the baseline)."""
    steps: int
    """Steps measured in all."""
    seconds: float
    steps_per_s: float
    fsyncs_per_step: float | None
    p50_ms: float
    p99_ms: float
    cpu_us_per_step: float
    largest_group: int | None
    """The most steps' writes one commit held (SQLite)."""


class Clock:
    """The worker: each run's task start times."""

    def __init__(self) -> None:
        self.starts: dict[str, list[float]] = {}

    async def echo(self, ctx: TaskContext) -> Any:
        self.starts.setdefault(ctx.run_id, []).append(time.perf_counter())
        return f"{ctx.run_id}/{ctx.task_id}"

    def latencies(self) -> list[float]:
        return [b - a for s in self.starts.values() for a, b in itertools.pairwise(s)]


def quantile(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def chains(
    store: Store, runs: int, steps: int, *, together: bool, tag: str
) -> dict[str, Any]:
    """``runs`` chains of ``steps`` on ``store`` (started first, not timed); the timing."""
    clock = Clock()
    kernel = Kernel(store, ChainPlanner(steps), {"echo": clock.echo})
    ids = [f"{tag}{i:04d}" for i in range(runs)]
    for rid in ids:
        await kernel.start(app="throughput", run_id=rid, max_events=4 * steps + 10)
    cpu0, t0, wall0 = time.process_time(), time.perf_counter(), time.time()
    if together:
        outcomes = await asyncio.gather(*(kernel.run(rid) for rid in ids))
    else:
        outcomes = [await kernel.run(rid) for rid in ids]
    seconds = time.perf_counter() - t0
    assert {o.status.value for o in outcomes} == {"succeeded"}, outcomes
    lat = clock.latencies()
    return {
        "seconds": seconds,
        "steps": runs * steps,
        "cpu": time.process_time() - cpu0,
        "p50": quantile(lat, 0.5),
        "p99": quantile(lat, 0.99),
        "start": wall0,
        "end": wall0 + seconds,
    }


async def sqlite_row(setting: str, runs: int, steps: int, *, together: bool) -> Row:
    synchronous = "normal" if setting == "normal" else "full"
    delay = SLOW_FSYNC_SECONDS if setting == "slow-disk" else 0.0
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        store = SQLiteStore(
            Path(tmp) / "runs.db", synchronous=synchronous, fsync_delay_seconds=delay
        )
        await store.open()
        try:
            before = store.commit_stats()
            got = await chains(store, runs, steps, together=together, tag="r")
            after = store.commit_stats()
        finally:
            await store.close()
    n = got["steps"]
    synced = after.synced_commits - before.synced_commits
    return Row(
        setting=setting,
        runs=runs,
        together=together,
        steps=n,
        seconds=round(got["seconds"], 3),
        steps_per_s=round(n / got["seconds"], 1),
        fsyncs_per_step=round(synced / n, 3),
        p50_ms=round(got["p50"] * 1e3, 3),
        p99_ms=round(got["p99"] * 1e3, 3),
        cpu_us_per_step=round(got["cpu"] / n * 1e6, 1),
        largest_group=after.largest_group,
    )


# -- PostgreSQL: worker processes -----------------------------------------------------------


def pg_child(url: str, runs: int, steps: int, tag: str) -> None:
    from loopkernel.store import open_store

    async def go() -> dict[str, Any]:
        store = open_store(url)
        await store.open()
        try:
            return await chains(store, runs, steps, together=True, tag=tag)
        finally:
            await store.close()

    print(json.dumps(asyncio.run(go())))


def wal_syncs(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
        return int(row[0]) if row else 0


class PgFailed(Exception):
    """A PostgreSQL worker process of the benchmark failed (its traceback is above)."""


def pg_row(url: str, workers: int, runs: int, steps: int) -> Row:
    """``runs`` chains over ``workers`` processes, each with its share at once."""
    share = [runs // workers + (1 if k < runs % workers else 0) for k in range(workers)]
    syncs0 = wal_syncs(url)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.throughput",
                "--pg-child",
                url,
                str(n),
                str(steps),
                f"w{workers}.{k}-{runs}-",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k, n in enumerate(share)
        if n
    ]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise PgFailed(f"a worker process exited {[p.returncode for p in procs]}")
    results = [json.loads(out) for out in outs]
    syncs = wal_syncs(url) - syncs0
    n = sum(r["steps"] for r in results)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return Row(
        setting=f"pg-{workers}w",
        runs=runs,
        together=True,
        steps=n,
        seconds=round(seconds, 3),
        steps_per_s=round(n / seconds, 1),
        fsyncs_per_step=round(syncs / n, 3),
        p50_ms=round(statistics.median(r["p50"] for r in results) * 1e3, 3),
        p99_ms=round(max(r["p99"] for r in results) * 1e3, 3),
        cpu_us_per_step=round(sum(r["cpu"] for r in results) / n * 1e6, 1),
        largest_group=None,
    )


def pg_rows(levels: Sequence[int], steps: int) -> tuple[list[Row], str | None]:
    url = pg_database()  # prints why not, in one line
    if url is None:
        return [], "PostgreSQL: skipped (the line above says why)"
    rows: list[Row] = []
    try:
        for workers in (1, 4):
            for runs in levels:
                if runs < workers:
                    continue
                try:
                    rows.append(pg_row(url, workers, runs, steps))
                except PgFailed as exc:
                    return rows, f"PostgreSQL: stopped at {workers} workers x {runs}: {exc}"
                    print(
                        f"  {rows[-1].setting} x{runs}: {rows[-1].steps_per_s} steps/s", flush=True
                    )
    finally:
        drop_pg(url)
    return rows, None


# -- the table ------------------------------------------------------------------------------


def ratios(rows: list[Row]) -> dict[str, dict[str, float]]:
    """For each row run at once: its steps/s over the same setting's one at a time (on
    PostgreSQL: one run in one worker), its p99 over the single run's."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if not r.together:
            continue
        home = "pg-1w" if r.setting.startswith("pg") else r.setting
        single = next((b for b in rows if b.setting == home and b.together and b.runs == 1), None)
        seq = next((b for b in rows if b.setting == home and not b.together), single)
        if seq is None or single is None:
            continue
        out[f"{r.setting}@{r.runs}"] = {
            "to_one_at_a_time": round(r.steps_per_s / seq.steps_per_s, 2),
            "p99_to_single": round(r.p99_ms / single.p99_ms, 2) if single.p99_ms else 0.0,
        }
    return out


def goals(rows: list[Row], ratio: dict[str, dict[str, float]]) -> list[tuple[str, str, str]]:
    """(goal, measured, met) for the issue's four goals."""

    def at(key: str, field: str) -> float | None:
        return ratio.get(key, {}).get(field)

    full64 = next((r for r in rows if r.setting == "full" and r.together and r.runs == 64), None)
    checks = [
        (
            "64 runs, FULL: >= 3x one at a time",
            at("full@64", "to_one_at_a_time"),
            GOALS["ratio_64_full"],
            True,
        ),
        (
            "64 runs, FULL: fsyncs per step <= 0.1",
            full64.fsyncs_per_step if full64 else None,
            GOALS["fsyncs_per_step"],
            False,
        ),
        (
            "64 runs, FULL: p99 <= 2x the single run's",
            at("full@64", "p99_to_single"),
            GOALS["p99_to_single"],
            False,
        ),
        (
            "64 runs, slow disk: >= 5x one at a time",
            at("slow-disk@64", "to_one_at_a_time"),
            GOALS["ratio_64_slow"],
            True,
        ),
    ]
    out = []
    for name, value, goal, above in checks:
        if value is None:
            out.append((name, "not measured", ""))
            continue
        met = value >= goal if above else value <= goal
        out.append((name, f"{value}", "met" if met else "NOT met"))
    return out


def print_table(
    rows: list[Row], ratio: dict[str, dict[str, float]], floor: dict[str, float]
) -> None:
    print()
    print(
        "| setting | runs | mode | steps/s | x one at a time | fsyncs/step | p50 ms | p99 ms "
        "| p99 x single | CPU µs/step | largest group |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rat = ratio.get(f"{r.setting}@{r.runs}", {}) if r.together else {}
        print(
            f"| {r.setting} | {r.runs} | {'at once' if r.together else 'one at a time'} "
            f"| {r.steps_per_s:,.0f} | {rat.get('to_one_at_a_time', '')} "
            f"| {'' if r.fsyncs_per_step is None else r.fsyncs_per_step} | {r.p50_ms} | {r.p99_ms} "
            f"| {rat.get('p99_to_single', '')} | {r.cpu_us_per_step} "
            f"| {'' if r.largest_group is None else r.largest_group} |"
        )
    print()
    print(
        "fsync floor (one-row SQLite WAL commits, same disk): "
        f"FULL {floor['full_commits_per_s']:,.0f}/s, NORMAL {floor['normal_commits_per_s']:,.0f}/s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1, 8, 64 runs of 40 steps")
    p.add_argument("--steps", type=int, default=None, help="steps a run (200; quick 40)")
    p.add_argument("--pg-child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.pg_child:
        url, runs, steps, tag = args.pg_child
        pg_child(url, int(runs), int(steps), tag)
        return 0
    steps = args.steps or (40 if args.quick else 200)
    levels = [1, 8, 64] if args.quick else [1, 8, 64, 256]
    floor = {
        "full_commits_per_s": round(1e6 / commit_floor("full"), 1),
        "normal_commits_per_s": round(1e6 / commit_floor("normal"), 1),
    }
    rows: list[Row] = []
    for setting in ("full", "normal", "slow-disk"):
        rows.append(asyncio.run(sqlite_row(setting, SEQUENTIAL, steps, together=False)))
        for runs in levels:
            rows.append(asyncio.run(sqlite_row(setting, runs, steps, together=True)))
            print(f"  {setting} x{runs}: {rows[-1].steps_per_s} steps/s", flush=True)
    pg, skipped = pg_rows(levels[:3], steps)
    rows += pg
    ratio = ratios(rows)
    load = os.getloadavg()
    print(
        f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"{os.cpu_count()} cpus"
    )
    print(f"chains of {steps} steps; one at a time: {SEQUENTIAL} runs in turn")
    print_table(rows, ratio, floor)
    if skipped:
        print(skipped)
    print()
    print("| goal | measured | |")
    print("|---|---:|---|")
    checks = goals(rows, ratio)
    for line in checks:
        print("| " + " | ".join(line) + " |")
    write_results(
        "throughput",
        {
            "steps_per_run": steps,
            "levels": levels,
            "sequential_runs": SEQUENTIAL,
            "slow_fsync_seconds": SLOW_FSYNC_SECONDS,
            "floor": floor,
            "rows": [asdict(r) for r in rows],
            "ratios": ratio,
            "goals": [{"goal": g, "measured": m, "met": ok} for g, m, ok in checks],
            "postgres": skipped or "measured",
            "command": " ".join(
                ["python -m bench.throughput", *(argv if argv is not None else sys.argv[1:])]
            ),
        },
        quick=args.quick,
        load_average=[round(x, 2) for x in load],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
