"""What a worker's look at the schedules costs each round (``loopkernel._schedules``).

    python -m bench.schedules            # 10, 100, 1000 and 10000 schedules
    python -m bench.schedules --quick    # 10, 100, 1000

For each count, on SQLite (synchronous=FULL, a temporary directory): ``due_schedules``
when none is due (what every round of every worker pays: the ``busy`` column and
``next_due`` filter in SQL), and ``decide`` for one schedule a day behind on a
five-minute cron (288 due times through the catch-up window and ``skip``: the pure part
of a round after an outage). Prints a table and writes bench/results/schedules.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench._results import write_results
from loopkernel import _schedules as sched
from loopkernel.store import Schedule, open_store


async def look(count: int, where: Path, rounds: int) -> list[float]:
    store = open_store(str(where / f"s{count}.db"))
    await store.open()
    try:
        for i in range(count):
            s = Schedule(name=f"s{i}", cron="0 0 1 1 *", app="a:b", params={}, next_due=4e9)
            await store.add_schedule(s)
        took = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            assert await store.due_schedules(time.time()) == []
            took.append(time.perf_counter() - t0)
        return took
    finally:
        await store.close()


def decide_cost(rounds: int) -> list[float]:
    now = time.time() // 300 * 300
    s = Schedule(name="s", cron="*/5 * * * *", app="a:b", params={}, next_due=now - 86400 + 300)
    took = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        changed, _ = sched.decide(s, now + 1, going=False)
        took.append(time.perf_counter() - t0)
        assert changed.counts == {"skipped": 287} and len(changed.pending) == 1
    return took


def run() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules")
    parser.add_argument("--quick", action="store_true", help="up to 1000 schedules")
    args = parser.parse_args()
    counts = [10, 100, 1000] if args.quick else [10, 100, 1000, 10000]
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for count in counts:
            took = asyncio.run(look(count, Path(tmp), 200))
            rows[f"due_schedules, {count} schedules"] = {
                "median_ms": round(statistics.median(took) * 1000, 3),
                "p95_ms": round(sorted(took)[int(len(took) * 0.95)] * 1000, 3),
            }
    took = decide_cost(20)
    rows["decide, 288 due times"] = {
        "median_ms": round(statistics.median(took) * 1000, 3),
        "p95_ms": round(sorted(took)[int(len(took) * 0.95)] * 1000, 3),
    }
    print(f"{'what':<34} {'median ms':>10} {'p95 ms':>10}")
    for what, row in rows.items():
        print(f"{what:<34} {row['median_ms']:>10} {row['p95_ms']:>10}")
    write_results("schedules", {"rows": rows}, quick=args.quick)


if __name__ == "__main__":
    run()
