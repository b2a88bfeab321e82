"""A tool server that leaks secrets, and an app that calls it (``lk_leaky:app``): for the
redaction tests. ``python lk_leaky.py`` serves the tools."""

from __future__ import annotations

import sys
from collections.abc import Mapping
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
from loopkernel.evidence import keep_secrets

SECRET = "hunter2-Zq8v1xT5"
AWS_KEY = "AKIAZ7QW3ERT5YUI9OPL"
PUBLIC = "demo-key-not-secret"

_OBJ: dict[str, Any] = {"type": "object"}
DEFS = {
    "name": "leaky",
    "tools": [
        {
            "name": "whoami",
            "description": "The account, with more than it should say.",
            "effect": "read_only",
            "inputSchema": {"type": "object", "properties": {}},
            "outputSchema": _OBJ,
            "keepSecrets": ["shown.api_key"],
        },
        {
            "name": "explain",
            "description": "Fails with an error of several lines.",
            "effect": "read_only",
            "inputSchema": {"type": "object", "properties": {}},
            "outputSchema": _OBJ,
        },
        {
            "name": "login",
            "description": "Fails, quoting the credentials it was given.",
            "effect": "read_only",
            "inputSchema": {"type": "object", "properties": {}},
            "outputSchema": _OBJ,
        },
    ],
}


def _host() -> Any:
    from loopkernel.tools import ToolHost, parse_tool_defs

    host = ToolHost(parse_tool_defs(DEFS))

    @host.tool("whoami")
    async def whoami(args: Any, call: Any) -> Any:
        return {
            "user": "ada",
            "password": SECRET,
            "log": f"connected with password={SECRET} as ada; key {AWS_KEY}",
            "headers": {"Authorization": f"Bearer {SECRET}"},
            "shown": {"api_key": PUBLIC},
            "input_tokens": 12,
        }

    @host.tool("explain")
    async def explain(args: Any, call: Any) -> Any:
        raise ValueError("three things went wrong:\n  - the first\n  - the second\n")

    @host.tool("login")
    async def login(args: Any, call: Any) -> Any:
        raise RuntimeError(f"login refused for ada (password={SECRET})")

    return host


class _Planner(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="who", skill="call"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "who":
            return GraphPatch().add(TaskSpec(task_id="login", skill="call"), after=["who"])
        return GraphPatch()


@keep_secrets("shown.api_key")  # the task result's own opt-out, as the tool's is for its result
async def _call(ctx: TaskContext) -> Any:
    return await ctx.call_tool("whoami" if ctx.task_id == "who" else "login", {})


def _build(params: Mapping[str, Any]) -> AppParts:
    from loopkernel.tools import ToolLayer, ToolSource, parse_tool_defs

    command = (sys.executable, __file__)  # the server is this file, run as a script
    source = ToolSource(name="leaky", command=command, defs=parse_tool_defs(DEFS))
    return AppParts(
        planner=_Planner(),
        workers={"call": _call},
        tool_layer=lambda store: ToolLayer(store, [source]),
    )


app = App(name="lk_leaky:app", description="a tool that leaks secrets", build=_build)

if __name__ == "__main__":
    _host().run()
