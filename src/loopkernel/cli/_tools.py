"""``loopkernel tools list|call``: talk to any stdio MCP server named by its command line.

::

    loopkernel tools list --server-cmd "python -m loopkernel.tools.testkit.faults"
    loopkernel tools call echo --args '{"text": "hi"}' --server-cmd "npx -y some-mcp-server"

A direct call for an operator: it goes through the same session, validation and error
mapping as a run's calls, but outside any run, so it is neither journaled nor policed.
Exit codes: 0 success, 1 the tool or its server failed, 2 usage error; failures print one
line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from loopkernel.cli._args import key_value, positive
from loopkernel.cli._render import one_line
from loopkernel.errors import LoopKernelError, ToolError, ToolTimeout, ToolUnavailable, UsageError

__all__ = ["add_parser"]

OK, FAILED, USAGE = 0, 1, 2


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("tool arguments must be a JSON object")
    return value


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tools list`` and ``tools call`` on the ``loopkernel`` command."""
    tools = subparsers.add_parser(
        "tools",
        help="list or call the tools of any stdio MCP server",
        description="List or call the tools of any stdio MCP server, named by its command line.",
    )
    sub = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--server-cmd",
            required=True,
            metavar="CMD",
            help='the server\'s command line, e.g. "python -m loopkernel.tools.testkit.faults"',
        )
        p.add_argument(
            "--env",
            action="append",
            type=key_value,
            default=[],
            metavar="KEY=VALUE",
            help="an environment variable for the server (repeatable); it inherits only "
            "HOME, PATH, SHELL, TERM, USER, LOGNAME",
        )
        p.add_argument(
            "--start-timeout",
            type=positive,
            default=20.0,
            metavar="S",
            help="seconds the server has to answer the MCP handshake (default 20)",
        )
        p.add_argument("--verbose", action="store_true", help="show the MCP SDK's log")

    p = sub.add_parser("list", help="list a server's tools with their effect classes")
    common(p)
    p.add_argument("--json", action="store_true", help="the full definitions, schemas included")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("call", help="call one tool and print its result as JSON")
    p.add_argument("name", help="the tool")
    common(p)
    p.add_argument(
        "--args",
        type=_json_object,
        default={},
        metavar="JSON",
        help="the arguments, a JSON object (default {})",
    )
    p.add_argument(
        "--timeout", type=positive, default=30.0, metavar="S", help="deadline (default 30 s)"
    )
    p.add_argument("--key", default=None, help="an idempotency key to send in _meta")
    p.set_defaults(func=cmd_call)


def _source(args: argparse.Namespace) -> Any:
    from loopkernel.tools import ToolSource

    if not args.server_cmd.strip():
        raise UsageError("--server-cmd is empty")
    return ToolSource.from_command(
        "server", args.server_cmd, env=dict(args.env), start_timeout=args.start_timeout
    )


def _quiet(args: argparse.Namespace) -> None:
    # The SDK logs a traceback for every line it cannot parse; one line of ours says it.
    if not args.verbose:
        logging.getLogger("mcp").setLevel(logging.CRITICAL)


def _fail(exc: LoopKernelError) -> int:
    kind = exc.attrs.get("kind")
    label = f"{exc.family}({kind})" if kind else exc.family
    print(f"loopkernel tools: {label}: {one_line(exc.message)}", file=sys.stderr)
    return USAGE if isinstance(exc, UsageError) else FAILED


def cmd_list(args: argparse.Namespace) -> int:
    from loopkernel.tools import SourceSession, ToolDef

    async def run() -> list[ToolDef]:
        async with SourceSession(_source(args)) as session:
            return list(session.tools.values())

    _quiet(args)
    try:
        tools = asyncio.run(run())
    except (ToolError, ToolTimeout, ToolUnavailable, UsageError) as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps([t.to_json() for t in tools], indent=2))
        return OK
    if not tools:
        print("(the server has no tools)")
    width = max((len(t.name) for t in tools), default=0)
    for t in tools:
        first = t.description.strip().splitlines()[0] if t.description.strip() else ""
        print(f"{t.name:<{width}}  {t.effect:<12}  {first}")
    return OK


def cmd_call(args: argparse.Namespace) -> int:
    from loopkernel.graph import JSON
    from loopkernel.tools import SourceSession
    from loopkernel.tools._source import check_arguments

    async def run() -> JSON:
        async with SourceSession(_source(args)) as session:
            tool = session.tool(args.name)
            check_arguments(session.schemas, tool, args.args)
            return await session.call(args.name, args.args, key=args.key, time_limit=args.timeout)

    _quiet(args)
    try:
        result = asyncio.run(run())
    except (ToolError, ToolTimeout, ToolUnavailable, UsageError) as exc:
        return _fail(exc)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return OK
