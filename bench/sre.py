"""SRE investigator: time per investigation without a model, tool calls per incident.

``python bench/sre.py [--repeat N]`` runs every example incident under
``examples/incidents`` through ``loopkernel investigate`` in-process (a fresh SQLite file
per run, the tools server a real stdio MCP process), and prints, per incident: the detector
ranked first, whether it is the expected one, wall time (median of N), tool calls made and
calls answered "already collected", whether the main cause is right, how many verified
causes are FALSE (verified but not the incident's cause: precision), and how many key facts
the report states with a citation (``examples/incidents/_expect.py`` decides all three).
Writes ``bench/results/sre.json``.

``--model`` also runs each incident with ``model=true`` through a real gateway process
serving the bundled local model (``loopkernel gateway --local smollm2``), interleaved with
the no-model runs, and adds: the median time with the model, its ratio to the no-model
time, the detector found with the model, and how many rounds the model planned versus fell
back to the rules. Writes ``bench/results/sre_model.json`` then.
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

import importlib.util  # noqa: E402

from bench._results import write_results  # noqa: E402
from loopkernel.client import Client  # noqa: E402

INCIDENTS = ROOT / "examples" / "incidents"


def _check_module() -> Any:
    spec = importlib.util.spec_from_file_location("_expect", INCIDENTS / "_expect.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _check_module().check


async def one(db: Path, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    async with Client(str(db)) as client:
        _, started = await client.start("sre", overrides=params)
        outcome = await client.execute(started.run_id)
        inspection = await client.inspect(started.run_id)
    elapsed = time.perf_counter() - t0
    assert outcome.status.value == "succeeded", outcome.verdict
    result = next(t for t in inspection.tasks if t["task_id"] == "report")["result"]
    return elapsed, {**result["report"], "markdown": result["markdown"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per incident (default 3)")
    parser.add_argument(
        "--model", action="store_true", help="also run with the bundled local model (smollm2)"
    )
    parser.add_argument(
        "--match", default="", help="only the incidents whose name contains this (e.g. heldout-)"
    )
    args = parser.parse_args()
    if args.model:
        import os

        from loopkernel.testing import GatewayProcess

        with (
            tempfile.TemporaryDirectory() as gw_dir,
            GatewayProcess(["--local", "smollm2"], ledger=Path(gw_dir) / "ledger.db") as gw,
        ):
            os.environ.update(gw.runtime_env())
            bench(args.repeat, model=True, match=args.match)
        return
    bench(args.repeat, model=False, match=args.match)


def bench(repeat: int, *, model: bool, match: str = "") -> None:
    rows = []
    head = (
        f"{'incident':<24} {'detector':<21} {'main':<5} {'FALSE':>5} {'facts':>6} {'ok':<4} "
        f"{'median s':>9} {'calls':>6} {'dup':>4}"
    )
    if model:
        head += f" {'model s':>8} {'ratio':>6} {'model det.':<18} {'planned':>7} {'fellback':>8}"
    print(head)
    for d in sorted(p for p in INCIDENTS.iterdir() if (p / "expected.json").is_file()):
        if match not in d.name:
            continue
        dump = d / "dump" if (d / "dump").is_dir() else d / "dump.txt"
        params = {
            "question": (d / "question.txt").read_text().strip(),
            "dump": str(dump),
            "namespace": (d / "namespace.txt").read_text().strip(),
        }
        want = json.loads((d / "expected.json").read_text())
        expected = want["detector"]
        times, model_times = [], []
        report: dict[str, Any] = {}
        model_report: dict[str, Any] = {}
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                elapsed, report = asyncio.run(one(Path(tmp) / "runs.db", params))
            times.append(elapsed)
            if model:
                with tempfile.TemporaryDirectory() as tmp:
                    elapsed, model_report = asyncio.run(
                        one(Path(tmp) / "runs.db", {**params, "model": True})
                    )
                model_times.append(elapsed)
        verified = report["verified_causes"]
        found = verified[0]["detector"] if verified else None
        cov = report["coverage"]
        verdict = check(report, want)
        row = {
            "incident": d.name,
            "expected": expected,
            "detector": found,
            "main_cause": verdict["main_cause"],
            "false_verified": verdict["false_verified"],
            "facts_cited": verdict["facts_cited"],
            "facts_total": verdict["facts_total"],
            "problems": verdict["problems"],
            "correct": verdict["correct"],
            "median_s": round(statistics.median(times), 3),
            "min_s": round(min(times), 3),
            "max_s": round(max(times), 3),
            "tool_calls": cov["tool_calls"],
            "already_collected": cov["already_collected"],
            "evidence_items": len(report["evidence"]),
            "exit": cov["exit"],
        }
        line = (
            f"{d.name:<24} {found or '-':<21} {'yes' if row['main_cause'] else 'NO':<5} "
            f"{len(row['false_verified']):>5} {row['facts_cited']:>3}/{row['facts_total']:<2} "
            f"{'yes' if row['correct'] else 'NO':<4} "
            f"{row['median_s']:>9.3f} {row['tool_calls']:>6} {row['already_collected']:>4}"
        )
        if model:
            mv = model_report["verified_causes"]
            planning = model_report["coverage"]["planning"]
            row.update(
                model_median_s=round(statistics.median(model_times), 3),
                model_detector=mv[0]["detector"] if mv else None,
                model_tool_calls=model_report["coverage"]["tool_calls"],
                model_rounds=sum(p["by"] == "model" for p in planning),
                fallback_rounds=sum(p["by"] == "rules" for p in planning),
                fallback_reasons=sorted({p["reason"] for p in planning if p["by"] == "rules"}),
            )
            row["model_ratio"] = round(row["model_median_s"] / row["median_s"], 2)
            line += (
                f" {row['model_median_s']:>8.3f} {row['model_ratio']:>5.1f}x "
                f"{row['model_detector'] or '-':<18} {row['model_rounds']:>7} "
                f"{row['fallback_rounds']:>8}"
            )
        rows.append(row)
        print(line, flush=True)
        for problem in row["problems"]:
            print(f"    {problem}", flush=True)
    med = statistics.median(r["median_s"] for r in rows)
    calls = statistics.mean(r["tool_calls"] for r in rows)
    false_total = sum(len(r["false_verified"]) for r in rows)
    cited = sum(r["facts_cited"] for r in rows)
    facts = sum(r["facts_total"] for r in rows)
    print(
        f"\n{sum(r['main_cause'] for r in rows)}/{len(rows)} main cause right, "
        f"{sum(r['correct'] for r in rows)}/{len(rows)} with every check; {false_total} false "
        f"verified causes; {cited}/{facts} key facts cited; median {med:.3f} s per "
        f"investigation; {calls:.1f} tool calls per incident on average"
    )
    results: dict[str, Any] = {
        "repeat": repeat,
        "incidents": rows,
        "median_s": med,
        "mean_tool_calls": calls,
        "main_cause_right": sum(r["main_cause"] for r in rows),
        "all_checks": sum(r["correct"] for r in rows),
        "false_verified": false_total,
        "facts_cited": cited,
        "facts_total": facts,
    }
    if model:
        mmed = statistics.median(r["model_median_s"] for r in rows)
        right = sum(r["model_detector"] == r["expected"] for r in rows)
        planned = sum(r["model_rounds"] for r in rows)
        fell = sum(r["fallback_rounds"] for r in rows)
        print(
            f"with the local model: {right}/{len(rows)} correct; median {mmed:.3f} s per "
            f"investigation ({mmed / med:.1f}x); {planned} rounds model-planned, {fell} fell back"
        )
        results.update(
            model_median_s=mmed, model_correct=right, model_rounds=planned, fallback_rounds=fell
        )
    if match:  # a partial run does not replace the recorded figures
        return
    write_results("sre_model" if model else "sre", results)


if __name__ == "__main__":
    main()
