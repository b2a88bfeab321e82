"""A test app whose tool server records its pid first thing: ``lk_startup:app``.

``--set pidfile=PATH`` names the file the server appends its pid to as soon as it runs;
``--set mode=serve`` then makes it the fault tool set (``echo`` ...), ``mode=hang`` makes
it sleep without ever answering (a server still starting), ``mode=missing`` names a
command that does not exist. The run is one task that
calls ``echo`` once; ``--set fail_plan=true`` makes the first planning raise instead (a
run that fails before its first tool call).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loopkernel import (
    App,
    AppParts,
    BasePlanner,
    Event,
    GraphPatch,
    Snapshot,
    TaskContext,
    TaskSpec,
)
from loopkernel.tools import ToolLayer, ToolSource, allow_all, load_tool_defs

SERVER = """
import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
if sys.argv[2] == "hang":
    time.sleep(600)
else:
    os.execv(sys.executable, [sys.executable, "-m", "loopkernel.tools.testkit.faults"])
"""


def source(pidfile: str | os.PathLike[str], mode: str = "serve") -> ToolSource:
    """The recording server as a tool source (with the fault set's frozen defs)."""
    from loopkernel.tools.testkit import FAULTS_DEFS

    command = (sys.executable, "-c", SERVER, str(Path(pidfile)), mode)
    if mode == "missing":
        command = ("/nonexistent/lk-tool-server", str(Path(pidfile)))
    return ToolSource(name="faults", command=command, defs=load_tool_defs(FAULTS_DEFS))


class EchoOnce(BasePlanner):
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if self.fail:
            raise RuntimeError("the planner failed before any tool call")
        return GraphPatch().add(TaskSpec(task_id="echo", skill="echo"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", snapshot.task("echo").result)


async def echo(ctx: TaskContext) -> Any:
    return await ctx.call_tool("echo", {"text": "hi"})


def _build(params: Mapping[str, Any]) -> AppParts:
    src = source(str(params["pidfile"]), str(params["mode"]))
    return AppParts(
        planner=EchoOnce(bool(params["fail_plan"])),
        workers={"echo": echo},
        tool_layer=lambda store: ToolLayer(store, [src], policy_hook=allow_all),
    )


app = App(
    name="lk_startup:app",
    description="one echo call on a server that records its pid",
    build=_build,
    defaults={"pidfile": "server.pids", "mode": "serve", "fail_plan": False},
)
