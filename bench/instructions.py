"""Instructions per chain step and per fan-out task, counted by callgrind (issue 30 item 3).

    python -m bench.instructions                 # chain at NORMAL and FULL, fan-out at 64
    python -m bench.instructions --small         # fewer tasks (a smoke run)
    python -m bench.instructions --profile       # and where a chain step's instructions go

Instructions, not time: load on the machine does not change them. Each measure runs a
fresh process twice under ``valgrind --tool=callgrind`` (every thread), with ``lo`` and
``hi`` tasks, and reports ``(I(hi) - I(lo)) / (hi - lo)``, so that start-up, imports and
the store's opening cancel out. Workers do nothing; ``poll_interval`` is 10^6 s, so that
no poll driven by time enters the count. ``--profile`` splits the hi run's instructions by
the shared object they ran in (the interpreter, SQLite, the json and asyncio C modules,
libc) and, per step, by the Python functions ``cProfile`` charges them to (its own
overhead inflates the Python share; the split is what is read, not the sum).

Prints a table and writes bench/results/instructions.json (``--small``: a temp dir).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._results import write_results

GOAL_CHAIN = 310_000
"""Issue 30's goal: a third of the ~930,000 instructions a chain step took before."""


def child(shape: str, n: int, synchronous: str) -> None:
    """Run one ``shape`` run of ``n`` no-op tasks in a temp dir (under valgrind)."""
    from bench.kernel_overhead import ChainPlanner, FanOutPlanner, noop
    from loopkernel import ExecutionConfig, Kernel, SQLiteStore

    async def go() -> None:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
            store = SQLiteStore(Path(tmp) / "runs.db", synchronous=synchronous)  # type: ignore[arg-type]
            await store.open()
            planner = ChainPlanner(n) if shape == "chain" else FanOutPlanner(n)
            concurrency = 1 if shape == "chain" else 64
            kernel = Kernel(
                store,
                planner,
                {"noop": noop},
                config=ExecutionConfig(concurrency=concurrency, poll_s=1e6),
            )
            started = await kernel.start(app="bench", max_events=4 * n + 10)
            outcome = await kernel.run(started.run_id)
            assert outcome.status.value == "succeeded", outcome
            await store.close()

    asyncio.run(go())


def _env() -> dict[str, str]:
    """The children's environment: the same dict layouts in every run, and bytecode caches
    written and read (``PYTHONDONTWRITEBYTECODE`` would make each run compile the package
    again, a cost that need not be the same in two runs and so does not cancel out)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONHASHSEED": "0"}


def callgrind(shape: str, n: int, synchronous: str, out: Path) -> int:
    """Instructions of a whole process running ``child(shape, n, synchronous)``."""
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "bench.instructions",
        "--child",
        shape,
        str(n),
        synchronous,
    ]
    env = _env()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    found = re.findall(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"callgrind failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return int(found[-1])


def per_task(shape: str, lo: int, hi: int, synchronous: str, tmp: Path) -> dict[str, Any]:
    # Once without valgrind first: the bytecode caches are written, not counted.
    warm = [sys.executable, "-m", "bench.instructions", "--child", shape, str(lo), synchronous]
    subprocess.run(warm, check=True, env=_env())
    low = callgrind(shape, lo, synchronous, tmp / f"{shape}-{synchronous}-lo.out")
    high = callgrind(shape, hi, synchronous, tmp / f"{shape}-{synchronous}-hi.out")
    return {
        "shape": shape,
        "synchronous": synchronous,
        "lo": lo,
        "hi": hi,
        "instructions_lo": low,
        "instructions_hi": high,
        "per_task": round((high - low) / (hi - lo)),
    }


def by_object(out: Path) -> dict[str, int]:
    """Instructions of a callgrind output file, summed by shared object."""
    proc = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    totals: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S+:\S+ \[(.+)\]", line)
        if not m:
            continue
        obj = Path(m.group(2)).name
        name = (
            "sqlite"
            if "sqlite" in obj
            else "json (C)"
            if obj.startswith("_json")
            else "asyncio (C)"
            if obj.startswith("_asyncio")
            else "interpreter"
            if "python" in obj
            else "libc"
            if obj.startswith(("libc", "ld-"))
            else obj
        )
        totals[name] = totals.get(name, 0) + int(m.group(1).replace(",", ""))
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def python_split(n: int, synchronous: str, top: int = 25) -> list[dict[str, Any]]:
    """Share of a chain's profiled time per Python function (``cProfile``, tottime)."""
    child("chain", 20, synchronous)  # imports and first-call caches out of the profile
    prof = cProfile.Profile()
    prof.enable()
    child("chain", n, synchronous)
    prof.disable()
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]  # type: ignore[attr-defined]
    return [
        {
            "function": f"{Path(fn).name}:{line} {name}",
            "share": round(v[2] / total, 4),
            "calls_per_step": round(v[1] / n, 2),
        }
        for (fn, line, name), v in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="fewer tasks; results to a temp dir")
    parser.add_argument("--profile", action="store_true", help="where a step's instructions go")
    parser.add_argument(
        "--only", choices=("chain", "fanout"), help="one shape (chain: at NORMAL and FULL)"
    )
    parser.add_argument("--child", nargs=3, metavar=("SHAPE", "N", "SYNC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
    lo, hi = (50, 250) if args.small else (200, 1200)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape, sync in (("chain", "normal"), ("chain", "full"), ("fanout", "normal")):
            if args.only and shape != args.only:
                continue
            rows.append(per_task(shape, lo, hi, sync, Path(tmp)))
            r = rows[-1]
            print(f"{shape:7} {sync:7} {r['per_task']:>10,} instructions a task", flush=True)
        objects = by_object(Path(tmp) / "chain-normal-hi.out") if args.profile else {}
    if rows[0]["shape"] == "chain":
        chain = rows[0]["per_task"]
        met = "met" if chain <= GOAL_CHAIN else "not met"
        print(f"\nchain step at NORMAL: {chain:,} (goal <= {GOAL_CHAIN:,}: {met})")
    result: dict[str, Any] = {"rows": rows, "goal_chain": GOAL_CHAIN}
    if args.profile:
        print("\nwhere the chain's instructions go (whole process, hi run):")
        whole = sum(objects.values())
        for name, count in objects.items():
            print(f"  {name:24} {count / whole:6.1%}")
        split = python_split(hi, "normal")
        print("\nPython functions by share of profiled time (cProfile tottime):")
        for row in split:
            print(f"  {row['share']:6.1%}  {row['calls_per_step']:6} /step  {row['function']}")
        result["objects"] = objects
        result["python"] = split
    write_results("instructions", result, quick=args.small)


if __name__ == "__main__":
    main()
