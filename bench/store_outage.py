"""A PostgreSQL outage against ``--store-retry`` (docs/durability.md, "PostgreSQL down").

``python -m bench.store_outage --pg URL [--bound 60] [--long 75] [--short 30] [--task 4]``

A run (one task that works ``--task`` seconds, ``loopkernel run`` in a process of its
own) reaches the server through a TCP proxy this script controls (``bench/_pgproxy.py``;
the shared server is never stopped). Once the task works, the proxy goes down: every
connection through it is closed and new ones are refused.

* **long**: down for ``--long`` seconds, longer than ``--store-retry BOUND``: the run must
  give up about BOUND seconds after the cut, with one line on stderr and exit 8, and be
  left resumable;
* **short**: down for ``--short`` seconds, shorter than the bound: the run must ride it
  through and succeed, its task run once.

Prints a table and writes ``bench/results/store_outage.json`` (``--quick``: bound 8,
long 12, short 4, written to the temporary results directory)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._pgproxy import Proxy  # noqa: E402
from bench._results import write_results  # noqa: E402
from bench.chaos import drop_schema, fresh_schema  # noqa: E402


def _sql(url: str, query: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(query).fetchall()


def _working(url: str, proc: subprocess.Popen[str]) -> bool:
    """Until the task's row says it is running; False if the process ended first."""
    while proc.poll() is None:
        with contextlib.suppress(Exception):  # no tables yet: the run is creating them
            if _sql(url, "SELECT 1 FROM tasks WHERE task_id = 'slow' AND state = 'running'"):
                return True
        time.sleep(0.05)
    return False


def case(base: str, name: str, *, bound: float, outage: float, task: float) -> dict[str, Any]:
    """One outage of ``outage`` seconds under ``--store-retry bound``; what the run did."""
    schema = f"outage_{os.getpid()}_{name}"
    url = fresh_schema(base, schema)
    proxy = Proxy.to(url)
    starts = Path(tempfile.mkdtemp(prefix="lk-outage-")) / "starts"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "LK_TEST_SLOW_STARTS": str(starts)}
    cmd = [sys.executable, "-m", "loopkernel", "--db", proxy.url(url), "run", "lk_doorapps:slow"]
    cmd += ["--set", f"seconds={task}", "--run-id", name, "--store-retry", f"{bound:g}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if not _working(url, proc):
            raise RuntimeError(
                f"{name}: the run ended before its task worked: {proc.communicate()}"
            )
        cut = time.monotonic()
        proxy.down()
        back = None
        while proc.poll() is None:
            if back is None and time.monotonic() - cut >= outage:
                proxy.up()
                back = time.monotonic() - cut
            time.sleep(0.02)
        ended = time.monotonic() - cut
        _, err = proc.communicate()
        row = _sql(url, f"SELECT status FROM runs WHERE run_id = '{name}'")
        return {
            "case": name,
            "store_retry": bound,
            "outage": outage,
            "server_back_after": None if back is None else round(back, 2),
            "exit": proc.returncode,
            "ended_after_cut": round(ended, 2),
            "over_bound": round(ended - bound, 2),
            "status": row[0][0] if row else None,
            "task_starts": len(starts.read_text().splitlines()) if starts.exists() else 0,
            "stderr_lines": len(err.strip().splitlines()),
            "stderr": err.strip()[-400:],
        }
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.stop()
        drop_schema(base, schema)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/store_outage.py", description=__doc__.split("\n")[0])
    p.add_argument("--pg", default=os.environ.get("LOOPKERNEL_CHAOS_PG"), help="a database URL")
    p.add_argument("--bound", type=float, default=None, help="--store-retry (60)")
    p.add_argument("--long", type=float, default=None, help="the outage past the bound (75)")
    p.add_argument("--short", type=float, default=None, help="the outage within it (30)")
    p.add_argument("--task", type=float, default=4.0, help="the task's seconds (4)")
    p.add_argument("--quick", action="store_true", help="bound 8, long 12, short 4")
    args = p.parse_args(argv)
    if not args.pg:
        print("store_outage: needs --pg URL (or LOOPKERNEL_CHAOS_PG)", file=sys.stderr)
        return 2
    small = (8.0, 12.0, 4.0) if args.quick else (60.0, 75.0, 30.0)
    bound = args.bound if args.bound is not None else small[0]
    long_ = args.long if args.long is not None else small[1]
    short = args.short if args.short is not None else small[2]
    rows = [
        case(args.pg, "long", bound=bound, outage=long_, task=args.task),
        case(args.pg, "short", bound=bound, outage=short, task=args.task),
    ]
    cols = ["case", "store_retry", "outage", "exit", "ended_after_cut", "over_bound"]
    cols += ["status", "task_starts", "stderr_lines"]
    print(" ".join(f"{c:>15}" for c in cols))
    for r in rows:
        print(" ".join(f"{r[c]!s:>15}" for c in cols))
    for r in rows:
        print(f"{r['case']}: stderr: {r['stderr']}")
    long_row, short_row = rows
    ok = (
        long_row["exit"] == 8
        and long_row["stderr_lines"] <= 2  # "retrying for up to N s" once, then the end
        and "gave up" in long_row["stderr"].splitlines()[-1]
        and long_row["ended_after_cut"] < bound + args.task + 5
        and short_row["exit"] == 0
        and short_row["status"] == "succeeded"
        and short_row["task_starts"] == 1
    )
    given = list(argv if argv is not None else sys.argv[1:])
    argv_shown = " ".join("URL" if i and given[i - 1] == "--pg" else a for i, a in enumerate(given))
    payload = {"command": f"python -m bench.store_outage {argv_shown}", "rows": rows, "ok": ok}
    print(json.dumps({"ok": ok}))
    write_results("store_outage", payload, quick=args.quick, load=os.getloadavg())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
