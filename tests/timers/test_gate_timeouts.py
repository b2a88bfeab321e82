"""A Flow's ``gate(..., timeout=ApprovalTimeout(...))`` (issue 33, item 2): the wait op
carries ``on_timeout`` with its deadline; nobody answers in time and the gate is rejected
(the flow sees a rejection) or the run escalated (``approval_timeout``), once, on both
stores; a human in time wins; a SIGKILL at the timer resumes to the same digest; every
place that shows the run calls it an approval with a deadline, not a timer."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lk_helpers import cli_env
from loopkernel import ExecutionConfig, GraphPatch, Kernel, KernelParts, TaskContext
from loopkernel._waits import WaitKind, read_waits
from loopkernel.client import Client
from loopkernel.errors import UsageError
from loopkernel.executor import ApprovalTimeout
from loopkernel.graph import EventKind, RunStatus, Wait
from loopkernel.ids import RunId, TaskId
from loopkernel.planner import Flow, Step, gate
from loopkernel.testing import run_cli, was_killed
from loopkernel.worker import RunWorker, WorkerConfig

if TYPE_CHECKING:
    from lk_stores import Backend

GATED = "lk_timerapps:gated"


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def work(ctx: TaskContext) -> Any:
    return {"task": ctx.task_id}


def _flow(action: str) -> Flow:
    timeout = ApprovalTimeout(seconds=60, action=action)  # type: ignore[arg-type]
    return Flow(
        Step("prep", "work"),
        gate(Step("pay", "work"), "pay 100 USD?", timeout=timeout),
        verdict=lambda at: at.result("pay"),
    )


# -- the wait op ----------------------------------------------------------------------------


def test_the_wait_op_journals_on_timeout_only_when_set() -> None:
    plain = GraphPatch().wait("a", "why?")
    assert plain.to_json() == [{"op": "wait", "task_id": "a", "reason": "why?"}]
    timed = GraphPatch().wait("a", "why?", seconds=5, on_timeout="escalate")
    form = timed.to_json()
    assert form == [
        {"op": "wait", "task_id": "a", "reason": "why?", "seconds": 5, "on_timeout": "escalate"}
    ]
    assert GraphPatch.from_json(form) == timed
    resolved = [{"op": "wait", "task_id": "a", "reason": "r", "until": 9.5, "on_timeout": "reject"}]
    assert GraphPatch.from_json(resolved).ops == (
        Wait(task_id=TaskId("a"), reason="r", until=9.5, on_timeout="reject"),
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Wait(task_id=TaskId("a"), reason="r", until=1.0, on_timeout="later"), "reject or"),
        (lambda: Wait(task_id=TaskId("a"), reason="r", on_timeout="reject"), "needs a deadline"),
        (lambda: GraphPatch().wait("a", "r", seconds=5), "both seconds= and on_timeout="),
        (lambda: GraphPatch().wait("a", "r", on_timeout="reject"), "both seconds= and"),
        (
            lambda: GraphPatch.from_json(
                [{"op": "wait", "task_id": "a", "reason": "r", "until": 1, "on_timeout": 3}]
            ),
            "on_timeout must be reject or escalate",
        ),
        (
            lambda: GraphPatch.from_json(
                [{"op": "wait", "task_id": "a", "reason": "r", "on_timeout": "reject"}]
            ),
            "needs a deadline",
        ),
        (lambda: gate(Step("a"), "r", timeout=60), "timeout must be an ApprovalTimeout"),  # type: ignore[arg-type]
    ],
)
def test_bad_timeouts_are_usage_errors(build: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        build()


# -- the kernel, both stores ----------------------------------------------------------------


@pytest.mark.parametrize("action", ["reject", "escalate"])
def test_a_gate_nobody_answers_in_time_is_decided_by_its_own_action_once(
    backend: Backend, action: str
) -> None:
    clock = FakeClock(5_000.0)

    async def body() -> None:
        store = backend.store()
        await store.open()
        kernel = Kernel(
            store,
            _flow(action),
            {"work": work},
            config=ExecutionConfig(poll_s=0.01),
            parts=KernelParts(clock=clock),
        )
        await kernel.start(app="test", run_id="g")
        assert (await kernel.run("g")).status is RunStatus.WAITING
        (waiting,) = await read_waits(store, RunId("g"))
        assert (waiting.kind, waiting.task_id, waiting.until) == (WaitKind.APPROVAL, "pay", 5_060.0)
        assert "waiting for an approval: task pay (deadline " in waiting.line()
        clock.now = 5_059.0  # not yet
        assert (await kernel.run("g")).status is RunStatus.WAITING
        clock.now = 5_060.0
        outcome = await kernel.run("g")
        if action == "reject":  # the flow saw a rejection, by the timeout
            assert outcome.status is RunStatus.CANCELLED
            assert outcome.verdict == {
                "kind": "rejected",
                "task_id": "pay",
                "by": {"by": "timeout"},
            }
        else:
            assert outcome.status is RunStatus.ESCALATED
            assert outcome.verdict == {
                "kind": "approval_timeout",
                "task_id": "pay",
                "reason": "pay 100 USD?",
                "deadline": 5_060.0,
            }
        events = await store.events(RunId("g"))
        fired = [(e.task_id, e.data) for e in events if e.kind is EventKind.TIMER_FIRED]
        assert fired == [
            (
                "pay",
                {
                    "wait_epoch": 1,
                    "due": 5_060.0,
                    "timer": "approval_timeout",
                    "on_timeout": action,
                },
            )
        ]
        clock.now = 9_999.0
        assert (await kernel.run("g")).status is outcome.status  # nothing more fires
        assert len(await store.events(RunId("g"))) == len(events)
        await store.close()

    asyncio.run(body())


@pytest.mark.parametrize("resumed_at", [5_030.0, 9_000.0])
def test_a_human_in_time_wins_and_the_deadline_later_does_nothing(
    lite_backend: Backend, resumed_at: float
) -> None:
    """Answered before the deadline; executed before it, or only after it passed while no
    executor ran the run: the answer wins, the deadline never fires."""
    clock = FakeClock(5_000.0)

    async def body() -> None:
        store = lite_backend.store()
        await store.open()
        kernel = Kernel(
            store,
            _flow("escalate"),
            {"work": work},
            config=ExecutionConfig(poll_s=0.01),
            parts=KernelParts(clock=clock),
        )
        await kernel.start(app="test", run_id="g")
        await kernel.run("g")
        await store.add_human_input(
            RunId("g"), TaskId("pay"), decision="approve", payload={"by": "ops"}
        )
        clock.now = resumed_at
        outcome = await kernel.run("g")
        assert (outcome.status, outcome.verdict) == (RunStatus.SUCCEEDED, {"task": "pay"})
        events = await store.events(RunId("g"))
        clock.now = 9_999.0
        assert (await kernel.run("g")).status is RunStatus.SUCCEEDED
        after = await store.events(RunId("g"))
        assert after == events
        assert EventKind.TIMER_FIRED not in [e.kind for e in after]
        await store.close()

    asyncio.run(body())


def test_a_worker_logs_a_gate_as_an_approval_with_its_deadline(lite_backend: Backend) -> None:
    async def go() -> list[str]:
        store = lite_backend.store()
        await store.open()
        lines: list[str] = []
        try:
            client = Client(store=store)
            await client.start(GATED, overrides={"seconds": 3600.0}, run_id="w1")
            await store.enqueue(RunId("w1"))
            config = WorkerConfig(poll_seconds=0.05, apps=frozenset({GATED}))
            worker = RunWorker(store, config, log=lines.append)
            serving = asyncio.create_task(worker.serve())
            try:
                for _ in range(1500):
                    if worker.stats.parked:
                        break
                    await asyncio.sleep(0.02)
            finally:
                worker.stop()
                await asyncio.wait_for(serving, 30)
        finally:
            await store.close()
        return lines

    lines = asyncio.run(go())
    (parked,) = [line for line in lines if "lease released" in line]
    assert "w1 waiting for an approval: task pay (deadline " in parked, lines
    assert "timer" not in parked


# -- real processes, SIGKILL ----------------------------------------------------------------


def _kinds(db: Path, run_id: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT kind FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
        return [r[0] for r in rows]


def _digest(db: Path, run_id: str) -> str:
    out = run_cli(["inspect", run_id, "--json"], db=db, env=cli_env())
    return str(json.loads(out.stdout)["digest"])


def test_a_run_killed_at_the_gates_deadline_resumes_once_to_the_same_digest(
    tmp_path: Path,
) -> None:
    clock = tmp_path / "clock"
    clock.write_text("1000")
    args = ["run", GATED, "--run-id", "g", "--set", f"clock_file={clock}"]
    env = cli_env()

    # Uninterrupted: the gate waits as an approval, then is rejected by its deadline.
    ref = tmp_path / "ref.db"
    ran = run_cli([*args, "--quiet"], db=ref, env=env)
    assert ran.returncode == 3, ran.stderr
    assert "waiting for an approval: task pay (deadline " in ran.stdout, ran.stdout
    assert "waiting for a timer" not in ran.stdout
    shown = run_cli(["inspect", "g"], db=ref, env=env).stdout
    assert "approval: task pay, deadline 1970-01-01 00:17:40 UTC" in shown, shown
    assert "timer:" not in shown
    stopped = run_cli(["wait", "g", "--stop-at-timer", "--json"], db=ref, env=env)
    assert stopped.returncode == 3, stopped.stderr  # an approval, not a timer (11)
    (wait,) = json.loads(stopped.stdout)["waiting"]
    assert (wait["kind"], wait["until"]) == ("approval", 1060.0)
    clock.write_text("1060")
    done = run_cli(["resume", "g"], db=ref, env=env)
    assert done.returncode == run_cli(["inspect", "g"], db=ref, env=env).returncode
    assert json.loads(run_cli(["inspect", "g", "--json"], db=ref, env=env).stdout)["status"] == (
        "cancelled"
    )

    # Killed just after the deadline's timer_fired was journaled; resumed: once, same digest.
    clock.write_text("1000")
    db = tmp_path / "runs.db"
    assert run_cli(args, db=db, env=env).returncode == 3
    clock.write_text("1060")
    killed = run_cli(["resume", "g"], db=db, env=env, crash_at="timer_fired")
    assert was_killed(killed), killed.stderr
    assert _kinds(db, "g").count("timer_fired") == 1
    assert run_cli(["resume", "g"], db=db, env=env).returncode == done.returncode
    assert _kinds(db, "g").count("timer_fired") == 1
    assert _kinds(db, "g") == _kinds(ref, "g")
    assert _digest(db, "g") == _digest(ref, "g")
