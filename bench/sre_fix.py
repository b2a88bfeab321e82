"""Approved fixes under chaos: each fix killed at one boundary, resumed, applied once.

    python -m bench.sre_fix [--fixes N]    # N fixes per boundary (default 2)

For each crash point a fix passes (``tool_sent``, ``tool_returned``, ``task_returned``,
``event_committed``, ``patch_committed``, and none), ``N`` fix runs (``set_image`` on a
deployment of their own) are started, parked, approved, resumed with ``LOOPKERNEL_CRASH_AT``
set (a SIGKILL at the point), then resumed in new processes -- re-approved when the write
was sent and its answer lost -- until they end. The local Kubernetes API server
(``tests/lk_kubeapi.py``, real HTTP, the official client) counts the writes: each fix must
be applied exactly once and its verdict say it took. Prints a table, writes
bench/results/sre_fix.json.
"""

from __future__ import annotations

import argparse
import json
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
from loopkernel.testing import run_cli  # noqa: E402

POINTS = [None, "tool_sent", "tool_returned", "task_returned", "event_committed",
          "patch_committed"]  # fmt: skip
APP = "loopkernel_apps.sre.fix._app:app"


def one_fix(db: Path, api: KubeAPI, run_id: str, name: str, crash_at: str | None) -> dict[str, Any]:
    plan = {"tool": "set_image", "args": {"deployment": name, "container": "app", "image": "v2"}}
    args = ["run", APP, "--run-id", run_id, "--set", f"plan={json.dumps(plan)}"]
    args += ["--set", "namespace=prod", "--set", f"api={api.url}"]
    run_cli(args, db=db)
    approvals, resumes = 1, 1
    run_cli(["approve", run_id, "apply"], db=db)
    killed = run_cli(["resume", run_id], db=db, crash_at=crash_at).returncode == -9
    for _ in range(4):
        out = run_cli(["resume", run_id], db=db)
        resumes += 1
        if "waiting" not in out.stdout + out.stderr:
            break
        run_cli(["approve", run_id, "apply"], db=db)
        approvals += 1
    shown = run_cli(["inspect", run_id, "--json"], db=db).stdout
    writes = sum(1 for w in api.writes if w[2] == name)
    return {"killed": killed, "writes": writes, "approvals": approvals, "resumes": resumes,
            "took": '"took": true' in shown}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixes", type=int, default=2, help="fixes per crash point (2)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, KubeAPI() as api:
        db = Path(tmp) / "runs.db"
        for point in POINTS:
            t0 = time.perf_counter()
            got = []
            for i in range(args.fixes):
                name = f"svc-{point or 'none'}-{i}".replace("_", "-")
                api.add(deployment("prod", name, "v1"))
                got.append(one_fix(db, api, f"fix-{name}", name, point))
            rows.append({
                "crash_at": point or "-", "fixes": len(got),
                "killed": sum(g["killed"] for g in got),
                "exactly_once": sum(g["writes"] == 1 for g in got),
                "took": sum(g["took"] for g in got),
                "approvals": sum(g["approvals"] for g in got),
                "seconds": round(time.perf_counter() - t0, 1),
            })  # fmt: skip
    print(f"{'crash at':<16} {'fixes':>5} {'killed':>6} {'once':>5} {'took':>5} {'approvals':>9}")
    for r in rows:
        print(f"{r['crash_at']:<16} {r['fixes']:>5} {r['killed']:>6} {r['exactly_once']:>5} "
              f"{r['took']:>5} {r['approvals']:>9}   {r['seconds']} s")  # fmt: skip
    write_results("sre_fix", {"fixes_per_point": args.fixes, "rows": rows},
                  load=os.getloadavg()[0])  # fmt: skip


if __name__ == "__main__":
    main()
