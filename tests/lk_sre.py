"""Helpers for the SRE investigator's tests: the example incidents and one in-process run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from loopkernel.client import Client

ROOT = Path(__file__).resolve().parent.parent
INCIDENTS = ROOT / "examples" / "incidents"
NAMES = sorted(p.name for p in INCIDENTS.iterdir() if (p / "expected.json").is_file())


def incident(name: str) -> dict[str, Any]:
    d = INCIDENTS / name
    dump = d / "dump" if (d / "dump").is_dir() else d / "dump.txt"
    return {
        "dump": str(dump),
        "question": (d / "question.txt").read_text().strip(),
        "namespace": (d / "namespace.txt").read_text().strip(),
        "expected": json.loads((d / "expected.json").read_text()),
    }


async def _investigate(db: Path, params: dict[str, Any], run_id: str) -> dict[str, Any]:
    async with Client(str(db)) as client:
        _, started = await client.start("sre", overrides=params, run_id=run_id)
        outcome = await client.execute(started.run_id)
        assert outcome.status.value == "succeeded", outcome.verdict
        inspection = await client.inspect(run_id)
        report = next(t for t in inspection.tasks if t["task_id"] == "report")
        result: dict[str, Any] = dict(report["result"])
        result["run_digest"] = inspection.digest
        return result


def investigate(db: Path, name: str, run_id: str = "inv", **overrides: Any) -> dict[str, Any]:
    """Run the investigator on an example incident in this process; the report task's result."""
    case = incident(name)
    params = {k: case[k] for k in ("dump", "question", "namespace")} | overrides
    return asyncio.run(_investigate(db, params, run_id))
