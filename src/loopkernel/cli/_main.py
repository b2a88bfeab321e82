"""``loopkernel``: each command parses its arguments, makes one client call, renders.

Exit codes (also in ``docs/cli.md``):

====  ==========================================
0     the run succeeded (or the command did its job)
1     the run failed
2     usage error: bad arguments, unknown run, refused approval
3     the run is waiting for a human
4     the run escalated (a tripwire fired)
5     the run was cancelled
6     the run is still running (e.g. cancel was requested of a live executor)
====  ==========================================
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from loopkernel.cli._args import count, json_value, setting
from loopkernel.cli._render import Progress, render_inspection
from loopkernel.client import Client
from loopkernel.errors import LoopKernelError, UsageError
from loopkernel.executor import DEFAULT_MAX_EVENTS, RunOutcome, StartedRun
from loopkernel.graph import RunStatus

__all__ = ["EXIT_CODES", "main"]

EXIT_CODES: dict[RunStatus, int] = {
    RunStatus.SUCCEEDED: 0,
    RunStatus.FAILED: 1,
    RunStatus.WAITING: 3,
    RunStatus.ESCALATED: 4,
    RunStatus.CANCELLED: 5,
    RunStatus.RUNNING: 6,
}
USAGE = 2

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


async def _finish(client: Client, outcome: RunOutcome, args: argparse.Namespace) -> int:
    if getattr(args, "json", False):
        print(
            json.dumps(
                {
                    "run_id": outcome.run_id,
                    "status": outcome.status.value,
                    "verdict": outcome.verdict,
                },
                indent=2,
            )
        )
    else:
        print(f"run {outcome.run_id}: {outcome.status.value}")
        if outcome.verdict is not None:
            print(f"verdict: {json.dumps(outcome.verdict)}")
        if outcome.status is RunStatus.WAITING:
            print("waiting for a human:")
            for task in await client.waiting(outcome.run_id):
                print(f"  {task.task_id}: {task.wait_reason}")
                print(
                    f"    loopkernel approve {outcome.run_id} {task.task_id} "
                    "[--payload JSON]   (or reject)"
                )
            print(f"  then: loopkernel resume {outcome.run_id}")
    return EXIT_CODES[outcome.status]


async def start_run(client: Client, args: argparse.Namespace) -> StartedRun:
    """Start the run that ``add_app_arguments`` describes."""
    _, started = await client.start(
        args.app,
        scenario=args.scenario,
        overrides=dict(args.set or [])
        | ({"planner": args.planner} if getattr(args, "planner", None) else {}),
        run_id=args.run_id,
        max_events=args.max_events,
    )
    return started


async def cmd_run(args: argparse.Namespace) -> int:
    async with Client(args.db) as client:
        started = await start_run(client, args)
        if not args.json:
            print(
                f"run {started.run_id} started ({args.app}"
                f"{', scenario ' + args.scenario if args.scenario else ''}) in {client.store.url}"
            )
            print(f"approval token (shown once): {started.token}")
        progress = None if args.quiet or args.json else Progress(sys.stdout)
        outcome = await client.execute(
            started.run_id, observer=progress, max_concurrency=args.concurrency
        )
        return await _finish(client, outcome, args)


async def cmd_demo(args: argparse.Namespace) -> int:
    args.app, args.scenario, args.set, args.run_id = "speculation", "demo", [], None
    args.max_events, args.quiet, args.json, args.concurrency = DEFAULT_MAX_EVENTS, False, False, 16
    print(
        "LoopKernel demo: three researchers race; at a quorum of two the straggler is "
        "cancelled in flight\nand a distiller that sees only its ancestors writes the answer.\n"
    )
    return await cmd_run(args)


async def cmd_resume(args: argparse.Namespace) -> int:
    async with Client(args.db) as client:
        progress = None if args.quiet or args.json else Progress(sys.stdout)
        outcome = await client.execute(
            args.run, observer=progress, max_concurrency=args.concurrency
        )
        return await _finish(client, outcome, args)


async def cmd_decide(args: argparse.Namespace) -> int:
    async with Client(args.db) as client:
        event = await client.decide(
            args.run,
            args.task,
            args.decision,
            payload=args.payload,
            token=args.token,
            local=args.token is None,
        )
        print(
            f"{args.decision} journaled for task {args.task} of run {args.run} "
            f"(event #{event.seq}); a live executor or a worker picks it up, "
            f"else: loopkernel resume {args.run}"
        )
        return 0


async def cmd_cancel(args: argparse.Namespace) -> int:
    async with Client(args.db) as client:
        status = await client.cancel(args.run, args.reason)
        if status is RunStatus.RUNNING:
            print(f"cancel requested for run {args.run}; its executor stops it at its next poll")
        else:
            print(f"run {args.run}: {status.value}")
        return EXIT_CODES[status]


async def cmd_inspect(args: argparse.Namespace) -> int:
    async with Client(args.db) as client:
        inspection = await client.inspect(args.run, journal=args.journal or args.json, at=args.at)
        if args.json:
            print(json.dumps(inspection.to_json(), indent=2, sort_keys=True))
        else:
            render_inspection(inspection, sys.stdout, journal=args.journal)
        return EXIT_CODES[inspection.info.status]


async def cmd_runs(args: argparse.Namespace) -> int:
    async with Client(args.db) as client:
        for info in await client.store.list_runs(args.limit):
            counts = " ".join(f"{k}={v}" for k, v in sorted(info.task_counts.items()))
            print(
                f"{info.run_id}  {info.app:<12} {info.status.value:<10} events={info.last_seq} "
                f"{counts}"
            )
        return 0


async def cmd_export(args: argparse.Namespace) -> int:
    async with Client(args.db) as client:
        await client.export(args.run, args.to)
        print(f"run {args.run} exported to {args.to}")
        return 0


def add_app_arguments(p: argparse.ArgumentParser) -> None:
    """What names a new run: the app, its scenario and parameters, the id, the guard."""
    p.add_argument("app", help="app name (speculation, ...) or module:attribute")
    p.add_argument("--scenario", help="a named scenario of the app")
    p.add_argument(
        "--set",
        action="append",
        type=setting,
        metavar="KEY=VALUE",
        help="override an app parameter (VALUE is JSON or a string); repeatable",
    )
    p.add_argument(
        "--planner",
        choices=["rules", "llm"],
        help="rules: the app's deterministic planner; llm: a model proposes each patch "
        "through the gateway, the rules answer whatever it gets wrong (same as "
        "--set planner=...; docs/models.md)",
    )
    p.add_argument("--run-id", help="the run id (default: a random one)")
    p.add_argument(
        "--max-events",
        type=int,
        default=DEFAULT_MAX_EVENTS,
        help=f"runaway guard: most events a run may have (default {DEFAULT_MAX_EVENTS})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopkernel",
        description="A durable runtime for agentic AI: a task graph patched as it runs.",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="database: a SQLite path or postgresql:// URL (default: $LOOPKERNEL_DB, else runs.db)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.set_defaults(func=handler)
        return p

    def execution_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--quiet", action="store_true", help="no progress lines")
        p.add_argument("--json", action="store_true", help="print the outcome as JSON")
        p.add_argument("--concurrency", type=int, default=16, help="tasks at once (default 16)")

    p = command("run", cmd_run, "start a run of an app and execute it")
    add_app_arguments(p)
    execution_flags(p)

    command("demo", cmd_demo, "run the speculation app with a live progress view")

    p = command("resume", cmd_resume, "resume a stopped, waiting or crashed run")
    p.add_argument("run")
    execution_flags(p)

    for decision in ("approve", "reject"):
        p = command(decision, cmd_decide, f"{decision} a waiting task (journals human_input)")
        p.add_argument("run")
        p.add_argument("task")
        p.add_argument("--payload", type=json_value, default=None, help="JSON handed to the task")
        p.add_argument(
            "--token",
            help="the run's approval token; without it, local access "
            "to the database is the authority",
        )
        p.set_defaults(decision=decision)

    p = command("cancel", cmd_cancel, "cancel a run")
    p.add_argument("run")
    p.add_argument("--reason", default="cancelled by an operator")

    p = command("inspect", cmd_inspect, "show a run: graph, verdict, digest, journal")
    p.add_argument("run")
    p.add_argument("--journal", action="store_true", help="also list events and patches")
    p.add_argument("--json", action="store_true", help="JSON with status, verdict and digest")
    p.add_argument(
        "--at",
        type=count,
        metavar="SEQ",
        help="the run as of event SEQ (its journal replayed up to there)",
    )

    p = command("runs", cmd_runs, "list the runs in the database")
    p.add_argument("--limit", type=int, default=50)

    p = command("export", cmd_export, "write a consistent copy of one run to a new SQLite file")
    p.add_argument("run")
    p.add_argument("--to", required=True, help="the new file")

    for module in (
        "loopkernel.cli._tools",
        "loopkernel.cli._workers",
        "loopkernel.cli._fork",
        "loopkernel.cli._bench",
        "loopkernel.cli._gateway",
    ):
        _add_optional(sub, module)
    return parser


def _add_optional(sub: Any, module: str) -> None:
    """Commands that live in their own module register themselves here."""
    try:
        mod = __import__(module, fromlist=["add_parser"])
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return
        raise
    mod.add_parser(sub)


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["gateway"]:  # the gateway has its own command line (and process)
        from loopkernel.cli._gateway import run_gateway

        return run_gateway(raw[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "gateway":
        # The runtime never holds provider keys (docs/models.md). As the process's entry
        # point, re-execute without them, so even /proc/PID/environ is clean; called as a
        # function (tests, embedding), clean os.environ, so nothing started later gets them.
        from loopkernel.models._scrub import reexec_without_credentials, scrub

        if argv is None:
            reexec_without_credentials()
        else:
            scrub()
    func = args.func
    try:
        if asyncio.iscoroutinefunction(func):
            return int(asyncio.run(func(args)))
        return int(func(args))
    except UsageError as exc:
        print(f"loopkernel: {exc}", file=sys.stderr)
        return USAGE
    except LoopKernelError as exc:
        print(f"loopkernel: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("loopkernel: interrupted; the run can be resumed", file=sys.stderr)
        return 130
