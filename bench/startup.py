"""Whole-process start-up, side by side: the looplab baseline from process start to exit,
on LoopKernel, by hand and on LangGraph, for two source trees in one run (before / after).

    python -m bench.startup                                   # this tree only
    python -m bench.startup --before /tmp/base                # a tree at another commit
    python -m bench.startup --before /tmp/base --reps 9

``--before`` names a checkout of another commit (``git archive BASE | tar -x -C DIR``).
Both trees run with this interpreter; a tree's ``src`` and root go first on
``PYTHONPATH``, so the CLI and the loops load that tree's code. The tool server is
spawned with the SDK's small environment (no ``PYTHONPATH``), so it is the installed
(this) tree's server for both: what is compared is the client side.

Every round runs each (tree, implementation) once, in a rotating order, after one
warm-up round; the table gives medians and ratios, since the machine is noisy. Prints a
markdown table and writes ``bench/results/startup.json`` (``--quick``: 3 rounds, to a
temp dir).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._results import write_results

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
IMPLS = ("loopkernel", "handrolled", "langgraph")
TITLES = {"loopkernel": "LoopKernel", "handrolled": "hand-rolled", "langgraph": "LangGraph"}


def command(impl: str, work: Path) -> list[str]:
    """The baseline scenario's start command, as the scoreboard runs it."""
    if impl == "loopkernel":
        db = str(work / "runs.db")
        return [PY, "-m", "loopkernel", "--db", db, "run", "looplab", "--scenario", "baseline",
                "--run-id", "lab", "--quiet"]  # fmt: skip
    module, flag, state = {
        "handrolled": ("bench.handrolled", "--state", "state.json"),
        "langgraph": ("bench.langgraph_loop", "--db", "checkpoints.db"),
    }[impl]
    return [PY, "-m", module, flag, str(work / state), "--run", "lab", "--scenario", "baseline"]


def env_for(tree: Path, work: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LOOPKERNEL_CRASH_AT", "LOOPLAB_CRASH_AFTER_CALL", "LOOPKERNEL_DB")
    }
    env["LOOPLAB_DIR"] = str(work / "lab")
    env["PYTHONPATH"] = os.pathsep.join([str(tree / "src"), str(tree)])
    return env


def once(tree: Path, impl: str, work: Path) -> float:
    work.mkdir(parents=True)
    t0 = time.perf_counter()
    out = subprocess.run(
        command(impl, work), env=env_for(tree, work), cwd=work, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    elapsed = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{impl} in {tree} failed ({out.returncode}): {out.stderr[-800:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--before", type=Path, help="a source tree at the commit to compare")
    parser.add_argument("--reps", type=int, default=7, help="measured rounds (default 7)")
    parser.add_argument("--quick", action="store_true", help="3 rounds; results to a temp dir")
    args = parser.parse_args(argv)
    if args.before is not None and not (args.before / "bench" / "handrolled").is_dir():
        parser.error(
            f"--before {args.before}: not a source tree of this project (no bench/handrolled)"
        )
    if args.quick:
        args.reps = 3
    trees = {"after": ROOT} | ({} if args.before is None else {"before": args.before.resolve()})
    if args.before is not None:
        trees = {"before": trees["before"], "after": ROOT}
    cases = [(name, impl) for name in trees for impl in IMPLS]
    times: dict[str, list[float]] = {f"{n}/{i}": [] for n, i in cases}
    with tempfile.TemporaryDirectory(prefix="lk-startup-") as tmp:
        for rep in range(args.reps + 1):
            shift = rep % len(cases)
            for name, impl in cases[shift:] + cases[:shift]:
                t = once(trees[name], impl, Path(tmp) / f"{rep}-{name}-{impl}")
                if rep:
                    times[f"{name}/{impl}"].append(t)
            print(f"[{time.strftime('%H:%M:%S')}] round {rep}/{args.reps}", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = [
        f"Whole process, looplab baseline, median of {args.reps} (s; range; ratio to the "
        "hand-rolled loop of the same tree)",
        "",
        "| tree | " + " | ".join(TITLES[i] for i in IMPLS) + " |",
        "|---|" + "---:|" * len(IMPLS),
    ]
    for name in trees:
        hand = med[f"{name}/handrolled"]
        cells = [
            f"{med[f'{name}/{i}']:.2f} ({min(times[f'{name}/{i}']):.2f}-"
            f"{max(times[f'{name}/{i}']):.2f}; {med[f'{name}/{i}'] / hand:.2f}x)"
            for i in IMPLS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    # Ratios of runs in the same round (seconds apart) first: the load of a shared machine
    # drifts between rounds more than within one.
    pairs = [(f"{n}/loopkernel", f"{n}/handrolled") for n in trees]
    pairs += [(f"{n}/loopkernel", f"{n}/langgraph") for n in trees]
    if "before" in trees:
        pairs += [(f"after/{i}", f"before/{i}") for i in IMPLS]
        pairs += [
            ("after/loopkernel", "before/handrolled"),
            ("after/loopkernel", "before/langgraph"),
        ]
    ratios: dict[str, float] = {}
    lines += ["", "| ratio | median of per-round ratios | ratio of medians |", "|---|---:|---:|"]
    for a, b in pairs:
        per_round = statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))
        ratios[f"{a} / {b}"] = per_round
        lines.append(f"| {a} / {b} | {per_round:.2f}x | {med[a] / med[b]:.2f}x |")
    table = "\n".join(lines)
    print(table)
    data: dict[str, Any] = {
        "trees": {k: str(v) for k, v in trees.items()},
        "reps": args.reps,
        "seconds": times,
        "median": med,
        "ratios": ratios,
        "table": table,
    }
    write_results("startup", data, quick=args.quick, load_average=os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
