"""Run housekeeping: ``delete``, ``prune``, retention for ``worker`` / ``serve``, and
``completion`` (docs/operations.md).

::

    loopkernel delete RUN [RUN ...]                    # every row of each run, at once
    loopkernel prune --older-than 30d [--status failed]... [--dry-run] [--vacuum]
    loopkernel worker --retention 30d                  # prunes finished runs every hour
    source <(loopkernel completion bash)

A run an executor holds (a live lease) is never deleted: ``delete`` exits 7 naming the
holder, ``prune`` keeps it and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime

from loopkernel.cli._args import run_id
from loopkernel.cli._complete import bash_completion
from loopkernel.cli._exit import HELD, USAGE, Handler
from loopkernel.client import PRUNED_BY_DEFAULT, Client, Pruned
from loopkernel.errors import RunHeld, RunNotFound, StoreUnavailable
from loopkernel.graph import RunStatus

__all__ = ["add_parser", "age", "duration", "moment", "retain_forever"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
RETENTION_EVERY = 3600.0
"""Seconds between two prunings of a ``--retention`` setting (the first is at start)."""


def duration(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or a plain number of seconds) in seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (a number and a unit: 45s, 90m, 12h, 30d, 2w)"
        )
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def moment(text: str) -> float:
    """A point in time, seconds since the epoch: a date or date-time (``2026-11-30``,
    ``2026-11-30T08:00``, local time unless it names its zone), or a duration back from
    now (``7d``)."""
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        pass
    try:
        return time.time() - duration(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"not a date or a duration: {text!r} (2026-11-30, 2026-11-30T08:00, 7d, 12h)"
        ) from None


def age(seconds: float) -> str:
    """``45s``, ``12m``, ``5h``, ``3d``: the largest unit that fits, rounded down."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


async def cmd_delete(args: argparse.Namespace) -> int:
    code = 0
    async with Client(args.db, create=False) as client:
        for run in args.runs:
            try:
                await client.delete(run)
            except RunNotFound as exc:
                print(f"loopkernel: {exc}", file=sys.stderr)
                code = code or USAGE
            except RunHeld as exc:
                print(f"loopkernel: {exc}", file=sys.stderr)
                code = code or HELD
            else:
                print(f"deleted run {run}")
    return code


def _statuses(args: argparse.Namespace) -> frozenset[RunStatus]:
    return frozenset(RunStatus(s) for s in args.status) if args.status else PRUNED_BY_DEFAULT


def _report(pruned: Pruned, out: Callable[[str], None]) -> None:
    verb = "would delete" if pruned.dry_run else "deleted"
    for run in pruned.deleted:
        out(f"{verb} run {run}")
    for run in pruned.held:
        out(f"kept run {run}: an executor holds it")
    kept = f", kept {len(pruned.held)} held by an executor" if pruned.held else ""
    out(f"{verb} {len(pruned.deleted)} run(s){kept}")
    if pruned.reclaimed is not None:
        r = pruned.reclaimed
        out(f"space: {r.before:,} -> {r.after:,} bytes ({r.before - r.after:,} returned; {r.how})")


async def cmd_prune(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        pruned = await client.prune(
            args.older_than, statuses=_statuses(args), dry_run=args.dry_run, vacuum=args.vacuum
        )
    _report(pruned, print)
    return 0


async def retain_forever(
    client: Client, retention: float, *, every: float = RETENTION_EVERY
) -> None:
    """Prune the finished runs older than ``retention`` now and every ``every`` seconds,
    until cancelled; each pruning that deletes something says so in one line on stderr."""
    while True:
        try:
            pruned = await client.prune(retention)
        except StoreUnavailable as exc:  # a fault that passes: the next round tries again
            print(f"loopkernel: retention skipped: {exc}", file=sys.stderr, flush=True)
            await asyncio.sleep(every)
            continue
        if pruned.deleted or pruned.held:
            print(
                f"loopkernel: retention {age(retention)}: {len(pruned.deleted)} run(s) deleted"
                + (f", {len(pruned.held)} held kept" if pruned.held else "")
                + _returned(pruned),
                file=sys.stderr,
                flush=True,
            )
        await asyncio.sleep(every)


def _returned(pruned: Pruned) -> str:
    r = pruned.reclaimed
    return "" if r is None else f", {max(0, r.before - r.after):,} bytes returned"


def add_retention_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--retention",
        type=duration,
        default=None,
        metavar="AGE",
        help="delete finished runs whose last change is older than AGE (30d, 12h), at start "
        "and every hour (default: keep every run)",
    )


def cmd_completion(args: argparse.Namespace) -> int:
    print(bash_completion(args.build_parser()), end="")  # the whole parser, apps' commands too
    return 0


def _command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Handler | Callable[[argparse.Namespace], int],
    help: str,
) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help=help, description=help)
    p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.set_defaults(func=handler)
    return p


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``delete``, ``prune`` and ``completion`` on the ``loopkernel`` command."""
    p = _command(
        subparsers,
        "delete",
        cmd_delete,
        "delete runs: every row of each (journal, tasks, effects, evidence) in one "
        "transaction; a run an executor holds is refused (exit 7)",
    )
    p.add_argument("runs", nargs="+", type=run_id, metavar="RUN")

    p = _command(
        subparsers,
        "prune",
        cmd_prune,
        "delete the runs whose last change is older than AGE (finished runs unless "
        "--status says otherwise)",
    )
    p.add_argument(
        "--older-than", type=duration, required=True, metavar="AGE", help="30d, 12h, 90m, 2w"
    )
    p.add_argument(
        "--status",
        action="append",
        choices=[s.value for s in RunStatus],
        help="only runs in this status; repeatable (default: succeeded, failed, escalated, "
        "cancelled)",
    )
    p.add_argument("--dry-run", action="store_true", help="delete nothing; list what would go")
    p.add_argument(
        "--vacuum",
        action="store_true",
        help="SQLite: rewrite a file made before space was given back at once (one VACUUM; "
        "writers wait for it), so that every later prune returns its space",
    )

    p = _command(subparsers, "completion", cmd_completion, "print a shell completion script (bash)")
    p.add_argument("shell", choices=["bash"], help="the shell")
