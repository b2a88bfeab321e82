"""A worker in this process, on both stores: it executes what is submitted, gives back what
it cannot finish, stops a run whose lease was taken, parks waiting runs and wakes them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest

from loopkernel.client import Answerer, Client
from loopkernel.errors import UsageError
from loopkernel.executor import ExecutionConfig
from loopkernel.graph import EventKind, RunStatus
from loopkernel.ids import RunId
from loopkernel.store import Claim, Store, digest_of
from loopkernel.worker import RunWorker, WorkerConfig

if TYPE_CHECKING:
    from lk_stores import Backend

TEST_APPS = frozenset({"lk_workers:relay", "lk_testapps:gate"})
"""The module:attribute apps these tests submit: a worker runs them only when told to."""
SPEC_FAST = {"delays": [0.01, 0.02, 2.0], "distill_delay": 0.01}


@asynccontextmanager
async def serving(store: Store, **config: Any) -> AsyncIterator[RunWorker]:
    lines: list[str] = []
    config = {"poll_seconds": 0.1, "apps": TEST_APPS, **config}
    worker = RunWorker(store, WorkerConfig(**config), log=lines.append)
    task = asyncio.create_task(worker.serve())
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 60)


async def eventually(what: str, check: Callable[[], Awaitable[bool]], within: float = 30) -> None:
    """Poll ``check`` (yielding to the loop between tries) until true; ``within`` is a
    generous bound for a hang, not a timing aim."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def submit(client: Client, app: str, run_id: str, **overrides: Any) -> None:
    await client.start(app, overrides=overrides, run_id=run_id)
    await client.store.enqueue(RunId(run_id))


async def status(store: Store, run_id: str) -> RunStatus:
    return (await store.get_run(RunId(run_id))).status


async def lease(backend: Backend, run_id: str) -> tuple[Any, ...]:
    (row,) = backend.sql(f"SELECT owner, lease_epoch FROM runs WHERE run_id = '{run_id}'")
    return row


def test_a_worker_executes_each_submitted_run_once_to_the_same_digest(backend: Backend) -> None:
    async def body(store: Store) -> None:
        client = Client(store=store)
        await client.start("speculation", overrides=SPEC_FAST, run_id="alone")
        await client.execute("alone")  # not enqueued: executed here, as `loopkernel run` does
        expected = digest_of(await store.dump(RunId("alone")))
        runs = [f"r{i}" for i in range(6)]
        async with serving(store, concurrency=4) as worker:
            for run_id in runs:
                await submit(client, "speculation", run_id, **SPEC_FAST)

            async def all_done() -> bool:
                # The store says succeeded before the worker has released and counted it.
                ok = all([await status(store, r) is RunStatus.SUCCEEDED for r in runs])
                return ok and worker.stats.ended == 6

            await eventually("every run to succeed and be counted", all_done, within=60)
        assert (worker.stats.claimed, worker.stats.ended) == (6, 6)
        for run_id in runs:
            assert digest_of(await store.dump(RunId(run_id))) == expected
            finished = [e for e in await store.events(RunId(run_id)) if e.kind == "run_finished"]
            assert len(finished) == 1

    backend.run(body)


def test_stopping_gives_back_unfinished_runs_that_another_worker_finishes(
    backend: Backend,
) -> None:
    async def body(store: Store) -> None:
        client = Client(store=store)
        await submit(client, "lk_workers:relay", "slow", hang="b")
        async with serving(store, worker_id="first") as first:
            await eventually("b to run", lambda: _running(store, "slow", "b"))
        assert (first.stats.released, first.stats.ended) == (1, 0)
        assert await status(store, "slow") is RunStatus.RUNNING
        assert await lease(backend, "slow") == (None, 2)  # claimed, released: free
        async with serving(store, worker_id="second") as second:

            async def ended() -> bool:
                # the store says succeeded before the worker has released and counted it
                done = await _is(store, "slow", RunStatus.SUCCEEDED)
                return done and second.stats.ended == 1

            await eventually("the run to end and be counted", ended)
        assert second.stats.ended == 1
        journal = await store.events(RunId("slow"))
        assert [e.task_id for e in journal if e.kind is EventKind.TASK_COMPLETED] == ["a", "b", "c"]

    backend.run(body)


async def _is(store: Store, run_id: str, want: RunStatus) -> bool:
    return await status(store, run_id) is want


async def _running(store: Store, run_id: str, task_id: str) -> bool:
    task = (await store.load_run(RunId(run_id))).state.get(task_id)
    return task is not None and task.state == "running"


def test_a_worker_whose_lease_is_taken_stops_the_run_and_writes_nothing(
    backend: Backend,
) -> None:
    async def body(store: Store) -> None:
        client = Client(store=store)
        # b outlasts the theft, however slow the machine: a run that finished is not stolen.
        await submit(client, "lk_workers:relay", "r", delays={"a": 0.01, "b": 4.0, "c": 0.01})
        async with serving(
            store, worker_id="slowpoke", execution=ExecutionConfig(lease_s=0.6)
        ) as worker:
            await eventually("b to run", lambda: _running(store, "r", "b"))
            # Another worker takes the run over, as if this one had missed its heartbeats.
            claims: list[Claim] = []

            async def stolen() -> bool:  # SKIP LOCKED: not while the owner is mid-transaction
                # The lease runs out again at each try: the owner's next heartbeat (every
                # 0.2 s) renews a lease that nobody took yet, and on a loaded machine the
                # first try can come after it.
                backend.sql("UPDATE runs SET lease_until = 0 WHERE run_id = 'r'")
                claim = await store.claim_run("thief", 60)
                claims.extend([claim] if claim else [])
                return claim is not None

            await eventually("the thief to claim the run", stolen, within=60)
            (thief,) = claims
            assert thief.run_id == "r"
            before = await store.events(RunId("r"))
            await eventually("the worker to notice", lambda: _true(worker.stats.lost == 1), 60)
            # Its executor is gone: whatever the old owner could still have written is over.
            await eventually("the worker to let go", lambda: _true(worker.running == frozenset()))
        assert await store.events(RunId("r")) == before  # nothing of the old owner landed
        assert await lease(backend, "r") == ("thief", thief.epoch)
        # The thief resumes the run by the ordinary recovery rules.
        result = await Client(store=store.fenced(RunId("r"), thief.epoch)).run_owned("r")
        assert result.status is RunStatus.SUCCEEDED

    backend.run(body)


async def _true(value: bool) -> bool:
    return value


def test_a_waiting_run_holds_no_lease_and_an_approval_wakes_a_worker(backend: Backend) -> None:
    # PostgreSQL wakes the worker by NOTIFY: with an hour-long poll, only a NOTIFY can.
    poll = 3600.0 if backend.kind == "postgres" else 0.1

    async def body(store: Store) -> None:
        client = Client(store=store)
        await submit(client, "lk_testapps:gate", "g")
        async with serving(store, poll_seconds=poll) as worker:
            await eventually("the run to wait", lambda: _is(store, "g", RunStatus.WAITING))
            await eventually("the lease to go", lambda: _true(worker.running == frozenset()))
            assert await lease(backend, "g") == (None, 2)
            assert worker.stats.parked == 1
            async with Client(backend.url) as other:  # another connection, as another process
                await other.decide(
                    "g", "gate", "approve", payload={"by": "ops"}, answerer=Answerer(local=True)
                )
            await eventually("the run to end", lambda: _is(store, "g", RunStatus.SUCCEEDED), 60)
        assert (await store.get_run(RunId("g"))).verdict["saw"] == ["gate", "prep"]  # type: ignore[index]

    backend.run(body)


def test_cancelling_a_waiting_run_from_elsewhere_lets_a_worker_finish_it(
    backend: Backend,
) -> None:
    async def body(store: Store) -> None:
        client = Client(store=store)
        await submit(client, "lk_testapps:gate", "g")
        async with serving(store):
            await eventually("the run to wait", lambda: _is(store, "g", RunStatus.WAITING))
            async with Client(backend.url) as other:
                assert await other.cancel("g", "not today") is RunStatus.RUNNING
            await eventually("the run to end", lambda: _is(store, "g", RunStatus.CANCELLED))
        assert (await store.get_run(RunId("g"))).verdict == {
            "kind": "cancelled",
            "reason": "not today",
        }

    backend.run(body)


def test_no_more_runs_at_once_than_the_concurrency(backend: Backend) -> None:
    async def body(store: Store) -> None:
        client = Client(store=store)
        runs = [f"r{i}" for i in range(5)]
        for run_id in runs:
            await submit(client, "lk_workers:relay", run_id, delays={"a": 0.1, "b": 0.1, "c": 0.1})
        peak = 0
        async with serving(store, concurrency=2) as worker:

            async def all_done() -> bool:
                nonlocal peak
                peak = max(peak, len(worker.running))
                return all([await _is(store, r, RunStatus.SUCCEEDED) for r in runs])

            await eventually("every run to succeed", all_done)
        assert peak == 2

    backend.run(body)


def test_worker_config_is_checked() -> None:
    with pytest.raises(UsageError):
        WorkerConfig(concurrency=0)
    with pytest.raises(UsageError):
        WorkerConfig(execution=ExecutionConfig(lease_s=0))
    assert WorkerConfig(execution=ExecutionConfig(lease_s=9)).heartbeat_seconds == 3


class PausedRelease:
    """A real store whose ``release`` waits for a go-ahead: stop() lands at that moment."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def release(self, run_id: RunId, epoch: int) -> bool:
        self.entered.set()
        await self.go.wait()
        return await self._store.release(run_id, epoch)


def test_a_stop_while_a_run_is_released_still_counts_it(backend: Backend) -> None:
    async def body(store: Store) -> None:
        client = Client(store=store)
        await submit(client, "speculation", "one", **SPEC_FAST)
        paused = PausedRelease(store)
        worker = RunWorker(paused, WorkerConfig(poll_seconds=0.1), log=lambda _: None)  # type: ignore[arg-type]
        serving = asyncio.create_task(worker.serve())
        await asyncio.wait_for(paused.entered.wait(), 60)  # the run ended; releasing it
        worker.stop()
        await asyncio.sleep(0)  # let the shutdown begin while the release is in flight
        paused.go.set()
        stats = await asyncio.wait_for(serving, 60)
        assert (stats.ended, stats.released) == (1, 0)
        assert await status(store, "one") is RunStatus.SUCCEEDED
        assert await lease(backend, "one") == (None, 2)  # claimed, released: nobody holds it

    backend.run(body)


class BrokenRelease(PausedRelease):
    """A real store whose ``release`` fails the way no bookkeeping expects (a bug)."""

    async def release(self, run_id: RunId, epoch: int) -> bool:
        raise RuntimeError(f"release of {run_id} broke")


def test_an_error_no_run_expected_leaves_serve_and_no_task_outlives_it(backend: Backend) -> None:
    async def body(store: Store) -> None:
        client = Client(store=store)
        await submit(client, "speculation", "one", **SPEC_FAST)
        worker = RunWorker(BrokenRelease(store), WorkerConfig(poll_seconds=0.1), log=lambda _: None)  # type: ignore[arg-type]
        before = asyncio.all_tasks()
        # No stop(): the run's task failed, so its owner stops the rest and says why
        # (before, the error was kept in a task nobody awaited, and serve went on).
        with pytest.raises(ExceptionGroup) as caught:
            await asyncio.wait_for(worker.serve(), 30)
        assert [str(e) for e in caught.value.exceptions] == ["release of one broke"]
        assert {t for t in asyncio.all_tasks() if not t.done()} <= before
        assert worker.running == frozenset()
        assert await status(store, "one") is RunStatus.SUCCEEDED

    backend.run(body)
