"""Any stdio MCP server attaches by its command line alone: tools and schemas come from
tools/list, effect classes from its annotations (or the config), and its calls get the
same validation, journal and error kinds as ours."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopkernel import TaskContext, ToolError
from loopkernel.ids import RunId
from loopkernel.store import SQLiteStore
from loopkernel.tools import ToolLayer, ToolSource, allow_all

pytestmark = pytest.mark.slow

SERVER = Path(__file__).parent / "servers" / "third_party.py"
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(SERVER))}"


def test_a_third_party_server_needs_only_its_command_line(
    store: SQLiteStore, make_ctx: Callable[..., TaskContext]
) -> None:
    source = ToolSource.from_command("weather", COMMAND, effects={"shout": "read_only"})

    async def scenario() -> None:
        async with ToolLayer(store, [source], policy_hook=allow_all) as tools:
            listed = {t.name: t for _, t in await tools.list_tools()}
            assert set(listed) == {"forecast", "shout", "broken"}
            # effect classes: annotations, the config's override, the safe default
            assert listed["forecast"].effect == "read_only"
            assert listed["shout"].effect == "read_only"
            assert listed["broken"].effect == "idempotent"
            assert listed["forecast"].input_schema["required"] == ["city"]

            ctx = make_ctx(tools)
            forecast = await ctx.call_tool("forecast", {"city": "Oslo", "days": 2})
            assert forecast == {"city": "Oslo", "days": 2, "sky": "clear"}
            assert await ctx.call_tool("shout", {"text": "hi"}) == {"result": "HI"}

            # its derived inputSchema is enforced before the call leaves
            with pytest.raises(ToolError) as info:
                await ctx.call_tool("forecast", {"city": "Oslo", "days": "2"})
            assert info.value.verdict()["kind"] == "invalid_arguments"
            sent = tools.sent

            with pytest.raises(ToolError) as info:
                await ctx.call_tool("broken", {"reason": "x"})
            assert info.value.verdict()["kind"] == "handler_error"
            assert tools.sent == sent + 1 and tools.spawns == 1

        effects = await store.effects(RunId("run-1"))
        assert [(e.tool, e.effect, e.status) for e in effects] == [
            ("forecast", "read_only", "done"),
            ("shout", "read_only", "done"),
            ("broken", "idempotent", "failed"),
        ]

    asyncio.run(scenario())


def test_a_tool_without_annotations_is_treated_as_irreversible(
    store: SQLiteStore, make_ctx: Callable[..., TaskContext]
) -> None:
    source = ToolSource.from_command("weather", COMMAND)

    async def scenario() -> Any:
        async with ToolLayer(store, [source]) as tools:  # the default hook
            return await tools.resolve("shout")

    assert asyncio.run(scenario())[1].effect == "irreversible"
