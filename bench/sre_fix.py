"""Approved fixes under chaos: each fix killed at one boundary, resumed, applied once, and
ending with the digest of the same fix never interrupted.

    python -m bench.sre_fix [--fixes N]    # N fixes per boundary (default 2)

First one uninterrupted fix (``set_image`` on a deployment), for its digest. Then for each
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
from lk_kubeapi import KubeAPI, deployment  # noqa: E402
from loopkernel.client import Client  # noqa: E402
from loopkernel.testing import run_cli  # noqa: E402

POINTS = ["tool_sent", "tool_returned", "task_returned", "event_committed", "patch_committed"]
APP = "loopkernel_apps.sre.fix._app:app"
PLAN = {"tool": "set_image", "args": {"deployment": "svc", "container": "app", "image": "v2"}}
RUN = "fix-1"


async def _park(db: Path, api: KubeAPI) -> str:
    async with Client(str(db)) as client:
        params = {"plan": PLAN, "namespace": "prod", "api": api.url}
        await client.start(APP, overrides=params, run_id=RUN)
        return (await client.execute(RUN)).status.value


async def _shown(db: Path) -> tuple[str, bool]:
    async with Client(str(db)) as client:
        shown = await client.inspect(RUN)
        checked: Any = next((t for t in shown.tasks if t["task_id"] == "recheck"), {})
        return shown.digest, bool((checked.get("result") or {}).get("took"))


def one_fix(db: Path, api: KubeAPI, crash_at: str | None) -> dict[str, Any]:
    api.reset(deployment("prod", "svc", "v1"))
    assert asyncio.run(_park(db, api)) == "waiting" and api.writes == []
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
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, KubeAPI() as api:
        t0 = time.perf_counter()
        base = one_fix(Path(tmp) / "base.db", api, None)
        assert base["writes"] == 1 and base["took"], base
        rows.append({"crash_at": "-", "fixes": 1, "killed": 0, "exactly_once": 1, "took": 1,
                     "same_digest": 1, "approvals": 1,
                     "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip
        for point in POINTS:
            t0 = time.perf_counter()
            got = [one_fix(Path(tmp) / f"{point}-{i}.db", api, point) for i in range(args.fixes)]
            rows.append({
                "crash_at": point, "fixes": len(got),
                "killed": sum(g["killed"] for g in got),
                "exactly_once": sum(g["writes"] == 1 for g in got),
                "took": sum(g["took"] for g in got),
                "same_digest": sum(g["digest"] == base["digest"] for g in got),
                "approvals": sum(g["approvals"] for g in got),
                "seconds": round(time.perf_counter() - t0, 1),
            })  # fmt: skip
    print("| killed at | fixes | killed | applied exactly once | took | digest = uninterrupted "
          "| approvals | s |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    keys = ("crash_at", "fixes", "killed", "exactly_once", "took", "same_digest", "approvals",
            "seconds")  # fmt: skip
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    write_results("sre_fix", {"fixes_per_point": args.fixes, "rows": rows},
                  load=round(load[0], 1))  # fmt: skip


if __name__ == "__main__":
    main()
