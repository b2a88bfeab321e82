"""A follow-up investigation killed at every boundary: resumed in a new process, it ends with
the uninterrupted follow-up's report digest, sends none of the calls it reuses from the
earlier run, and sends each of its own once.

    python -m bench.sre_followup_crash

The earlier run (the ``oom-payments`` example, bounded to four tool calls) and the
follow-up "and what do its logs say?" (which reuses those four and reads the rest) are
made once; each case starts from a copy of the submitted follow-up's ``.db``, is resumed
with ``LOOPKERNEL_CRASH_AT`` set (a real SIGKILL at the point), then resumed again. The
read tools' audit log (``LOOPKERNEL_SRE_AUDIT``) says what was sent. Prints a table, writes
bench/results/sre_followup_crash.json. The test suite runs two of these points
(``tests/crash/test_followup_crash.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from bench._results import write_results  # noqa: E402
from lk_sre import incident  # noqa: E402
from loopkernel.client import Client  # noqa: E402
from loopkernel.testing import run_cli, was_killed  # noqa: E402

POINTS = ["tool_sent:1", "tool_returned:2", "task_returned:1", "task_returned:2",
          "task_returned:5", "event_committed:3", "patch_committed:3"]  # fmt: skip
PARENT, FOLLOW = "inv", "fu"


def _cli(tmp: Path, args: list[str], crash_at: str | None = None) -> Any:
    env = {"LOOPKERNEL_SRE_AUDIT": str(tmp / "audit.jsonl")}
    return run_cli(args, db=tmp / "runs.db", crash_at=crash_at, env=env)


def _sent(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _call(a: dict[str, Any]) -> str:
    return a["tool"] + " " + json.dumps(a["args"], sort_keys=True)


def _report(tmp: Path) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with Client(str(tmp / "runs.db"), create=False) as client:
            shown = await client.inspect(FOLLOW)
        found: dict[str, Any] = next(t for t in shown.tasks if t["task_id"] == "report")
        return found["result"] or {}

    return asyncio.run(go())


def _prepare(root: Path) -> Path:
    case = incident("oom-payments")
    parent = root / "parent"
    parent.mkdir()
    asked = _cli(parent, ["investigate", case["question"], "--dump", case["dump"],
                          "--namespace", case["namespace"], "--run-id", PARENT,
                          "--set", "max_tool_calls=4", "--json"])  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    (parent / "audit.jsonl").unlink()
    follow = _cli(parent, ["investigate", "and what do its logs say?", "--follow-up", PARENT,
                           "--run-id", FOLLOW, "--user", "alice"])  # fmt: skip
    assert follow.returncode == 0, follow.stderr
    return parent / "runs.db"


def one(root: Path, submitted: Path, point: str | None) -> dict[str, Any]:
    tmp = root / (point or "none").replace(":", "-")
    tmp.mkdir()
    shutil.copy(submitted, tmp / "runs.db")
    t0 = time.perf_counter()
    first = _cli(tmp, ["resume", FOLLOW, "--quiet"], crash_at=point)
    killed = was_killed(first)
    if point is not None:
        assert _cli(tmp, ["resume", FOLLOW, "--quiet"]).returncode == 0
    report = _report(tmp)
    sent = _sent(tmp)
    keys = Counter(a["key"] for a in sent)
    return {"point": point or "-", "killed": killed, "digest": report.get("digest"),
            "reused": sorted(_call(r) for r in report.get("reused", [])),
            "calls": sorted(set(map(_call, sent))), "sent": len(sent),
            "keys_twice": sum(1 for n in keys.values() if n > 1),
            "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        submitted = _prepare(root)
        base = one(root, submitted, None)
        rows = [base] + [one(root, submitted, p) for p in POINTS]
    for r in rows:
        r["same_digest"] = r["digest"] == base["digest"]
        r["reused_sent"] = len(set(base["reused"]) & set(r["calls"]))
        r["same_calls"] = r["calls"] == base["calls"]
    print("| killed at | killed | digest = uninterrupted | reused calls sent | "
          "calls = uninterrupted | sends | keys sent twice | s |")
    print("|---|---|---|---|---|---|---|---|")
    keys = ("point", "killed", "same_digest", "reused_sent", "same_calls", "sent", "keys_twice",
            "seconds")  # fmt: skip
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    out = [{k: r[k] for k in keys} for r in rows]
    write_results("sre_followup_crash", {"reused": len(base["reused"]), "rows": out},
                  load=round(load[0], 1))  # fmt: skip


if __name__ == "__main__":
    main()
