"""Kernel overhead: a durable step against the disk's floor, fan-out, memory, PostgreSQL.

    python -m bench.kernel_overhead            # everything (RSS up to 100,000 tasks)
    python -m bench.kernel_overhead --quick    # RSS up to 10,000; fewer repeats
    python -m bench.kernel_overhead --only pg  # PostgreSQL and the SQLite FULL chain alone

Workers do nothing, so what is measured is the kernel: journaling each completion, planning
it, committing the step, starting the next task. In one run, interleaved (rounds of every
measure, medians), so that a loaded machine weighs on all of them alike:

- the floor: one SQLite WAL commit of one small row, at synchronous=FULL (fsync'd) and
  NORMAL, in the same temp dir -- what any durable step costs at least; and at FULL a
  commit of as many pages as a chain step writes (``STEP_PAGES``);
- a 1,000-step chain at FULL and NORMAL, µs per step, and its ratio to the floor;
- a fan-out of 1,000 tasks at concurrency 16, 64 and 1,000, µs per task;
- peak RSS of a fresh process running a chain of 1k, 10k (and 100k) tasks, on SQLite
  and on PostgreSQL;
- recovery: a 10,000-task chain SIGKILLed after step 5,000 (``patch_committed``), resumed
  in a fresh process: seconds from opening the store to the first new step planned;
- PostgreSQL (``LOOPKERNEL_BENCH_PG``, default the local server; skipped if down): a
  200-step chain, ms per step, its ratio to the SQLite FULL step, and round trips per
  step, counted by a TCP relay between the store and the server (one "turn" = the client
  speaks, then the server answers).

Prints a table and writes bench/results/kernel_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench._results import write_results
from loopkernel import (
    BasePlanner,
    Event,
    ExecutionConfig,
    GraphPatch,
    Kernel,
    KernelParts,
    Snapshot,
    SQLiteStore,
    Store,
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


async def timed_run(
    store: Store, shape: str, n: int, concurrency: int, keep: int | None = None
) -> tuple[float, int]:
    """Seconds to execute a ``shape`` run of ``n`` tasks in ``store``; its event count.
    ``keep``: the kernel's ``keep_finished`` (None: every task stays in memory)."""
    planner = ChainPlanner(n) if shape == "chain" else FanOutPlanner(n)
    kernel = Kernel(
        store,
        planner,
        {"noop": noop},
        config=ExecutionConfig(concurrency=concurrency, keep_finished=keep),
    )
    started = await kernel.start(app="bench", max_events=4 * n + 10)
    t0 = time.perf_counter()
    outcome = await kernel.run(started.run_id)
    elapsed = time.perf_counter() - t0
    assert outcome.status.value == "succeeded", outcome
    return elapsed, (await store.get_run(started.run_id)).last_seq


async def measure(
    shape: str, n: int, synchronous: str, concurrency: int, keep: int | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        store = SQLiteStore(Path(tmp) / "runs.db", synchronous=synchronous)  # type: ignore[arg-type]
        await store.open()
        elapsed, events = await timed_run(store, shape, n, concurrency, keep)
        await store.close()
        size = (Path(tmp) / "runs.db").stat().st_size
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


STEP_PAGES = 7
"""Pages a chain step's commit writes to the WAL: 6.7 frames a step, counted with
``strace -f -e pwrite64`` over a 1,000-step chain (two writes a frame; docs/performance.md)."""


def commit_floor(synchronous: str, samples: int = 300, pages: int = 1) -> float:
    """µs per SQLite WAL commit of one small row at ``synchronous`` (or of ``pages`` rows
    of most of a page each), in the benchmark's temp dir: the least a durable step can
    cost in this store (one that writes as much as a step does)."""
    size = 200 if pages == 1 else 3500
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        db = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        t0 = time.perf_counter()
        for i in range(samples):
            db.execute("BEGIN IMMEDIATE")
            for j in range(pages):
                db.execute("INSERT INTO t VALUES (?, ?)", (i * pages + j, "x" * size))
            db.execute("COMMIT")
        elapsed = time.perf_counter() - t0
        db.close()
    return elapsed / samples * 1e6


# -- memory: a fresh process per size -------------------------------------------------------


def peak_kib() -> int:
    """This process's peak RSS. ``VmHWM`` where there is /proc: ``ru_maxrss`` keeps the
    forking parent's peak across exec on Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


KEEP = 1000
"""``keep_finished`` of the evicting RSS rows: a chain of 1,000 never evicts. (The default
is the same on SQLite since 2026-12-02; the rows without ``--keep`` show the default.)"""


def rss_child(n: int, keep: int | None, pg: str | None = None) -> None:
    """Run a chain of ``n`` at NORMAL (or on PostgreSQL at ``pg``); print peak RSS (KiB)
    before and after."""
    before = peak_kib()
    if pg is None:
        asyncio.run(measure("chain", n, "normal", 16, keep))
    else:
        asyncio.run(pg_step(pg, n, keep))
    print(before, peak_kib())


def peak_rss(n: int, keep: int | None = None, pg: str | None = None) -> dict[str, Any]:
    extra = [] if keep is None else ["--keep", str(keep)]
    extra += [] if pg is None else ["--pg", pg]
    out = subprocess.run(
        [sys.executable, "-m", "bench.kernel_overhead", "--rss-child", str(n), *extra],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    before, after = int(out[-2]), int(out[-1])
    return {
        "tasks": n,
        "keep_finished": keep,
        "peak_mb": round(after / 1024, 1),
        "growth_mb": round((after - before) / 1024, 1),
    }


# -- recovery: a 10,000-task chain killed halfway, resumed in a fresh process ----------------


def crash_child(db: str, n: int) -> None:
    """Run a chain of ``n`` at NORMAL in ``db``; ``LOOPKERNEL_CRASH_AT`` kills it midway."""

    async def go() -> None:
        store = SQLiteStore(Path(db), synchronous="normal")
        await store.open()
        kernel = Kernel(store, ChainPlanner(n), {"noop": noop})
        await kernel.start(app="bench", run_id="recovery", max_events=4 * n + 10)
        await kernel.run("recovery")

    asyncio.run(go())


def resume_child(db: str, n: int) -> None:
    """Resume the killed run in this fresh process; print the seconds from opening the
    store to the first step planned after the crash, then the run's status."""
    first: list[float] = []

    def observe(event: Event, *_: Any) -> None:
        if not first:
            first.append(time.perf_counter())

    async def go() -> str:
        t0 = time.perf_counter()
        store = SQLiteStore(Path(db), synchronous="normal")
        await store.open()
        kernel = Kernel(store, ChainPlanner(n), {"noop": noop}, parts=KernelParts(observer=observe))
        outcome = await kernel.run("recovery")
        await store.close()
        first[0] -= t0
        return outcome.status.value

    status = asyncio.run(go())
    print(first[0], status)


def recovery(n: int) -> float:
    """Seconds from store open to the first new step, resuming a chain of ``n`` that was
    SIGKILLed after step ``n // 2``."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        db = str(Path(tmp) / "runs.db")
        me = [sys.executable, "-m", "bench.kernel_overhead"]
        env = dict(os.environ, LOOPKERNEL_CRASH_AT=f"patch_committed:{n // 2}")
        killed = subprocess.run([*me, "--crash-child", db, str(n)], env=env, check=False)
        assert killed.returncode == -9, killed.returncode
        out = subprocess.run(
            [*me, "--resume-child", db, str(n)], capture_output=True, text=True, check=True
        ).stdout.split()
    assert out[-1] == "succeeded", out
    return float(out[-2])


# -- PostgreSQL: time per step, round trips per step ----------------------------------------


class Relay:
    """A TCP relay between a client and PostgreSQL that counts round trips: each time the
    client speaks after the server did (or first) is one turn."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.turns = 0
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
            sr, sw = await asyncio.open_connection(*self.target)
            last = {"side": "server"}

            async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, side: str) -> None:
                while data := await r.read(65536):
                    if side == "client" and last["side"] == "server":
                        self.turns += 1
                    last["side"] = side
                    w.write(data)
                    await w.drain()
                w.close()

            await asyncio.gather(pipe(cr, sw, "client"), pipe(sr, cw, "server"))

        server = self.loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()


def pg_database() -> str | None:
    """A fresh database on the benchmark's server, or None (and one line saying why) if
    the ``postgres`` extra is missing or the server does not answer."""
    why = pg_missing()
    if why is not None:
        print(f"PostgreSQL rows skipped: {why}", flush=True)
        return None
    import psycopg

    base = os.environ.get("LOOPKERNEL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"lk_bench_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"PostgreSQL rows skipped: no server answered at {base} ({first})", flush=True)
        return None
    return base.rsplit("/", 1)[0] + "/" + name


def pg_missing() -> str | None:
    """Why the PostgreSQL store cannot be used here (its extra not installed), or None."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        return f"the postgres extra is not installed ({exc}): pip install 'loopkernel[postgres]'"
    return None


def drop_pg(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def pg_step(url: str, n: int, keep: int | None = None) -> dict[str, float]:
    from loopkernel.store import open_store

    store = open_store(url)
    await store.open()
    try:
        elapsed, events = await timed_run(store, "chain", n, 16, keep)
    finally:
        await store.close()
    return {"ms_per_step": elapsed / n * 1e3, "events": events}


async def pg_turns(url: str, relay: Relay, n: int) -> float:
    """Round trips per step: a chain of ``n`` minus a chain of 1, over ``n - 1`` steps."""
    from urllib.parse import urlsplit

    from loopkernel.store import open_store

    parts = urlsplit(url)
    relayed = parts._replace(netloc=f"{parts.username}@127.0.0.1:{relay.port}").geturl()

    async def turns(steps: int) -> int:
        store = open_store(relayed)
        await store.open()
        try:
            start = relay.turns
            await timed_run(store, "chain", steps, 16)
            return relay.turns - start
        finally:
            await store.close()

    one = await turns(1)
    many = await turns(n)
    return (many - one) / (n - 1)


# -- the run --------------------------------------------------------------------------------


def median(xs: list[float], digits: int = 1) -> float:
    return round(statistics.median(xs), digits)


def pg_only(rounds: int, *, quick: bool) -> None:
    """``--only pg``: per round, the SQLite FULL chain step and the PostgreSQL step, then
    the round trips per step; medians and their ratio."""
    samples: dict[str, list[float]] = {}
    pg_url = pg_database()
    if pg_url is None:
        raise SystemExit("nothing to measure: --only pg needs PostgreSQL (see the line above)")
    try:
        for r in range(rounds):
            chain = asyncio.run(measure("chain", 1000, "full", 16))["us_per_task"]
            samples.setdefault("chain_full_us", []).append(chain)
            step = asyncio.run(pg_step(pg_url, 200))["ms_per_step"]
            samples.setdefault("pg_step_ms", []).append(step)
            print(f"  round {r + 1}/{rounds}: chain_full_us={chain:.1f}, pg_step_ms={step:.2f}")
        turns = round(asyncio.run(pg_turns(pg_url, Relay("127.0.0.1", 5432), 50)), 2)
    finally:
        drop_pg(pg_url)
    m = {k: round(statistics.median(v), 3) for k, v in samples.items()}
    ratio = round(m["pg_step_ms"] * 1000 / m["chain_full_us"], 2)
    load = os.getloadavg()
    print()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"medians of {rounds} interleaved rounds")
    print()
    print("| measure | value | ratio |")
    print("|---|---:|---:|")
    print(f"| SQLite chain of 1,000, FULL, per step | {m['chain_full_us']} µs | |")
    print(
        f"| PostgreSQL chain of 200, per step | {m['pg_step_ms']} ms | {ratio} x SQLite FULL step |"
    )
    print(f"| PostgreSQL round trips per step | {turns} | |")
    write_results(
        "kernel_overhead_pg",
        {
            "rounds": rounds,
            "medians": m,
            "samples": samples,
            "ratios": {"pg_step_to_sqlite_full_step": ratio},
            "pg_round_trips_per_step": turns,
        },
        quick=quick,
        load_average=[round(x, 2) for x in load],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="RSS up to 10,000; fewer rounds")
    parser.add_argument(
        "--only",
        choices=["pg"],
        help="pg: the PostgreSQL step, its round trips and the SQLite FULL chain step it "
        "is compared with; nothing else",
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 5, 3 with --quick)")
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pg", help=argparse.SUPPRESS)
    parser.add_argument("--crash-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--resume-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child, args.keep, args.pg)
        return
    if args.crash_child or args.resume_child:
        db, n = args.crash_child or args.resume_child
        (crash_child if args.crash_child else resume_child)(db, int(n))
        return
    if args.only == "pg":
        pg_only(args.rounds or (3 if args.quick else 5), quick=args.quick)
        return
    rounds = args.rounds or (3 if args.quick else 5)
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    pg_url = pg_database()
    try:
        for r in range(rounds):
            add("floor_full_us", commit_floor("full"))
            add("floor_step_full_us", commit_floor("full", pages=STEP_PAGES))
            add("chain_full_us", asyncio.run(measure("chain", 1000, "full", 16))["us_per_task"])
            add("floor_normal_us", commit_floor("normal"))
            add("chain_normal_us", asyncio.run(measure("chain", 1000, "normal", 16))["us_per_task"])
            evicting = asyncio.run(measure("chain", 1000, "normal", 16, keep=100))
            add("chain_normal_keep100_us", evicting["us_per_task"])
            for c in (16, 64, 1000):
                row = asyncio.run(measure("fanout", 1000, "full", c))
                add(f"fanout_c{c}_us", row["us_per_task"])
            if pg_url is not None:
                add("pg_step_ms", asyncio.run(pg_step(pg_url, 200))["ms_per_step"])
            print(
                f"  round {r + 1}/{rounds}: "
                + ", ".join(f"{k}={v[-1]:.1f}" for k, v in samples.items()),
                flush=True,
            )
        turns = None
        sizes = [1000, 10_000] if args.quick else [1000, 10_000, 100_000]
        rss_pg = []
        if pg_url is not None:
            turns = round(asyncio.run(pg_turns(pg_url, Relay("127.0.0.1", 5432), 50)), 2)
            rss_pg = [peak_rss(n, pg=pg_url) for n in sizes]
    finally:
        if pg_url is not None:
            drop_pg(pg_url)
    rss = [peak_rss(n) for n in sizes]
    rss_evicting = [peak_rss(n, KEEP) for n in sizes]
    samples["recovery_10k_s"] = [round(recovery(10_000), 4) for _ in range(rounds)]

    # µs and ms to a tenth; seconds (recovery, 0.05-0.2 s) to a tenth of a millisecond
    m = {k: median(v, 4 if k.endswith("_s") else 1) for k, v in samples.items()}
    ratios = {
        "chain_full_to_floor": round(m["chain_full_us"] / m["floor_full_us"], 2),
        "chain_full_to_step_floor": round(m["chain_full_us"] / m["floor_step_full_us"], 2),
        "chain_normal_to_floor": round(m["chain_normal_us"] / m["floor_normal_us"], 2),
    }
    if "pg_step_ms" in m:
        ratios["pg_step_to_sqlite_full_step"] = round(
            m["pg_step_ms"] * 1000 / m["chain_full_us"], 2
        )
    ratios["recovery_10k_to_aim"] = round(m["recovery_10k_s"] / 0.2, 2)
    ratios["rss_growth_largest_vs_1k_mb"] = round(rss[-1]["peak_mb"] - rss[0]["peak_mb"], 1)
    ratios["rss_growth_largest_vs_1k_mb_keep_finished"] = round(
        rss_evicting[-1]["peak_mb"] - rss_evicting[0]["peak_mb"], 1
    )
    if rss_pg:
        ratios["pg_rss_growth_largest_vs_1k_mb"] = round(
            rss_pg[-1]["peak_mb"] - rss_pg[0]["peak_mb"], 1
        )
    ratios["chain_normal_keep100_to_keep_all"] = round(
        m["chain_normal_keep100_us"] / m["chain_normal_us"], 2
    )
    load = os.getloadavg()
    table = [
        ("floor: SQLite WAL commit, FULL (fsync)", f"{m['floor_full_us']} µs", ""),
        (
            f"floor: SQLite WAL commit of {STEP_PAGES} pages (a step's), FULL",
            f"{m['floor_step_full_us']} µs",
            "",
        ),
        ("floor: SQLite WAL commit, NORMAL", f"{m['floor_normal_us']} µs", ""),
        (
            "chain of 1,000, FULL, per step",
            f"{m['chain_full_us']} µs",
            f"{ratios['chain_full_to_floor']} x floor, "
            f"{ratios['chain_full_to_step_floor']} x a step's",
        ),
        (
            "chain of 1,000, NORMAL, per step",
            f"{m['chain_normal_us']} µs",
            f"{ratios['chain_normal_to_floor']} x floor",
        ),
        (
            "same, keep_finished=100 (older tasks evicted, read back on demand)",
            f"{m['chain_normal_keep100_us']} µs",
            f"{ratios['chain_normal_keep100_to_keep_all']} x keeping all",
        ),
        *(
            (
                f"fan-out of 1,000 at concurrency {c}, FULL, per task",
                f"{m[f'fanout_c{c}_us']} µs",
                "",
            )
            for c in (16, 64, 1000)
        ),
        *(
            (
                f"peak RSS, chain of {r['tasks']:,}, keep_finished by default",
                f"{r['peak_mb']} MB (+{r['growth_mb']} in the run)",
                "",
            )
            for r in rss
        ),
        *(
            (
                f"peak RSS, chain of {r['tasks']:,}, keep_finished={KEEP:,}",
                f"{r['peak_mb']} MB (+{r['growth_mb']} in the run)",
                "",
            )
            for r in rss_evicting
        ),
    ]
    table.append(
        (
            "recovery: 10,000-task chain killed at step 5,000, open to first new step",
            f"{m['recovery_10k_s'] * 1000:.0f} ms",
            f"{ratios['recovery_10k_to_aim']} x the 0.2 s aim",
        )
    )
    if "pg_step_ms" in m:
        table.append(
            (
                "PostgreSQL chain of 200, per step",
                f"{m['pg_step_ms']} ms",
                f"{ratios['pg_step_to_sqlite_full_step']} x SQLite FULL step",
            )
        )
        table.append(("PostgreSQL round trips per step", str(turns), ""))
        table.extend(
            (
                f"PostgreSQL: peak RSS, chain of {r['tasks']:,}, keep_finished by default",
                f"{r['peak_mb']} MB (+{r['growth_mb']} in the run)",
                "",
            )
            for r in rss_pg
        )
    else:
        table.append(("PostgreSQL", "not measured: no server answered", ""))
    print()
    print(
        f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cpus"
    )
    print(f"medians of {rounds} interleaved rounds")
    print()
    print("| measure | value | ratio |")
    print("|---|---:|---:|")
    for line in table:
        print("| " + " | ".join(line) + " |")
    write_results(
        "kernel_overhead",
        {
            "rounds": rounds,
            "medians": m,
            "samples": samples,
            "ratios": ratios,
            "rss": rss,
            "rss_keep_finished": rss_evicting,
            "rss_postgres": rss_pg,
            "pg_round_trips_per_step": turns,
        },
        quick=args.quick,
        load_average=[round(x, 2) for x in load],
    )


if __name__ == "__main__":
    main()
