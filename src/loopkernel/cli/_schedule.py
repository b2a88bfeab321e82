"""``loopkernel schedule add|list|show|pause|resume|update|trigger|backfill|remove``: runs
started by workers at cron due times, with an overlap policy, a catch-up window, jitter and
a time zone (docs/operations.md, "Schedules")."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import datetime
from typing import Any

from loopkernel import _schedules as sched
from loopkernel._cron import Cron, zone
from loopkernel.cli._args import setting
from loopkernel.cli._housekeeping import duration
from loopkernel.client import Client
from loopkernel.errors import UsageError
from loopkernel.graph import JSON
from loopkernel.ids import valid_id
from loopkernel.store import Schedule
from loopkernel.store._protocol import CATCHUP_WINDOW

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def _check_app(app_name: str, scenario: str | None, params: dict[str, JSON]) -> None:
    """A bad ``--set`` or ``--scenario`` is refused now, not at the first due time."""
    from loopkernel._app import load_app

    load_app(app_name).params(scenario, params)


def _first(cron: Cron, tz: str, now: float) -> float:
    first = cron.next_after(now, zone(tz))
    if first is None:
        raise UsageError(f"cron {cron.text!r} never comes due")
    return first


async def cmd_add(args: argparse.Namespace) -> int:
    if not valid_id(args.name) or "." in args.name or len(args.name) > 100:
        raise UsageError(
            f"schedule name {args.name[:40]!r}: letters, digits, _ : - (no dots), at most 100"
        )
    cron = Cron.parse(args.cron)
    params = dict(args.set or [])
    _check_app(args.app, args.scenario, params)
    tz = args.tz or "UTC"
    schedule = Schedule(
        name=args.name,
        cron=cron.text,
        app=args.app,
        params=params,
        next_due=_first(cron, tz, time.time()),
        overlap=args.overlap or "skip",
        catchup_window=(args.catchup_window if args.catchup_window is not None else CATCHUP_WINDOW),
        jitter=args.jitter or 0.0,
        tz=tz,
        scenario=args.scenario,
    )
    async with Client(args.db) as client:
        await client.store.add_schedule(schedule)
    print(f"schedule {args.name}: {_policy(schedule)}; next {_when(schedule.next_due, tz)}")
    return 0


def _policy(s: Schedule) -> str:
    text = f"{s.cron} ({s.tz}) -> {s.app}"
    if s.scenario:
        text += f" --scenario {s.scenario}"
    text += f", overlap {s.overlap}, catch-up {s.catchup_window:g} s"
    if s.jitter:
        text += f", jitter {s.jitter:g} s"
    return text


def _row(s: Schedule) -> dict[str, JSON]:
    return {
        "name": s.name,
        "cron": s.cron,
        "tz": s.tz,
        "app": s.app,
        "scenario": s.scenario,
        "params": s.params,
        "overlap": s.overlap,
        "catchup_window": s.catchup_window,
        "jitter": s.jitter,
        "paused": s.paused,
        "next_due": s.next_due,
        "last_run": s.last_run,
        "pending": list(s.pending),
        "buffer": list(s.buffer),
        "requests": [r[0] for r in s.requests],
        "counts": dict(s.counts),
    }


async def cmd_list(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        schedules = await client.store.schedules()
    if args.json:
        print(json.dumps([_row(s) for s in schedules]))
        return 0
    for s in schedules:
        state = f"next {_when(s.next_due, s.tz)}"
        if s.paused is not None:
            state = f"PAUSED ({s.paused})"
        counts = " ".join(f"{k} {v}" for k, v in sorted(s.counts.items())) or "no runs yet"
        buffered = f"  buffered {len(s.buffer)}" if s.buffer else ""
        print(f"{s.name}  {_policy(s)}  {state}  last {s.last_run or '-'}  {counts}{buffered}")
    return 0


async def cmd_show(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        found = [s for s in await client.store.schedules() if s.name == args.name]
        if not found:
            raise UsageError(f"no schedule {args.name!r}")
        events = await client.store.schedule_events(args.name)
    if args.json:
        rows = [
            {"rev": e.rev, "at": e.at, "kind": e.kind, "run_id": e.run_id, "detail": e.detail}
            for e in events
        ]
        print(json.dumps({**_row(found[0]), "events": rows}))
        return 0
    print(f"schedule {args.name}: {_policy(found[0])}")
    for e in events:
        run = f" {e.run_id}" if e.run_id else ""
        print(f"  {sched.when(e.at)}  {e.kind}{run}  {e.detail}")
    return 0


async def _edit(
    args: argparse.Namespace, edit: Callable[[Schedule], tuple[Schedule, sched.Events]]
) -> Schedule:
    async with Client(args.db, create=False) as client:
        return await sched.change(client.store, args.name, edit)


async def cmd_pause(args: argparse.Namespace) -> int:
    note = args.note or f"paused at {sched.when(time.time())}"
    await _edit(args, lambda s: sched.pause(s, note))
    print(f"schedule {args.name} paused: no due time starts a run until `schedule resume`")
    return 0


async def cmd_resume(args: argparse.Namespace) -> int:
    s = await _edit(args, lambda s: sched.resume(s, time.time()))
    print(f"schedule {args.name} resumed; next {_when(s.next_due, s.tz)}")
    return 0


def _updated(s: Schedule, args: argparse.Namespace, now: float) -> tuple[Schedule, sched.Events]:
    cron = Cron.parse(args.cron) if args.cron else Cron.parse(s.cron)
    tz = args.tz or s.tz
    params = {**s.params, **dict(args.set or [])}
    scenario = args.scenario if args.scenario is not None else s.scenario
    if args.set or args.scenario is not None:
        _check_app(s.app, scenario, params)
    changed = replace(
        s,
        cron=cron.text,
        tz=tz,
        params=params,
        scenario=scenario or None,
        overlap=args.overlap or s.overlap,
        catchup_window=(
            args.catchup_window if args.catchup_window is not None else s.catchup_window
        ),
        jitter=args.jitter if args.jitter is not None else s.jitter,
    )
    if (cron.text, tz) != (s.cron, s.tz):
        changed = replace(changed, next_due=_first(cron, tz, now))
    return changed, [("updated", None, _policy(changed))]


async def cmd_update(args: argparse.Namespace) -> int:
    s = await _edit(args, lambda s: _updated(s, args, time.time()))
    print(f"schedule {args.name}: {_policy(s)}; next {_when(s.next_due, s.tz)}")
    return 0


async def cmd_trigger(args: argparse.Namespace) -> int:
    s = await _edit(args, lambda s: sched.trigger(s, time.time(), args.overlap))
    print(
        f"schedule {args.name}: {s.requests[-1][0]} asked for; a worker starts it "
        f"(overlap {args.overlap or s.overlap})"
    )
    return 0


def _moment(text: str, tz: str) -> float:
    """A date or date-time; in the schedule's time zone unless it names one."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"not a date or date-time: {text!r} (2026-11-30T08:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(tz))
    return moment.timestamp()


async def cmd_backfill(args: argparse.Namespace) -> int:
    asked = [0]

    def edit(s: Schedule) -> tuple[Schedule, sched.Events]:
        start, end = _moment(args.start, s.tz), _moment(args.end, s.tz)
        changed, events, asked[0] = sched.backfill(s, start, end, args.overlap)
        return changed, events

    s = await _edit(args, edit)
    print(
        f"schedule {args.name}: {asked[0]} due times asked for; workers start them "
        f"(overlap {args.overlap or s.overlap}; one that ran already is not run again)"
    )
    return 0


async def cmd_remove(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        await client.store.remove_schedule(args.name)
    print(f"schedule {args.name} removed (its runs stay)")
    return 0


def _when(t: float, tz: str = "UTC") -> str:
    if t >= sched.NEVER:
        return "never"
    return datetime.fromtimestamp(t, zone(tz)).strftime("%Y-%m-%d %H:%M %Z")


def _policy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tz", help="IANA time zone the cron fields are read in (default UTC)")
    p.add_argument(
        "--overlap",
        choices=sched.OVERLAP_POLICIES,
        help="while the previous run goes on (Temporal's names; default skip)",
    )
    p.add_argument(
        "--catchup-window",
        type=duration,
        metavar="DURATION",
        help="a due time missed by more than this is counted, not run (default 365d)",
    )
    p.add_argument(
        "--jitter", type=duration, metavar="DURATION", help="start each due time up to this late"
    )
    p.add_argument("--scenario", help="the app scenario of the runs it starts")
    p.add_argument("--set", action="append", type=setting, metavar="KEY=VALUE")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``schedule`` on the ``loopkernel`` command."""
    top = subparsers.add_parser(
        "schedule", help="start runs at cron due times, by workers", description=__doc__
    )
    top.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = top.add_subparsers(
        dest="schedule_command",
        required=True,
        metavar="add|list|show|pause|resume|update|trigger|backfill|remove",
    )

    def command(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.set_defaults(func=handler)
        return p

    p = command("add", cmd_add, "add a schedule: a run of APP at each due time of --cron")
    p.add_argument("name", help="the schedule's name; its runs are NAME.<due time>")
    p.add_argument("app", help="app name or module:attribute")
    p.add_argument("--cron", required=True, help='five fields, in --tz: "*/5 * * * *"')
    _policy_options(p)
    p = command("list", cmd_list, "list the schedules, their policies and counts")
    p.add_argument("--json", action="store_true")
    p = command("show", cmd_show, "a schedule and its journal of decisions")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p = command("pause", cmd_pause, "start no run until resumed")
    p.add_argument("name")
    p.add_argument("--note", help="why (shown by list)")
    p = command("resume", cmd_resume, "resume a paused schedule (times passed are not run)")
    p.add_argument("name")
    p = command("update", cmd_update, "change the cron, time zone, policy or parameters")
    p.add_argument("name")
    p.add_argument("--cron", help="five fields, in --tz")
    _policy_options(p)
    p = command("trigger", cmd_trigger, "start a run now, through the overlap policy")
    p.add_argument("name")
    p.add_argument("--overlap", choices=sched.OVERLAP_POLICIES, help="instead of the schedule's")
    p = command("backfill", cmd_backfill, "start the runs of the due times from START to END")
    p.add_argument("name")
    p.add_argument("start", help="date or date-time, in the schedule's time zone")
    p.add_argument("end", help="date or date-time (inclusive)")
    p.add_argument("--overlap", choices=sched.OVERLAP_POLICIES, help="instead of the schedule's")
    p = command("remove", cmd_remove, "remove a schedule (its runs stay)")
    p.add_argument("name")
