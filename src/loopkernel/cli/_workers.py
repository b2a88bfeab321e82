"""``loopkernel worker``, ``submit`` and ``wait``: runs executed by a pool of workers.

::

    loopkernel --db postgresql://... worker --concurrency 8          # on as many machines
    RUN=$(loopkernel --db postgresql://... submit speculation --scenario fast)
    loopkernel --db postgresql://... wait "$RUN"                       # exit code = status

``submit`` creates the run and hands it to the workers; it prints the run id on stdout
and the approval token on stderr (both as JSON on stdout with ``--json``). ``wait``
blocks until the run ends or waits for a human and exits with the run's status code
(``EXIT_CODES``; 6 if ``--timeout`` passed first). It waits through a timer (a run asleep
is woken by a worker or ``serve``) unless ``--stop-at-timer``; returning while the run
sleeps, it exits 11 (``TIMER_WAIT``).
``approve``, ``reject`` and ``cancel`` work from any process: a worker picks the run up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from loopkernel._waits import WaitingOn, WaitKind, owner_note, run_waits_on_timer, waits_of
from loopkernel.cli._args import count, positive, run_id
from loopkernel.cli._door import db_flag, prog
from loopkernel.cli._exit import EXIT_CODES, TIMER_WAIT, Handler
from loopkernel.cli._main import (
    add_app_arguments,
    check_app_arguments,
    start_run,
)
from loopkernel.client import Client
from loopkernel.executor import ExecutionConfig
from loopkernel.graph import TERMINAL_RUN, EventKind, RunStatus, TaskState
from loopkernel.store import RunInfo, open_store
from loopkernel.worker import RunWorker, WorkerConfig, default_worker_id

if TYPE_CHECKING:
    from loopkernel._waker import TimerWaker

__all__ = ["add_parser", "housekeeping"]


async def cmd_worker(args: argparse.Namespace) -> int:
    config = WorkerConfig(
        worker_id=args.id or default_worker_id(),
        concurrency=args.concurrency,
        poll_seconds=args.poll,
        execution=ExecutionConfig(lease_s=args.lease, concurrency=args.tasks),
        apps=frozenset(args.app or ()),
        adopt_orphans=args.adopt_orphans,
    )
    # A worker may be the first to reach an empty PostgreSQL database: it makes the tables
    # (as `submit` would); a SQLite path must hold a database already.
    url = args.db or os.environ.get("LOOPKERNEL_DB") or ""
    store = open_store(args.db, create=url.startswith(("postgresql://", "postgres://")))
    await store.open()
    try:
        worker = RunWorker(store, config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        async with asyncio.TaskGroup() as group:  # the worker and its chores: one owner
            chores = group.create_task(housekeeping(Client(store=store), retention=args.retention))
            await worker.serve()
            chores.cancel()
    finally:
        await store.close()
    return 0


async def housekeeping(
    client: Client, *, retention: float | None, waker: TimerWaker | None = None
) -> None:
    """A process's one owner of retention and timers (``worker``, ``serve``): each a task of
    one ``TaskGroup`` on the process's own client and loop, cancelled together when the
    process stops. A chore that fails says so and stops; it never stops the process."""

    async def chore(name: str, body: Coroutine[Any, Any, None]) -> None:
        try:
            await body
        except Exception as exc:
            print(f"loopkernel: {name} stopped: {exc}", file=sys.stderr, flush=True)

    async with asyncio.TaskGroup() as group:
        if retention is not None:
            from loopkernel.cli._housekeeping import retain_forever

            group.create_task(chore("retention", retain_forever(client, retention)))
        if waker is not None:
            group.create_task(chore("timers", waker.serve()))


async def cmd_submit(args: argparse.Namespace) -> int:
    check_app_arguments(args)
    async with Client(args.db) as client:
        started = await start_run(client, args)
        await client.store.enqueue(started.run_id)
    if args.json:
        print(json.dumps({"run_id": started.run_id, "token": started.token}))
    else:  # the id alone on stdout, for RUN=$(loopkernel submit ...); the token for a human
        print(started.run_id, flush=True)
        print(f"approval token (shown once): {started.token}", file=sys.stderr)
    return 0


async def cmd_wait(args: argparse.Namespace) -> int:
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    async with Client(args.db, create=False) as client:
        while True:
            info, waits, answered = await _look(client, args.run)
            if info.status in TERMINAL_RUN:
                break
            if info.status is RunStatus.WAITING and (
                args.stop_at_timer or answered or not run_waits_on_timer(waits)
            ):
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            await asyncio.sleep(args.interval)
    if args.json:
        _wait_json(info, waits, answered)
    else:
        _wait_text(args, info, waits, answered)
    if info.status is RunStatus.WAITING and run_waits_on_timer(waits) and not answered:
        return TIMER_WAIT
    return EXIT_CODES[info.status]


async def _look(client: Client, run: str) -> tuple[RunInfo, list[WaitingOn], set[str]]:
    """The run's row; if it waits, what for, and which waiting tasks were answered already
    (an approval journaled that no executor has taken up yet)."""
    info = await client.info(run)
    if info.status is not RunStatus.WAITING:
        return info, [], set()
    loaded = await client.store.load_run(info.run_id)
    waiting = loaded.state.in_state(TaskState.WAITING)
    timed = any(t.wake_at is not None for t in waiting)
    waits = waits_of(
        waiting,
        await client.store.events(info.run_id) if waiting else [],
        await client.store.patches(info.run_id) if timed else [],
    )
    answered = {str(e.task_id) for e in loaded.unplanned if e.kind is EventKind.HUMAN_INPUT}
    return info, waits, answered


def _wait_json(info: RunInfo, waits: list[WaitingOn], answered: set[str]) -> None:
    listed = [
        {**w.to_json(), **({"answered": True} if w.task_id in answered else {})} for w in waits
    ]
    out = {
        "run_id": info.run_id,
        "status": info.status.value,
        "verdict": info.verdict,
        "waiting": listed,
        "owner_lost_at": info.owner_lost_at,
    }
    print(json.dumps(out))


def _wait_text(
    args: argparse.Namespace, info: RunInfo, waits: list[WaitingOn], answered: set[str]
) -> None:
    note = owner_note(info)
    print(f"run {info.run_id}: {info.status.value}" + (f" ({note})" if note else ""))
    if info.verdict is not None:
        print(f"verdict: {json.dumps(info.verdict)}")
    db = db_flag(args)
    for wait in waits:
        if wait.task_id in answered:
            print(
                f"task {wait.task_id}: answered, not taken up yet: a worker picks it up "
                f"if the run was submitted; else: {prog()}{db} resume {info.run_id}"
            )
        elif wait.kind is WaitKind.TIMER:
            print(
                f"{wait.line()}\n  a worker wakes it then if the run was submitted, or "
                f"`{prog()}{db} serve`; else after that time: {prog()}{db} resume "
                f"{info.run_id}"
            )
        else:
            print(
                f"{wait.line()}\n"
                f"  {prog()}{db} approve {info.run_id} {wait.task_id} (or reject); then a "
                f"worker picks it up if the run was submitted, else: {prog()}{db} resume "
                f"{info.run_id}"
            )


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``worker``, ``submit`` and ``wait`` on the ``loopkernel`` command."""

    def command(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help, description=help)
        p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.set_defaults(func=handler)
        return p

    p = command(
        "worker",
        cmd_worker,
        "execute submitted runs until SIGTERM: claim under a lease, heartbeat, take over "
        "the runs of dead workers (docs/workers.md)",
    )
    p.add_argument("--concurrency", type=count, default=8, help="runs at once (default 8)")
    p.add_argument(
        "--lease",
        type=positive,
        default=10.0,
        help="seconds a lease lasts without a heartbeat: the takeover time (default 10)",
    )
    p.add_argument(
        "--poll",
        type=positive,
        default=1.0,
        help="seconds between looks for work when no notification comes (default 1)",
    )
    p.add_argument("--tasks", type=count, default=16, help="tasks at once per run (default 16)")
    p.add_argument("--id", help="the worker's name in leases (default HOST:PID)")
    p.add_argument(
        "--app",
        action="append",
        metavar="NAME",
        help="also run this app (a name or module:attribute); repeatable. Without it a "
        "worker runs only installed apps (entry points); runs of any other app or version "
        "are left for a worker that has it",
    )
    p.add_argument(
        "--adopt-orphans",
        action="store_true",
        help="also take over runs of a `loopkernel run`/`resume` that died (its lease ran "
        "out); they are the workers' from then on",
    )
    from loopkernel.cli._housekeeping import add_retention_flag

    add_retention_flag(p)

    p = command("submit", cmd_submit, "start a run for the workers; print its id and token")
    add_app_arguments(p)
    p.add_argument("--json", action="store_true", help="print run_id and token as JSON")

    p = command(
        "wait", cmd_wait, "wait until a run ends or waits for a human; exit with its status"
    )
    p.add_argument("run", type=run_id)
    p.add_argument(
        "--timeout",
        type=positive,
        help="give up after this many seconds (exit 6, or 11 while it sleeps on a timer)",
    )
    p.add_argument(
        "--stop-at-timer",
        action="store_true",
        help="return when the run sleeps on a timer (exit 11) instead of waiting through it",
    )
    p.add_argument(
        "--interval", type=positive, default=0.1, help="seconds between looks (default 0.1)"
    )
    p.add_argument("--json", action="store_true", help="print status and verdict as JSON")
