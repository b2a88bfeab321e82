"""Scale-out: runs per second and time-to-takeover with 1, 2 and 4 workers on PostgreSQL,
and the durable step overhead on PostgreSQL next to SQLite.

    python -m bench.scaleout                 # 160 runs per row, 3 takeovers per row
    python -m bench.scaleout --quick         # 60 runs per row, 1 takeover per row
    python -m bench.scaleout --db postgresql://user@host/db

Throughput: N ``loopkernel worker`` processes (8 runs at once each, lease 2 s, poll 0.2 s)
execute speculation runs whose tasks wait on I/O (researchers sleep 1 s and 1.5 s, the
straggler's 5 s are cancelled at the quorum, the distiller sleeps 0.5 s: a run takes about
2 s, nearly all of it waiting). The clock runs from the first ``enqueue`` to the last
run's end; every run must succeed. One worker with 8 runs at once cannot beat ~4 runs/s;
more workers add slots until the CPUs are busy.

Takeover: with the workers busy, one worker that holds runs is SIGKILLed; the time until
every one of its runs is claimed by another worker. The lease bounds it (2 s after the
last heartbeat, which is at most 2/3 s old) plus the poll interval, plus waiting for a free
slot when the others are full.

Step overhead: a chain of no-op tasks (each step = journal the completion, plan, commit
the patch, start the next task), on SQLite (``synchronous=FULL``) and on PostgreSQL, each
plain and through a fenced view (how a worker writes); and the cost of single store calls
(the rows of ``docs/postgres.md``). Prints markdown tables; writes
bench/results/scaleout.json. Needs a PostgreSQL server (``.ci/start-postgres``); it works
in a schema of its own and drops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from bench._results import write_results
from bench.kernel_overhead import ChainPlanner as Chain
from bench.kernel_overhead import noop
from loopkernel import GraphPatch, Kernel, TaskSpec
from loopkernel.client import Client
from loopkernel.graph import EventKind, TaskState, validate
from loopkernel.ids import RunId, TaskId
from loopkernel.store import NewEvent, NewRun, PatchRecord, Store, open_store

DEFAULT_PG = os.environ.get("LOOPKERNEL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
IO_RUN = {"delays": [1.0, 1.5, 5.0], "distill_delay": 0.5}
LEASE, POLL, PER_WORKER = 2.0, 0.2, 8
LOOPKERNEL = [sys.executable, "-m", "loopkernel"]


# -- a schema of our own ----------------------------------------------------------------------


@contextmanager
def bench_schema(base: str) -> Iterator[str]:
    """A fresh schema in ``base``'s database; the URL whose tables live there."""
    schema = f"scaleout_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    parts = urlsplit(base)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    try:
        yield urlunsplit(parts._replace(query=urlencode(query)))
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def sql(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


# -- worker processes -------------------------------------------------------------------------


@contextmanager
def workers(url: str, n: int, logdir: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for i in range(n):
            tag = f"w{i}"
            with (logdir / f"{tag}.log").open("ab") as log:
                options = ["--concurrency", str(PER_WORKER), "--lease", str(LEASE)]
                procs[tag] = subprocess.Popen(
                    [
                        *LOOPKERNEL,
                        "--db",
                        url,
                        "worker",
                        "--id",
                        tag,
                        *options,
                        "--poll",
                        str(POLL),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        for tag in procs:  # every worker listens before the clock starts
            wait_for(lambda tag=tag: "serving" in (logdir / f"{tag}.log").read_text(), 30)
        yield procs
    finally:
        for proc in procs.values():
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def wait_for(check: Any, timeout: float, step: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"scaleout: timed out after {timeout}s")
        time.sleep(step)


async def create_runs(url: str, n: int, params: dict[str, Any]) -> list[str]:
    """Runs that exist but are not enqueued yet: no worker sees them."""
    async with Client(url) as client:
        return [(await client.start("speculation", overrides=params))[1].run_id for _ in range(n)]


async def enqueue(url: str, runs: list[str]) -> None:
    store = open_store(url)
    await store.open()
    try:
        for run_id in runs:
            await store.enqueue(RunId(run_id))
    finally:
        await store.close()


def unfinished(url: str, runs: list[str]) -> int:
    ids = ",".join(f"'{r}'" for r in runs)
    return int(
        sql(
            url,
            f"SELECT count(*) FROM runs WHERE run_id IN ({ids}) "
            "AND status IN ('running', 'waiting')",
        )[0][0]
    )


def throughput(url: str, n_workers: int, n_runs: int, logdir: Path) -> dict[str, Any]:
    runs = asyncio.run(create_runs(url, n_runs, IO_RUN))
    with workers(url, n_workers, logdir):
        t0 = time.perf_counter()
        asyncio.run(enqueue(url, runs))
        wait_for(lambda: unfinished(url, runs) == 0, 600, step=0.05)
        elapsed = time.perf_counter() - t0
    ids = ",".join(f"'{r}'" for r in runs)
    statuses = dict(
        sql(url, f"SELECT status, count(*) FROM runs WHERE run_id IN ({ids}) GROUP BY status")
    )
    assert statuses == {"succeeded": n_runs}, statuses
    return {
        "workers": n_workers,
        "runs": n_runs,
        "seconds": round(elapsed, 3),
        "runs_per_s": round(n_runs / elapsed, 2),
    }


def takeover(url: str, n_workers: int, logdir: Path, trials: int) -> list[float]:
    """Seconds from SIGKILL until all the victim's runs are held by others, per trial."""
    return [one_takeover(url, n_workers, logdir / f"t{trial}") for trial in range(trials)]


def one_takeover(url: str, n_workers: int, logdir: Path) -> float:
    logdir.mkdir()
    runs = asyncio.run(create_runs(url, 2 * n_workers, {"delays": [3.0, 3.5, 8.0]}))
    ids = ",".join(f"'{r}'" for r in runs)

    def owners() -> dict[str, str]:
        query = f"SELECT run_id, owner FROM runs WHERE run_id IN ({ids}) AND status = 'running'"
        return {r[0]: r[1] for r in sql(url, query) if r[1] is not None}

    with workers(url, n_workers, logdir) as procs:
        asyncio.run(enqueue(url, runs))
        wait_for(lambda: len(set(owners().values())) == n_workers, 30)
        held = {r for r, owner in owners().items() if owner == "w0"}
        os.kill(procs["w0"].pid, signal.SIGKILL)
        t0 = time.perf_counter()

        def taken_over() -> bool:
            now = owners()
            return all(now.get(r, "w0") != "w0" or unfinished(url, [r]) == 0 for r in held)

        wait_for(taken_over, 60, step=0.01)
        took = time.perf_counter() - t0
        wait_for(lambda: unfinished(url, runs) == 0, 60, step=0.05)
    return round(took, 3)


# -- the durable step, on both stores -----------------------------------------------------------


async def chain_step_us(url: str, n: int, *, fenced: bool) -> float:
    store = open_store(url)
    await store.open()
    try:
        kernel = Kernel(store, Chain(n), {"noop": noop})
        started = await kernel.start(app="bench", max_events=4 * n + 10)
        if fenced:
            await store.enqueue(started.run_id)
            claim = await store.claim_run("bench", 600)
            assert claim is not None and claim.run_id == started.run_id
            kernel = Kernel(store.fenced(claim.run_id, claim.epoch), Chain(n), {"noop": noop})
        t0 = time.perf_counter()
        outcome = await kernel.run(started.run_id)
        elapsed = time.perf_counter() - t0
    finally:
        await store.close()
    assert outcome.status.value == "succeeded", outcome
    return round(elapsed / n * 1e6, 1)


async def store_calls_us(url: str, n: int) -> dict[str, float]:
    """Median µs of single store calls on one run of ``n`` steps (``docs/postgres.md``)."""
    store: Store = open_store(url)
    await store.open()
    samples: dict[str, list[float]] = {
        "append_events (1 event + 1 task)": [],
        "commit_patches (1 patch + 1 task)": [],
        "last_seq": [],
        "get_run": [],
        f"load_run ({n} tasks)": [],
    }

    def timed(name: str, t0: float) -> None:
        samples[name].append(time.perf_counter() - t0)

    try:
        rid = RunId(f"calls-{time.time_ns()}")
        await store.create_run(
            NewRun(run_id=rid, app="b", params={}, max_events=10**6, token_hash="h")
        )
        state = (await store.load_run(rid)).state
        seq = 1
        for i in range(n):
            tid = TaskId(f"t{i:05}")
            patch = GraphPatch().add(TaskSpec(task_id=tid, skill="s", input={"i": i}))
            delta = validate(state, patch, {"s"})
            t0 = time.perf_counter()
            await store.commit_patches(
                rid, [PatchRecord(event_seq=seq, ops=patch.to_json())], delta
            )
            timed("commit_patches (1 patch + 1 task)", t0)
            state.apply(delta)
            task = replace(state.tasks[tid], state=TaskState.SUCCEEDED, result={"r": i})
            done = NewEvent(kind=EventKind.TASK_COMPLETED, task_id=tid, data={"r": i})
            t0 = time.perf_counter()
            (event,) = await store.append_events(rid, [done], [task])
            timed("append_events (1 event + 1 task)", t0)
            state.tasks[tid] = task
            seq = event.seq
            t0 = time.perf_counter()
            await store.last_seq(rid)
            timed("last_seq", t0)
            t0 = time.perf_counter()
            await store.get_run(rid)
            timed("get_run", t0)
        for _ in range(20):
            t0 = time.perf_counter()
            await store.load_run(rid)
            timed(f"load_run ({n} tasks)", t0)
    finally:
        await store.close()
    return {k: round(statistics.median(v) * 1e6, 1) for k, v in samples.items()}


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 runs, 1 takeover per row")
    parser.add_argument("--db", default=DEFAULT_PG, help=f"a PostgreSQL URL (default {DEFAULT_PG})")
    args = parser.parse_args()
    n_runs, trials, steps = (60, 1, 300) if args.quick else (160, 3, 1000)
    os.environ.pop("LOOPKERNEL_DB", None)
    scale: list[dict[str, Any]] = []
    steps_rows: list[dict[str, Any]] = []
    with bench_schema(args.db) as url, tempfile.TemporaryDirectory() as tmp:
        for n in (1, 2, 4):
            (Path(tmp) / f"n{n}").mkdir()
            row = throughput(url, n, n_runs, Path(tmp) / f"n{n}")
            if n > 1:
                row["takeover_s"] = takeover(url, n, Path(tmp) / f"n{n}", trials)
            print(f"  {n} worker(s): {row}", flush=True)
            scale.append(row)
        lite = str(Path(tmp) / "steps.db")
        for name, where in (("SQLite", lite), ("PostgreSQL", url)):
            plain = asyncio.run(chain_step_us(where, steps, fenced=False))
            fenced = asyncio.run(chain_step_us(where, steps, fenced=True))
            calls = asyncio.run(store_calls_us(where, 300))
            steps_rows.append({"store": name, "step_us": plain, "fenced_step_us": fenced, **calls})
            print(f"  {name}: {steps_rows[-1]}", flush=True)

    print()
    print(
        f"Speculation runs waiting on I/O, {n_runs} per row; {PER_WORKER} runs at once per "
        f"worker; lease {LEASE} s, poll {POLL} s; {os.cpu_count()} CPUs.\n"
    )
    print("| workers | runs/s | seconds | takeover after SIGKILL (s) |")
    print("|---:|---:|---:|---|")
    for r in scale:
        took = ", ".join(f"{t:.2f}" for t in r.get("takeover_s", [])) or "n/a (no other worker)"
        print(f"| {r['workers']} | {r['runs_per_s']:.1f} | {r['seconds']:.1f} | {took} |")
    print(f"\nDurable step: a chain of {steps} no-op tasks; store calls: medians over 300.\n")
    keys = [k for k in steps_rows[0] if k != "store"]
    print("| µs | " + " | ".join(r["store"] for r in steps_rows) + " |")
    print("|---|" + "---:|" * len(steps_rows))
    for k in keys:
        label = {"step_us": "kernel step", "fenced_step_us": "kernel step, fenced (worker)"}.get(
            k, k
        )
        print(f"| {label} | " + " | ".join(f"{r[k]:,.0f}" for r in steps_rows) + " |")
    write_results(
        "scaleout",
        {
            "command": "python -m bench.scaleout" + (" --quick" if args.quick else ""),
            "settings": {
                "runs_per_row": n_runs,
                "runs_at_once_per_worker": PER_WORKER,
                "lease_s": LEASE,
                "poll_s": POLL,
                "io_run": IO_RUN,
                "chain_steps": steps,
            },
            "scaleout": scale,
            "durable_step": steps_rows,
        },
        quick=args.quick,
        postgres=sql(args.db, "SHOW server_version")[0][0],
    )


if __name__ == "__main__":
    main()
