"""``loopkernel serve``: the web inspector (docs/web.md). Starlette and uvicorn are imported
only when the command runs, so the CLI starts without the ``web`` extra."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING

from loopkernel.cli._args import count, positive

if TYPE_CHECKING:
    from loopkernel.client import Client

__all__ = ["add_parser"]


def port(text: str) -> int:
    """A TCP port, 0 meaning any free one."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be between 0 and 65535")
    return value


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM, then exit 0: stopping a server is not an error.

    Beside the inspector, on the same loop and the same client, one owner runs the chores
    (``housekeeping``): a ``TimerWaker`` executes the runs whose timer is due (unless
    ``--no-timers``), and ``--retention`` prunes. Stopping cancels them: the runs the waker
    executes stop between two steps and give their leases back (SIGTERM is turned into the
    same interrupt as Ctrl-C, after uvicorn has closed its connections)."""
    from loopkernel.web import require_extra

    require_extra()
    from loopkernel.web._serve import Listen, serve

    async def chores(client: Client) -> None:
        from loopkernel._waker import TimerWaker
        from loopkernel.cli._workers import housekeeping

        waker = TimerWaker(client, poll_seconds=args.poll, apps=frozenset(args.app))
        await housekeeping(
            client, retention=args.retention, waker=None if args.no_timers else waker
        )

    async def serve_and_wake() -> None:
        await serve(
            args.db,
            listen=Listen(host=args.host, port=args.port, allow_hosts=tuple(args.allow_host)),
            token_file=args.token_file,
            require_token_for_reads=args.require_token_for_reads,
            max_streams=args.max_streams,
            keepalive_seconds=args.keepalive_seconds,
            operators_file=args.operators,
            beside=None if args.no_timers and args.retention is None else chores,
        )

    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the signal it handled
            asyncio.run(serve_and_wake())
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("inspector stopped")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help = "serve the web inspector: runs, live graph and journal, approve / reject / cancel"
    p = sub.add_parser("serve", help=help, description=help)
    p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8765, help="port (default 8765; 0: any free)")
    p.add_argument(
        "--token-file",
        help="read the operator token from this file (default: a new one, printed at start)",
    )
    p.add_argument(
        "--operators",
        metavar="FILE",
        help="named operators, one 'NAME SHA256-OF-TOKEN' per line: each signs in with a "
        "token of their own, and their decisions and cancels are journaled with their name",
    )
    p.add_argument(
        "--require-token-for-reads",
        action="store_true",
        help="every page needs the operator token too (sign in at /login)",
    )
    p.add_argument(
        "--max-streams",
        type=count,
        default=64,
        help="most live page streams at once; one more is answered 503 (default 64)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this host name (repeatable; loopback names and "
        "--host always are: any other Host is refused, against DNS rebinding)",
    )
    p.add_argument(
        "--no-timers",
        action="store_true",
        help="only serve the inspector: do not execute runs whose timer is due (a worker "
        "or `resume` wakes them then)",
    )
    p.add_argument(
        "--poll",
        type=positive,
        default=1.0,
        metavar="SECONDS",
        help="how often to look for runs whose timer is due (default 1)",
    )
    p.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="NAME",
        help="also wake runs of this app (module:attribute; installed apps always are)",
    )
    # for tests: a short keepalive, so a test waits on a keepalive instead of 15 s
    p.add_argument("--keepalive-seconds", type=float, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_serve)
