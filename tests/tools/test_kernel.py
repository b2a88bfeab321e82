"""The tool layer under the real Kernel: tool failures become persisted run verdicts that
name the tool and the kind; an irreversible call parks its task until a human approves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    KernelParts,
    RunStatus,
    Snapshot,
    TaskContext,
    TaskSpec,
)
from loopkernel.store import SQLiteStore
from loopkernel.tools import ToolLayer, ToolSource, allow_all, read_ledger
from loopkernel.tools.testkit import faults_source, record_source

pytestmark = pytest.mark.slow


class OneTask(BasePlanner):
    """One task, ``call``; the run succeeds with its result."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="call", skill="call"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", {"result": snapshot.task("call").result})


def worker_calling(tool: str, args: dict[str, Any]) -> Any:
    async def work(ctx: TaskContext) -> Any:
        return await ctx.call_tool(tool, args)

    return work


@pytest.mark.parametrize(
    ("source", "tool", "args", "error_type", "kind"),
    [
        (faults_source(), "wrong_type", {}, "ToolError", "invalid_output"),
        (faults_source("--refuse"), "echo", {"text": "x"}, "ToolUnavailable", "cannot_start"),
    ],
    # A timeout is a fault that may pass: the run stays resumable (test_transient.py).
    ids=["error", "unavailable"],
)
def test_a_tool_failure_is_the_runs_persisted_verdict(
    tmp_path: Path, source: ToolSource, tool: str, args: dict[str, Any], error_type: str, kind: str
) -> None:
    async def scenario() -> Any:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        async with ToolLayer(store, [source], policy_hook=allow_all) as tools:
            kernel = Kernel(
                store,
                OneTask(),
                {"call": worker_calling(tool, args)},
                parts=KernelParts(tools=tools),
            )
            started = await kernel.start(app="tools-test")
            outcome = await kernel.run(started.run_id)
        assert outcome.status is RunStatus.FAILED
        info = await store.get_run(started.run_id)
        await store.close()
        return info

    info = asyncio.run(scenario())
    assert info.status is RunStatus.FAILED
    assert info.verdict["type"] == error_type
    assert info.verdict["kind"] == kind
    assert info.verdict["tool"] == tool
    assert info.verdict["task_id"] == "call"


def test_an_irreversible_call_parks_the_task_until_approved(tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    seen: list[tuple[Any, int]] = []

    async def commit(ctx: TaskContext) -> Any:
        seen.append((ctx.human_input, ctx.wait_epoch))
        draft = await ctx.call_tool("record", {"entry": "draft"})
        done = await ctx.call_tool("commit", {"entry": "ship"})
        return {"draft": draft["seq"], "commit": done["seq"]}

    async def scenario() -> Any:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        # the default policy hook: irreversible calls wait for a human
        async with ToolLayer(store, [record_source(record)]) as tools:
            kernel = Kernel(store, OneTask(), {"call": commit}, parts=KernelParts(tools=tools))
            started = await kernel.start(app="tools-test")
            parked = await kernel.run(started.run_id)
            assert parked.status is RunStatus.WAITING
            assert [e["key"] for e in read_ledger(record)] == [f"{started.run_id}/call/0"]
            await store.add_human_input(
                started.run_id, "call", decision="approve", payload={"by": "ops"}
            )
            finished = await kernel.run(started.run_id)
        effects = await store.effects(started.run_id)
        await store.close()
        return started.run_id, finished, effects

    run_id, finished, effects = asyncio.run(scenario())
    assert finished.status is RunStatus.SUCCEEDED
    assert finished.verdict == {"result": {"draft": 1, "commit": 2}}
    assert seen == [(None, 0), ({"by": "ops"}, 1)]
    assert [e["key"] for e in read_ledger(record)] == [f"{run_id}/call/0", f"{run_id}/call/1"]
    assert [(e.tool, e.status) for e in effects] == [("record", "done"), ("commit", "done")]
