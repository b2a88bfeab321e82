"""The Python API both ways (issue 24, section 4): ``loopkernel.sync`` from a plain script
and from inside a running event loop, plain ``def`` workers, approve / reject / cancel
from Python."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import cli_env
from loopkernel import (
    BasePlanner,
    Event,
    ExecutionConfig,
    GraphPatch,
    Kernel,
    RunStatus,
    Snapshot,
    SQLiteStore,
    TaskContext,
    TaskSpec,
    UsageError,
    sync,
)

SCRIPT = """
from loopkernel import sync

with sync.Client({db!r}) as client:
    started, outcome = client.run_app("lk_testapps:gate", run_id="g")
    print("first", outcome.status.value, [t.task_id for t in client.waiting("g")])
    event = client.decide("g", "gate", "approve", payload={{"by": "ops"}}, token=started.token)
    print("decided", event.kind.value)
    print("then", client.execute("g").status.value)
    started, _ = client.run_app("lk_testapps:gate", run_id="h")
    print("cancel", client.cancel("h", "not today").value, client.info("h").verdict)
"""


def test_a_plain_script_runs_approves_and_cancels(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(db=db)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "first waiting ['gate']",
        "decided human_input",
        "then succeeded",
        "cancel cancelled {'kind': 'cancelled', 'reason': 'not today'}",
    ], out.stdout


def test_inside_a_running_event_loop_it_does_not_deadlock(tmp_path: Path) -> None:
    """As in Jupyter: sync code called from a coroutine, its loop running in this thread."""
    db = str(tmp_path / "runs.db")

    async def notebook_cell() -> tuple[str, str, list[str]]:
        asyncio.get_running_loop()  # a loop runs in this thread, as in a notebook
        with sync.Client(db) as client:
            _, outcome = client.run_app("lk_testapps:gate", run_id="nb")
            client.decide("nb", "gate", "reject", local=True)
            after = client.execute("nb")
            runs = [r.run_id for r in client.list_runs()]
        return outcome.status.value, after.status.value, runs

    first, after, runs = asyncio.run(notebook_cell())
    assert (first, runs) == ("waiting", ["nb"])
    assert after in ("succeeded", "failed")  # the gate planner's answer to a rejection
    with sync.Client(db, create=False) as client:
        ins = client.inspect("nb", journal=True)
        assert ins.events is not None
        assert [e.kind.value for e in ins.events].count("human_input") == 1


def test_call_runs_any_coroutine_and_refuses_to_wait_for_itself(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    sync.call(store.open())
    kernel = Kernel(store, Chain(), {"w": plain_worker})
    started = sync.call(kernel.start(app="chain"))
    outcome = sync.call(kernel.run(started.run_id))
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.verdict == {"sum": 3, "threads": True}

    async def inner() -> None:
        sync.call(asyncio.sleep(0))  # from the loop's own thread: would wait for itself

    with pytest.raises(UsageError, match="wait for itself"):
        sync.call(inner())
    sync.call(store.close())


class Chain(BasePlanner):
    """one -> two (both plain ``def`` workers) -> finish with the sum of their results."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return (
            GraphPatch()
            .add(TaskSpec(task_id="one", skill="w", input={"n": 1}))
            .add(TaskSpec(task_id="two", skill="w", input={"n": 2}), after=["one"])
        )

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id != "two":
            return GraphPatch()
        one, two = snapshot.task("one").result, snapshot.task("two").result
        return GraphPatch().finish(
            "succeeded", {"sum": one["n"] + two["n"], "threads": one["thread"] and two["thread"]}
        )


def plain_worker(ctx: TaskContext) -> dict[str, Any]:
    """A plain ``def``: it runs in a thread, never on the event loop's."""
    off_loop = threading.current_thread() is not threading.main_thread()
    try:
        asyncio.get_running_loop()
        off_loop = False
    except RuntimeError:
        pass
    return {"n": ctx.input["n"], "thread": off_loop}


def test_a_plain_def_worker_runs_in_a_thread_and_the_run_succeeds(tmp_path: Path) -> None:
    async def go() -> tuple[RunStatus, Any]:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        try:
            kernel = Kernel(store, Chain(), {"w": plain_worker})
            started = await kernel.start(app="chain")
            outcome = await kernel.run(started.run_id)
            return outcome.status, outcome.verdict
        finally:
            await store.close()

    assert asyncio.run(go()) == (RunStatus.SUCCEEDED, {"sum": 3, "threads": True})


def test_a_worker_that_is_not_callable_is_refused_at_construction(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    with pytest.raises(UsageError, match="skill 'w' is a list, not a callable"):
        Kernel(store, Chain(), {"w": [1, 2]})  # type: ignore[dict-item]
    assert not (tmp_path / "runs.db").exists()


class Race(BasePlanner):
    """slow (a plain def, blocked) and fast; fast's completion cancels slow."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return (
            GraphPatch()
            .add(TaskSpec(task_id="slow", skill="slow"))
            .add(TaskSpec(task_id="fast", skill="fast"))
        )

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "fast":
            return GraphPatch().cancel("slow").finish("succeeded", {"winner": "fast"})
        return GraphPatch()


def test_a_cancelled_sync_worker_is_discarded_and_its_thread_runs_to_its_end(
    tmp_path: Path,
) -> None:
    started_slow, release, ended = threading.Event(), threading.Event(), threading.Event()

    def slow(ctx: TaskContext) -> str:
        started_slow.set()
        release.wait(60)
        ended.set()
        return "late"

    async def fast(ctx: TaskContext) -> str:
        await asyncio.to_thread(started_slow.wait, 60)  # slow is in its thread now
        return "first"

    async def go() -> tuple[RunStatus, dict[str, Any]]:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        try:
            kernel = Kernel(
                store,
                Race(),
                {"slow": slow, "fast": fast},
                config=ExecutionConfig(cancel_grace_s=0.0),
            )
            run = await kernel.start(app="race")
            outcome = await kernel.run(run.run_id)
            release.set()  # the thread was never interrupted: it ends now
            dump = await store.dump(run.run_id)
            return outcome.status, {t["task_id"]: t for t in dump["tasks"]}
        finally:
            await store.close()

    status, tasks = asyncio.run(go())
    assert ended.is_set()  # asyncio.run waited for the thread
    assert status is RunStatus.SUCCEEDED
    assert tasks["slow"]["state"] == "cancelled" and tasks["slow"]["result"] is None
    assert tasks["fast"]["result"] == "first"


def test_the_example_of_docs_operations_runs_as_written(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs/operations.md").read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    out = subprocess.run(
        [sys.executable, "-c", block],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["succeeded", "cancelled"]


INTERRUPTED = """
import sys
from loopkernel import sync

def watch(event, state, record):
    if event.kind.value == "task_completed" and event.task_id == "a":
        print("a done", flush=True)  # b hangs now: its first attempt never ends

with sync.Client({db!r}) as client:
    started = client.start("lk_workers:relay", overrides={{"hang": "b"}}, run_id="hc")
    try:
        client.execute("hc", observer=watch)
    except KeyboardInterrupt:
        print("interrupted", client.info("hc").status.value, flush=True)
    print("resumed", client.execute("hc").status.value, flush=True)
"""


def test_ctrl_c_in_a_sync_call_unwinds_the_run_and_leaves_it_resumable(tmp_path: Path) -> None:
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED.format(db=str(tmp_path / "runs.db"))],
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == "a done\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    # the run stayed resumable (running, its lease given back): the same process resumes it
    assert out.splitlines() == ["interrupted running", "resumed succeeded"], (out, err)
