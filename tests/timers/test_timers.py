"""Durable time (issue 24, section 1): a task asleep until a time, woken once when due, on
both stores with a fake clock, and across SIGKILLs in real processes; an approval that
nobody answers in time, rejected or escalated by policy, journaled once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import (
    BasePlanner,
    Event,
    EventKind,
    ExecutionConfig,
    GraphPatch,
    Kernel,
    KernelParts,
    Snapshot,
    TaskContext,
    TaskSpec,
)
from loopkernel.errors import PatchRejected, UsageError
from loopkernel.executor import ApprovalTimeout, NeedsApproval
from loopkernel.graph import GraphState, RunStatus, TaskState, validate
from loopkernel.ids import RunId, TaskId
from loopkernel.testing import run_cli, was_killed

if TYPE_CHECKING:
    from lk_stores import Backend


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Nap(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return (
            GraphPatch()
            .add(TaskSpec(task_id="prep", skill="work"))
            .add(TaskSpec(task_id="nap", skill="work"), after=["prep"])
            .sleep("nap", seconds=30)
        )

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "nap":
            return GraphPatch().finish("succeeded", {"woke": True})
        return GraphPatch()


async def work(ctx: TaskContext) -> Any:
    return {"task": ctx.task_id}


# -- the patch op ---------------------------------------------------------------------------


def test_a_sleep_is_a_wait_with_a_wake_up_time_in_the_journal_form() -> None:
    patch = GraphPatch().sleep("t", until=1234.5, reason="later")
    ops = patch.to_json()
    assert ops == [{"op": "wait", "task_id": "t", "reason": "later", "until": 1234.5}]
    assert GraphPatch.from_json(ops) == patch
    assert GraphPatch().wait("t", "human").to_json() == [
        {"op": "wait", "task_id": "t", "reason": "human"}
    ]
    with pytest.raises(UsageError, match="exactly one of until= and seconds="):
        GraphPatch().sleep("t")
    with pytest.raises(UsageError, match="until must be a number"):
        GraphPatch.from_json([{"op": "wait", "task_id": "t", "reason": "r", "until": "soon"}])


def test_validate_sets_the_wake_up_time_and_refuses_an_unresolved_duration() -> None:
    state = GraphState(run_id=RunId("r"), app="a", params=None)
    state.apply(validate(state, GraphPatch().add(TaskSpec(task_id="t", skill="w")), {"w"}))
    delta = validate(state, GraphPatch().sleep("t", until=99.0), {"w"})
    (task,) = delta.tasks
    assert (task.state, task.wake_at, task.wait_epoch) == (TaskState.WAITING, 99.0, 1)
    with pytest.raises(PatchRejected) as err:
        validate(state, GraphPatch().sleep("t", seconds=5), {"w"})
    assert err.value.attrs["rule"] == "unresolved_timer"
    state.apply(delta)
    resumed = validate(state, GraphPatch().resume("t"), {"w"}).tasks[0]
    assert (resumed.state, resumed.wake_at) == (TaskState.READY, None)


# -- in process, with a fake clock, on both stores -----------------------------------------


def test_a_sleeping_run_waits_until_its_time_then_wakes_once(backend: Backend) -> None:
    clock = FakeClock(1_000.0)

    async def body() -> None:
        store = backend.store()
        await store.open()
        kernel = Kernel(
            store,
            Nap(),
            {"work": work},
            config=ExecutionConfig(poll_s=0.01),
            parts=KernelParts(clock=clock),
        )
        await kernel.start(app="test", run_id="nap-1")
        first = await kernel.run("nap-1")
        assert first.status is RunStatus.WAITING
        loaded = await store.load_run(RunId("nap-1"))
        assert loaded.state.tasks["nap"].wake_at == 1_030.0
        assert await store.due_runs(1_029.0) == []
        assert await store.due_runs(1_030.0) == ["nap-1"]
        clock.now = 1_029.9  # not yet: still waiting, nothing fired
        assert (await kernel.run("nap-1")).status is RunStatus.WAITING
        kinds = [e.kind for e in await store.events(RunId("nap-1"))]
        assert EventKind.TIMER_FIRED not in kinds
        clock.now = 1_030.0
        done = await kernel.run("nap-1")
        assert (done.status, done.verdict) == (RunStatus.SUCCEEDED, {"woke": True})
        events = await store.events(RunId("nap-1"))
        fired = [e for e in events if e.kind is EventKind.TIMER_FIRED]
        assert [(e.task_id, e.data) for e in fired] == [
            ("nap", {"wait_epoch": 1, "due": 1_030.0, "timer": "sleep"})
        ]
        patch = {p.event_seq: p for p in await store.patches(RunId("nap-1"))}[fired[0].seq]
        assert (patch.planner, patch.ops) == (
            "kernel",
            [{"op": "resume", "task_id": "nap", "payload": None}],
        )
        await store.close()

    asyncio.run(body())


class Gated(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="pay", skill="pay"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", {"paid": True})

    def on_human_input(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.data["decision"] == "reject":
            verdict = {"kind": "rejected", "by": event.data.get("payload")}
            return GraphPatch().cancel("pay").finish("cancelled", verdict)
        return super().on_human_input(snapshot, event)


async def pay(ctx: TaskContext) -> Any:
    if ctx.human_input is None:
        raise NeedsApproval("spend 100 USD?")
    return {"paid": True}


@pytest.mark.parametrize("action", ["reject", "escalate"])
def test_an_approval_nobody_answers_in_time_is_decided_by_policy_once(
    lite_backend: Backend, action: str
) -> None:
    clock = FakeClock(5_000.0)
    timeout = ApprovalTimeout(seconds=3600, action=action)  # type: ignore[arg-type]

    async def body() -> None:
        store = lite_backend.store()
        await store.open()
        kernel = Kernel(
            store,
            Gated(),
            {"pay": pay},
            config=ExecutionConfig(poll_s=0.01),
            parts=KernelParts(clock=clock, approval_timeout=timeout),
        )
        await kernel.start(app="test", run_id="gate")
        assert (await kernel.run("gate")).status is RunStatus.WAITING
        assert (await store.get_run(RunId("gate"))).status is RunStatus.WAITING
        assert await store.due_runs(8_599.0) == []
        clock.now = 8_600.0
        outcome = await kernel.run("gate")
        if action == "reject":
            assert outcome.status is RunStatus.CANCELLED
            assert outcome.verdict == {"kind": "rejected", "by": {"by": "timeout"}}
        else:
            assert outcome.status is RunStatus.ESCALATED
            assert outcome.verdict == {
                "kind": "approval_timeout",
                "task_id": "pay",
                "reason": "spend 100 USD?",
                "after_seconds": 3600,
            }
        events = await store.events(RunId("gate"))
        fired = [e for e in events if e.kind is EventKind.TIMER_FIRED]
        assert len(fired) == 1 and fired[0].data["timer"] == "approval_timeout"
        assert (await kernel.run("gate")).status is outcome.status  # nothing more fires
        assert len(await store.events(RunId("gate"))) == len(events)
        await store.close()

    asyncio.run(body())


def test_an_approval_answered_in_time_never_times_out(lite_backend: Backend) -> None:
    clock = FakeClock(5_000.0)

    async def body() -> None:
        store = lite_backend.store()
        await store.open()
        kernel = Kernel(
            store,
            Gated(),
            {"pay": pay},
            config=ExecutionConfig(poll_s=0.01),
            parts=KernelParts(clock=clock, approval_timeout=ApprovalTimeout(seconds=60)),
        )
        await kernel.start(app="test", run_id="gate")
        await kernel.run("gate")
        await store.add_human_input(
            RunId("gate"), TaskId("pay"), decision="approve", payload={"by": "ops"}
        )
        clock.now = 9_999.0
        outcome = await kernel.run("gate")
        assert (outcome.status, outcome.verdict) == (RunStatus.SUCCEEDED, {"paid": True})
        kinds = [e.kind for e in await store.events(RunId("gate"))]
        assert EventKind.TIMER_FIRED not in kinds
        await store.close()

    asyncio.run(body())


# -- real processes, SIGKILL --------------------------------------------------------------


def _kinds(db: Path, run_id: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT kind FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
        return [r[0] for r in rows]


def _inspect(db: Path, run_id: str) -> dict[str, Any]:
    out = run_cli(["inspect", run_id, "--json"], db=db, env=cli_env())
    assert out.returncode in (0, 3), out.stderr
    return dict(json.loads(out.stdout))


def test_a_sleeping_run_killed_and_resumed_before_and_after_its_time(tmp_path: Path) -> None:
    clock = tmp_path / "clock"
    clock.write_text("1000")
    args = ["run", "lk_timerapps:nap", "--run-id", "nap", "--set", f"clock_file={clock}"]
    env = cli_env()

    # Uninterrupted (no kill): waits, then wakes once its time came.
    ref = tmp_path / "ref.db"
    assert run_cli(args, db=ref, env=env).returncode == 3
    clock.write_text("1060")
    assert run_cli(["resume", "nap"], db=ref, env=env).returncode == 0
    clock.write_text("1000")

    # Killed while asleep (after prep's patch), resumed before its time: still waiting.
    db = tmp_path / "runs.db"
    killed = run_cli(args, db=db, env=env, crash_at="patch_committed:2")
    assert was_killed(killed), killed.stderr
    early = run_cli(["resume", "nap"], db=db, env=env)
    assert early.returncode == 3, early.stderr
    assert "timer_fired" not in _kinds(db, "nap")
    assert _inspect(db, "nap")["status"] == "waiting"

    # After its time: killed just after the timer fired, resumed: fired once, same digest.
    clock.write_text("1060")
    killed = run_cli(["resume", "nap"], db=db, env=env, crash_at="timer_fired")
    assert was_killed(killed), killed.stderr
    assert _kinds(db, "nap").count("timer_fired") == 1
    done = run_cli(["resume", "nap"], db=db, env=env)
    assert done.returncode == 0, done.stderr
    assert _kinds(db, "nap").count("timer_fired") == 1
    assert _kinds(db, "nap") == _kinds(ref, "nap")
    assert _inspect(db, "nap")["digest"] == _inspect(ref, "nap")["digest"]


def test_a_worker_wakes_a_sleeping_run_when_it_is_due(tmp_path: Path) -> None:
    """``loopkernel worker`` on SQLite: the run sleeps 0.3 s on the real clock; the worker
    claims it once its timer is due and runs it to the end (waited on the journal)."""
    db = tmp_path / "runs.db"
    env = cli_env()
    start = run_cli(
        ["submit", "lk_timerapps:nap", "--run-id", "w", "--set", "seconds=0.3"], db=db, env=env
    )
    assert start.returncode == 0, start.stderr
    worker = subprocess.Popen(
        [*LOOPKERNEL, "--db", str(db), "worker", "--poll", "0.05", "--app", "lk_timerapps:nap"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(2000):
            if "run_finished" in _kinds(db, "w"):
                break
            assert worker.poll() is None, worker.communicate()
            time.sleep(0.05)  # a look at the journal, not a threshold
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
    assert _kinds(db, "w").count("timer_fired") == 1
    assert _inspect(db, "w")["status"] == "succeeded"


def _timer_events(db: Path, run_id: str) -> list[tuple[float, float]]:
    """``(due, journaled at)`` of each ``timer_fired`` of the run."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT data, created_at FROM events WHERE run_id = ? AND kind = 'timer_fired'",
            (run_id,),
        )
        return [(float(json.loads(data)["due"]), float(at)) for data, at in rows]


def test_serve_wakes_sleeping_runs_once_while_a_worker_and_resumes_race_it(
    tmp_path: Path,
) -> None:
    """``loopkernel serve`` as a real process: a run started by ``run`` (which no worker
    serves) asleep 0.5 s is woken by serve alone and finishes after its due time; a run
    handed to workers, asleep too, is raced by serve, a ``worker`` and ``resume`` after
    ``resume``: whichever holds the lease fires the timer, once, and no task runs twice."""
    from loopkernel.testing import read_trace

    db, trace = tmp_path / "runs.db", tmp_path / "trace"
    env = cli_env(LOOPKERNEL_TRACE=str(trace))
    nap = ["lk_timerapps:nap", "--set", "seconds=0.5"]
    alone = run_cli(["run", *nap, "--run-id", "alone", "--quiet"], db=db, env=env)
    assert alone.returncode == 3, alone.stderr  # waiting on its timer
    raced = run_cli(["submit", *nap, "--run-id", "raced"], db=db, env=env)
    assert raced.returncode == 0, raced.stderr
    app = ["--app", "lk_timerapps:nap", "--poll", "0.05"]
    serve = subprocess.Popen(
        [*LOOPKERNEL, "--db", str(db), "serve", "--port", "0", *app],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = subprocess.Popen(
        [*LOOPKERNEL, "--db", str(db), "worker", *app],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    resumed: list[int] = []
    try:
        for _ in range(400):
            if all("run_finished" in _kinds(db, r) for r in ("alone", "raced")):
                break
            assert serve.poll() is None, serve.communicate()
            out = run_cli(["resume", "raced", "--quiet"], db=db, env=env)  # a third executor
            resumed.append(out.returncode)
        else:
            raise AssertionError("the runs never finished")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        serve.terminate()  # SIGTERM: serve stops, exit 0
        _, err = serve.communicate(timeout=60)
    assert serve.returncode == 0, err
    assert "woke alone: succeeded" in err, err  # nobody else could have: not a worker's
    assert set(resumed) <= {0, 3, 7}, resumed  # done, not yet due, or held: never doubled
    for run in ("alone", "raced"):
        fired = _timer_events(db, run)
        assert len(fired) == 1, (run, fired)
        due, at = fired[0]
        assert at >= due  # after the due time, never before
        assert _inspect(db, run)["status"] == "succeeded"
    counts = read_trace(trace)
    assert counts[("start", "prep")] == 2 and counts[("start", "nap")] == 2, counts


def test_the_waker_leaves_other_apps_alone_and_backs_off_a_run_its_clock_says_is_early(
    tmp_path: Path,
) -> None:
    """``serve``'s timer waker in process: a due run of an app it may not run is left
    waiting (said once), never failed; one whose app's clock is behind the waker's is
    executed, stays waiting with nothing journaled, and is looked at again after a
    back-off; once the app's clock has come, the timer fires once."""
    from loopkernel._waker import TimerWaker
    from loopkernel.client import Client

    clock = tmp_path / "clock"
    clock.write_text("1000")
    lines: list[str] = []

    async def body() -> None:
        async with Client(str(tmp_path / "runs.db")) as client:
            overrides = {"clock_file": str(clock), "seconds": 60.0}
            await client.start("lk_timerapps:nap", overrides=overrides, run_id="n")
            assert (await client.execute("n")).status is RunStatus.WAITING  # due at 1060

            other = TimerWaker(client, poll_seconds=0.001, log=lines.append)
            assert await other.wake_due() == [] and await other.wake_due() == []
            assert len(lines) == 1 and "'lk_timerapps:nap' is not installed" in lines[0]
            assert (await client.info("n")).status is RunStatus.WAITING  # not failed

            now = [0.0]  # the waker's monotonic clock, moved by hand: no race with the machine
            waker = TimerWaker(
                client,
                poll_seconds=1.0,
                apps={"lk_timerapps:nap"},
                log=lines.append,
                monotonic=lambda: now[0],
            )
            assert await waker.wake_due() == ["n"]  # 1060 is long past on this clock ...
            await waker.settle()
            assert (await client.info("n")).status is RunStatus.WAITING  # ... not on the app's
            now[0] = 0.999
            assert await waker.wake_due() == []  # backing off for one poll
            clock.write_text("1060")
            now[0] = 1.0
            assert await waker.wake_due() == ["n"]
            await waker.settle()
            assert (await client.info("n")).status is RunStatus.SUCCEEDED
            kinds = [e.kind for e in await client.events("n")]
            assert kinds.count(EventKind.TIMER_FIRED) == 1
            assert await waker.wake_due() == []
            assert waker.woken == 2

    asyncio.run(body())
