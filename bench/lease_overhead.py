"""What owning a run costs: ``Client.execute`` (lease acquired, heartbeat, fenced writes,
release) against executing the same run with no lease, as ``run``/``resume`` did before.

    python -m bench.lease_overhead            # 200 runs each way
    python -m bench.lease_overhead --quick    # 40

Each run is a small speculation run (plan, three researchers, the straggler cancelled at
once, a distiller: about a dozen commits), on SQLite with synchronous=FULL in a temporary
directory. The two ways alternate run by run, so drift in the machine's load hits both
alike. Prints a table and writes bench/results/lease_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench._results import write_results
from loopkernel.client import Client

PARAMS = {"delays": [0.0, 0.0, 0.2], "quorum": 2, "distill_delay": 0.0}


async def one(client: Client, run_id: str, *, leased: bool) -> float:
    await client.start("speculation", overrides=PARAMS, run_id=run_id)
    t0 = time.perf_counter()
    if leased:
        outcome = await client.execute(run_id)
    else:
        outcome = await client.run_owned(run_id)
    took = time.perf_counter() - t0
    assert outcome.status.value == "succeeded", outcome
    return took


async def main(runs: int, where: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"no lease": [], "lease": []}
    async with Client(str(where / "runs.db")) as client:
        for i in range(runs):
            times["no lease"].append(await one(client, f"plain-{i}", leased=False))
            times["lease"].append(await one(client, f"owned-{i}", leased=True))
    return times


def run() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lease_overhead")
    parser.add_argument("--quick", action="store_true", help="40 runs each way")
    args = parser.parse_args()
    runs = 40 if args.quick else 200
    with tempfile.TemporaryDirectory() as tmp:
        times = asyncio.run(main(runs, Path(tmp)))
    rows = {
        way: {
            "runs": len(t),
            "median_ms": round(statistics.median(t) * 1000, 2),
            "p90_ms": round(sorted(t)[int(len(t) * 0.9)] * 1000, 2),
        }
        for way, t in times.items()
    }
    base = rows["no lease"]["median_ms"]
    print("| way | runs | median ms/run | p90 ms/run | ratio |")
    print("|---|---|---|---|---|")
    for way, row in rows.items():
        ratio = row["median_ms"] / base
        print(f"| {way} | {row['runs']} | {row['median_ms']} | {row['p90_ms']} | {ratio:.2f} |")
    write_results(
        "lease_overhead",
        {"runs_each": runs, "results": rows, "load": os.getloadavg()[0]},
    )


if __name__ == "__main__":
    run()
