"""``commit_step``, the executor's durable step, on both stores -- and, on PostgreSQL, the
server function that makes it one statement (schema 7) and the migration that adds it.

The step's guarantees: another process's events make ours move after them (and the
records' and tasks' seqs with them); a stale lease writes nothing; an event planned twice
is ``ReplayDivergence`` and writes nothing; watchers of the journal are woken.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from loopkernel.errors import LeaseLost, ReplayDivergence, RunNotFound
from loopkernel.graph import (
    JSON,
    Delta,
    Event,
    EventKind,
    GraphPatch,
    TaskSpec,
    TaskState,
    validate,
)
from loopkernel.ids import RunId, TaskId
from loopkernel.store import NewEvent, NewRun, PatchRecord, Store, digest_of

if TYPE_CHECKING:
    from lk_stores import Backend

RUN = RunId("run-1")
SKILLS = frozenset({"fetch"})


async def planned_run(store: Store) -> None:
    """A run whose start (seq 1) is planned: tasks ``a`` and ``b``, ``a`` running."""
    await store.create_run(
        NewRun(run_id=RUN, app="demo", params={}, max_events=100, token_hash="h")
    )
    patch = (
        GraphPatch()
        .add(TaskSpec(task_id="a", skill="fetch"))
        .add(TaskSpec(task_id="b", skill="fetch"), after=["a"])
    )
    state = (await store.load_run(RUN)).state
    delta = validate(state, patch, SKILLS)
    a = replace(next(t for t in delta.tasks if t.task_id == "a"), state=TaskState.RUNNING)
    delta = replace(delta, tasks=(*[t for t in delta.tasks if t.task_id != "a"], a))
    await store.commit_patches(RUN, [PatchRecord(event_seq=1, ops=patch.to_json())], delta)


async def step_of(
    store: Store, seq: int, *, finish: bool = False
) -> tuple[list[Event], list[PatchRecord], Delta, NewEvent | None]:
    """What the executor commits when ``a`` completes, numbering the event ``seq``: the
    event, its patch (``b`` starts, or the run finishes), the tasks' new values."""
    state = (await store.load_run(RUN)).state
    a = replace(state.task(TaskId("a")), state=TaskState.SUCCEEDED, result="A", done_seq=seq)
    state.tasks[a.task_id] = a
    event = Event(
        run_id=RUN, seq=seq, kind=EventKind.TASK_COMPLETED, task_id=a.task_id, data={"r": "A"}
    )
    patch = GraphPatch().finish("succeeded", verdict={"v": 1}) if finish else GraphPatch()
    delta = validate(state, patch, SKILLS)
    b = replace(state.task(TaskId("b")), state=TaskState.RUNNING)
    delta = replace(delta, tasks=(a, *delta.tasks, b))
    final = None
    if finish:
        final = NewEvent(kind=EventKind.RUN_FINISHED, data={"status": "succeeded"})
    return [event], [PatchRecord(event_seq=seq, ops=patch.to_json())], delta, final


async def everything(store: Store) -> tuple[JSON, ...]:
    info = await store.get_run(RUN)
    return (
        await store.dump(RUN),
        [(e.seq, e.kind.value, e.task_id, e.data) for e in await store.events(RUN)],
        [(p.event_seq, p.ops) for p in await store.patches(RUN)],
        info.status.value,
        info.last_seq,
    )


def test_a_step_writes_its_events_patches_tasks_and_finish(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await planned_run(store)
        journal, records, delta, final = await step_of(store, 2, finish=True)
        written, finished = await store.commit_step(RUN, journal, records, delta, final)
        assert written == journal
        assert finished is not None and finished.seq == 3
        assert finished.kind is EventKind.RUN_FINISHED
        events = await store.events(RUN)
        assert [(e.seq, e.kind) for e in events] == [
            (1, EventKind.RUN_STARTED),
            (2, EventKind.TASK_COMPLETED),
            (3, EventKind.RUN_FINISHED),
        ]
        assert events[1].data == {"r": "A"} and events[2] == finished
        assert [p.event_seq for p in await store.patches(RUN)] == [1, 2]
        loaded = await store.load_run(RUN)
        assert loaded.info.status.value == "succeeded" and loaded.info.verdict == {"v": 1}
        a, b = loaded.state.task(TaskId("a")), loaded.state.task(TaskId("b"))
        assert (a.state, a.result, a.done_seq) == (TaskState.SUCCEEDED, "A", 2)
        assert b.state is TaskState.RUNNING

    backend.run(body)


def test_events_another_process_appended_first_move_the_step_after_them(
    backend: Backend,
) -> None:
    async def body(store: Store) -> None:
        await planned_run(store)
        # The executor numbers its completion 2 (the last seq it knows is 1) ...
        journal, records, delta, final = await step_of(store, 2)
        # ... but another process appends before the step commits.
        other = backend.store()
        await other.open()
        try:
            cancel = await other.request_cancel(RUN, "stop")
        finally:
            await other.close()
        assert cancel.seq == 2
        written, finished = await store.commit_step(RUN, journal, records, delta, final)
        assert finished is None
        assert [(e.seq, e.kind, e.task_id, e.data) for e in written] == [
            (3, EventKind.TASK_COMPLETED, "a", {"r": "A"})
        ]
        assert [(e.seq, e.kind) for e in await store.events(RUN)] == [
            (1, EventKind.RUN_STARTED),
            (2, EventKind.CANCEL_REQUESTED),
            (3, EventKind.TASK_COMPLETED),
        ]
        # The patch answers the completion where it was written; the cancel is unplanned.
        assert [p.event_seq for p in await store.patches(RUN)] == [1, 3]
        loaded = await store.load_run(RUN)
        assert loaded.state.task(TaskId("a")).done_seq == 3
        assert [e.seq for e in loaded.unplanned] == [2]

    backend.run(body)


def test_several_events_move_together_each_seq_to_its_own(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await planned_run(store)
        state = (await store.load_run(RUN)).state
        a = replace(state.task(TaskId("a")), state=TaskState.SUCCEEDED, done_seq=2)
        b = replace(state.task(TaskId("b")), state=TaskState.FAILED, done_seq=3)
        journal = [
            Event(run_id=RUN, seq=seq, kind=kind, task_id=tid, data={"n": seq})
            for seq, kind, tid in (
                (2, EventKind.TASK_COMPLETED, a.task_id),
                (3, EventKind.TASK_FAILED, b.task_id),
            )
        ]
        records = [PatchRecord(event_seq=2, ops=[]), PatchRecord(event_seq=3, ops=[])]
        # Another process appends two events first: ours become 4 and 5.
        other = backend.store()
        await other.open()
        try:
            await other.append_events(RUN, [NewEvent(kind=EventKind.TOOL_RESTARTED)] * 2)
        finally:
            await other.close()
        written, _ = await store.commit_step(RUN, journal, records, Delta(tasks=(a, b)))
        assert [(e.seq, e.task_id, e.data) for e in written] == [
            (4, "a", {"n": 2}),
            (5, "b", {"n": 3}),
        ]
        assert [p.event_seq for p in await store.patches(RUN)] == [1, 4, 5]
        tasks = (await store.load_run(RUN)).state.tasks
        assert (tasks[a.task_id].done_seq, tasks[b.task_id].done_seq) == (4, 5)

    backend.run(body)


def test_a_task_written_twice_in_a_step_keeps_its_last_value(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await planned_run(store)
        journal, records, delta, final = await step_of(store, 2)
        b = (await store.load_run(RUN)).state.task(TaskId("b"))
        twice = (replace(b, state=TaskState.RUNNING), replace(b, state=TaskState.CANCELLED))
        await store.commit_step(
            RUN, journal, records, replace(delta, tasks=(*delta.tasks, *twice)), final
        )
        state = (await store.load_run(RUN)).state
        assert state.task(TaskId("b")).state is TaskState.CANCELLED

    backend.run(body)


def test_a_stale_lease_steps_nothing(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await planned_run(store)
        await store.enqueue(RUN)
        first = await store.claim_run("w1", 0.05)
        assert first is not None
        stale = store.fenced(RUN, first.epoch)
        await asyncio.sleep(0.1)
        second = await store.claim_run("w2", 30)
        assert second is not None and second.epoch == first.epoch + 1
        before = await everything(store)
        journal, records, delta, final = await step_of(store, 2, finish=True)
        with pytest.raises(LeaseLost, match=f"epoch {first.epoch} is over") as err:
            await stale.commit_step(RUN, journal, records, delta, final)
        assert err.value.current == second.epoch  # type: ignore[attr-defined]
        assert "w2" in str(err.value)
        assert await everything(store) == before
        # The current holder's view steps.
        fresh = store.fenced(RUN, second.epoch)
        written, finished = await fresh.commit_step(RUN, journal, records, delta, final)
        assert [e.seq for e in written] == [2] and finished is not None and finished.seq == 3

    backend.run(body)


def test_a_step_on_a_missing_run_is_run_not_found(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await planned_run(store)
        journal, records, delta, final = await step_of(store, 2)
        with pytest.raises(RunNotFound):
            await store.commit_step(RunId("nope"), journal, records, delta, final)

    backend.run(body)


def test_a_step_planning_an_event_twice_is_replay_divergence_and_writes_nothing(
    backend: Backend,
) -> None:
    async def body(store: Store) -> None:
        await planned_run(store)
        journal, records, delta, final = await step_of(store, 2, finish=True)
        before = await everything(store)
        again = [PatchRecord(event_seq=1, ops=[]), *records]  # seq 1 already has its patch
        with pytest.raises(ReplayDivergence, match="already has a patch"):
            await store.commit_step(RUN, journal, again, delta, final)
        assert await everything(store) == before  # not the event, not the tasks, no finish

    backend.run(body)


def test_a_step_wakes_watchers_of_the_journal(backend: Backend) -> None:
    async def body(watcher: Store) -> None:
        await planned_run(watcher)
        await watcher.wait_for_journal(0.01)  # connect (PostgreSQL: LISTEN) first
        writer = backend.store()
        await writer.open()
        try:

            async def until_two_events() -> None:
                while await watcher.last_seq(RUN) < 2:
                    await watcher.wait_for_journal(60)  # returns early only when woken

            waiting = asyncio.create_task(until_two_events())
            await asyncio.sleep(0)
            journal, records, delta, final = await step_of(writer, 2)
            await writer.commit_step(RUN, journal, records, delta, final)
            await asyncio.wait_for(waiting, 30)  # far below the 60 s a missed wake-up costs
        finally:
            await writer.close()

    backend.run(body)


# -- PostgreSQL: the function and its migration ----------------------------------------------


@pytest.mark.postgres
def test_a_step_waiting_for_the_run_lock_numbers_after_what_its_holder_appended(
    pg_backend: Backend,
) -> None:
    """The function reads MAX(seq) after the row lock in a statement of its own, and that
    statement sees what the lock's holder committed while the step waited (READ COMMITTED
    gives each statement of a volatile function a fresh snapshot)."""
    import psycopg

    async def body(store: Store) -> None:
        await planned_run(store)
        journal, records, delta, final = await step_of(store, 2)
        holder = await psycopg.AsyncConnection.connect(pg_backend.url, autocommit=True)
        # pg_stat_activity is read outside the holder's transaction (which would keep
        # showing it the first reading).
        watcher = await psycopg.AsyncConnection.connect(pg_backend.url, autocommit=True)
        try:
            async with holder.transaction():
                await holder.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (RUN,))
                await holder.execute(
                    "INSERT INTO events (run_id, seq, kind, task_id, data, created_at) "
                    "VALUES (%s, 2, 'cancel_requested', NULL, '{\"reason\":\"x\"}', 0)",
                    (RUN,),
                )
                step = asyncio.create_task(store.commit_step(RUN, journal, records, delta, final))
                # The step waits for the lock (seen by the server), then the holder commits.
                for _ in range(200):
                    cur = await watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock' "
                        "AND query LIKE %s",
                        ("%loopkernel_commit_step%",),
                    )
                    row = await cur.fetchone()
                    if row is not None and row[0] >= 1:
                        break
                    await asyncio.sleep(0.02)
                else:
                    pytest.fail("the step never waited for the run's lock")
                assert not step.done()
        finally:
            await holder.close()
            await watcher.close()
        written, _ = await step
        assert [e.seq for e in written] == [3]
        assert [p.event_seq for p in await store.patches(RUN)] == [1, 3]
        assert (await store.load_run(RUN)).state.task(TaskId("a")).done_seq == 3

    pg_backend.run(body)


def _v6(pg_backend: Backend) -> None:
    """Make ``pg_backend``'s store what schema 6 was: the same tables, no step function."""
    pg_backend.sql("DROP FUNCTION loopkernel_commit_step")
    pg_backend.sql("ALTER TABLE effects DROP COLUMN arguments_digest")  # schema 8
    pg_backend.sql("DROP INDEX runs_due")  # schema 9: timers
    pg_backend.sql("ALTER TABLE tasks DROP COLUMN wake_at")
    pg_backend.sql("ALTER TABLE runs DROP COLUMN wake_at")
    pg_backend.sql("ALTER TABLE runs DROP COLUMN app_version")  # schema 10: versions
    pg_backend.sql("ALTER TABLE patches DROP COLUMN app_version")
    pg_backend.sql("DROP TABLE schedules")  # schema 11
    pg_backend.sql("DROP INDEX events_by_task")  # schema 12: task pages, task starts
    pg_backend.sql("DROP TRIGGER tasks_started_insert ON tasks")
    pg_backend.sql("DROP TRIGGER tasks_started_update ON tasks")
    pg_backend.sql("DROP FUNCTION loopkernel_task_started")
    pg_backend.sql("ALTER TABLE tasks DROP COLUMN started_at")
    pg_backend.sql("DROP TABLE kb_identifiers")  # schema 13: the runbook index
    pg_backend.sql("DROP TABLE kb_passages")
    pg_backend.sql("DROP TABLE schedule_events")  # schema 14: schedule policies
    pg_backend.sql("UPDATE meta SET value = '6' WHERE key = 'schema_version'")


@pytest.mark.postgres
def test_a_schema_6_database_migrates_to_7_and_its_runs_go_on(
    pg_backend: Backend, lite_backend: Backend
) -> None:
    from loopkernel.store._schema import POSTGRES_VERSION as SCHEMA_VERSION

    async def begin(store: Store) -> None:
        await planned_run(store)

    async def end(store: Store) -> str:
        journal, records, delta, final = await step_of(store, 2, finish=True)
        written, finished = await store.commit_step(RUN, journal, records, delta, final)
        assert [e.seq for e in written] == [2] and finished is not None
        return digest_of(await store.dump(RUN))

    pg_backend.run(begin)
    _v6(pg_backend)
    assert pg_backend.sql("SELECT to_regproc('loopkernel_commit_step') IS NULL") == [(True,)]
    digest = pg_backend.run(end)  # open() migrates; the step needs the function
    assert pg_backend.sql("SELECT value FROM meta WHERE key = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]
    lite_backend.run(begin)
    assert lite_backend.run(end) == digest  # the same run as SQLite's


@pytest.mark.postgres
@pytest.mark.parametrize("version", [1, 5])
def test_older_schemas_migrate_through_7(pg_backend: Backend, version: int) -> None:
    from loopkernel.store._schema import POSTGRES_MIGRATIONS as MIGRATIONS
    from loopkernel.store._schema import POSTGRES_VERSION as SCHEMA_VERSION

    pg_backend.sql("CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)")
    for statements in MIGRATIONS[:version]:
        for statement in statements:
            pg_backend.sql(statement)
    pg_backend.sql(f"INSERT INTO meta VALUES ('schema_version', '{version}')")

    async def body(store: Store) -> None:
        await planned_run(store)
        journal, records, delta, final = await step_of(store, 2, finish=True)
        await store.commit_step(RUN, journal, records, delta, final)
        assert (await store.get_run(RUN)).last_seq == 3

    pg_backend.run(body)
    assert pg_backend.sql("SELECT value FROM meta WHERE key = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]
