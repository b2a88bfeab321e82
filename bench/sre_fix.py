"""Approved fixes under chaos: each fix killed at one boundary, resumed, applied once, and
ending with the digest of the same fix never interrupted.

    python -m bench.sre_fix [--fixes N] [--tool T ...]  # N fixes per boundary (default 2)

For each tool swept (``set_image`` on a deployment, ``delete_pod`` on a pod: a pod holds no
key once deleted, so its re-send is answered by the state it asks for), first one
uninterrupted fix, for its digest. Then for each
crash point a fix passes (``tool_sent``: the call journaled as intended, not sent;
``tool_returned``: sent and answered, the answer not journaled; ``task_returned``,
``event_committed``: the answer journaled, the re-check not run; ``patch_committed``), ``N``
fixes: started and parked (nothing sent), approved, resumed in a new process with
``LOOPKERNEL_CRASH_AT`` set (a real SIGKILL at the point), then resumed in another process
until they end -- re-approved only if a run parks again (none should). Every fix is the same
run (same run id, same parameters, one API server URL reset in between) in a database of
its own, so its digest must equal the uninterrupted one. The local Kubernetes API server
(``tests/lk_kubeapi.py``, real HTTP, the official client) counts the writes: exactly one
each. Prints a table, writes bench/results/sre_fix.json. The test suite runs two of these
points (``tests/sre/test_fix.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the fake API server is a test helper

from bench._results import write_results  # noqa: E402
from lk_kubeapi import KubeAPI, deployment, pod  # noqa: E402
from loopkernel.client import Client  # noqa: E402
from loopkernel.testing import run_cli  # noqa: E402

POINTS = ["tool_sent", "tool_returned", "task_returned", "event_committed", "patch_committed"]
APP = "loopkernel_apps.sre.fix._app:app"
PLANS: dict[str, dict[str, Any]] = {
    "set_image": {"tool": "set_image",
                  "args": {"deployment": "svc", "container": "app", "image": "v2"}},
    "delete_pod": {"tool": "delete_pod", "args": {"pod": "svc-1-abcde"}},
}  # fmt: skip
RUN = "fix-1"


async def _park(db: Path, api: KubeAPI, plan: dict[str, Any]) -> str:
    async with Client(str(db)) as client:
        params = {"plan": plan, "namespace": "prod", "api": api.url}
        await client.start(APP, overrides=params, run_id=RUN)
        return (await client.execute(RUN)).status.value


async def _shown(db: Path) -> tuple[str, bool]:
    async with Client(str(db)) as client:
        shown = await client.inspect(RUN)
        checked: Any = next((t for t in shown.tasks if t["task_id"] == "recheck"), {})
        return shown.digest, bool((checked.get("result") or {}).get("took"))


def one_fix(db: Path, api: KubeAPI, crash_at: str | None, tool: str) -> dict[str, Any]:
    api.reset(deployment("prod", "svc", "v1"), pod("prod", "svc-1-abcde"))
    assert asyncio.run(_park(db, api, PLANS[tool])) == "waiting" and api.writes == []
    approvals = 1
    run_cli(["approve", RUN, "apply"], db=db)
    killed = run_cli(["resume", RUN], db=db, crash_at=crash_at).returncode == -9
    for _ in range(4 if crash_at else 0):
        out = run_cli(["resume", RUN], db=db)
        if "waiting" not in out.stdout + out.stderr:
            break
        run_cli(["approve", RUN, "apply"], db=db)
        approvals += 1
    digest, took = asyncio.run(_shown(db))
    return {"killed": killed, "writes": len(api.writes), "approvals": approvals,
            "took": took, "digest": digest}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixes", type=int, default=2, help="fixes per crash point (2)")
    p.add_argument("--tool", action="append", choices=sorted(PLANS),
                   help="the write swept (repeatable; default: every one)")  # fmt: skip
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, KubeAPI() as api:
        for tool in args.tool or list(PLANS):
            rows.extend(_sweep(Path(tmp) / tool, api, tool, args.fixes))
    print("| tool | killed at | fixes | killed | applied exactly once | took "
          "| digest = uninterrupted | approvals | s |\n" + "|---" * 9 + "|")  # fmt: skip
    keys = ("tool", "crash_at", "fixes", "killed", "exactly_once", "took", "same_digest",
            "approvals", "seconds")  # fmt: skip
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    write_results("sre_fix", {"fixes_per_point": args.fixes, "rows": rows},
                  load=round(load[0], 1))  # fmt: skip


def _sweep(tmp: Path, api: KubeAPI, tool: str, fixes: int) -> list[dict[str, Any]]:
    """The rows of one tool: its uninterrupted fix, then ``fixes`` per crash point."""
    tmp.mkdir()
    t0 = time.perf_counter()
    base = one_fix(tmp / "base.db", api, None, tool)
    assert base["writes"] == 1 and base["took"], base
    rows = [{"tool": tool, "crash_at": "-", "fixes": 1, "killed": 0, "exactly_once": 1,
             "took": 1, "same_digest": 1, "approvals": 1,
             "seconds": round(time.perf_counter() - t0, 1)}]  # fmt: skip
    for point in POINTS:
        t0 = time.perf_counter()
        got = [one_fix(tmp / f"{point}-{i}.db", api, point, tool) for i in range(fixes)]
        rows.append({
            "tool": tool, "crash_at": point, "fixes": len(got),
            "killed": sum(g["killed"] for g in got),
            "exactly_once": sum(g["writes"] == 1 for g in got),
            "took": sum(g["took"] for g in got),
            "same_digest": sum(g["digest"] == base["digest"] for g in got),
            "approvals": sum(g["approvals"] for g in got),
            "seconds": round(time.perf_counter() - t0, 1),
        })  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
