"""Web inspector: page load for big runs, bytes per live update, and how long a committed
event takes to show.

    python -m bench.web                       # SQLite, and PostgreSQL when one answers
    python -m bench.web --events 2000 --samples 20 --tasks 2000 --no-pg

Two numbers, both through a real ``loopkernel serve`` subprocess and the system Chromium
(Playwright, ``executable_path``; it never downloads a browser):

- **page load**: a run with ``--events`` journal entries (each with its patch): the HTML's
  size, the server's time to first byte and whole response (httpx), and the browser's
  navigation timing (request start to the ``load`` event).
- **big runs**: runs of ``--tasks`` tasks, a fan-out (``plan`` then ``w0 ...`` side by
  side) and a chain (``s0 → s1 → ...``), half of them succeeded: the same page numbers,
  checked against ``PAGE_BUDGET_BYTES`` (the budget ``tests/web`` asserts).
- **bytes per live update**: a stream of a ``--tasks``-task fan-out, as its page opens
  it; one task finishes per update; the bytes of each ``state`` message, beside the bytes
  of the page's graph and task table (what every update re-sent before deltas).
- **commit to screen**: with the run page open, the bench appends an event from another
  connection and stamps the time right after the commit returns; the page stamps the
  moment the row enters its DOM (a MutationObserver, same machine clock). SQLite wakes
  the server by polling ``PRAGMA data_version`` every 20 ms; PostgreSQL by LISTEN/NOTIFY.

- **issue 29's goals** (item 7), on SQLite: ``--viewers`` live streams of a running run
  of ``--watch-events`` events against the same run unwatched (``--rounds`` pairs in
  turn, medians: ``bench.web_viewers``), commit to receipt p50/p95, a fresh viewer's
  first event, the server's RSS; the ``--tasks``-task run page's HTML and its first
  contentful paint in Chromium; the longest cheap request while ``/at/SEQ`` of the
  ``--events`` run is rebuilt. Printed last, each beside its goal, with the load.

Prints tables and writes bench/results/web.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench._results import write_results
from loopkernel.graph import EventKind
from loopkernel.ids import RunId
from loopkernel.store import NewEvent, NewRun, PatchRecord, Store, open_store

T = TypeVar("T")
CHROMIUM = os.environ.get("LOOPKERNEL_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "bench-operator-token-0123456789"
PAGE_BUDGET_BYTES = 150_000
"""A 10,000-task run page's HTML; ``tests/web/test_web_operator_browser.py`` asserts it."""


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` off the main thread (Playwright's sync API owns its loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def big_run(db: str, run_id: str, events: int) -> None:
    """A running run with ``events`` journal entries, each answered by an empty patch."""
    from loopkernel.graph import Delta

    store = open_store(db)
    await store.open()
    try:
        rid = RunId(run_id)
        await store.create_run(
            NewRun(run_id=rid, app="bench", params={}, max_events=10**7, token_hash="h")
        )
        seq = 1
        while seq < events:
            batch = min(500, events - seq)
            news = [
                NewEvent(kind=EventKind.TOOL_RESTARTED, data={"source": "bench", "n": seq + i})
                for i in range(batch)
            ]
            out = await store.append_events(rid, news)
            seq = out[-1].seq
        records = [PatchRecord(event_seq=s, ops=[]) for s in range(1, seq + 1)]
        await store.commit_patches(rid, records, Delta())
    finally:
        await store.close()


async def big_task_run(db: str, run_id: str, tasks: int, shape: str) -> None:
    """A running run of ``tasks`` tasks (``fan`` or ``chain``), the first half succeeded."""
    from loopkernel.graph import Delta, GraphPatch, TaskSpec, TaskState, validate

    store = open_store(db)
    await store.open()
    try:
        rid = RunId(run_id)
        await store.create_run(
            NewRun(run_id=rid, app="bench", params={}, max_events=10**7, token_hash="h")
        )
        first = (await store.events(rid))[-1]
        patch = GraphPatch()
        if shape == "fan":
            patch = patch.add(TaskSpec(task_id="plan", skill="plan"))
            for i in range(tasks - 1):
                patch = patch.add(TaskSpec(task_id=f"w{i}", skill="work"), after=["plan"])
        else:
            for i in range(tasks):
                after = [f"s{i - 1}"] if i else []
                patch = patch.add(TaskSpec(task_id=f"s{i}", skill="step"), after=after)
        state = (await store.load_run(rid)).state
        delta = validate(state, patch, {"plan", "work", "step"})
        record = PatchRecord(event_seq=first.seq, ops=patch.to_json())  # type: ignore[arg-type]
        await store.commit_patches(rid, [record], delta)
        done = tuple(
            t.evolve(state=TaskState.SUCCEEDED, result={"n": i})
            for i, t in enumerate(delta.tasks)
            if i < tasks // 2
        )
        await store.commit_patches(rid, [], Delta(tasks=done))
    finally:
        await store.close()


def live_update_bytes(db: str, url: str, run_id: str, tasks: int, updates: int) -> dict[str, float]:
    """Bytes of each ``state`` message while one task after another finishes."""
    from loopkernel.graph import Delta, TaskState
    from loopkernel.ids import TaskId

    with httpx.Client(base_url=url, timeout=120) as http:
        page = http.get(f"/runs/{run_id}?tasks=all").text
        whole = page.split('<div id="graph">', 1)[1].split("<h2>Journal", 1)[0]
        live = page.split('data-live="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
        sizes: list[int] = []
        with http.stream("GET", live) as r:
            chunks = r.iter_text()
            text = ""

            def states() -> list[str]:
                return [b for b in text.split("\n\n") if b.startswith("event: state")]

            while not states():
                text += next(chunks)
            for i in range(updates):

                async def finish(n: int = i) -> None:
                    store = open_store(db)
                    await store.open()
                    try:
                        rid = RunId(run_id)
                        task = (await store.load_run(rid)).state.tasks[TaskId(f"w{tasks // 2 + n}")]
                        done = task.evolve(state=TaskState.SUCCEEDED, result={"n": n})
                        await store.commit_patches(rid, [], Delta(tasks=(done,)))
                    finally:
                        await store.close()

                run_async(finish())
                want = i + 2
                while len(states()) < want:
                    text += next(chunks)
                sizes.append(len(states()[want - 1].encode()))
    sizes.sort()
    return {
        "updates": len(sizes),
        "median_bytes": statistics.median(sizes),
        "max_bytes": sizes[-1],
        "full_graph_and_table_bytes": len(whole.encode()),
    }


def serve(db: str, tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    token_file = tmp / "token"
    token_file.write_text(TOKEN)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopkernel",
            "--db",
            db,
            "serve",
            "--port",
            "0",
            "--token-file",
            str(token_file),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"(http://\S+)/", line)
    if found is None:
        proc.kill()
        raise SystemExit(f"serve did not start: {line}{proc.stdout.read()}")
    return proc, found.group(1)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def page_load(url: str, path: str, browser: Any, repeats: int) -> dict[str, float]:
    ttfb, whole, size = [], [], 0
    with httpx.Client(timeout=120) as http:
        for _ in range(repeats):
            t0 = time.perf_counter()
            with http.stream("GET", url + path) as r:
                chunks = r.iter_bytes()
                first = next(chunks)
                ttfb.append(time.perf_counter() - t0)
                size = len(first) + sum(len(c) for c in chunks)
            whole.append(time.perf_counter() - t0)
    loads, paints = [], []
    for _ in range(repeats):
        page = browser.new_page()
        page.goto(url + path, wait_until="load", timeout=120_000)
        nav = page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0];"
            " return n.loadEventEnd - n.requestStart; }"
        )
        loads.append(nav / 1000)
        # first contentful paint, from the navigation's start (Paint Timing)
        paint = page.evaluate(
            "() => { const p = performance.getEntriesByName('first-contentful-paint')[0];"
            " return p ? p.startTime : null; }"
        )
        if paint is not None:
            paints.append(paint / 1000)
        page.close()
    return {
        "html_bytes": size,
        "server_ttfb_ms": statistics.median(ttfb) * 1000,
        "server_total_ms": statistics.median(whole) * 1000,
        "browser_load_ms": statistics.median(loads) * 1000,
        "first_paint_ms": statistics.median(paints) * 1000 if paints else float("nan"),
    }


WATCH = """() => {
  window.__seen = {};
  new MutationObserver(records => {
    const now = performance.timeOrigin + performance.now();
    for (const r of records) for (const n of r.addedNodes)
      if (n.id && n.id.startsWith('ev-')) window.__seen[n.id.slice(3)] = now;
  }).observe(document.getElementById('journal'), {childList: true});
}"""


def latency(db: str, url: str, run_id: str, browser: Any, samples: int) -> dict[str, float]:
    page = browser.new_page()
    page.goto(f"{url}/runs/{run_id}", wait_until="load", timeout=120_000)
    page.wait_for_selector("#live-dot:not([hidden])", state="attached")
    page.evaluate(WATCH)

    async def open_writer() -> Store:
        store = open_store(db)
        await store.open()
        return store

    # The writer lives on a loop of its own thread: Playwright's sync API owns this one.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    store = call(open_writer())
    gaps = []
    try:
        for _ in range(samples):
            out = call(
                store.append_events(RunId(run_id), [NewEvent(kind=EventKind.TOOL_RESTARTED)])
            )
            committed = time.time() * 1000
            seq = out[-1].seq
            page.wait_for_selector(f"#ev-{seq}", state="attached", timeout=30_000)
            shown = page.evaluate(f"() => window.__seen['{seq}']")
            gaps.append(shown - committed)
    finally:
        call(store.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
        page.close()
    gaps.sort()
    return {
        "samples": len(gaps),
        "median_ms": statistics.median(gaps),
        "p95_ms": gaps[min(len(gaps) - 1, int(len(gaps) * 0.95))],
        "max_ms": gaps[-1],
    }


def pg_url() -> str | None:
    url = os.environ.get("LOOPKERNEL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
    try:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
            name = f"loopkernel_bench_web_{os.getpid()}"
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        return url.rsplit("/", 1)[0] + "/" + name
    except Exception:
        return None


def drop_pg(url: str) -> None:
    import psycopg

    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


def viewers_goals(db: str, tmp: Path, viewers: int, events: int, rounds: int) -> dict[str, Any]:
    """Issue 29's item 7 beside ``bench.web_viewers``'s figures: ``viewers`` live streams of
    a running run of ``events`` events against the same run unwatched (``rounds`` pairs,
    medians), commit to receipt, a fresh viewer, the server's RSS; and the longest other
    request while ``/at/SEQ`` of the ``big`` run is rebuilt."""
    from bench import web_viewers as wv

    for r in range(rounds):
        run_async(big_run(db, f"alone{r}", 1))
        run_async(big_run(db, f"watched{r}", 1))
    proc, url = serve(db, tmp, "--max-streams", str(viewers + 8))
    alone, seen, loads = [], [], []
    try:
        for r in range(rounds):
            loads.append(os.getloadavg()[0])
            alone.append(wv.write(db, f"alone{r}", events, 10)["wall_s"])
            seen.append(wv.watched(db, url, proc.pid, f"watched{r}", viewers, events, 10))
        fresh = wv.fresh_viewer(url, f"watched{rounds - 1}", events + 1)
        last = run_async(_last_seq(db, "big"))
        at = wv.others_wait(url, "big", last // 2)
    finally:
        stop(proc)
    med = {k: statistics.median(one[k] for one in seen) for k in ("wall_s", "p50_ms", "p95_ms")}
    return {
        "viewers": viewers,
        "events": events,
        "rounds": rounds,
        "load_averages": loads,
        "unwatched_wall_s": statistics.median(alone),
        "watched": med,
        "missing": sum(one["missing"] for one in seen),
        "skipped_per_viewer": seen[-1]["skipped_per_viewer"],
        "watched_over_unwatched": med["wall_s"] / statistics.median(alone),
        "fresh_viewer_ms": fresh,
        "rss_kb": max(one["rss_kb"] for one in seen),
        "at_seq": last // 2,
        "at": at,
    }


async def _last_seq(db: str, run_id: str) -> int:
    store = open_store(db)
    await store.open()
    try:
        return await store.last_seq(RunId(run_id))
    finally:
        await store.close()


def print_goals(g: dict[str, Any], fan: dict[str, float], tasks: int, events: int) -> None:
    """Every figure of issue 29's item 7, with its goal beside it."""
    w = g["watched"]
    rows = [
        (
            f"run wall time, {g['viewers']} viewers / unwatched ({g['events']} events)",
            f"{w['wall_s']:.2f} s / {g['unwatched_wall_s']:.2f} s = "
            f"{g['watched_over_unwatched']:.2f}x",
            "<= 1.1x",
        ),
        (
            "commit -> receipt p50 / p95",
            f"{w['p50_ms']:.0f} / {w['p95_ms']:.0f} ms ({g['missing']} missed)",
            "p95 <= 1000 ms",
        ),
        (
            "rows skipped per viewer (catch-up), mean / max",
            f"{g['skipped_per_viewer']['mean']:.0f} / {g['skipped_per_viewer']['max']} of "
            f"{g['events']} ({g['skipped_per_viewer']['viewers_skipping']} viewers skipped)",
            "",
        ),
        ("fresh viewer, first event", f"{g['fresh_viewer_ms']:.0f} ms", ""),
        (f"server RSS, {g['viewers']} viewers", f"{g['rss_kb'] / 1024:.0f} MiB", ""),
        (f"{tasks}-task run page, HTML", f"{fan['html_bytes'] / 1e3:.0f} KB", "<= 150 KB"),
        (
            f"{tasks}-task run page, first paint in Chromium",
            f"{fan['first_paint_ms']:.0f} ms (load {fan['browser_load_ms']:.0f} ms)",
            "<= 1000 ms",
        ),
        (
            f"longest other request while /at/{g['at_seq']} of {events} events is served",
            f"{g['at']['others_worst_ms']:.0f} ms (the /at itself {g['at']['at_ms']:.0f} ms)",
            "<= 100 ms",
        ),
    ]
    low, high = min(g["load_averages"]), max(g["load_averages"])
    print(
        f"\n| issue 29, item 7 (SQLite; load {low:.1f}-{high:.1f} on {os.cpu_count()} cores) "
        "| measured | goal |"
    )
    print("|---|---|---|")
    for label, value, goal in rows:
        print(f"| {label} | {value} | {goal} |")


def print_tables(results: dict[str, Any], args: argparse.Namespace) -> None:
    """The page, big-run, live-update and commit-to-screen tables, per store."""
    print(f"\n| store | run page ({args.events} events) | HTML | server | browser load |")
    print("|---|---|---|---|---|")
    for kind, r in results.items():
        for label, key in (("last 500 entries", "page_load"), ("?journal=all", "page_load_all")):
            p = r[key]
            print(
                f"| {kind} | {label} | {p['html_bytes'] / 1e6:.2f} MB "
                f"| {p['server_total_ms']:.0f} ms | {p['browser_load_ms']:.0f} ms |"
            )
    print(f"\n| store | run page ({args.tasks} tasks) | HTML | budget | server | browser load |")
    print("|---|---|---|---|---|---|")
    for kind, r in results.items():
        for label, key in (("fan-out", "fan_page"), ("chain", "chain_page")):
            p = r[key]
            ok = "under" if p["html_bytes"] < PAGE_BUDGET_BYTES else "OVER"
            print(
                f"| {kind} | {label} | {p['html_bytes'] / 1e3:.0f} KB "
                f"| {ok} {PAGE_BUDGET_BYTES / 1e3:.0f} KB "
                f"| {p['server_total_ms']:.0f} ms | {p['browser_load_ms']:.0f} ms |"
            )
    print(f"\n| store | live update ({args.tasks}-task fan-out) | median | max | graph + table |")
    print("|---|---|---|---|---|")
    for kind, r in results.items():
        u = r["live_update"]
        print(
            f"| {kind} | one task finishes | {u['median_bytes']:.0f} B | {u['max_bytes']} B "
            f"| {u['full_graph_and_table_bytes'] / 1e6:.2f} MB |"
        )
    print(f"\n| store | commit → screen ({args.samples} events): median | p95 | max |")
    print("|---|---|---|---|")
    for kind, r in results.items():
        c = r["commit_to_screen"]
        print(f"| {kind} | {c['median_ms']:.1f} ms | {c['p95_ms']:.1f} ms | {c['max_ms']:.1f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--viewers", type=int, default=200, help="live streams of one run")
    parser.add_argument(
        "--watch-events", type=int, default=None, help="the watched run's events (--events)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="unwatched/watched pairs")
    args = parser.parse_args()
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    from playwright.sync_api import sync_playwright

    stores: list[tuple[str, str]] = []
    tmp = Path(tempfile.mkdtemp(prefix="lk-bench-web-"))
    stores.append(("sqlite", str(tmp / "runs.db")))
    pg = None if args.no_pg else pg_url()
    if pg is not None:
        stores.append(("postgres", pg))
    results: dict[str, Any] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            for kind, db in stores:
                t0 = time.perf_counter()
                run_async(big_run(db, "big", args.events))
                run_async(big_run(db, "live", 1))
                run_async(big_task_run(db, "fan", args.tasks, "fan"))
                run_async(big_task_run(db, "chain", args.tasks, "chain"))
                print(f"{kind}: {args.events} events written in {time.perf_counter() - t0:.1f}s")
                proc, url = serve(db, tmp)
                try:
                    results[kind] = {
                        "page_load": page_load(url, "/runs/big", browser, args.repeats),
                        "page_load_all": page_load(
                            url, "/runs/big?journal=all", browser, args.repeats
                        ),
                        "commit_to_screen": latency(db, url, "live", browser, args.samples),
                        "fan_page": page_load(url, "/runs/fan", browser, args.repeats),
                        "chain_page": page_load(url, "/runs/chain", browser, args.repeats),
                        "live_update": live_update_bytes(db, url, "fan", args.tasks, args.updates),
                    }
                finally:
                    stop(proc)
                if kind == "sqlite":
                    watch = args.watch_events or args.events
                    with ThreadPoolExecutor(1) as pool:  # off Playwright's loop
                        goals = pool.submit(
                            viewers_goals, db, tmp, args.viewers, watch, args.rounds
                        )
                        results["goals"] = goals.result()
        finally:
            browser.close()
            if pg is not None:
                drop_pg(pg)
    goals = results.pop("goals")
    print_tables(results, args)
    print_goals(goals, results["sqlite"]["fan_page"], args.tasks, args.events)
    write_results(
        "web",
        {
            "goals": goals,
            "events": args.events,
            "samples": args.samples,
            "tasks": args.tasks,
            "page_budget_bytes": PAGE_BUDGET_BYTES,
            "results": results,
        },
        load_average=os.getloadavg()[0],
    )


if __name__ == "__main__":
    main()
