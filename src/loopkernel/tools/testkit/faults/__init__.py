"""The fault tool set: every way a tool server can misbehave, on demand.

Run it with ``python -m loopkernel.tools.testkit.faults [--refuse | --garbage-at-start]``.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from loopkernel.graph import JSON
from loopkernel.tools._host import CallInfo, ToolHost

__all__ = ["build_host", "main"]

DEFS = Path(__file__).with_name("tool-defs.json")
GARBAGE = b"this line is not JSON-RPC\n"


def build_host(wire: int | None = None) -> ToolHost:
    """The host with every fault registered; ``wire`` is a descriptor of the MCP stdout
    (the SDK points fd 1 at stderr while it serves, so ``garbage`` needs its own copy)."""
    host = ToolHost.from_file(DEFS)

    @host.tool("echo")
    async def echo(args: dict[str, JSON], call: CallInfo) -> JSON:
        return {"text": args["text"]}

    @host.tool("request_meta")
    async def request_meta(args: dict[str, JSON], call: CallInfo) -> JSON:
        return {"meta": dict(call.meta)}

    @host.tool("wrong_type")
    async def wrong_type(args: dict[str, JSON], call: CallInfo) -> JSON:
        return {"price": "0.40"}

    @host.tool("slow")
    async def slow(args: dict[str, JSON], call: CallInfo) -> JSON:
        import anyio

        await anyio.sleep(float(args["seconds"]))
        return {"slept": args["seconds"]}

    @host.tool("fail")
    async def fail(args: dict[str, JSON], call: CallInfo) -> JSON:
        raise RuntimeError(str(args.get("message", "the handler raised on purpose")))

    @host.tool("crash")
    async def crash(args: dict[str, JSON], call: CallInfo) -> JSON:
        os._exit(17)

    @host.tool("crash_once")
    def crash_once(args: dict[str, JSON], call: CallInfo) -> JSON:
        marker = Path(str(args["marker"]))
        if not marker.exists():
            marker.write_text(call.key or "", encoding="utf-8")
            os._exit(17)
        return {"survived": True}

    def flaky(args: dict[str, JSON], call: CallInfo) -> JSON:
        marker = Path(str(args["marker"]))
        tries = int(marker.read_text(encoding="utf-8") or 0) + 1 if marker.exists() else 1
        marker.write_text(str(tries), encoding="utf-8")
        if tries <= int(args["failures"]):
            raise OSError(errno.ENOSPC, "No space left on device", str(marker))
        return {"tries": tries}

    host.add("flaky", flaky)
    host.add("flaky_send", flaky)

    def charge(args: dict[str, JSON], call: CallInfo, *, dedupe: bool) -> JSON:
        ledger = Path(str(args["ledger"]))
        lines = ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []
        seen = [line for line in lines if dedupe and call.key and line == call.key]
        if not seen:  # the effect: one line, on disk before anything else happens
            with ledger.open("a", encoding="utf-8") as f:
                f.write(f"{call.key or '-'}\n")
                f.flush()
                os.fsync(f.fileno())
            lines.append(call.key or "-")
        hold = args.get("hold")
        if hold is not None and not Path(str(hold)).exists():
            Path(str(hold)).write_text(str(os.getpid()), encoding="utf-8")
            while True:  # in flight for good: the test kills this server
                time.sleep(3600)
        out: dict[str, JSON] = {"charged": len(lines)}
        if "note" in args:
            out["note"] = args["note"]
        return out

    host.add("charge", functools.partial(charge, dedupe=False))
    host.add("charge_deduped", functools.partial(charge, dedupe=True))

    @host.tool("garbage")
    async def garbage(args: dict[str, JSON], call: CallInfo) -> JSON:
        import anyio

        os.write(wire if wire is not None else 1, GARBAGE)
        await anyio.sleep(3600)
        return {}

    return host


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loopkernel.tools.testkit.faults")
    parser.add_argument("--refuse", action="store_true", help="exit 3 without speaking MCP")
    parser.add_argument(
        "--garbage-at-start", action="store_true", help="print a banner on stdout, then serve"
    )
    args = parser.parse_args(argv)
    if args.refuse:
        print("faults: refusing to start (--refuse)", file=sys.stderr, flush=True)
        return 3
    if args.garbage_at_start:
        os.write(1, b"faults server starting...\n")
    host = build_host(wire=os.dup(1))
    host.run()
    return 0
