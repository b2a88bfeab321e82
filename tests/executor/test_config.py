"""``ExecutionConfig`` and ``KernelParts``: one value each, handed down whole; the keyword
arguments of before still work, with a deprecation warning; ``hold_lease`` stops its body
with ``LeaseLost`` when the lease is taken over."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from loopkernel import ExecutionConfig, GraphPatch, Kernel, KernelParts, SQLiteStore, UsageError
from loopkernel._hold import hold_lease
from loopkernel.client import Answerer, Client, Listeners
from loopkernel.errors import LeaseLost, RunHeld
from loopkernel.graph import Event
from loopkernel.ids import RunId
from loopkernel.planner import BasePlanner, Snapshot
from loopkernel.store._lease import Holder


class Finish(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded")


@pytest.mark.parametrize(
    "bad",
    [
        {"concurrency": 0},
        {"concurrency": True},
        {"keep_finished": -1},
        {"poll_s": 0.0},
        {"cancel_grace_s": -1.0},
        {"lease_s": float("nan")},
        {"store_retry_s": -0.5},
        {"lock_wait_s": float("inf")},
    ],
)
def test_a_config_is_checked_when_made(bad: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match=next(iter(bad)).split("_")[0]):
        ExecutionConfig(**bad)


def test_the_kernel_reads_its_knobs_and_parts_from_the_two_values(tmp_path: Path) -> None:
    clock = time.time
    config = ExecutionConfig(concurrency=3, poll_s=0.5, cancel_grace_s=0.0, keep_finished=7)
    kernel = Kernel(
        SQLiteStore(tmp_path / "runs.db"),
        Finish(),
        {},
        config=config,
        parts=KernelParts(clock=clock, app_version="2"),
    )
    assert (kernel.max_concurrency, kernel.poll_interval, kernel.cancel_grace) == (3, 0.5, 0.0)
    assert kernel.keep_finished == 7 and kernel.config is config
    assert kernel.clock is clock and kernel.app_version == "2"
    assert ExecutionConfig().kept == 1000


def test_the_keywords_of_before_still_work_and_say_what_replaces_them(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    with pytest.warns(DeprecationWarning, match=r"max_concurrency=.*config=ExecutionConfig"):
        kernel = Kernel(store, Finish(), {}, max_concurrency=2, app_version="1")
    assert kernel.max_concurrency == 2 and kernel.app_version == "1"
    with pytest.raises(TypeError, match="nonsense"):
        Kernel(store, Finish(), {}, nonsense=1)


def test_execute_takes_the_config_and_the_keywords_of_before(tmp_path: Path) -> None:
    async def go() -> None:
        async with Client(str(tmp_path / "runs.db")) as client:
            _, one = await client.start("lk_testapps:gate", run_id="one")
            _, two = await client.start("lk_testapps:gate", run_id="two")
            seen: list[str] = []
            listeners = Listeners(observer=lambda event, *_: seen.append(event.kind.value))
            config = ExecutionConfig(concurrency=1, lease_s=3.0, keep_finished=0)
            outcome = await client.execute(one.run_id, config=config, listeners=listeners)
            assert outcome.status.value == "waiting" and "task_completed" in seen
            with pytest.warns(DeprecationWarning, match="store_retry="):
                again = await client.execute(two.run_id, store_retry=5.0)
            assert again.status.value == "waiting"

    asyncio.run(go())


def test_hold_lease_cancels_its_body_with_lease_lost_when_taken_over(tmp_path: Path) -> None:
    async def go() -> None:
        async with Client(str(tmp_path / "runs.db")) as client:
            store = client.store
            _, started = await client.start("lk_testapps:gate", run_id="held")
            rid = RunId(started.run_id)
            claim = await store.acquire(rid, Holder.here(), 0.3)
            body_ended = asyncio.Event()

            async def thief() -> None:
                await asyncio.sleep(0.05)
                await store.acquire(rid, Holder.here(), 30.0, takeover=claim.epoch)

            steal = asyncio.create_task(thief())
            with pytest.raises(LeaseLost):
                async with hold_lease(store, claim, lease_s=0.3):
                    try:
                        await asyncio.sleep(30)
                    finally:
                        body_ended.set()
            await steal
            assert body_ended.is_set()
            assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]

    asyncio.run(go())


def test_hold_lease_leaves_an_outside_cancellation_alone(tmp_path: Path) -> None:
    async def go() -> None:
        async with Client(str(tmp_path / "runs.db")) as client:
            _, started = await client.start("lk_testapps:gate", run_id="kept")
            claim = await client.store.acquire(RunId(started.run_id), Holder.here(), 30.0)

            async def body() -> None:
                async with hold_lease(client.store, claim, lease_s=30.0):
                    await asyncio.sleep(30)

            task = asyncio.create_task(body())
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.store.heartbeat(claim.run_id, claim.epoch, 30.0)  # still ours

    asyncio.run(go())


class CountingStore(SQLiteStore):
    """A real SQLite store that counts how often the run itself is read."""

    reads: list[str]

    async def get_run(self, run_id: RunId) -> Any:
        self.reads.append("get_run")
        return await super().get_run(run_id)

    async def load_run(self, run_id: RunId) -> Any:
        self.reads.append("load_run")
        return await super().load_run(run_id)


class RacedStore(CountingStore):
    """After the first read of ``race``, another executor takes the run and gives it
    back before ``execute`` takes the lease (a real acquire and release)."""

    race: RunId | None = None

    async def load_run(self, run_id: RunId) -> Any:
        loaded = await super().load_run(run_id)
        if run_id == self.race:
            self.race = None
            claim = await self.acquire(run_id, Holder.here(), 5.0)
            await self.release(run_id, claim.epoch)
        return loaded


def _epoch(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT lease_epoch FROM runs WHERE run_id = 'r'").fetchone()[0])


def test_execute_reads_the_run_once_and_hands_it_down(tmp_path: Path) -> None:
    async def go() -> None:
        store = CountingStore(tmp_path / "runs.db")
        store.reads = []
        async with Client(store=store) as client:
            _, started = await client.start("lk_testapps:gate", run_id="r")
            del store.reads[:]
            first = await client.execute(started.run_id)
            assert first.status.value == "waiting"
            assert store.reads == ["load_run"]  # not the row first, then the run again
            await client.decide("r", "gate", "approve", answerer=Answerer(local=True))
            del store.reads[:]
            resumed = await client.execute("r")
            assert resumed.status.value == "succeeded"
            assert store.reads == ["load_run"]
            del store.reads[:]
            epoch = _epoch(tmp_path / "runs.db")
            again = await client.execute("r")  # finished: read once, nothing executed
            assert again.status.value == "succeeded" and store.reads == ["load_run"]
            assert _epoch(tmp_path / "runs.db") == epoch  # no lease taken: nothing written
            # Held by a live executor elsewhere: refused; given back, free at the read.
            await client.start("lk_testapps:gate", run_id="o")
            elsewhere = Holder(host="elsewhere", pid=1, since=time.time())
            theirs = await store.acquire(RunId("o"), elsewhere, 5.0)
            del store.reads[:]
            with pytest.raises(RunHeld):
                await client.execute("o")
            await store.release(RunId("o"), theirs.epoch)
            del store.reads[:]
            assert (await client.execute("o")).status.value == "waiting"
            assert store.reads == ["load_run"]  # released: free at the read, taken next

    asyncio.run(go())


def test_a_run_taken_and_given_back_between_the_read_and_the_lease_is_read_again(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        store = RacedStore(tmp_path / "runs.db")
        store.reads = []
        async with Client(store=store) as client:
            await client.start("lk_testapps:gate", run_id="r")
            store.race = RunId("r")
            outcome = await client.execute("r")
            assert outcome.status.value == "waiting"
            assert store.reads == ["load_run", "load_run"]  # the first read was stale

    asyncio.run(go())
