"""A separate process appending to one run: ``_seq_writer.py URL RUN_ID TAG N GO_FILE``.

Opens the store, prints ``ready``, waits for GO_FILE to exist (so that two writers start
together), then appends N events, one per transaction, with task ids TAG0..TAG{N-1}.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from loopkernel.graph import EventKind
from loopkernel.ids import RunId, TaskId
from loopkernel.store import NewEvent, open_store


def wait_for(go: Path) -> None:
    deadline = time.monotonic() + 30
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go signal within 30s")
        time.sleep(0.001)


async def main(url: str, run_id: str, tag: str, n: int, go: Path) -> None:
    store = open_store(url)
    await store.open()
    try:
        print("ready", flush=True)
        await asyncio.to_thread(wait_for, go)
        for i in range(n):
            event = NewEvent(kind=EventKind.TASK_COMPLETED, task_id=TaskId(f"{tag}{i}"))
            await store.append_events(RunId(run_id), [event])
    finally:
        await store.close()


if __name__ == "__main__":
    url, run_id, tag, n, go = sys.argv[1:]
    asyncio.run(main(url, run_id, tag, int(n), Path(go)))
