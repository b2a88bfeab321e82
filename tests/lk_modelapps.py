"""Apps that ask a model, for subprocess tests (`one_ask`, `boundary`)."""

from __future__ import annotations

import asyncio
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
from loopkernel.models import Message

SERVERS = Path(__file__).parent / "models" / "servers"


class One(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="ask", skill="ask"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", snapshot.task("ask").result)


async def ask(ctx: TaskContext) -> Any:
    reply = await ctx.complete(
        [Message(role="user", content=str(ctx.params["prompt"]))], max_tokens=24
    )
    return {"text": reply.text, "tokens": reply.output_tokens, "cost_usd": reply.cost_usd}


async def ask_and_look(ctx: TaskContext) -> Any:
    """Ask, call a tool server that lists its environment, and keep this process's own
    /proc/self/environ in a file for the test to search."""
    answer = await ask(ctx)
    out, environ = Path(str(ctx.params["environ_out"])), Path("/proc/self/environ")
    await asyncio.to_thread(out.write_bytes, await asyncio.to_thread(environ.read_bytes))
    tool = await ctx.call_tool("environ_names")
    return {**answer, "tool_env": tool["names"]}


def _ask(params: Mapping[str, Any]) -> AppParts:
    return AppParts(planner=One(), workers={"ask": ask})


def _boundary(params: Mapping[str, Any]) -> AppParts:
    from loopkernel.tools import ToolLayer, ToolSource, allow_all

    source = ToolSource(name="env", command=(sys.executable, str(SERVERS / "env_server.py")))
    return AppParts(
        planner=One(),
        workers={"ask": ask_and_look},
        tool_layer=lambda store: ToolLayer(store, [source], policy_hook=allow_all),
    )


one_ask = App(
    name="lk_modelapps:one_ask",
    description="one task that asks the model",
    build=_ask,
    defaults={"prompt": "Say hello."},
)
boundary = App(
    name="lk_modelapps:boundary",
    description="ask the model, list a tool server's environment, keep /proc/self/environ",
    build=_boundary,
    defaults={"prompt": "Say hello.", "environ_out": "environ.bin"},
)
