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
7     the run is held by another executor (its lease); nothing was written
8     the store is unavailable (locked, disk full, I/O error, PostgreSQL down); the run
      is left resumable
9     not a usable LoopKernel database (missing, foreign, corrupt, unreadable, too new)
10    this version of the app refuses to resume the run (``IncompatibleVersion``);
      nothing was journaled
141   the output was closed early (``loopkernel runs | head``)
====  ==========================================
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from loopkernel._app import App, load_app
from loopkernel._waits import WaitingOn, WaitKind, clock, owner_note, read_waits
from loopkernel.cli._args import (
    approval_payload,
    count,
    max_events,
    run_id,
    setting,
    task_id,
    whole,
)
from loopkernel.cli._door import (
    Parser,
    add_logging_flags,
    db_flag,
    extra_for,
    missing_extra,
    prog,
    resume_command,
    setup_logging,
    shown_url,
    version,
)
from loopkernel.cli._exit import (
    BROKEN_PIPE,
    EXIT_CODES,
    HELD,
    INCOMPATIBLE_VERSION,
    NOT_A_DATABASE,
    STORE_UNAVAILABLE,
    TERMINATED,
    USAGE,
    Handler,
)
from loopkernel.cli._render import Progress, one_line, render_inspection
from loopkernel.client import DEFAULT_STORE_RETRY, Answerer, Client, Listeners
from loopkernel.errors import (
    IncompatibleVersion,
    LeaseLost,
    LoopKernelError,
    NotADatabase,
    RunHeld,
    SchemaTooNew,
    StoreUnavailable,
    TransientFault,
    UsageError,
)
from loopkernel.executor import (
    DEFAULT_MAX_EVENTS,
    ExecutionConfig,
    RunOutcome,
    StartedRun,
    check_keep_finished,
)
from loopkernel.graph import JSON, RunStatus
from loopkernel.store import SQLiteStore

if TYPE_CHECKING:
    from loopkernel.store import RunInfo
    from loopkernel.tools import StartedServers

__all__ = ["EXIT_CODES", "main"]


async def _finish(
    client: Client, outcome: RunOutcome, args: argparse.Namespace, token: str | None = None
) -> int:
    waiting: list[WaitingOn] = []
    if outcome.status is RunStatus.WAITING:
        waiting = await read_waits(client.store, outcome.run_id)
    if getattr(args, "json", False):
        out: dict[str, Any] = {
            "run_id": outcome.run_id,
            "status": outcome.status.value,
            "verdict": outcome.verdict,
            "waiting": [w.to_json() for w in waiting],
        }
        if token is not None:
            out["token"] = token  # shown once: a script that ran --json must still get it
        print(json.dumps(out, indent=2))
    else:
        print(f"run {outcome.run_id}: {outcome.status.value}")
        if outcome.verdict is not None:
            print(f"verdict: {json.dumps(outcome.verdict)}")
        _print_waits(args, outcome.run_id, waiting)
    return EXIT_CODES[outcome.status]


def _print_waits(args: argparse.Namespace, run: str, waiting: list[WaitingOn]) -> None:
    """Each wait with what answers it: a human's command, or a timer's wake-up time."""
    for wait in waiting:
        print(wait.line())
        if wait.kind is WaitKind.TIMER:
            print(
                f"  woken after that time by a worker (a submitted run) or `serve`; "
                f"else: {resume_command(args, run)}"
            )
        else:
            print(
                f"  {prog()}{db_flag(args)} approve {run} {wait.task_id} "
                "[--payload JSON]   (or reject)"
            )
    if any(w.kind is not WaitKind.TIMER for w in waiting):
        print(f"  then: {resume_command(args, run)}")


def _overrides(args: argparse.Namespace) -> dict[str, JSON]:
    """The ``--set`` pairs, and ``--planner`` as the parameter it stands for."""
    planner = getattr(args, "planner", None)
    return dict(args.set or []) | ({"planner": planner} if planner else {})


def check_app_arguments(args: argparse.Namespace) -> tuple[App, dict[str, JSON]]:
    """Refuse a bad app, scenario or parameter before the database is even opened: a
    mistyped ``--set`` must not leave a new empty ``runs.db`` behind. The app and the
    run's parameters."""
    app = load_app(args.app)
    params = app.params(args.scenario, _overrides(args))
    parts = app.build(params)
    if parts.tool_layer is not None:  # its MCP layer is built once the store is open
        from loopkernel.tools._extra import require_mcp

        require_mcp()
    return app, params


async def start_run(client: Client, args: argparse.Namespace) -> StartedRun:
    """Start the run that ``add_app_arguments`` describes."""
    _, started = await client.start(
        args.app,
        scenario=args.scenario,
        overrides=_overrides(args),
        run_id=args.run_id,
        max_events=args.max_events,
        require_token=args.require_token,
    )
    return started


async def cmd_run(args: argparse.Namespace) -> int:
    app, params = check_app_arguments(args)
    client = Client(args.db)
    check_keep_finished(args.keep_finished)  # before the store is opened
    # The app's tool servers start first: their start-up (a process importing the MCP
    # SDK) overlaps opening the store, journaling the run and its first planning, and
    # they are stopped on every way out that did not hand them to the run.
    async with client.start_tool_servers(app, params) as servers:
        await servers.spawned()
        async with client:  # a store that does not answer before the run exists: exit 8 now
            return await _run(client, args, servers)


async def _run(client: Client, args: argparse.Namespace, servers: StartedServers) -> int:
    started = await start_run(client, args)
    args.started = started.run_id  # for the resume hint on Ctrl-C
    if not args.json:
        print(
            f"run {started.run_id} started ({args.app}"
            f"{', scenario ' + args.scenario if args.scenario else ''})"
            f" in {shown_url(client.store.url)}"
        )
        print(f"approval token (shown once): {started.token}")
    progress = None if args.quiet or args.json else Progress(sys.stdout)
    outcome = await client.execute(
        started.run_id,
        config=execution_config(args),
        listeners=_listeners(args, progress),
        tool_servers=servers,
    )
    return await _finish(client, outcome, args, started.token)


async def open_retrying(client: Client, args: argparse.Namespace, run: str | None = None) -> None:
    """Open the store, retrying one that does not answer (a write lock held, a server
    down) within ``--store-retry`` seconds in total, as ``Client.execute`` does."""
    deadline = time.monotonic() + args.store_retry
    delay, on_retry = 0.05, _retrying(args)
    wait = client.store.lock_wait_s if isinstance(client.store, SQLiteStore) else 0.0
    while True:
        try:
            await client.store.open()
            return
        except StoreUnavailable as exc:
            now = time.monotonic()
            left = deadline - now
            if left <= 0 or now + min(delay, left) + wait > deadline + 0.05:
                attrs = {**exc.attrs, **({"run_id": run} if run else {})}
                raise StoreUnavailable(exc.message, **attrs) from exc
            on_retry(exc, min(delay, left))
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 2.0)


def execution_config(args: argparse.Namespace) -> ExecutionConfig:
    """The one ``ExecutionConfig`` of ``run``/``resume``'s flags, handed down whole."""
    return ExecutionConfig(
        concurrency=args.concurrency,
        store_retry_s=args.store_retry,
        keep_finished=args.keep_finished,
    )


def _listeners(args: argparse.Namespace, progress: Progress | None) -> Listeners:
    return Listeners(
        observer=progress,
        on_retry=_retrying(args),
        on_tool_server=None if progress is None else progress.tool_server,
    )


def _retrying(args: argparse.Namespace) -> Callable[[StoreUnavailable, float], None]:
    """Say, once, that the store is being retried (the run is not stuck, it waits)."""
    known: Callable[[StoreUnavailable, float], None] | None = getattr(args, "on_retry", None)
    if known is not None:  # one line per command, whether opening or executing retried
        return known
    said = False

    def on_retry(exc: StoreUnavailable, delay: float) -> None:
        nonlocal said
        if not said and not args.quiet:
            print(
                f"loopkernel: {exc}; retrying for up to {args.store_retry:g} s",
                file=sys.stderr,
                flush=True,
            )
            said = True

    args.on_retry = on_retry
    return on_retry


async def cmd_demo(args: argparse.Namespace) -> int:
    args.app, args.scenario, args.set, args.run_id = "speculation", "demo", [], None
    args.require_token = False
    args.max_events, args.quiet, args.json, args.concurrency = DEFAULT_MAX_EVENTS, False, False, 16
    args.keep_finished = None
    args.store_retry = DEFAULT_STORE_RETRY
    print(
        "LoopKernel demo: three researchers race; at a quorum of two the straggler is "
        "cancelled in flight\nand a distiller that sees only its ancestors writes the answer.\n"
    )
    return await cmd_run(args)


async def cmd_resume(args: argparse.Namespace) -> int:
    client = Client(args.db, create=False)
    check_keep_finished(args.keep_finished)  # before the store is opened
    await open_retrying(client, args, args.run)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(client.store.close)
        progress = None if args.quiet or args.json else Progress(sys.stdout)
        outcome = await client.execute(
            args.run, config=execution_config(args), listeners=_listeners(args, progress)
        )
        return await _finish(client, outcome, args)


async def cmd_decide(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        event = await client.decide(
            args.run,
            args.task,
            args.decision,
            payload=args.payload,
            answerer=Answerer(token=args.token, local=args.token is None),
        )
        print(
            f"{args.decision} journaled for task {args.task} of run {args.run} "
            f"(event #{event.seq}); a live executor or a worker picks it up, "
            f"else: {resume_command(args, args.run)}"
        )
        return 0


async def cmd_cancel(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        status = await client.cancel(args.run, args.reason)
        if status is RunStatus.RUNNING:
            print(f"cancel requested for run {args.run}; its executor stops it at its next poll")
        else:
            print(f"run {args.run}: {status.value}")
        return EXIT_CODES[status]


async def cmd_inspect(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
        inspection = await client.inspect(args.run, journal=args.journal or args.json, at=args.at)
        if args.json:
            print(json.dumps(inspection.to_json(), indent=2, sort_keys=True))
        else:
            info = inspection.info
            now = args.at is None and info.status is RunStatus.WAITING
            waits = await read_waits(client.store, info.run_id) if now else []
            render_inspection(inspection, sys.stdout, journal=args.journal, waits=waits)
        return EXIT_CODES[inspection.info.status]


async def cmd_runs(args: argparse.Namespace) -> int:
    from loopkernel.cli._housekeeping import age

    async with Client(args.db, create=False) as client:
        status = None if args.status is None else RunStatus(args.status)
        before = None
        if args.before is not None:
            last = await client.info(args.before)
            before = (last.created_at, str(last.run_id))
        found = await client.list_runs(args.limit, status=status, app=args.app, before=before)
        now = time.time()
        shown = [info for info in found if args.since is None or info.created_at >= args.since]
        for info in shown:
            counts = " ".join(f"{k}={v}" for k, v in sorted(info.task_counts.items()))
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.created_at))
            print(
                f"{info.run_id}  {info.app:<12} {info.status.value:<10} {started} "
                f"{age(now - info.created_at):>4} events={info.last_seq} {counts}"
                f"{_run_note(info)}".rstrip()
            )
        if len(found) == args.limit and len(shown) == len(found):
            # stdout stays the list (for pipes); the next page's command goes to stderr
            print(f"(more: {_next_page(args, str(found[-1].run_id))})", file=sys.stderr)
        return 0


def _next_page(args: argparse.Namespace, last: str) -> str:
    """The ``runs`` command for the page after ``last``, with this one's filters kept (an
    age given to ``--since`` as the moment it meant, so the pages do not drift)."""
    words = [f"{prog()}{db_flag(args)} runs --before {last}"]
    if args.limit != 50:
        words.append(f"--limit {args.limit}")
    if args.status is not None:
        words.append(f"--status {args.status}")
    if args.app is not None:
        words.append(f"--app {shlex.quote(args.app)}")
    if args.since is not None:
        since = datetime.fromtimestamp(args.since).astimezone().isoformat(timespec="seconds")
        words.append(f"--since {since}")
    return " ".join(words)


def _run_note(info: RunInfo) -> str:
    """``  [owner lost at ...]`` or ``  [timer at ...]`` after a run's line in ``runs``."""
    note = owner_note(info)
    if note is None and info.status is RunStatus.WAITING and info.wake_at is not None:
        note = f"timer at {clock(info.wake_at)}"
    return "" if note is None else f"  [{note}]"


async def cmd_export(args: argparse.Namespace) -> int:
    async with Client(args.db, create=False) as client:
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
    p.add_argument(
        "--run-id",
        type=run_id,
        help="the run id: letters, digits and . _ : - , at most 128 (default: a random one)",
    )
    p.add_argument(
        "--max-events",
        type=max_events,
        default=DEFAULT_MAX_EVENTS,
        help=f"runaway guard: most events a run may have (default {DEFAULT_MAX_EVENTS})",
    )
    p.add_argument(
        "--require-token",
        action="store_true",
        help="approvals of this run need its approval token even from a caller with "
        "database access (set LOOPKERNEL_REQUIRE_TOKEN=1 for every run)",
    )


def build_parser(*, app_commands: bool = True) -> argparse.ArgumentParser:
    """The whole command line; ``app_commands=False`` leaves out the commands installed
    apps contribute (finding them reads every installed package's metadata)."""
    parser = Parser(
        prog="loopkernel",
        description="A durable runtime for agentic AI: a task graph patched as it runs.",
    )
    parser.add_argument("--version", action="version", version=f"loopkernel {version()}")
    add_logging_flags(parser, top=True)
    parser.add_argument(
        "--db",
        default=None,
        help="database: a SQLite path or postgresql:// URL (default: $LOOPKERNEL_DB, else "
        "runs.db); also accepted after the command name, except for tools and bench",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.set_defaults(func=handler)
        return p

    def execution_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--quiet", action="store_true", help="no progress lines")
        p.add_argument(
            "--json",
            action="store_true",
            help="print the outcome as JSON (run_id, status, verdict, waiting tasks; "
            "run adds the approval token)",
        )
        p.add_argument("--concurrency", type=count, default=16, help="tasks at once (default 16)")
        p.add_argument(
            "--keep-finished",
            type=whole,
            default=None,
            metavar="N",
            help="keep about N succeeded tasks in memory and read older ones back when "
            "asked, so a long run's memory stays flat (default 1,000; on PostgreSQL they "
            "go to a private temporary file)",
        )
        p.add_argument(
            "--store-retry",
            type=float,
            default=DEFAULT_STORE_RETRY,
            metavar="SECONDS",
            help="how long to retry a store that does not answer (locked, disk full, "
            f"server down) before stopping with exit 8 (default {DEFAULT_STORE_RETRY:g})",
        )

    p = command("run", cmd_run, "start a run of an app and execute it")
    add_app_arguments(p)
    execution_flags(p)

    command("demo", cmd_demo, "run the speculation app with a live progress view")

    p = command("resume", cmd_resume, "resume a stopped, waiting or crashed run")
    p.add_argument("run", type=run_id)
    execution_flags(p)

    for decision in ("approve", "reject"):
        p = command(decision, cmd_decide, f"{decision} a waiting task (journals human_input)")
        p.add_argument("run", type=run_id)
        p.add_argument("task", type=task_id)
        p.add_argument(
            "--payload",
            type=approval_payload,
            default=None,
            help="a JSON object handed to the task (at most 64 KiB)",
        )
        p.add_argument(
            "--token",
            help="the run's approval token; without it, access to the database is the "
            "authority, unless the run or LOOPKERNEL_REQUIRE_TOKEN requires the token",
        )
        p.set_defaults(decision=decision)

    p = command("cancel", cmd_cancel, "cancel a run")
    p.add_argument("run", type=run_id)
    p.add_argument(
        "--reason",
        default="cancelled by an operator",
        help="why, kept in the run's verdict (default: cancelled by an operator)",
    )

    p = command("inspect", cmd_inspect, "show a run: graph, verdict, digest, journal")
    p.add_argument("run", type=run_id)
    p.add_argument("--journal", action="store_true", help="also list events and patches")
    p.add_argument("--json", action="store_true", help="JSON with status, verdict and digest")
    p.add_argument(
        "--at",
        type=count,
        metavar="SEQ",
        help="the run as of event SEQ (its journal replayed up to there)",
    )

    p = command("runs", cmd_runs, "list the runs in the database")
    p.add_argument(
        "--limit", type=count, default=50, help="list at most N runs, newest first (default 50)"
    )
    p.add_argument(
        "--status",
        choices=[s.value for s in RunStatus],
        help="only runs in this status",
    )
    p.add_argument("--app", help="only runs of this app")
    p.add_argument(
        "--since",
        type=_moment,
        metavar="WHEN",
        help="only runs started since WHEN: a date (2026-11-30, 2026-11-30T08:00) or an age "
        "(7d, 12h)",
    )
    p.add_argument(
        "--before",
        type=run_id,
        metavar="RUN",
        help="the next page: runs started before RUN (the last one listed)",
    )

    p = command("export", cmd_export, "write a consistent copy of one run to a new SQLite file")
    p.add_argument("run", type=run_id)
    p.add_argument("--to", required=True, help="the new file")

    for module in (
        "loopkernel.cli._tools",
        "loopkernel.cli._workers",
        "loopkernel.cli._fork",
        "loopkernel.cli._gateway",
        "loopkernel.cli._web",
        "loopkernel.cli._housekeeping",
        "loopkernel.cli._schedule",
    ):
        _add_optional(sub, module)
    for name in ("run", "resume", "worker", "serve"):
        if name in sub.choices:
            add_logging_flags(sub.choices[name])
    if "serve" in sub.choices:  # serve's own module is the web's: retention joins it here
        from loopkernel.cli._housekeeping import add_retention_flag

        add_retention_flag(sub.choices["serve"])
    if app_commands:
        _add_app_commands(sub)
    return parser


def _moment(text: str) -> float:
    from loopkernel.cli._housekeeping import moment

    return moment(text)


def _command_word(raw: Sequence[str]) -> str | None:
    """The command a command line names (after ``--db X`` / ``--db=X``), or None when it
    names none or asks for help before it."""
    i = 0
    while i < len(raw):
        word = raw[i]
        if word == "--db":
            i += 2
        elif word.startswith("--db="):
            i += 1
        elif word.startswith("-"):
            return None
        else:
            return word
    return None


def _builtin_commands(parser: argparse.ArgumentParser) -> frozenset[str]:
    return frozenset(
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    )


def _add_app_commands(sub: Any) -> None:
    """Commands an installed app contributes: entry points of group ``loopkernel.commands``,
    each a module with ``add_parser(subparsers)`` (keep its imports light: it loads with
    every command that is not built in, and with ``--help``)."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group="loopkernel.commands"), key=lambda e: e.name):
        try:
            module = ep.load()
        except ImportError:
            continue  # an app whose own dependencies are missing contributes nothing
        module.add_parser(sub)


def _add_optional(sub: Any, module: str) -> None:
    """Commands that live in their own module register themselves here."""
    try:
        mod = __import__(module, fromlist=["add_parser"])
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return
        raise
    mod.add_parser(sub)


def _resume_hint(args: argparse.Namespace, exc: LoopKernelError) -> str:
    """``; run R is left resumable: loopkernel --db DB resume R`` when a run was hit."""
    run_id = exc.attrs.get("run_id")
    if not run_id:
        return ""
    db = ""
    if args.db:
        where = str(exc.attrs.get("url") or args.db)
        db = f" --db {shlex.quote(where.removeprefix('sqlite:///'))}"
    return f"; run {run_id} is left resumable: {prog()}{db} resume {run_id}"


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    # The gateway has its own command line (and process), and no database: a --db before
    # the command is ignored rather than letting argparse eat the gateway's flags.
    skip = 2 if raw[:1] == ["--db"] else 1 if raw[:1] and raw[0].startswith("--db=") else 0
    if raw[skip : skip + 1] == ["gateway"]:
        from loopkernel.cli._gateway import run_gateway

        return run_gateway(raw[skip + 1 :])
    # An app's commands are looked up only when the command is not one of ours (or for
    # help): reading the installed packages' metadata would cost every command ~20 ms.
    parser = build_parser(app_commands=False)
    if _command_word(raw) not in _builtin_commands(parser):
        parser = build_parser()
    args = parser.parse_args(argv, argparse.Namespace(build_parser=build_parser))  # completion
    if args.command != "gateway":
        # The runtime never holds provider keys (docs/models.md). As the process's entry
        # point, re-execute without them, so even /proc/PID/environ is clean; called as a
        # function (tests, embedding), clean os.environ, so nothing started later gets them.
        from loopkernel.models._scrub import reexec_without_credentials, scrub

        if argv is None:
            reexec_without_credentials()
        else:
            scrub()
    setup_logging(args)
    func = args.func
    try:
        if args.command == "serve":
            _require_database(args)
        if asyncio.iscoroutinefunction(func):
            own = args.command in ("worker", "serve")  # they stop gracefully on SIGTERM
            return int(asyncio.run(func(args) if own else _terminable(func, args)))
        return int(func(args))
    except Terminated:
        _say_stopped(args, "terminated (SIGTERM)")
        return TERMINATED
    except IncompatibleVersion as exc:
        print(f"loopkernel: {one_line(str(exc))}", file=sys.stderr)
        return INCOMPATIBLE_VERSION
    except UsageError as exc:
        print(f"loopkernel: {one_line(str(exc))}", file=sys.stderr)
        return USAGE
    except RunHeld as exc:
        print(f"loopkernel: {one_line(str(exc))}", file=sys.stderr)
        return HELD
    except LeaseLost as exc:
        print(
            f"loopkernel: {one_line(str(exc))}; another executor took the run over, "
            "so this one stopped",
            file=sys.stderr,
        )
        return HELD
    except (NotADatabase, SchemaTooNew) as exc:
        print(f"loopkernel: {one_line(str(exc))}", file=sys.stderr)
        return NOT_A_DATABASE
    except StoreUnavailable as exc:
        print(
            f"loopkernel: store unavailable: {one_line(str(exc))}{_resume_hint(args, exc)}",
            file=sys.stderr,
        )
        return STORE_UNAVAILABLE
    except TransientFault as exc:
        print(f"loopkernel: {one_line(str(exc))}{_resume_hint(args, exc)}", file=sys.stderr)
        return EXIT_CODES[RunStatus.RUNNING]
    except LoopKernelError as exc:
        print(f"loopkernel: {exc.family}: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        extra = extra_for(exc.name or "")
        if extra is None:
            raise
        print(f"loopkernel: {missing_extra(extra, exc)}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:
        # The reader went away (``loopkernel runs | head``): stop quietly, as `cat` does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE
    except KeyboardInterrupt:
        _say_stopped(args, "interrupted")
        return 130


class Terminated(Exception):
    """SIGTERM reached a command that executes a run: it stopped as Ctrl-C stops it."""


async def _terminable(func: Handler, args: argparse.Namespace) -> int:
    """``func(args)``; SIGTERM cancels it like Ctrl-C (``run``, ``resume``...: the tasks in
    flight are cancelled, the lease is given back) and ends as ``Terminated``. Commands
    that handle SIGTERM themselves (``worker``, ``serve``) replace this handler."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    got: list[int] = []

    def term() -> None:
        got.append(signal.SIGTERM)
        task.cancel()

    with contextlib.suppress(ValueError, RuntimeError):  # not the main thread: no handler
        loop.add_signal_handler(signal.SIGTERM, term)
    try:
        return await func(args)
    except asyncio.CancelledError:
        if got and task.uncancel() == 0:
            raise Terminated from None
        raise
    finally:
        with contextlib.suppress(ValueError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)


def _say_stopped(args: argparse.Namespace, how: str) -> None:
    """One line on stderr; the resume command for the run the command was executing."""
    run = getattr(args, "started", None)  # set by any command once its run exists
    if run is None and args.command in ("run", "demo", "resume"):
        run = getattr(args, "run", None)
    if run is not None:
        print(f"loopkernel: {how}; resume with: {resume_command(args, run)}", file=sys.stderr)
    else:
        print(f"loopkernel: {how}", file=sys.stderr)


def _require_database(args: argparse.Namespace) -> None:
    """``NotADatabase`` (exit 9) unless ``--db`` names an existing LoopKernel database:
    for commands that read one and must never create it (``serve``)."""

    async def check() -> None:
        async with Client(args.db, create=False):
            pass

    asyncio.run(check())
