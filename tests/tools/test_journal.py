"""The effect journal: a key per call, intent before the send, the result after; a replay
returns what was journaled without calling, and a call in flight at a crash is re-sent
with the same key, which the durable run record honours."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopkernel import NeedsApproval, TaskContext, ToolError
from loopkernel.errors import ReplayDivergence
from loopkernel.ids import RunId, TaskId
from loopkernel.store import EffectRecord, SQLiteStore
from loopkernel.tools import (
    CallInfo,
    ToolCallRequest,
    ToolLayer,
    allow_all,
    idempotency_key,
    read_ledger,
    require_approval,
)
from loopkernel.tools.testkit import faults_source, record_source
from loopkernel.tools.testkit.record import build_host

MakeCtx = Callable[..., TaskContext]
HERE = Path(__file__).parent


def keys_in(record: Path) -> list[str]:
    return [e["key"] for e in read_ledger(record)]


@pytest.mark.slow
def test_a_call_is_journaled_and_its_key_reaches_the_tool(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    record = tmp_path / "record.jsonl"

    async def scenario() -> None:
        async with ToolLayer(store, [record_source(record)], policy_hook=allow_all) as tools:
            ctx = make_ctx(tools, run_id="run-7", task_id="write")
            assert await ctx.call_tool("record", {"entry": "a"}) == {"seq": 1, "entry": "a"}
            assert await ctx.call_tool("record", {"entry": "b"}) == {"seq": 2, "entry": "b"}
            assert await ctx.call_tool("entries") == {"entries": read_ledger(record)}
        effects = await store.effects(RunId("run-7"))
        assert [(e.key, e.call_index, e.tool, e.effect, e.status) for e in effects] == [
            ("run-7/write/0", 0, "record", "idempotent", "done"),
            ("run-7/write/1", 1, "record", "idempotent", "done"),
            ("run-7/write/2", 2, "entries", "read_only", "done"),
        ]
        assert effects[1].arguments == {"entry": "b"}
        assert effects[1].result == {"seq": 2, "entry": "b"}

    asyncio.run(scenario())
    assert keys_in(record) == ["run-7/write/0", "run-7/write/1"]


@pytest.mark.slow
def test_a_re_executed_task_gets_journaled_results_without_calling(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    record = tmp_path / "record.jsonl"

    async def execute() -> tuple[list[Any], ToolLayer]:
        async with ToolLayer(store, [record_source(record)], policy_hook=allow_all) as tools:
            ctx = make_ctx(tools, attempt=len(keys_in(record)) + 1)
            out = [await ctx.call_tool("record", {"entry": e}) for e in ("a", "b")]
        return out, tools

    first, tools1 = asyncio.run(execute())
    again, tools2 = asyncio.run(execute())
    assert first == again == [{"seq": 1, "entry": "a"}, {"seq": 2, "entry": "b"}]
    assert tools1.spawns == 1 and tools1.sent == 2
    assert tools2.spawns == 0 and tools2.sent == 0  # the replay started no server at all
    assert keys_in(record) == ["run-1/t1/0", "run-1/t1/1"]


@pytest.mark.slow
def test_a_journaled_tool_error_is_raised_again_without_calling(
    store: SQLiteStore, make_ctx: MakeCtx
) -> None:
    async def execute() -> tuple[ToolError, ToolLayer]:
        async with ToolLayer(store, [faults_source()], policy_hook=allow_all) as tools:
            with pytest.raises(ToolError) as info:
                await make_ctx(tools).call_tool("fail", {"message": "once"})
        return info.value, tools

    first, _ = asyncio.run(execute())
    again, tools = asyncio.run(execute())
    assert type(again) is ToolError and tools.spawns == 0
    assert again.verdict() == first.verdict()  # byte-identical verdict after recovery
    assert first.verdict()["kind"] == "handler_error" and first.verdict()["tool"] == "fail"


@pytest.mark.slow
def test_a_call_in_flight_at_a_crash_is_resent_with_its_key(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    """The tool ran and answered, the process died before journaling: the re-send carries
    the same key, the record replays its first answer, and nothing is written twice."""
    record = tmp_path / "record.jsonl"
    key = idempotency_key("run-1", "t1", 0)

    async def scenario() -> None:
        # what the dead process left: the intent in the journal, the entry in the record
        await store.intend_effect(
            EffectRecord(
                run_id=RunId("run-1"),
                key=key,
                task_id=TaskId("t1"),
                call_index=0,
                tool="record",
                effect="idempotent",
                arguments={"entry": "a"},
                status="intended",
            )
        )

        first = await build_host(record).invoke(
            "record", {"entry": "a"}, CallInfo(tool="record", key=key)
        )
        async with ToolLayer(store, [record_source(record)], policy_hook=allow_all) as tools:
            assert await make_ctx(tools).call_tool("record", {"entry": "a"}) == first
            assert tools.sent == 1
        (effect,) = await store.effects(RunId("run-1"))
        assert (effect.status, effect.result) == ("done", first)

    asyncio.run(scenario())
    assert keys_in(record) == [key]


def test_a_task_that_calls_differently_on_replay_is_refused(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    async def scenario() -> None:
        await store.intend_effect(
            EffectRecord(
                run_id=RunId("run-1"),
                key="run-1/t1/0",
                task_id=TaskId("t1"),
                call_index=0,
                tool="record",
                effect="idempotent",
                arguments={"entry": "a"},
                status="intended",
            )
        )
        async with ToolLayer(
            store, [record_source(tmp_path / "r")], policy_hook=allow_all
        ) as tools:
            with pytest.raises(ReplayDivergence, match="does not make the same tool calls"):
                await make_ctx(tools).call_tool("record", {"entry": "B"})
            with pytest.raises(ReplayDivergence):
                await make_ctx(tools).call_tool("commit", {"entry": "a"})
            assert tools.spawns == 0

    asyncio.run(scenario())


def test_bad_arguments_are_refused_before_anything_is_journaled_or_spawned(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with ToolLayer(
            store, [record_source(tmp_path / "r")], policy_hook=allow_all
        ) as tools:
            ctx = make_ctx(tools)
            with pytest.raises(ToolError) as info:
                await ctx.call_tool("record", {"entry": 42})
            assert info.value.verdict()["kind"] == "invalid_arguments"
            assert "$.entry: 42 is not of type 'string'" in info.value.message
            with pytest.raises(ToolError, match="not JSON"):
                await ctx.call_tool("record", {"entry": float("inf")})
            with pytest.raises(ToolError) as info:
                await ctx.call_tool("nope")
            assert info.value.verdict()["kind"] == "unknown_tool"
            assert tools.spawns == 0
        assert await store.effects(RunId("run-1")) == []

    asyncio.run(scenario())


@pytest.mark.slow
def test_an_irreversible_call_waits_for_the_policy_hook(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    """A hook that parks the task: nothing is journaled or sent; resumed after approval,
    the hook sees the payload and the epoch and lets the call go, exactly once."""
    record = tmp_path / "record.jsonl"
    seen: list[ToolCallRequest] = []

    async def hook(request: ToolCallRequest) -> None:
        seen.append(request)
        if request.effect == "irreversible" and request.human_input != {"approved_by": "ops"}:
            raise NeedsApproval(f"{request.tool} needs a human", tool=request.tool)

    async def execute(**ctx_kw: Any) -> Any:
        async with ToolLayer(store, [record_source(record)], policy_hook=hook) as tools:
            ctx = make_ctx(tools, **ctx_kw)
            first = await ctx.call_tool("record", {"entry": "draft"})
            return first, await ctx.call_tool("commit", {"entry": "ship it"}), tools

    with pytest.raises(NeedsApproval) as parked:
        asyncio.run(execute())
    assert parked.value.tool == "commit"
    assert keys_in(record) == ["run-1/t1/0"]  # the draft went out; the commit did not
    assert [e.key for e in asyncio.run(store.effects(RunId("run-1")))] == ["run-1/t1/0"]

    first, committed, tools = asyncio.run(
        execute(human_input={"approved_by": "ops"}, wait_epoch=1, attempt=2)
    )
    assert first == {"seq": 1, "entry": "draft"}  # replayed from the journal, not re-sent
    assert committed == {"seq": 2, "entry": "ship it"} and tools.sent == 1
    assert keys_in(record) == ["run-1/t1/0", "run-1/t1/1"]
    # the hook saw each call the first time only; the approved one with payload and epoch
    assert [(r.tool, r.effect, r.wait_epoch) for r in seen] == [
        ("record", "idempotent", 0),
        ("commit", "irreversible", 0),
        ("commit", "irreversible", 1),
    ]
    assert seen[-1].human_input == {"approved_by": "ops"} and seen[-1].key == "run-1/t1/1"


def test_the_default_hook_asks_once_per_irreversible_call() -> None:
    def request(effect: str, epoch: int, seq: int) -> ToolCallRequest:
        return ToolCallRequest(
            run_id=RunId("r"),
            task_id=TaskId("t"),
            attempt=1,
            call_index=0,
            key="r/t/0",
            tool="commit",
            source="s",
            effect=effect,  # type: ignore[arg-type]
            arguments={},
            human_input=None,
            wait_epoch=epoch,
            irreversible_seq=seq,
        )

    require_approval(request("read_only", 0, 0))
    require_approval(request("idempotent", 0, 0))
    with pytest.raises(NeedsApproval, match="irreversible"):
        require_approval(request("irreversible", 0, 1))
    require_approval(request("irreversible", 1, 1))  # approved once: the first may go
    with pytest.raises(NeedsApproval):
        require_approval(request("irreversible", 1, 2))  # the second needs its own


@pytest.mark.slow
@pytest.mark.parametrize("point", ["tool_sent", "tool_returned"])
def test_a_real_crash_at_a_tool_crash_point_ends_with_one_effect(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path, point: str
) -> None:
    record = tmp_path / "record.jsonl"
    env = dict(os.environ, LOOPKERNEL_CRASH_AT=point)
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "_crash_call.py"),
            str(store.path),
            str(record),
            "run-1",
            "t1",
            "x",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout == ""
    (effect,) = asyncio.run(store.effects(RunId("run-1")))
    assert effect.status == "intended"
    # sent: the server never saw it; returned: the server wrote it, the journal did not
    assert keys_in(record) == ([] if point == "tool_sent" else ["run-1/t1/0"])

    async def resume() -> Any:
        async with ToolLayer(store, [record_source(record)], policy_hook=allow_all) as tools:
            return await make_ctx(tools, attempt=2).call_tool("record", {"entry": "x"})

    assert asyncio.run(resume()) == {"seq": 1, "entry": "x"}
    assert keys_in(record) == ["run-1/t1/0"]
    (effect,) = asyncio.run(store.effects(RunId("run-1")))
    assert (effect.status, effect.result) == ("done", {"seq": 1, "entry": "x"})
