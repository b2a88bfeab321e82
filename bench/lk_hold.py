"""A long-lived LoopKernel host for the scoreboard's backup row: start a looplab run, and
when it waits for a human keep the store open (as a server would) for ``--hold`` seconds,
after writing ``DB.paused``, so a backup script can copy the ``.db`` file meanwhile."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from loopkernel import RunStatus
from loopkernel.client import Client


def mark(db: str) -> None:
    Path(f"{db}.paused").write_text("paused\n")


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lk_hold")
    parser.add_argument("--db", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--scenario", default="irreversible")
    parser.add_argument("--hold", type=float, default=30.0)
    args = parser.parse_args(argv)
    async with Client(args.db) as client:
        await client.start("looplab", scenario=args.scenario, run_id=args.run)
        outcome = await client.execute(args.run)
        if outcome.status is RunStatus.WAITING:
            mark(args.db)
            await asyncio.sleep(args.hold)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
