"""One journaled tool call in its own process, for crash tests:

    LOOPKERNEL_CRASH_AT=tool_returned python _crash_call.py DB RECORD RUN TASK ENTRY

Prints the result as JSON if it lives that long.
"""

from __future__ import annotations

import asyncio
import json
import sys

from loopkernel.executor import TaskContext, TaskServices
from loopkernel.graph import GraphState, Task
from loopkernel.ids import RunId, TaskId
from loopkernel.store import SQLiteStore
from loopkernel.tools import ToolLayer, allow_all
from loopkernel.tools.testkit import record_source


async def main(db: str, record: str, run_id: str, task_id: str, entry: str) -> None:
    store = SQLiteStore(db)
    await store.open()
    tid = TaskId(task_id)
    state = GraphState(
        run_id=RunId(run_id), app="crash", params=None, tasks={tid: Task(task_id=tid, skill="w")}
    )
    async with ToolLayer(store, [record_source(record)], policy_hook=allow_all) as tools:
        ctx = TaskContext(
            state=state, task_id=tid, attempt=1, upto_seq=0, services=TaskServices(tools=tools)
        )
        print(json.dumps(await ctx.call_tool("record", {"entry": entry})), flush=True)
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
