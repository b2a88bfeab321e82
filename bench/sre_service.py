"""The investigation service, measured: from submit to the rendered report, and a
follow-up against a fresh run (docs/sre.md, "The service").

::

    python -m bench.sre_service [--questions N] [--workers W] [--quick]

Starts ``loopkernel serve`` (with the Investigations page) and W ``loopkernel worker``
processes on one SQLite file, submits N questions at once through the page's form (as a
browser does: CSRF, the user's token), and times each one from its POST to the first GET of
``/investigations/RUN`` that holds the report. Then, on one finished run, a follow-up and a
fresh run of the same question side by side: tool calls (effects journaled) and run time.
Last, retrieval recall@3 of the shipped runbooks as ``kb_search`` ranks them (``bench.sre_kb``,
SQLite, fused ranking). The load average (``/proc/loadavg``) is printed at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench._results import write_results

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "examples" / "incidents" / "oom-payments"
TOKEN = "bench-user-token-0123456789"
LK = [sys.executable, "-m", "loopkernel"]


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def _start(tmp: Path, db: str, workers: int) -> tuple[subprocess.Popen[str], list[Any], str]:
    table = {
        "users": {
            "bench": {
                "token": TOKEN,
                "namespaces": ["prod"],
                "per_hour": 10**6,
                "max_queued": 10**6,
            }
        },
        "dumps": {"payments": str(CASE / "dump")},
        "uploads": str(tmp / "uploads"),
    }
    (tmp / "service.json").write_text(json.dumps(table))
    (tmp / "op").write_text("bench-operator-token-0123456789\n")
    env = {**os.environ, "LOOPKERNEL_SRE_SERVICE": str(tmp / "service.json")}
    subprocess.run(
        [*LK, "--db", db, "run", "speculation", "--quiet"], env=env, capture_output=True, check=True
    )  # creates the database
    serve = subprocess.Popen(
        [*LK, "--db", db, "serve", "--port", "0", "--token-file", str(tmp / "op")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert serve.stdout is not None
    url = re.search(r"(http://\S+/)", serve.stdout.readline())
    assert url is not None
    procs = [
        subprocess.Popen(
            [*LK, "--db", db, "worker", "--concurrency", "4", "--poll", "0.2"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    return serve, procs, url.group(1).rstrip("/")


def _one(url: str, n: int) -> float:
    with httpx.Client(base_url=url, timeout=120) as http:
        csrf = re.search(r'name="csrf" value="([^"]+)"', http.get("/investigations").text)
        assert csrf is not None
        began = time.perf_counter()
        asked = http.post(
            "/investigations",
            files={"archive": ("", b"")},
            data={
                "csrf": csrf.group(1),
                "token": TOKEN,
                "namespace": "prod",
                "source": "dump:payments",
                "question": f"why is the payments deployment restarting? ({n})",
            },
        )
        assert asked.status_code == 303, asked.text
        where = asked.headers["location"]
        while 'id="report"' not in http.get(where).text:
            time.sleep(0.1)
        return time.perf_counter() - began


def _calls_and_time(db: str, run_id: str) -> tuple[int, float]:
    """Tool calls journaled, and the run's time from its creation to its last write."""
    import asyncio

    from loopkernel.client import Client

    async def go() -> tuple[int, float]:
        async with Client(db) as client:
            info = await client.info(run_id)
            return len(await client.effects(run_id)), info.updated_at - info.created_at

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=50)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="8 questions; results to a temp dir")
    args = ap.parse_args()
    n = 8 if args.quick else args.questions
    load_start = os.getloadavg()
    print(f"load average at the start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    tmp = Path(tempfile.mkdtemp(prefix="lk-sre-service-"))
    db = str(tmp / "runs.db")
    serve, workers, url = _start(tmp, db, args.workers)
    try:
        with ThreadPoolExecutor(n) as pool:
            latencies = list(pool.map(lambda i: _one(url, i), range(n)))
        follow = _follow_vs_fresh(url, db)
    finally:
        for p in [*workers, serve]:
            p.send_signal(signal.SIGTERM if p is not serve else signal.SIGINT)
        for p in [*workers, serve]:
            p.wait(timeout=30)
    row = {
        "questions": n,
        "workers": args.workers,
        "p50_s": round(_pct(latencies, 50), 2),
        "p95_s": round(_pct(latencies, 95), 2),
        "max_s": round(max(latencies), 2),
    }
    print(
        f"| questions | workers | p50 s | p95 s | max s |\n|---|---|---|---|---|\n"
        f"| {n} | {args.workers} | {row['p50_s']} | {row['p95_s']} | {row['max_s']} |\n"
    )
    print("| run | tool calls | run time s |\n|---|---|---|")
    for k in ("fresh", "follow_up"):
        print(f"| {k} | {follow[k]['tool_calls']} | {follow[k]['seconds']:.2f} |")
    print(f"| follow-up / fresh | {follow['ratio_calls']:.2f} | {follow['ratio_time']:.2f} |")
    recall = _recall(tmp)
    print(f"\nrecall@3 of the shipped runbooks (kb_search, SQLite): "
          f"{recall['recall@3']}/{recall['classes']}")  # fmt: skip
    load = os.getloadavg()
    out = write_results(
        "sre_service",
        {"submit_to_report": row, "follow_up": follow, "kb": recall},
        quick=args.quick,
        load_average=round(load[0], 1),
        load_average_start=round(load_start[0], 1),
    )
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({out.name})")


def _recall(tmp: Path) -> dict[str, Any]:
    """recall@3 of ``kb_search``'s fused ranking over the shipped runbooks."""
    import asyncio

    from bench.sre_kb import measure

    got = asyncio.run(measure(str(tmp / "kb.db")))
    fused: dict[str, Any] = got["fused"]
    return {**fused, "search_ms_p50": got["search_ms_p50"]}


def _follow_vs_fresh(url: str, db: str) -> dict[str, Any]:
    """A fresh question and a follow-up on it, each from the page, then their cost."""
    with httpx.Client(base_url=url, timeout=120) as http:
        csrf = re.search(r'name="csrf" value="([^"]+)"', http.get("/investigations").text)
        assert csrf is not None
        asked = http.post(
            "/investigations",
            files={"archive": ("", b"")},
            data={
                "csrf": csrf.group(1),
                "token": TOKEN,
                "namespace": "prod",
                "source": "dump:payments",
                "question": "why is the payments deployment restarting?",
            },
        )
        fresh = asked.headers["location"]
        while 'id="report"' not in http.get(fresh).text:
            time.sleep(0.1)
        followed = http.post(
            f"{fresh}/follow-up",
            data={"csrf": csrf.group(1), "token": TOKEN, "question": "and what do its logs say?"},
        )
        follow = followed.headers["location"]
        while 'id="report"' not in http.get(follow).text:
            time.sleep(0.1)
    out: dict[str, Any] = {}
    for k, where in (("fresh", fresh), ("follow_up", follow)):
        calls, took = _calls_and_time(db, where.rsplit("/", 1)[1])
        out[k] = {"tool_calls": calls, "seconds": round(took, 3)}
    out["ratio_calls"] = out["follow_up"]["tool_calls"] / max(1, out["fresh"]["tool_calls"])
    out["ratio_time"] = out["follow_up"]["seconds"] / max(1e-9, out["fresh"]["seconds"])
    return out


if __name__ == "__main__":
    main()
