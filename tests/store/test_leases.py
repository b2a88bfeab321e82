"""The lease contract workers rely on, checked on both stores through ``backend``.

Enqueue, claim, heartbeat, release; a fenced view refused, writing nothing, once its epoch
is over; a waiting run woken by an answer from anyone; claimers that never share a run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

from loopkernel.errors import LeaseLost, RunNotFound, UsageError
from loopkernel.graph import JSON, Delta, EventKind, GraphPatch, RunStatus, TaskSpec, validate
from loopkernel.ids import RunId, TaskId
from loopkernel.store import Claim, EffectRecord, NewEvent, NewRun, PatchRecord, Store, open_store
from loopkernel.store._schema import POSTGRES_VERSION as PG_VERSION
from loopkernel.store._schema import SQLITE_VERSION

if TYPE_CHECKING:
    from lk_stores import Backend

RUN = RunId("run-1")
SKILLS = frozenset({"fetch"})
SHORT = 0.05
"""A lease that is over by the time a test has slept ``2 * SHORT``."""


async def new_run(store: Store, run_id: RunId = RUN, *, enqueue: bool = True) -> None:
    await store.create_run(
        NewRun(run_id=run_id, app="demo", params={}, max_events=100, token_hash="h")
    )
    if enqueue:
        await store.enqueue(run_id)


async def plan(store: Store, seq: int, patch: GraphPatch, run_id: RunId = RUN) -> None:
    delta = validate((await store.load_run(run_id)).state, patch, SKILLS)
    await store.commit_patches(run_id, [PatchRecord(event_seq=seq, ops=patch.to_json())], delta)


async def waiting_run(store: Store, run_id: RunId = RUN, *, enqueue: bool = True) -> None:
    """A run whose task ``gate`` waits for a human, every event planned, status waiting."""
    await new_run(store, run_id, enqueue=enqueue)
    await plan(
        store,
        1,
        GraphPatch().add(TaskSpec(task_id="gate", skill="fetch")).wait("gate", "ok?"),
        run_id,
    )
    await store.set_status(run_id, RunStatus.WAITING)


def effect(key: str) -> EffectRecord:
    return EffectRecord(
        run_id=RUN,
        key=key,
        task_id=TaskId("a"),
        call_index=0,
        tool="t",
        effect="idempotent",
        arguments={},
        status="intended",
    )


async def snapshot(store: Store, run_id: RunId = RUN) -> tuple[JSON, ...]:
    """Everything a write could change, but the lease columns."""
    info = await store.get_run(run_id)
    return (
        await store.dump(run_id),
        [(e.seq, e.kind.value, e.data) for e in await store.events(run_id)],
        [p.event_seq for p in await store.patches(run_id)],
        [(e.key, e.status) for e in await store.effects(run_id)],
        info.status.value,
    )


def test_the_stores_share_their_schema_versions_but_the_step_function() -> None:
    # 1-6 are the same tables and keys in both; PostgreSQL's 7 adds the one-statement
    # step (a server function), which SQLite has no use for; SQLite's 7 is PostgreSQL's 8
    # (effects.arguments_digest); SQLite's 8 (timers) is PostgreSQL's 9, which also
    # replaces the step function to write tasks.wake_at; SQLite's 9 (versions) is
    # PostgreSQL's 10, which replaces it again to write patches.app_version; SQLite's 10
    # (schedules) is PostgreSQL's 11; SQLite's 11 (the task page's index, tasks.started_at)
    # is PostgreSQL's 12; SQLite's 12 (the knowledge base) is PostgreSQL's 13; SQLite's 13
    # (schedule policies and their journal) is PostgreSQL's 14.
    assert SQLITE_VERSION == 13
    assert PG_VERSION == 14


def test_only_enqueued_running_runs_are_claimed_once_each(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store, RunId("local"), enqueue=False)  # `loopkernel run`: never claimed
        assert await store.claim_run("w1", 30) is None
        await new_run(store, RunId("a"))
        await new_run(store, RunId("b"))
        await store.enqueue(RunId("a"))  # idempotent
        first = await store.claim_run("w1", 30)
        second = await store.claim_run("w2", 30)
        assert first == Claim(run_id=RunId("a"), epoch=1, owner="w1")  # oldest first
        assert second == Claim(run_id=RunId("b"), epoch=1, owner="w2")
        assert await store.claim_run("w3", 30) is None  # both held
        with pytest.raises(RunNotFound):
            await store.enqueue(RunId("ghost"))
        with pytest.raises(UsageError, match="positive"):
            await store.claim_run("w1", 0)

    backend.run(body)


def test_an_expired_lease_is_taken_over_with_a_new_epoch(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        a = await store.claim_run("a", SHORT)
        assert a is not None and a.epoch == 1
        await asyncio.sleep(2 * SHORT)
        b = await store.claim_run("b", 30)
        assert b == Claim(run_id=RUN, epoch=2, owner="b")
        with pytest.raises(LeaseLost, match="epoch 1 is over") as err:
            await store.heartbeat(RUN, a.epoch, 30)
        assert (err.value.epoch, err.value.current, err.value.retryable) == (1, 2, True)  # type: ignore[attr-defined]
        await store.heartbeat(RUN, b.epoch, 30)

    backend.run(body)


def test_a_heartbeat_keeps_the_lease(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        a = await store.claim_run("a", SHORT)
        assert a is not None
        await asyncio.sleep(2 * SHORT)  # at least this long: the claim's lease is over
        for _ in range(3):  # a late heartbeat, while nobody took the run, still renews it
            await store.heartbeat(RUN, a.epoch, 60)
        assert await store.claim_run("b", 30) is None
        with pytest.raises(RunNotFound):
            await store.heartbeat(RunId("ghost"), 1, 30)

    backend.run(body)


def test_a_fenced_view_writes_while_its_epoch_holds(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        claim = await store.claim_run("a", 30)
        assert claim is not None
        view = store.fenced(RUN, claim.epoch)
        await plan(view, 1, GraphPatch().add(TaskSpec(task_id="a", skill="fetch")))
        (ev,) = await view.append_events(
            RUN, [NewEvent(kind=EventKind.TASK_COMPLETED, task_id=TaskId("a"))]
        )
        await view.intend_effect(effect("k"))
        await view.finish_effect(RUN, "k", status="done", result=1)
        await view.set_status(RUN, RunStatus.RUNNING)
        assert (await view.get_run(RUN)).last_seq == ev.seq == 2
        await view.close()  # a view leaves the connection to its store
        assert (await store.get_run(RUN)).last_seq == 2

    backend.run(body)


def test_a_taken_over_worker_can_write_nothing_more(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        a = await store.claim_run("a", SHORT)
        assert a is not None
        stale = store.fenced(RUN, a.epoch)
        await plan(stale, 1, GraphPatch().add(TaskSpec(task_id="a", skill="fetch")))
        await stale.intend_effect(effect("k1"))
        await asyncio.sleep(2 * SHORT)
        b = await store.claim_run("b", 30)
        assert b is not None and b.epoch == a.epoch + 1
        before = await snapshot(store)
        state = (await store.load_run(RUN)).state
        finish = validate(state, GraphPatch().finish("succeeded"), SKILLS)
        done = NewEvent(kind=EventKind.TASK_COMPLETED, task_id=TaskId("a"))
        writes: list[Callable[[], Awaitable[object]]] = [
            lambda: stale.append_events(RUN, [done]),
            lambda: stale.commit_patches(RUN, [PatchRecord(event_seq=9, ops=[])], finish),
            lambda: stale.set_status(RUN, RunStatus.WAITING),
            lambda: stale.intend_effect(effect("k2")),
            lambda: stale.finish_effect(RUN, "k1", status="done", result="late"),
            lambda: stale.request_cancel(RUN, "late"),
        ]
        for write in writes:
            with pytest.raises(LeaseLost):
                await write()
        assert await snapshot(store) == before  # nothing of the stale worker landed
        fresh = store.fenced(RUN, b.epoch)
        await fresh.finish_effect(RUN, "k1", status="done", result="b")
        assert (await store.get_effect(RUN, "k1")).result == "b"  # type: ignore[union-attr]

    backend.run(body)


def test_a_fenced_view_writes_its_own_run_only(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        await new_run(store, RunId("other"), enqueue=False)
        claim = await store.claim_run("a", 30)
        assert claim is not None
        view = store.fenced(RUN, claim.epoch)
        with pytest.raises(UsageError, match="fenced to run run-1"):
            await view.append_events(RunId("other"), [])
        with pytest.raises(UsageError, match="fenced to run run-1"):
            await view.create_run(
                NewRun(run_id=RunId("new"), app="x", params={}, max_events=9, token_hash="h")
            )
        with pytest.raises(UsageError, match="fenced to run run-1"):
            await view.claim_run("a", 30)
        assert [r.run_id for r in await store.list_runs()] == ["other", RUN]

    backend.run(body)


def test_release_ends_the_epoch_and_frees_the_run(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        a = await store.claim_run("a", 30)
        assert a is not None
        assert await store.release(RUN, a.epoch) is True
        with pytest.raises(LeaseLost):
            await store.fenced(RUN, a.epoch).set_status(RUN, RunStatus.RUNNING)
        b = await store.claim_run("b", 30)
        assert b == Claim(run_id=RUN, epoch=a.epoch + 2, owner="b")
        assert await store.release(RUN, a.epoch) is False  # a stale one changes nothing
        assert await store.claim_run("c", 30) is None
        await store.heartbeat(RUN, b.epoch, 30)

    backend.run(body)


def test_a_waiting_run_holds_nothing_and_an_answer_makes_it_claimable(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await waiting_run(store)
        await waiting_run(store, RunId("local"), enqueue=False)
        await waiting_run(store, RunId("cancelled"))
        assert await store.claim_run("w", 30) is None
        await store.add_human_input(RUN, TaskId("gate"), decision="approve", payload=None)
        await store.add_human_input(
            RunId("local"), TaskId("gate"), decision="approve", payload=None
        )
        await store.request_cancel(RunId("cancelled"), "stop")
        assert (await store.get_run(RUN)).status is RunStatus.RUNNING
        assert (await store.get_run(RunId("local"))).status is RunStatus.WAITING  # as ever
        claimed = {(await store.claim_run("w", 30)) for _ in range(3)}
        assert {c.run_id for c in claimed if c} == {RUN, RunId("cancelled")}

    backend.run(body)


def test_an_answer_that_lands_while_the_run_is_held_is_not_lost(backend: Backend) -> None:
    """The executor saw no new event, an approval lands, the executor parks the run:
    release notices the unanswered event and makes the run claimable again."""

    async def body(store: Store) -> None:
        await new_run(store)
        claim = await store.claim_run("a", 30)
        assert claim is not None
        view = store.fenced(RUN, claim.epoch)
        await plan(
            view, 1, GraphPatch().add(TaskSpec(task_id="gate", skill="fetch")).wait("gate", "ok?")
        )
        await store.add_human_input(RUN, TaskId("gate"), decision="approve", payload=None)
        await view.set_status(RUN, RunStatus.WAITING)  # too late: it did not look again
        await store.release(RUN, claim.epoch)
        assert (await store.get_run(RUN)).status is RunStatus.RUNNING
        assert await store.claim_run("b", 30) == Claim(run_id=RUN, epoch=claim.epoch + 2, owner="b")

    backend.run(body)


def test_a_plain_waiting_release_stays_waiting(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        claim = await store.claim_run("a", 30)
        assert claim is not None
        view = store.fenced(RUN, claim.epoch)
        await plan(
            view, 1, GraphPatch().add(TaskSpec(task_id="gate", skill="fetch")).wait("gate", "ok?")
        )
        await view.set_status(RUN, RunStatus.WAITING)
        await store.release(RUN, claim.epoch)
        assert (await store.get_run(RUN)).status is RunStatus.WAITING
        assert await store.claim_run("b", 30) is None

    backend.run(body)


def test_finished_runs_are_not_enqueued(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store, enqueue=False)
        state = (await store.load_run(RUN)).state
        finish: Delta = validate(state, GraphPatch().finish("succeeded"), SKILLS)
        await store.commit_patches(RUN, [PatchRecord(event_seq=1, ops=[])], finish)
        with pytest.raises(UsageError, match="already succeeded"):
            await store.enqueue(RUN)

    backend.run(body)


def test_claimers_on_separate_connections_never_share_a_run(backend: Backend) -> None:
    runs = [RunId(f"r{i:02}") for i in range(24)]

    async def setup(store: Store) -> None:
        for run_id in runs:
            await new_run(store, run_id)

    backend.run(setup)

    async def claimer(name: str) -> list[RunId]:
        store = open_store(backend.url)
        await store.open()
        got: list[RunId] = []
        try:
            while (claim := await store.claim_run(name, 30)) is not None:
                got.append(claim.run_id)
                await asyncio.sleep(0)
        finally:
            await store.close()
        return got

    async def race() -> list[list[RunId]]:
        return list(await asyncio.gather(*(claimer(f"w{i}") for i in range(4))))

    claimed = asyncio.run(race())
    flat = [r for got in claimed for r in got]
    assert sorted(flat) == runs  # every run once, none twice


@pytest.mark.postgres
def test_a_notify_wakes_a_waiting_worker(pg_backend: Backend) -> None:
    async def body(store: Store) -> None:
        await store.wait_for_work(0)  # LISTEN from now on
        other = open_store(pg_backend.url)
        await other.open()
        try:
            # An hour-long wait: only the notification can end it within the test.
            waiter = asyncio.ensure_future(store.wait_for_work(3600))
            await asyncio.sleep(0.1)
            assert not waiter.done()
            await new_run(other)  # enqueue notifies
            await asyncio.wait_for(waiter, 60)
            # Notifications that arrive between two waits are kept, not lost.
            await new_run(other, RunId("second"))
            await asyncio.wait_for(store.wait_for_work(3600), 60)
        finally:
            await other.close()

    pg_backend.run(body)


@pytest.mark.postgres
def test_a_broken_listen_connection_ends_the_wait_soon_and_listens_again(
    pg_backend: Backend,
) -> None:
    """Notifications sent while the LISTEN connection is gone are lost: the wait must not
    sleep out its hour but hand back to the worker (which looks for work itself), then
    listen again."""
    from loopkernel.store._postgres import Listener

    async def body(store: Store) -> None:
        listener = Listener(pg_backend.url)
        await listener.wait(0)  # LISTEN from now on
        assert listener._conn is not None
        pid = listener._conn.info.backend_pid
        assert pg_backend.sql(f"SELECT pg_terminate_backend({pid})") == [(True,)]
        # An hour-long wait ends within the bound: the broken connection is noticed.
        await asyncio.wait_for(listener.wait(3600), 60)
        await asyncio.wait_for(listener.wait(3600), 60)  # listening again: returns to look
        waiter = asyncio.ensure_future(listener.wait(3600))
        await asyncio.sleep(0.1)
        assert not waiter.done()  # really listening, not polling
        await new_run(store)  # enqueue notifies
        await asyncio.wait_for(waiter, 60)
        await listener.close()

    pg_backend.run(body)

    async def unreachable(_: Store) -> None:
        listener = Listener("postgresql://postgres@127.0.0.1:9/nowhere")
        await asyncio.wait_for(listener.wait(3600), 60)  # no server: a short pause, not 1h
        await listener.close()

    pg_backend.run(unreachable)


def test_sqlite_has_no_notifications_and_polls(lite_backend: Backend) -> None:
    async def body(store: Store) -> None:
        t0 = time.monotonic()
        await store.wait_for_work(0.05)
        assert time.monotonic() - t0 > 0.04  # it waited its poll (no upper bound: load)

    lite_backend.run(body)


# -- one executor per run: acquire (loopkernel run / resume / Client.execute) -------------


def test_acquire_owns_a_run_once_and_refuses_a_second_executor_writing_nothing(
    backend: Backend,
) -> None:
    from loopkernel.errors import RunHeld
    from loopkernel.store._lease import Holder

    first = Holder(host="box-a", pid=101, since=1_700_000_000.0)
    second = Holder(host="box-b", pid=202, since=1_700_000_100.0)

    async def body(store: Store) -> None:
        await new_run(store, enqueue=False)
        claim = await store.acquire(RUN, first, 60)
        before = backend.sql("SELECT owner, lease_until, lease_epoch FROM runs")
        with pytest.raises(RunHeld) as held:
            await store.acquire(RUN, second, 60)
        assert backend.sql("SELECT owner, lease_until, lease_epoch FROM runs") == before
        message = str(held.value)
        assert "held by another executor: pid 101 on host box-a since 2023-11-14 22:13:20 UTC" in (
            message
        )
        assert "its lease ends at" in message and "\n" not in message
        assert held.value.attrs["epoch"] == claim.epoch
        # Workers never claim a run that was not handed to them, held or not.
        assert await store.claim_run("w", 60) is None
        # The holder writes through its fenced view; the refused one never got one.
        view = store.fenced(RUN, claim.epoch)
        await view.set_status(RUN, RunStatus.RUNNING)
        # A holder known dead is taken over at the epoch it held (no waiting for the lease).
        took = await store.acquire(RUN, second, 60, takeover=claim.epoch)
        assert took.epoch == claim.epoch + 1
        with pytest.raises(LeaseLost):
            await view.set_status(RUN, RunStatus.RUNNING)
        assert await store.release(RUN, took.epoch)
        # Given back, a run no worker serves stays out of the workers' reach.
        assert backend.sql("SELECT owner, lease_until FROM runs") == [(None, None)]
        assert await store.claim_run("w", 60) is None

    backend.run(body)


def test_an_expired_local_lease_is_taken_over_and_an_enqueued_run_goes_back_to_workers(
    backend: Backend,
) -> None:
    from loopkernel.store._lease import Holder

    async def body(store: Store) -> None:
        await new_run(store, enqueue=False)
        gone = await store.acquire(RUN, Holder(host="box-a", pid=1, since=0.0), SHORT)
        await asyncio.sleep(2 * SHORT)
        # Its lease over, the run is still no worker's: only another local executor takes it.
        assert await store.claim_run("w", 60) is None
        later = await store.acquire(RUN, Holder(host="box-b", pid=2, since=0.0), 60)
        assert later.epoch == gone.epoch + 1
        assert await store.release(RUN, later.epoch)

        other = RunId("run-2")
        await new_run(store, other)  # handed to the workers
        mine = await store.acquire(other, Holder(host="box-c", pid=3, since=0.0), 60)
        assert mine.owner.startswith("queued:")
        assert await store.claim_run("w", 60) is None  # held
        assert await store.release(other, mine.epoch)
        claimed = await store.claim_run("w", 60)
        assert claimed is not None and claimed.run_id == other

    backend.run(body)
