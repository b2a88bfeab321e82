"""SRE investigator: time per investigation without a model, tool calls per incident.

``python bench/sre.py [--repeat N]`` runs every example incident under
``examples/incidents`` through ``loopkernel investigate`` in-process (a fresh SQLite file
per run, the tools server a real stdio MCP process), and prints, per incident: the detector
ranked first, whether it is the expected one, wall time (median of N), tool calls made and
calls answered "already collected". Writes ``bench/results/sre.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import write_results  # noqa: E402
from loopkernel.client import Client  # noqa: E402

INCIDENTS = ROOT / "examples" / "incidents"


async def one(db: Path, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    async with Client(str(db)) as client:
        _, started = await client.start("sre", overrides=params)
        outcome = await client.execute(started.run_id)
        inspection = await client.inspect(started.run_id)
    elapsed = time.perf_counter() - t0
    assert outcome.status.value == "succeeded", outcome.verdict
    report = next(t for t in inspection.tasks if t["task_id"] == "report")["result"]["report"]
    return elapsed, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per incident (default 3)")
    args = parser.parse_args()
    rows = []
    print(f"{'incident':<20} {'detector':<18} {'ok':<4} {'median s':>9} {'calls':>6} {'dup':>4}")
    for d in sorted(p for p in INCIDENTS.iterdir() if (p / "expected.json").is_file()):
        dump = d / "dump" if (d / "dump").is_dir() else d / "dump.txt"
        params = {
            "question": (d / "question.txt").read_text().strip(),
            "dump": str(dump),
            "namespace": (d / "namespace.txt").read_text().strip(),
        }
        expected = json.loads((d / "expected.json").read_text())["detector"]
        times = []
        report: dict[str, Any] = {}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                elapsed, report = asyncio.run(one(Path(tmp) / "runs.db", params))
            times.append(elapsed)
        verified = report["verified_causes"]
        found = verified[0]["detector"] if verified else None
        cov = report["coverage"]
        row = {
            "incident": d.name,
            "expected": expected,
            "detector": found,
            "correct": found == expected,
            "median_s": round(statistics.median(times), 3),
            "min_s": round(min(times), 3),
            "max_s": round(max(times), 3),
            "tool_calls": cov["tool_calls"],
            "already_collected": cov["already_collected"],
            "evidence_items": len(report["evidence"]),
            "exit": cov["exit"],
        }
        rows.append(row)
        print(
            f"{d.name:<20} {found or '-':<18} {'yes' if row['correct'] else 'NO':<4} "
            f"{row['median_s']:>9.3f} {row['tool_calls']:>6} {row['already_collected']:>4}"
        )
    med = statistics.median(r["median_s"] for r in rows)
    calls = statistics.mean(r["tool_calls"] for r in rows)
    print(
        f"\n{sum(r['correct'] for r in rows)}/{len(rows)} correct; median {med:.3f} s per "
        f"investigation; {calls:.1f} tool calls per incident on average"
    )
    write_results(
        "sre", {"repeat": args.repeat, "incidents": rows, "median_s": med, "mean_tool_calls": calls}
    )


if __name__ == "__main__":
    main()
