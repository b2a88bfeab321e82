"""The durable run record: an append-only file that each idempotency key enters once.

Run it with ``python -m loopkernel.tools.testkit.record --file PATH`` (or
``LOOPKERNEL_RECORD_FILE=PATH``). Each line of the file is ``{"key", "tool", "result"}``;
``loopkernel.tools.read_ledger(PATH)`` reads it back. A crash test asserts that every key
appears exactly once, whatever was killed when.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from loopkernel.graph import JSON
from loopkernel.tools._host import CallInfo, KeyLedger, ToolHost

__all__ = ["build_host", "main"]

DEFS = Path(__file__).with_name("tool-defs.json")


def build_host(path: str | os.PathLike[str] | None) -> ToolHost:
    """The record tool set writing to ``path`` (``None``: in memory)."""
    host = ToolHost.from_file(DEFS)
    ledger = KeyLedger(path)

    async def append(args: dict[str, JSON], call: CallInfo) -> JSON:
        return {"seq": len(ledger) + 1, "entry": args["entry"]}

    host.add("record", append, once=ledger)
    host.add("commit", append, once=ledger)

    @host.tool("entries")
    async def entries(args: dict[str, JSON], call: CallInfo) -> JSON:
        return {"entries": ledger.entries()}

    return host


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loopkernel.tools.testkit.record")
    parser.add_argument(
        "--file",
        default=os.environ.get("LOOPKERNEL_RECORD_FILE"),
        help="the record file (default: $LOOPKERNEL_RECORD_FILE)",
    )
    args = parser.parse_args(argv)
    if not args.file:
        parser.error("--file PATH (or LOOPKERNEL_RECORD_FILE) is required")
    build_host(args.file).run()
    return 0
