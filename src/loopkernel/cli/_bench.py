"""``loopkernel bench scoreboard``: the side-by-side scoreboard (``bench/scoreboard.py``).

The benchmark lives in the source checkout's ``bench/`` (it is not in the wheel) and needs
the ``bench`` extra: ``pip install -e '.[bench]'``. Exit 2 when either is missing.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register ``bench scoreboard`` on the ``loopkernel`` command."""
    bench = subparsers.add_parser(
        "bench",
        help="benchmarks (from a source checkout)",
        description="Benchmarks that run from a source checkout of LoopKernel.",
    )
    sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    p = sub.add_parser(
        "scoreboard",
        help="looplab on LoopKernel, by hand and on LangGraph, side by side",
        description="Run the looplab loop on LoopKernel, as a hand-rolled loop and on "
        "LangGraph; print the markdown scoreboard and write bench/results/. Takes minutes.",
    )
    p.add_argument("--quick", action="store_true", help="3 repetitions, no virtualenvs")
    p.add_argument("--keep", action="store_true", help="keep the working directories")
    p.add_argument("--out", help="where results are written (default bench/results)")
    p.set_defaults(func=_scoreboard)


def _checkout() -> Path | None:
    """The source checkout that holds ``bench/scoreboard.py``: the cwd or above, or the one
    an editable install points at."""
    import loopkernel

    candidates = [Path.cwd(), *Path.cwd().parents, Path(loopkernel.__file__).parents[2]]
    for root in candidates:
        if (root / "bench" / "scoreboard.py").is_file():
            return root
    return None


def _scoreboard(args: argparse.Namespace) -> int:
    root = _checkout()
    if root is None:
        print(
            "loopkernel: the scoreboard runs from a source checkout (bench/ is not installed); "
            "cd into one and pip install -e '.[bench]'",
            file=sys.stderr,
        )
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    # imported by name: bench/ is not part of the package (nor of its type check)
    main = importlib.import_module("bench.scoreboard").main
    argv = ["--quick"] if args.quick else []
    if args.keep:
        argv.append("--keep")
    if args.out:
        argv += ["--out", args.out]
    return int(main(argv))
