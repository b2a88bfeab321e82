"""What the web inspector needs of a store, on SQLite and PostgreSQL alike: one page of
runs at a time (keyset, filtered), patches after a seq, and a wake-up when any writer
appends to a journal."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from loopkernel.graph import EventKind, GraphPatch, RunStatus, TaskSpec, validate
from loopkernel.ids import RunId
from loopkernel.store import NewEvent, NewRun, PatchRecord, Store

if TYPE_CHECKING:
    from lk_stores import Backend


async def new_run(store: Store, run_id: str, app: str) -> None:
    await store.create_run(
        NewRun(run_id=RunId(run_id), app=app, params={}, max_events=100, token_hash="h")
    )


def test_list_runs_pages_by_keyset_and_filters(backend: Backend) -> None:
    async def body(store: Store) -> None:
        for n in range(7):
            await new_run(store, f"r{n}", "a" if n % 2 else "b")
        for n in (1, 2, 5):
            await store.set_status(RunId(f"r{n}"), RunStatus.WAITING)
        everything = [r.run_id for r in await store.list_runs(100)]
        assert everything == [f"r{n}" for n in range(6, -1, -1)]
        walked: list[str] = []
        before = None
        while True:
            page = await store.list_runs(3, before=before)
            if not page:
                break
            walked += [r.run_id for r in page]
            before = (page[-1].created_at, page[-1].run_id)
        assert walked == everything
        waiting = await store.list_runs(100, status=RunStatus.WAITING)
        assert [r.run_id for r in waiting] == ["r5", "r2", "r1"]
        assert all(r.status is RunStatus.WAITING for r in waiting)
        both = await store.list_runs(100, status=RunStatus.WAITING, app="a")
        assert [r.run_id for r in both] == ["r5", "r1"]
        assert [r.run_id for r in await store.list_runs(100, app="nope")] == []
        after_r5 = await store.list_runs(100, app="a", before=(both[0].created_at, "r5"))
        assert [r.run_id for r in after_r5] == ["r3", "r1"]

    backend.run(body)


def test_patches_after_a_seq(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store, "p", "a")
        await store.append_events(RunId("p"), [NewEvent(kind=EventKind.TOOL_RESTARTED)])
        loaded = await store.load_run(RunId("p"))
        patch = GraphPatch().add(TaskSpec(task_id="t", skill="s"))
        delta = validate(loaded.state, patch, skills=frozenset({"s"}))
        records = [
            PatchRecord(event_seq=1, ops=patch.to_json()),
            PatchRecord(event_seq=2, ops=[]),
        ]
        await store.commit_patches(RunId("p"), records, delta)
        assert [p.event_seq for p in await store.patches(RunId("p"))] == [1, 2]
        assert [p.event_seq for p in await store.patches(RunId("p"), after=1)] == [2]
        assert await store.patches(RunId("p"), after=2) == []

    backend.run(body)


def test_wait_for_journal_wakes_when_another_writer_appends(backend: Backend) -> None:
    async def body(watcher: Store) -> None:
        await new_run(watcher, "w", "a")
        await watcher.wait_for_journal(0.01)  # connect (PostgreSQL: LISTEN) first
        writer = backend.store()
        await writer.open()
        try:
            entered = asyncio.Event()

            async def until_two_events() -> None:
                while await watcher.last_seq(RunId("w")) < 2:
                    entered.set()  # the wait below notes where the journal stands first
                    await watcher.wait_for_journal(60)  # returns early only when woken

            waiting = asyncio.create_task(until_two_events())
            # the store reads off the loop: wait for the watcher to be waiting, not one turn
            await entered.wait()
            await asyncio.sleep(0)
            await writer.append_events(RunId("w"), [NewEvent(kind=EventKind.TOOL_RESTARTED)])
            await asyncio.wait_for(waiting, 30)  # far below the 60 s a missed wake-up costs
        finally:
            await writer.close()

    backend.run(body)


def test_a_commit_between_two_waits_wakes_the_second(backend: Backend) -> None:
    """A reader wakes, reads the journal, and waits again: what was committed after its
    wake-up (while it read) wakes the next wait at once, not a poll interval later."""

    async def body(watcher: Store) -> None:
        await new_run(watcher, "b", "a")
        await watcher.wait_for_journal(0.01)  # connect (PostgreSQL: LISTEN) first
        writer = backend.store()
        await writer.open()
        try:
            await watcher.wait_for_journal(0.05)  # the journal stands still: times out
            await writer.append_events(RunId("b"), [NewEvent(kind=EventKind.TOOL_RESTARTED)])
            await asyncio.wait_for(watcher.wait_for_journal(60), 30)  # between: woken
        finally:
            await writer.close()

    backend.run(body)
