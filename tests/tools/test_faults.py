"""The six faults, each with a real MCP server in a real subprocess, through the whole layer.

Each call raises the error kind a caller can act on, and never hangs. No test bounds a
call's duration from above (that is a timing aim, for bench/): a slow tool sleeps an hour,
so a deadline that is not enforced, or a dead server that is not noticed, hangs the test
into its timeout instead of passing. A deadline is checked from below only (it must not
fire early), which no load can break.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopkernel import TaskContext, ToolError, ToolTimeout, ToolUnavailable
from loopkernel.store import SQLiteStore
from loopkernel.tools import CallRules, RetryPolicy, ToolLayer, ToolSource, allow_all
from loopkernel.tools.testkit import faults_source

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

KEY = "run-1/t1/{}"
HOUR = 3600
MakeCtx = Callable[..., TaskContext]


def layer(store: SQLiteStore, *sources: ToolSource, **kw: Any) -> ToolLayer:
    # One send per call: these tests read the error of each fault; the retry policies
    # that re-send the ones that may pass are tests/tools/test_transient.py's.
    kw.setdefault("rules", CallRules(retry=RetryPolicy(attempts=1)))
    return ToolLayer(store, sources or [faults_source()], policy_hook=allow_all, **kw)


async def timed(coro: Any) -> tuple[float, BaseException | None, Any]:
    start = time.monotonic()
    try:
        value = await coro
    except Exception as exc:
        return time.monotonic() - start, exc, None
    return time.monotonic() - start, None, value


def test_wrong_type_raise_and_timeout_keep_the_session(
    store: SQLiteStore, make_ctx: MakeCtx
) -> None:
    async def scenario() -> None:
        async with layer(store, faults_source(timeouts={"slow": 0.3})) as tools:
            ctx = make_ctx(tools)
            assert await ctx.call_tool("echo", {"text": "warm"}) == {"text": "warm"}

            took, err, _ = await timed(ctx.call_tool("wrong_type"))
            assert isinstance(err, ToolError) and err.attrs["kind"] == "invalid_output"
            assert "'0.40' is not of type 'number'" in err.message

            took, err, _ = await timed(ctx.call_tool("fail", {"message": "no disk"}))
            assert type(err) is ToolError and err.attrs["kind"] == "handler_error"
            assert "RuntimeError: no disk" in err.message

            # the tool's deadline (ToolSource.timeouts) ...
            took, err, _ = await timed(ctx.call_tool("slow", {"seconds": HOUR}))
            assert isinstance(err, ToolTimeout) and err.attrs["kind"] == "timeout"
            assert err.attrs["timeout"] == 0.3 and took >= 0.3
            v = err.verdict()
            assert (v["type"], v["kind"], v["tool"]) == ("ToolTimeout", "timeout", "slow")
            # ... and one call's own deadline
            took, err, _ = await timed(tools.call(ctx, 99, "slow", {"seconds": HOUR}, timeout=0.6))
            assert isinstance(err, ToolTimeout) and err.attrs["timeout"] == 0.6
            assert took >= 0.6

            # the caller gives up (the kernel cancels a task in flight): same outcome
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(tools.call(ctx, 98, "slow", {"seconds": HOUR}), 0.3)

            # the session survived them all: the same process answers the next call
            _, err, value = await timed(ctx.call_tool("echo", {"text": "still here"}))
            assert err is None and value == {"text": "still here"}
            assert tools.spawns == 1

        effects = {e.key: e for e in await store.effects("run-1")}
        assert effects[KEY.format(0)].status == "done"
        assert effects[KEY.format(1)].status == "failed"
        assert effects[KEY.format(1)].error["kind"] == "invalid_output"
        assert effects[KEY.format(2)].error["kind"] == "handler_error"
        # a timeout leaves the call intended: nobody knows whether it had its effect
        assert effects[KEY.format(3)].status == "intended"
        assert effects[KEY.format(99)].status == "intended"
        assert effects[KEY.format(98)].status == "intended"

    asyncio.run(scenario())


def test_a_server_that_dies_is_restarted_once_and_the_call_resent(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    restarts: list[tuple[str, str]] = []

    async def on_restart(source: str, reason: str) -> None:
        restarts.append((source, reason))

    async def scenario() -> None:
        async with layer(store, on_restart=on_restart) as tools:
            ctx = make_ctx(tools)
            marker = tmp_path / "died-once"
            _, err, value = await timed(ctx.call_tool("crash_once", {"marker": str(marker)}))
            assert err is None and value == {"survived": True}
            # the re-sent call carried the same idempotency key as the one that killed it
            assert marker.read_text() == KEY.format(0)
            assert tools.restarts == {"faults": 1} and tools.spawns == 2
            assert [(r.source, r.tool, r.count) for r in tools.restart_log] == [
                ("faults", "crash_once", 1)
            ]

            # the budget is spent: the next death is final, and says so
            _, err, _ = await timed(ctx.call_tool("crash"))
            assert isinstance(err, ToolUnavailable) and err.attrs["kind"] == "server_died"
            assert "died again" in err.message
            # and the source stays gone, without spawning again
            _, err, _ = await timed(ctx.call_tool("echo", {"text": "x"}))
            assert isinstance(err, ToolUnavailable) and err.attrs["kind"] == "server_died"
            assert err.attrs["tool"] == "echo" and tools.spawns == 2

    asyncio.run(scenario())
    assert len(restarts) == 1 and restarts[0][0] == "faults"
    assert "server_died" in restarts[0][1] and "crash_once" in restarts[0][1]


def test_crash_every_time_is_unavailable_after_one_restart(
    store: SQLiteStore, make_ctx: MakeCtx
) -> None:
    async def scenario() -> None:
        async with layer(store) as tools:
            _, err, _ = await timed(make_ctx(tools).call_tool("crash"))
            assert isinstance(err, ToolUnavailable) and err.attrs["kind"] == "server_died"
            assert tools.restarts == {"faults": 1} and tools.spawns == 2
        (effect,) = await store.effects("run-1")
        assert effect.status == "intended"  # unknown outcome: a resumed run re-sends it

    asyncio.run(scenario())


def test_garbage_on_stdout_fails_the_call_at_once(store: SQLiteStore, make_ctx: MakeCtx) -> None:
    async def scenario() -> None:
        async with layer(store) as tools:
            ctx = make_ctx(tools)
            await ctx.call_tool("echo", {"text": "open the session first"})
            # An hour's deadline: only the pump seeing the line can end this call in time.
            _, err, _ = await timed(tools.call(ctx, 1, "garbage", {}, timeout=HOUR))
            assert isinstance(err, ToolUnavailable) and err.attrs["kind"] == "not_mcp"
            assert "this line is not JSON-RPC" in err.message
            assert tools.restarts == {"faults": 0}  # garbage is not restarted

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("source", "kind", "detail"),
    [
        (faults_source("--refuse"), "cannot_start", "refusing to start (--refuse)"),
        (faults_source("--garbage-at-start"), "not_mcp", "faults server starting..."),
        (ToolSource(name="faults", command=("no-such-server-xyz",)), "cannot_start", "not found"),
        (
            ToolSource(name="faults", command=("sleep", str(HOUR)), start_timeout=0.5),
            "not_mcp",
            "no MCP answer to initialize within 0.5 s",
        ),
    ],
    ids=["refuse", "garbage-at-start", "missing-command", "silent"],
)
def test_a_server_that_will_not_start_is_unavailable(
    store: SQLiteStore, make_ctx: MakeCtx, source: ToolSource, kind: str, detail: str
) -> None:
    async def scenario() -> None:
        async with ToolLayer(store, [source], policy_hook=allow_all) as tools:
            # no defs for the last two sources: resolving the tool needs the server
            _, err, _ = await timed(make_ctx(tools).call_tool("echo", {"text": "x"}))
            assert isinstance(err, ToolUnavailable), err
            assert err.attrs["kind"] == kind and detail in err.message
            assert err.attrs["tool"] == "echo"
            assert await store.effects("run-1") == []  # nothing was sent, nothing journaled

    asyncio.run(scenario())


def test_the_client_checks_output_a_third_party_server_lies_about(
    store: SQLiteStore, make_ctx: MakeCtx, script_source: Callable[..., ToolSource]
) -> None:
    source = script_source("lying", "lying.py")

    async def scenario() -> None:
        async with ToolLayer(store, [source], policy_hook=allow_all) as tools:
            _, err, _ = await timed(make_ctx(tools).call_tool("quote"))
            assert isinstance(err, ToolError) and err.attrs["kind"] == "invalid_output"
            assert "'0.40' is not of type 'number'" in err.message

    asyncio.run(scenario())
