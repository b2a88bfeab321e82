"""Tool faults that may pass vs final ones, with real MCP servers in real processes.

A handler out of disk (ENOSPC), a timeout, a dead server: re-sent under the same key by
the tool's retry policy; when the policy is spent the run is left ``running`` and
``resume`` re-sends the call under the same key. An irreversible tool is sent once: a
handler out of disk closes its key and ``resume`` sends it anew under the next one (a dead
server or a timeout is an unknown outcome: tests/tools/test_unknown_outcome.py). A final
error (the handler raised anything else, bad output) fails the task, and is not re-sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import cli_env
from loopkernel import KernelParts, RunStatus, TaskContext, ToolError
from loopkernel.errors import ToolTransientError, TransientFault, UsageError
from loopkernel.store import SQLiteStore
from loopkernel.testing import run_cli
from loopkernel.tools import (
    DEFAULT_RETRY,
    RetryPolicy,
    ToolLayer,
    allow_all,
    is_transient,
    load_tool_defs,
    parse_tool_defs,
)
from loopkernel.tools.testkit import FAULTS_DEFS, faults_source

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

MakeCtx = Callable[..., TaskContext]


def call(store: SQLiteStore, make_ctx: MakeCtx, tool: str, args: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with ToolLayer(store, [faults_source()], policy_hook=allow_all) as tools:
            try:
                return await make_ctx(tools).call_tool(tool, args)
            except Exception as exc:
                return exc

    return asyncio.run(go())


def effects(store: SQLiteStore) -> list[tuple[str, str]]:
    return [(e.key, e.status) for e in asyncio.run(store.effects("run-1"))]  # type: ignore[arg-type]


def test_a_handler_out_of_disk_is_re_sent_under_its_key_until_it_passes(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    marker = tmp_path / "m"
    assert call(store, make_ctx, "flaky", {"marker": str(marker), "failures": 2}) == {"tries": 3}
    assert marker.read_text() == "3"
    assert effects(store) == [("run-1/t1/0", "done")]


def test_a_fault_that_outlasts_the_policy_leaves_the_effect_intended(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    marker = tmp_path / "m"
    err = call(store, make_ctx, "flaky", {"marker": str(marker), "failures": 10})
    assert type(err) is ToolTransientError and err.attrs["kind"] == "handler_transient", err
    assert err.gave_up and err.verdict()["transient"] is True and err.attrs["sent"] == 3
    assert "No space left on device" in err.message and is_transient(err)
    assert marker.read_text() == "3"  # the declared policy: 3 sends
    assert effects(store) == [("run-1/t1/0", "intended")]  # not an answer: nothing concluded


def test_an_irreversible_tool_is_never_re_sent_by_the_layer(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    marker = tmp_path / "m"
    err = call(store, make_ctx, "flaky_send", {"marker": str(marker), "failures": 1})
    assert isinstance(err, ToolTransientError) and err.gave_up, err
    assert err.attrs["sent"] == 1 and err.attrs["effect"] == "irreversible"
    assert marker.read_text() == "1"
    # The handler answered that it did nothing: the journal closes the key, and the
    # resumed task sends the call anew under the next one (never the same key twice).
    assert effects(store) == [("run-1/t1/0", "failed")]
    assert call(store, make_ctx, "flaky_send", {"marker": str(marker), "failures": 1}) == {
        "tries": 2
    }
    assert effects(store) == [("run-1/t1/0", "failed"), ("run-1/t1/0/resend/1", "done")]
    # Replayed again, the decision is followed: nothing is sent.
    assert call(store, make_ctx, "flaky_send", {"marker": str(marker), "failures": 1}) == {
        "tries": 2
    }
    assert marker.read_text() == "2"


def test_a_final_error_is_journaled_and_not_re_sent(store: SQLiteStore, make_ctx: MakeCtx) -> None:
    err = call(store, make_ctx, "fail", {"message": "bad input"})
    assert type(err) is ToolError and err.attrs["kind"] == "handler_error"
    assert not is_transient(err)
    assert effects(store) == [("run-1/t1/0", "failed")]


def test_a_timeout_of_a_read_only_tool_is_retried_then_leaves_the_run_running(
    tmp_path: Path,
) -> None:
    from loopkernel import BasePlanner, Event, GraphPatch, Kernel, Snapshot, TaskSpec

    class One(BasePlanner):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().add(TaskSpec(task_id="call", skill="call"))

        def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().finish("succeeded", None)

    async def slow(ctx: TaskContext) -> Any:
        return await ctx.call_tool("slow", {"seconds": 30})

    async def scenario() -> Any:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        source = faults_source(timeouts={"slow": 0.2})
        async with ToolLayer(store, [source], policy_hook=allow_all) as tools:
            kernel = Kernel(store, One(), {"call": slow}, parts=KernelParts(tools=tools))
            started = await kernel.start(app="t")
            with pytest.raises(TransientFault) as fault:
                await kernel.run(started.run_id)
            sent = tools.sent
        info = await store.get_run(started.run_id)
        tasks = (await store.load_run(started.run_id)).state.tasks
        await store.close()
        return fault.value, sent, info, tasks

    fault, sent, info, tasks = asyncio.run(scenario())
    assert fault.attrs["cause"] == "ToolTimeout" and fault.attrs["sent"] == DEFAULT_RETRY.attempts
    assert sent == DEFAULT_RETRY.attempts
    assert info.status is RunStatus.RUNNING and info.verdict is None
    assert tasks["call"].state.value == "running"  # resumable: it runs again on resume


def test_the_cli_leaves_a_run_resumable_on_a_passing_fault_and_resume_finishes_it(
    tmp_path: Path,
) -> None:
    db, marker = tmp_path / "runs.db", tmp_path / "m"
    sets = ["--set", f"marker={marker}", "--set", "failures=5"]
    first = run_cli(
        ["run", "lk_testapps:flaky", "--run-id", "f", "--quiet", *sets], db=db, env=cli_env()
    )
    assert first.returncode == 6, first.stderr  # still running
    [line] = first.stderr.strip().splitlines()
    assert "task 'call' stopped on a fault that may pass" in line
    assert "No space left on device" in line and "sent 3 time(s)" in line
    assert line.endswith(f"run f is left resumable: loopkernel --db {db} resume f")
    resumed = run_cli(["resume", "f", "--json"], db=db, env=cli_env())
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["verdict"] == {"tries": 6}


def test_retry_policies_are_declared_in_the_defs_and_irreversible_ones_refused() -> None:
    defs = load_tool_defs(FAULTS_DEFS)
    flaky, send, slow = defs.get("flaky"), defs.get("flaky_send"), defs.get("slow")
    assert flaky is not None and send is not None and slow is not None
    assert flaky.retry_policy == RetryPolicy(attempts=3, backoff=0.05, max_backoff=0.2)
    assert slow.retry_policy == DEFAULT_RETRY  # read_only, nothing declared
    assert send.retry_policy.attempts == 1
    assert [RetryPolicy(backoff=0.5).delay(n) for n in (1, 2, 3, 5)] == [0.5, 1.0, 2.0, 5.0]
    raw = json.loads(FAULTS_DEFS.read_text())
    for tool in raw["tools"]:
        if tool["name"] == "flaky_send":
            tool["retry"] = {"attempts": 2}
    with pytest.raises(UsageError, match="an irreversible tool is never re-sent"):
        parse_tool_defs(raw)
    with pytest.raises(UsageError, match="retry must be an object"):
        parse_tool_defs({"tools": [{**raw["tools"][0], "retry": {"tries": 2}}]})
