"""Web inspector under many viewers: does watching a run slow it, how soon does a
committed event reach every viewer, and does one heavy page hold up the others?

    python -m bench.web_viewers                      # 200 viewers, 10,000 events, SQLite
    python -m bench.web_viewers --viewers 50 --events 2000

Everything goes through a real ``loopkernel serve`` subprocess. The "run" is a writer
subprocess appending its journal through a store of its own, in steps of ``--batch``
events each followed by their (empty) patches (as an executor journals a step and its
planner answers it), stamping the time each event commit returns:

- **watched / unwatched**: the writer's wall time with ``--viewers`` live streams of its
  run open, against the same writer with none (goal <= 1.1x);
- **commit to receipt**: for every viewer and every event it is sent, the time from the
  commit's return to the viewer reading that event's ``id:`` off its stream (p50 and p95;
  goal p95 <= 1 s). A viewer that fell more than ``CATCHUP_EVENTS`` behind is sent a
  ``catchup`` marker instead of the rows it skips: those are not in its latency, and the
  rows skipped per viewer (mean, max, how many viewers skipped) are printed beside it;
- **fresh viewer**: a stream opened on the run once it is long, to its first event;
- **server RSS** with every viewer connected (``/proc/PID/status``);
- **others wait**: while ``/runs/R/at/SEQ`` of a ``--events`` run is rebuilt, the longest
  answer to a cheap request sent every 20 ms (goal <= 100 ms).

Prints a table with the goals beside and writes bench/results/web_viewers.json. The
machine may be shared: the load average is recorded with the figures; read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench._results import write_results
from bench.web import big_run, run_async, serve, stop
from loopkernel.graph import Delta, EventKind
from loopkernel.ids import RunId
from loopkernel.store import NewEvent, PatchRecord, open_store


async def _write(db: str, run_id: str, events: int, batch: int) -> dict[str, Any]:
    store = open_store(db)
    await store.open()
    try:
        rid = RunId(run_id)
        commits: dict[int, float] = {}
        t0, cpu0 = time.perf_counter(), time.process_time()
        done = 0
        while done < events:
            news = [
                NewEvent(kind=EventKind.TOOL_RESTARTED, data={"source": "bench", "n": done + i})
                for i in range(min(batch, events - done))
            ]
            out = await store.append_events(rid, news)
            now = time.time()
            for ev in out:
                commits[ev.seq] = now
            done += len(out)
            # and planned, as the kernel plans every event it journals (empty patches)
            await store.commit_patches(
                rid, [PatchRecord(event_seq=e.seq, ops=[]) for e in out], Delta()
            )
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        return {"wall_s": wall, "cpu_s": cpu, "commits": commits}
    finally:
        await store.close()


def write(db: str, run_id: str, events: int, batch: int) -> dict[str, Any]:
    """Run the writer in a subprocess of its own (the run, in its own process)."""
    code = (
        "import asyncio, json, sys; from bench.web_viewers import _write; "
        "print(json.dumps(asyncio.run(_write(sys.argv[1], sys.argv[2], "
        "int(sys.argv[3]), int(sys.argv[4])))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, db, run_id, str(events), str(batch)],
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, Any] = json.loads(done.stdout)
    found["commits"] = {int(k): v for k, v in found["commits"].items()}
    return found


_ID = re.compile(rb"^id: (\d+)\nevent: journal$", re.MULTILINE)
_SKIP = re.compile(rb'^event: catchup\ndata: \{"skipped":(\d+),', re.MULTILINE)


async def _viewer(
    http: httpx.AsyncClient,
    run_id: str,
    after: int,
    until: int,
    got: dict[int, float],
    skipped: list[int],
) -> None:
    """One live page's stream: every ``id:`` it reads, stamped when the bytes carrying it
    arrived. It scans each chunk as it comes (a regex over the bytes, a browser's cost),
    so 200 viewers in this one process measure the server, not Python's line splitting."""
    async with http.stream("GET", f"/runs/{run_id}/events", params={"after": str(after)}) as r:
        r.raise_for_status()
        tail = b""
        async for chunk in r.aiter_raw():
            now = time.time()
            # Whole messages only (up to the last blank line): an ``id:`` line is read with
            # the ``event:`` line after it, however the chunks cut them.
            lines = tail + chunk
            cut = lines.rfind(b"\n\n")
            if cut < 0:
                tail = lines
                continue
            lines, tail = lines[: cut + 2], lines[cut + 2 :]
            for found in _ID.finditer(lines):
                got[int(found.group(1))] = now
            for found in _SKIP.finditer(lines):  # in catch-up: these rows are not sent
                skipped.append(int(found.group(1)))
            if until in got:
                return


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def watched(
    db: str, url: str, pid: int, run_id: str, viewers: int, events: int, batch: int
) -> dict[str, Any]:
    """The writer's run with ``viewers`` streams open; the receipts of each."""
    receipts: list[dict[int, float]] = [{} for _ in range(viewers)]
    skips: list[list[int]] = [[] for _ in range(viewers)]
    ready = threading.Event()
    rss: list[int] = []
    after = 1

    async def watch() -> None:
        limits = httpx.Limits(max_connections=viewers + 8)
        async with (
            httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http,
            asyncio.TaskGroup() as tg,
        ):
            for got, skipped in zip(receipts, skips, strict=True):
                tg.create_task(_viewer(http, run_id, after, after + events, got, skipped))
            await asyncio.sleep(3.0)  # every stream open and idle
            ready.set()

    def watching() -> None:
        asyncio.run(watch())

    thread = threading.Thread(target=watching, daemon=True)
    thread.start()
    ready.wait(120)
    rss.append(_rss_kb(pid))
    out = write(db, run_id, events, batch)
    thread.join(600)
    rss.append(_rss_kb(pid))
    lags = [
        got[seq] - out["commits"][seq] for got in receipts for seq in out["commits"] if seq in got
    ]
    # A viewer in catch-up is sent the live window, not every row: its latency is that of
    # the rows it was sent, and what it skipped (the markers' counts) is counted apart.
    skipped = [sum(one) for one in skips]
    missing = sum(1 for got in receipts for seq in out["commits"] if seq not in got)
    missing -= sum(skipped)
    lags.sort()
    return {
        "wall_s": out["wall_s"],
        "cpu_s": out["cpu_s"],
        "p50_ms": 1000 * statistics.median(lags),
        "p95_ms": 1000 * lags[int(0.95 * (len(lags) - 1))],
        "max_ms": 1000 * lags[-1],
        "missing": missing,
        "skipped_per_viewer": {
            "mean": statistics.mean(skipped),
            "max": max(skipped),
            "viewers_skipping": sum(1 for n in skipped if n),
        },
        "rss_kb": max(rss),
    }


def fresh_viewer(url: str, run_id: str, last: int) -> float:
    """Milliseconds from opening a stream on the long run to its first event."""

    async def go() -> float:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            t0 = time.perf_counter()
            await _viewer(http, run_id, last - 1, last, {}, [])
            return 1000 * (time.perf_counter() - t0)

    return asyncio.run(go())


def others_wait(url: str, run_id: str, seq: int) -> dict[str, float]:
    """The longest answer to a cheap request while ``/at/SEQ`` is rebuilt."""
    done = threading.Event()
    took: list[float] = []

    def heavy() -> None:
        t0 = time.perf_counter()
        httpx.get(f"{url}/runs/{run_id}/at/{seq}", timeout=600).raise_for_status()
        took.append(time.perf_counter() - t0)
        done.set()

    worst = 0.0
    thread = threading.Thread(target=heavy)
    with httpx.Client(base_url=url, timeout=600) as http:
        thread.start()
        while not done.is_set():
            t0 = time.perf_counter()
            http.get("/favicon.ico").raise_for_status()
            worst = max(worst, time.perf_counter() - t0)
            time.sleep(0.02)
    thread.join()
    t0 = time.perf_counter()
    httpx.get(f"{url}/runs/{run_id}/at/{seq}", timeout=600).raise_for_status()
    return {
        "at_ms": 1000 * took[0],
        "at_again_ms": 1000 * (time.perf_counter() - t0),
        "others_worst_ms": 1000 * worst,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="unwatched/watched pairs")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lk-bench-viewers-"))
    db = str(tmp / "runs.db")
    for r in range(args.rounds):
        run_async(big_run(db, f"alone{r}", 1))
        run_async(big_run(db, f"watched{r}", 1))
    run_async(big_run(db, "big", args.events))
    proc, url = serve(db, tmp, "--max-streams", str(args.viewers + 8))
    alones: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    loads: list[float] = []
    try:
        # Unwatched and watched in turn, ``--rounds`` times: a shared machine's load moves
        # between two runs a second long; the medians of the pairs are compared.
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            found = write(db, f"alone{r}", args.events, args.batch)
            alones.append({"wall_s": found["wall_s"], "cpu_s": found["cpu_s"]})
            rounds.append(
                watched(db, url, proc.pid, f"watched{r}", args.viewers, args.events, args.batch)
            )
        fresh = fresh_viewer(url, f"watched{args.rounds - 1}", args.events + 1)
        at = others_wait(url, "big", args.events // 2)
    finally:
        stop(proc)
    alone = statistics.median(one["wall_s"] for one in alones)
    alone_cpu = statistics.median(one["cpu_s"] for one in alones)
    seen = {
        k: statistics.median(one[k] for one in rounds)
        for k in ("wall_s", "cpu_s", "p50_ms", "p95_ms", "max_ms", "rss_kb")
    }
    seen["missing"] = sum(one["missing"] for one in rounds)
    ratio = seen["wall_s"] / alone
    rows = [
        ("run wall time, unwatched", f"{alone:.2f} s", ""),
        (f"run wall time, {args.viewers} viewers", f"{seen['wall_s']:.2f} s", ""),
        ("watched / unwatched", f"{ratio:.2f}x", "<= 1.1x"),
        ("the run's CPU, watched / unwatched", f"{seen['cpu_s'] / alone_cpu:.2f}x", ""),
        ("commit -> receipt p50", f"{seen['p50_ms']:.0f} ms", ""),
        ("commit -> receipt p95", f"{seen['p95_ms']:.0f} ms", "<= 1000 ms"),
        ("commit -> receipt max", f"{seen['max_ms']:.0f} ms", ""),
        ("events a viewer missed", str(seen["missing"]), "0"),
        ("fresh viewer, first event", f"{fresh:.0f} ms", ""),
        ("server RSS, viewers connected", f"{seen['rss_kb'] / 1024:.0f} MiB", ""),
        (f"/at/{args.events // 2} of {args.events} events", f"{at['at_ms']:.0f} ms", ""),
        ("the same /at again (cached)", f"{at['at_again_ms']:.0f} ms", ""),
        ("longest other request meanwhile", f"{at['others_worst_ms']:.0f} ms", "<= 100 ms"),
    ]
    print(
        f"\n| {args.viewers} viewers, {args.events} events in steps of {args.batch}, "
        f"medians of {args.rounds} rounds, load {min(loads):.1f}-{max(loads):.1f} | | goal |"
    )
    print("|---|---|---|")
    for label, value, goal in rows:
        print(f"| {label} | {value} | {goal} |")
    write_results(
        "web_viewers",
        {
            "viewers": args.viewers,
            "events": args.events,
            "batch": args.batch,
            "rounds": args.rounds,
            "unwatched_wall_s": alone,
            "unwatched_cpu_s": alone_cpu,
            "unwatched_rounds": alones,
            "watched": seen,
            "watched_rounds": rounds,
            "load_averages": loads,
            "watched_over_unwatched": ratio,
            "fresh_viewer_first_event_ms": fresh,
            "at": at,
        },
        load_average=os.getloadavg()[0],
    )


if __name__ == "__main__":
    main()
