"""Generated incidents through the real runtime, as ``bench/sre.py`` runs the examples:
``Client.start("sre", overrides=…)`` then ``execute`` on a fresh SQLite file per run, the
tools server a real stdio MCP process; at most ``jobs`` investigations at once."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.sre_gen_lib._model import Truth
from bench.sre_gen_lib._score import Score, World, score


async def _investigate(db: Path, params: dict[str, Any]) -> dict[str, Any]:
    from loopkernel.client import Client

    async with Client(str(db)) as client:
        _, started = await client.start("sre", overrides=params)
        outcome = await client.execute(started.run_id)
        inspection = await client.inspect(started.run_id)
    if outcome.status.value != "succeeded":
        raise RuntimeError(f"run {started.run_id} ended {outcome.status.value}: {outcome.verdict}")
    result = next(t for t in inspection.tasks if t["task_id"] == "report")["result"]
    report: dict[str, Any] = result["report"]
    return report


def investigate(incident: Path) -> dict[str, Any]:
    """One incident directory (dump/, question.txt, namespace.txt) investigated; the report,
    or ``{"error": …}`` when the run did not succeed."""
    params = {
        "question": (incident / "question.txt").read_text().strip(),
        "dump": str(incident / "dump"),
        "namespace": (incident / "namespace.txt").read_text().strip(),
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sre-gen-run-") as tmp:
        try:
            report = asyncio.run(_investigate(Path(tmp) / "runs.db", params))
        except Exception as exc:  # a failed run is a result: it scores 0
            return {"error": f"{type(exc).__name__}: {exc}"[:500], "elapsed_s": time.perf_counter() - t0}
    report["elapsed_s"] = time.perf_counter() - t0
    return report


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """One incident's result."""

    name: str
    truth: Truth
    score: Score
    elapsed_s: float
    error: str | None

    def as_json(self) -> dict[str, Any]:
        return {"incident": self.name, "fault": self.truth.fault, "flavour": self.truth.flavour.value,
                "runtime": self.truth.runtime.value, "log_format": self.truth.log_format.value,
                "distractors": list(self.truth.distractors), "elapsed_s": round(self.elapsed_s, 2),
                "error": self.error, **self.score.as_json()}  # fmt: skip


def judge(incident: Path, report: dict[str, Any]) -> Outcome:
    truth = Truth.from_json(json.loads((incident / "truth.json").read_text()))
    world = World.read(incident / "dump", (incident / "namespace.txt").read_text().strip())
    error = report.get("error")
    s = score({} if error else report, truth, world)
    (incident / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return Outcome(name=incident.name, truth=truth, score=s, elapsed_s=float(report.get("elapsed_s", 0.0)),
                   error=error)  # fmt: skip


def run_all(incidents: list[Path], jobs: int, *, progress: bool = True) -> list[Outcome]:
    out: list[Outcome] = []
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for i, (path, report) in enumerate(zip(incidents, pool.map(investigate, incidents), strict=True)):
            o = judge(path, report)
            out.append(o)
            if progress:
                mark = "ok" if o.score.recall and o.score.reason else "MISS"
                fv = f" FALSE-VERIFIED {len(o.score.false_verified)}" if o.score.false_verified else ""
                err = f" ERROR {o.error[:80]}" if o.error else ""
                print(f"[{i + 1}/{len(incidents)}] {o.name:<34} {mark:<4} score {o.score.score:.2f}{fv}{err}",
                      flush=True)  # fmt: skip
    return out


def table(outcomes: list[Outcome]) -> tuple[str, dict[str, Any]]:
    """The per-class table (incidents, recall, reason accuracy, precision, false verified)
    with totals, and the same as data."""
    by: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by[o.truth.fault].append(o)
    head = f"{'class':<24} {'n':>4} {'recall':>7} {'reason':>7} {'right':>6} {'prec.':>6} {'score':>6} {'FALSE':>6} {'symp.':>6} {'err':>4}"
    lines = [head, "-" * len(head)]
    rows: dict[str, Any] = {}

    def row(name: str, group: list[Outcome]) -> None:
        n = len(group)
        r = {"incidents": n,
             "recall": sum(o.score.recall for o in group) / n,
             "reason": sum(o.score.reason for o in group) / n,
             "right_entity_and_reason": sum(o.score.recall and o.score.reason for o in group) / n,
             "precision": sum(o.score.precision for o in group) / n,
             "score": sum(o.score.score for o in group) / n,
             "false_verified": sum(len(o.score.false_verified) for o in group),
             "symptom_causes": sum(o.score.symptom_causes for o in group),
             "errors": sum(o.error is not None for o in group)}  # fmt: skip
        rows[name] = r
        lines.append(f"{name:<24} {n:>4} {r['recall']:>7.0%} {r['reason']:>7.0%} {r['right_entity_and_reason']:>6.0%} "
                     f"{r['precision']:>6.2f} {r['score']:>6.2f} {r['false_verified']:>6} {r['symptom_causes']:>6} "
                     f"{r['errors']:>4}")  # fmt: skip

    for name in sorted(by):
        row(name, by[name])
    lines.append("-" * len(head))
    row("TOTAL", outcomes)
    healthy = by.get("healthy", [])
    fallback = sum(o.score.fallback for o in outcomes)
    lines.append(f"healthy controls verified: {sum(bool(o.score.false_verified) for o in healthy)}/{len(healthy)}; "
                 f"entity fallback (names read from cause text) used on {fallback}/{len(outcomes)} incidents")  # fmt: skip
    rows["fallback_incidents"] = fallback
    return "\n".join(lines), rows
