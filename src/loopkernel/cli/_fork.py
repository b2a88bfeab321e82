"""``loopkernel fork RUN --at SEQ``: a new run from a prefix of another's journal.

::

    loopkernel inspect RUN --journal              # find the event to go back to
    loopkernel fork RUN --at 7 --run-id try-2     # a new run: RUN's journal up to #7
    loopkernel reject try-2 publish               # decide differently this time
    loopkernel resume try-2

The fork is a new run, not a replay: it has its own approval token and its own
idempotency keys, so the tool calls of work that had not finished by SEQ are sent again
(and irreversible ones ask for approval again). See docs/fork.md.
"""

from __future__ import annotations

import argparse
import json

from loopkernel.cli._args import count, run_id
from loopkernel.cli._door import db_flag, prog
from loopkernel.cli._exit import Handler
from loopkernel.client import Client
from loopkernel.graph import TERMINAL_RUN

__all__ = ["add_parser"]


async def cmd_fork(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        started = await client.fork(args.run, at=args.at, new_run_id=args.run_id)
        info = await client.info(started.run_id)
        if args.json:
            out = {
                "run_id": started.run_id,
                "token": started.token,
                "forked_from": {"run_id": args.run, "seq": args.at},
                "status": info.status.value,
            }
            print(json.dumps(out, indent=2))
            return 0
        print(f"run {started.run_id} forked from {args.run} at event #{args.at}: {info.status}")
        print(f"approval token (shown once): {started.token}")
        if info.status not in TERMINAL_RUN:
            print(f"next: {prog()}{db_flag(args)} resume {started.run_id}")
        return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``fork`` on the ``loopkernel`` command."""

    def command(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help, description=help)
        p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.set_defaults(func=handler)
        return p

    p = command(
        "fork",
        cmd_fork,
        "start a new run from another's journal up to and including event SEQ "
        "(docs/fork.md); resume it like any run",
    )
    p.add_argument("run", type=run_id, help="the run to fork")
    p.add_argument("--at", type=count, required=True, metavar="SEQ", help="the last event kept")
    p.add_argument("--run-id", type=run_id, help="the new run's id (default: a random one)")
    p.add_argument("--json", action="store_true", help="print run id, token and origin as JSON")
