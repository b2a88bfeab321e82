"""``loopkernel schedule add|list|remove``: runs started by workers at cron due times
(docs/operations.md, "Schedules")."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

from loopkernel._cron import Cron
from loopkernel.cli._args import setting
from loopkernel.client import Client
from loopkernel.errors import UsageError
from loopkernel.ids import valid_id
from loopkernel.store import Schedule

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


async def cmd_add(args: argparse.Namespace) -> int:
    from loopkernel._app import load_app

    if not valid_id(args.name) or "." in args.name or len(args.name) > 100:
        raise UsageError(
            f"schedule name {args.name[:40]!r}: letters, digits, _ : - (no dots), at most 100"
        )
    cron = Cron.parse(args.cron)
    params = dict(args.set or [])
    app = load_app(args.app)
    app.params(None, params)  # a bad --set is refused now, not at the first due time
    first = cron.next_after(time.time())
    if first is None:
        raise UsageError(f"cron {cron.text!r} never comes due")
    schedule = Schedule(name=args.name, cron=cron.text, app=args.app, params=params, next_due=first)
    async with Client(args.db) as client:
        await client.store.add_schedule(schedule)
    print(f"schedule {args.name}: {cron.text} -> {args.app}; next {_when(first)}")
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        schedules = await client.store.schedules()
    if args.json:
        rows = [
            {
                "name": s.name,
                "cron": s.cron,
                "app": s.app,
                "params": s.params,
                "next_due": s.next_due,
                "last_run": s.last_run,
            }
            for s in schedules
        ]
        print(json.dumps(rows))
        return 0
    for s in schedules:
        print(f"{s.name}  {s.cron}  {s.app}  next {_when(s.next_due)}  last {s.last_run or '-'}")
    return 0


async def cmd_remove(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        await client.store.remove_schedule(args.name)
    print(f"schedule {args.name} removed (its runs stay)")
    return 0


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``schedule`` on the ``loopkernel`` command."""
    top = subparsers.add_parser(
        "schedule", help="start runs at cron due times, by workers", description=__doc__
    )
    top.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = top.add_subparsers(dest="schedule_command", required=True, metavar="add|list|remove")

    def command(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.set_defaults(func=handler)
        return p

    p = command("add", cmd_add, "add a schedule: a run of APP at each due time of --cron")
    p.add_argument("name", help="the schedule's name; its runs are NAME.<due time>")
    p.add_argument("app", help="app name or module:attribute")
    p.add_argument("--cron", required=True, help='five fields, UTC: "*/5 * * * *"')
    p.add_argument("--set", action="append", type=setting, metavar="KEY=VALUE")
    p = command("list", cmd_list, "list the schedules")
    p.add_argument("--json", action="store_true")
    p = command("remove", cmd_remove, "remove a schedule (its runs stay)")
    p.add_argument("name")
