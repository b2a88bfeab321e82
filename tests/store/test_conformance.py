"""The Store contract, checked on every implementation through the ``backend`` fixture.

Each test body is one ``async def`` run on a fresh, open store; the assertions are the
same for SQLite and PostgreSQL, so a behaviour one store has and the other lacks fails.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopkernel.errors import (
    ApprovalRefused,
    ReplayDivergence,
    RunNotFound,
    SchemaTooNew,
    UsageError,
)
from loopkernel.evidence import NewEvidence, SourceRef, sha256_text
from loopkernel.graph import (
    JSON,
    Delta,
    EventKind,
    GraphPatch,
    RunStatus,
    Task,
    TaskSpec,
    TaskState,
    validate,
)
from loopkernel.ids import RunId, TaskId
from loopkernel.store import EffectRecord, NewEvent, NewRun, PatchRecord, ProposalNote, Store
from loopkernel.store._codec import dumps
from loopkernel.store._schema import POSTGRES_VERSION as PG_VERSION
from loopkernel.store._schema import SQLITE_VERSION

if TYPE_CHECKING:
    from lk_stores import Backend

RUN = RunId("run-1")
SKILLS = frozenset({"fetch", "think"})
HERE = Path(__file__).parent


async def new_run(store: Store, run_id: RunId = RUN, **params: JSON) -> None:
    await store.create_run(
        NewRun(
            run_id=run_id, app="demo", params=params, max_events=1000, token_hash="hash-" + run_id
        )
    )


async def plan(store: Store, event_seq: int, patch: GraphPatch, run_id: RunId = RUN) -> Delta:
    """Validate ``patch`` against the stored graph and commit it as the answer to a seq."""
    loaded = await store.load_run(run_id)
    delta = validate(loaded.state, patch, SKILLS)
    await store.commit_patches(
        run_id, [PatchRecord(event_seq=event_seq, ops=patch.to_json())], delta
    )
    return delta


async def task(store: Store, task_id: str, run_id: RunId = RUN) -> Task:
    return (await store.load_run(run_id)).state.task(task_id)


def ab_patch() -> GraphPatch:
    return (
        GraphPatch()
        .add(TaskSpec(task_id=TaskId("a"), skill="fetch", input={"url": "u"}))
        .add(TaskSpec(task_id=TaskId("b"), skill="think"), after=["a"])
    )


def completed(task_id: str, result: JSON = None) -> NewEvent:
    return NewEvent(kind=EventKind.TASK_COMPLETED, task_id=TaskId(task_id), data=result)


def effect(key: str, call_index: int = 0, task_id: str = "a", **kw: JSON) -> EffectRecord:
    return EffectRecord(
        run_id=RUN,
        key=key,
        task_id=TaskId(task_id),
        call_index=call_index,
        tool=kw.get("tool", "search"),
        effect=kw.get("effect", "read_only"),
        arguments=kw.get("arguments", {"q": key}),
        status="intended",
    )


# -- runs ----------------------------------------------------------------------------------


def test_create_run_writes_the_row_and_run_started(backend: Backend) -> None:
    async def body(store: Store) -> None:
        before = time.time()
        event = await store.create_run(
            NewRun(run_id=RUN, app="demo", params={"q": [1, 2.5]}, max_events=7, token_hash="th")
        )
        assert (event.run_id, event.seq, event.kind) == (RUN, 1, EventKind.RUN_STARTED)
        assert event.data == {"app": "demo"}
        info = await store.get_run(RUN)
        assert (info.run_id, info.app, info.params) == (RUN, "demo", {"q": [1, 2.5]})
        assert (info.status, info.verdict, info.max_events) == (RunStatus.RUNNING, None, 7)
        assert info.last_seq == 1 and info.task_counts == {}
        assert before <= info.created_at == info.updated_at <= time.time()
        assert await store.token_hash(RUN) == "th"
        assert await store.events(RUN) == [event]

    backend.run(body)


def test_duplicate_run_id_is_refused_and_leaves_the_first_alone(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store, q=1)
        with pytest.raises(UsageError, match="already exists") as err:
            await new_run(store, q=2)
        assert not isinstance(err.value, RunNotFound)
        assert (await store.get_run(RUN)).params == {"q": 1}
        assert await store.last_seq(RUN) == 1

    backend.run(body)


def test_unknown_run_is_run_not_found(backend: Backend) -> None:
    async def body(store: Store) -> None:
        ghost = RunId("ghost")
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.get_run(ghost),
            lambda: store.load_run(ghost),
            lambda: store.token_hash(ghost),
            lambda: store.dump(ghost),
            lambda: store.set_status(ghost, RunStatus.WAITING),
            lambda: store.add_human_input(ghost, TaskId("a"), decision="approve", payload=None),
            lambda: store.request_cancel(ghost, "why"),
            lambda: store.append_events(ghost, [NewEvent(kind=EventKind.CANCEL_REQUESTED)]),
        ]
        for call in calls:
            with pytest.raises(RunNotFound, match="no run ghost"):
                await call()
        assert await store.last_seq(ghost) == 0
        assert await store.events(ghost) == []

    backend.run(body)


def test_list_runs_newest_first_with_counts_and_limit(backend: Backend) -> None:
    async def body(store: Store) -> None:
        for n in range(3):
            await new_run(store, RunId(f"r{n}"), n=n)
        await plan(store, 1, ab_patch(), run_id=RunId("r1"))
        runs = await store.list_runs()
        assert [r.run_id for r in runs] == ["r2", "r1", "r0"]
        assert runs[1].task_counts == {"ready": 1, "pending": 1}
        assert runs[1] == await store.get_run(RunId("r1"))
        assert [r.run_id for r in await store.list_runs(limit=2)] == ["r2", "r1"]

    backend.run(body)


def test_set_status_waiting_and_refuses_terminal(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        await store.set_status(RUN, RunStatus.WAITING, {"why": "approval"})
        info = await store.get_run(RUN)
        assert (info.status, info.verdict) == (RunStatus.WAITING, {"why": "approval"})
        await store.set_status(RUN, RunStatus.RUNNING)
        assert (await store.get_run(RUN)).status is RunStatus.RUNNING
        with pytest.raises(UsageError, match="finish patch"):
            await store.set_status(RUN, RunStatus.SUCCEEDED)
        assert (await store.get_run(RUN)).status is RunStatus.RUNNING

    backend.run(body)


# -- the journal -------------------------------------------------------------------------


def test_append_events_numbers_seq_per_run(backend: Backend) -> None:
    async def body(store: Store) -> None:
        other = RunId("run-2")
        await new_run(store)
        await new_run(store, other)
        first = await store.append_events(RUN, [completed("a", 1), completed("b", 2)])
        assert [(e.seq, e.task_id, e.data) for e in first] == [(2, "a", 1), (3, "b", 2)]
        assert [e.seq for e in await store.append_events(other, [completed("x")])] == [2]
        assert [e.seq for e in await store.append_events(RUN, [completed("c")])] == [4]
        assert await store.append_events(RUN, []) == []
        assert await store.last_seq(RUN) == 4 and await store.last_seq(other) == 2
        events = await store.events(RUN)
        assert [e.seq for e in events] == [1, 2, 3, 4] and events[1:3] == first
        assert await store.events(RUN, after=2) == events[2:]
        assert (await store.get_run(RUN)).last_seq == 4

    backend.run(body)


def test_append_events_writes_tasks_and_fills_done_seq(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        await plan(store, 1, ab_patch().add(TaskSpec(task_id=TaskId("c"), skill="fetch")))
        a, b, c = [await task(store, t) for t in "abc"]
        # A tasks-only write (the executor marking a task running) appends nothing.
        assert await store.append_events(RUN, [], [replace(a, state=TaskState.RUNNING)]) == []
        assert (await task(store, "a")).state is TaskState.RUNNING
        events = await store.append_events(
            RUN,
            [completed("a", {"r": 1}), NewEvent(kind=EventKind.TRIPWIRE, data="x")],
            [
                replace(a, state=TaskState.SUCCEEDED, result={"r": 1}, attempts=1),
                replace(b, state=TaskState.READY),  # not terminal: no done_seq
                replace(c, state=TaskState.CANCELLED),  # no event names it: stays None
            ],
        )
        assert [e.seq for e in events] == [2, 3]
        a2, b2, c2 = [await task(store, t) for t in "abc"]
        assert (a2.state, a2.result, a2.attempts, a2.done_seq) == ("succeeded", {"r": 1}, 1, 2)
        assert (b2.state, b2.done_seq) == (TaskState.READY, None)
        assert (c2.state, c2.done_seq) == (TaskState.CANCELLED, None)
        # A done_seq the caller already set is kept.
        fail = replace(b2, state=TaskState.FAILED, error={"type": "E"}, done_seq=99)
        await store.append_events(RUN, [completed("b")], [fail])
        assert (await task(store, "b")).done_seq == 99

    backend.run(body)


def test_commit_patches_records_patches_and_applies_delta(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        delta = await plan(store, 1, ab_patch())
        assert delta.edges == (("a", "b"),)
        (ev,) = await store.append_events(RUN, [completed("a")])
        rejected = PatchRecord(
            event_seq=ev.seq,
            ops=[{"op": "bogus"}],
            outcome="rejected",
            reason="bad op",
            planner="fallback",
        )
        assert await store.commit_patches(RUN, [rejected], Delta()) is None
        patches = await store.patches(RUN)
        assert patches == [PatchRecord(event_seq=1, ops=ab_patch().to_json()), rejected]
        state = (await store.load_run(RUN)).state
        assert state.task("a").input == {"url": "u"} and state.task("a").state is TaskState.READY
        assert state.task("b").state is TaskState.PENDING
        assert state.predecessors("b") == ["a"] and state.successors("a") == ["b"]
        assert (await store.get_run(RUN)).task_counts == {"ready": 1, "pending": 1}

    backend.run(body)


def test_duplicate_patch_is_replay_divergence_and_nothing_is_written(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        await plan(store, 1, ab_patch())
        (ev,) = await store.append_events(RUN, [completed("x")])
        state = (await store.load_run(RUN)).state
        finish = validate(state, GraphPatch().finish("failed", {"v": 1}), SKILLS)
        records = [
            PatchRecord(event_seq=ev.seq, ops=[]),  # new
            PatchRecord(event_seq=1, ops=[]),  # already planned
        ]
        final = NewEvent(kind=EventKind.RUN_FINISHED, data={"status": "failed"})
        with pytest.raises(ReplayDivergence):
            await store.commit_patches(RUN, records, finish, final)
        info = await store.get_run(RUN)
        assert (info.status, info.verdict, info.last_seq) == (RunStatus.RUNNING, None, 2)
        assert [p.event_seq for p in await store.patches(RUN)] == [1]
        assert (await task(store, "a")).state is TaskState.READY
        assert [e.seq for e in (await store.load_run(RUN)).unplanned] == [2]
        # The store is still usable after the rolled-back transaction.
        assert await store.commit_patches(RUN, records[:1], Delta()) is None

    backend.run(body)


def test_concurrent_duplicate_patch_has_one_winner(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        other = backend.store()
        await other.open()
        try:
            results = await asyncio.gather(
                *(
                    s.commit_patches(RUN, [PatchRecord(event_seq=1, ops=[], planner=p)], Delta())
                    for s, p in ((store, "one"), (other, "two"))
                ),
                return_exceptions=True,
            )
        finally:
            await other.close()
        assert sorted(type(r).__name__ for r in results) == ["NoneType", "ReplayDivergence"]
        assert len(await store.patches(RUN)) == 1

    backend.run(body)


def test_finish_writes_status_verdict_and_run_finished_together(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        await plan(store, 1, ab_patch())
        (ev,) = await store.append_events(RUN, [completed("x")])
        state = (await store.load_run(RUN)).state
        verdict = {"kind": "tripwire", "reason": "overspend", "usd": 1.5}
        delta = validate(state, GraphPatch().finish("escalated", verdict), SKILLS)
        final = NewEvent(kind=EventKind.RUN_FINISHED, data={"status": "escalated"})
        record = PatchRecord(event_seq=ev.seq, ops=[], planner="kernel")
        finished = await store.commit_patches(RUN, [record], delta, final)
        assert finished is not None
        assert (finished.seq, finished.kind, finished.data) == (
            3,
            EventKind.RUN_FINISHED,
            {"status": "escalated"},
        )
        info = await store.get_run(RUN)
        assert (info.status, info.verdict, info.last_seq) == ("escalated", verdict, 3)
        assert info.task_counts == {"cancelled": 2}
        assert (await store.events(RUN))[-1] == finished
        # The finishing patch answered its event; run_finished is left for nobody to plan.
        assert [e.kind for e in (await store.load_run(RUN)).unplanned] == ["run_finished"]

    backend.run(body)


def test_load_run_gives_graph_and_exactly_the_unplanned_events(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store, goal="x")
        await plan(store, 1, ab_patch())
        a = await task(store, "a")
        done = replace(a, state=TaskState.SUCCEEDED, result="A")
        events = await store.append_events(RUN, [completed("a", "A")], [done])
        b = (await store.load_run(RUN)).state.task("b")
        await store.append_events(RUN, [], [replace(b, state=TaskState.READY)])
        cancel = await store.request_cancel(RUN, "enough")
        await store.commit_patches(RUN, [PatchRecord(event_seq=events[0].seq, ops=[])], Delta())
        loaded = await store.load_run(RUN)
        assert loaded.info == await store.get_run(RUN)
        assert loaded.state.params == {"goal": "x"} and loaded.state.status is RunStatus.RUNNING
        assert list(loaded.state.tasks) == ["a", "b"]
        assert loaded.state.task("a") == replace(done, done_seq=2)
        assert loaded.state.task("b").state is TaskState.READY
        assert loaded.state.preds == {"b": ["a"]} and loaded.state.succs == {"a": ["b"]}
        assert loaded.unplanned == (cancel,)

    backend.run(body)


def test_task_order_is_byte_order_of_task_ids(backend: Backend) -> None:
    """Locale collations sort 'a-b' after 'ab' and 'B' after 'a'; the stores must not.
    (Ids are ASCII by their grammar, ``loopkernel.ids``; punctuation still sorts apart.)"""
    ids = ["b", "Z", "a-b", "ab", "B", "a", "a:b", "a_b", "0", "a.b"]

    async def body(store: Store) -> None:
        await new_run(store)
        patch = GraphPatch()
        for tid in ids:
            patch = patch.add(TaskSpec(task_id=TaskId(tid), skill="fetch"))
        for src, dst in (("b", "ab"), ("B", "a-b"), ("B", "a"), ("a", "a:b")):
            patch = patch.connect(src, dst)
        await plan(store, 1, patch)
        state = (await store.load_run(RUN)).state
        assert list(state.tasks) == sorted(ids, key=lambda s: s.encode())
        dump = await store.dump(RUN)
        assert [t["task_id"] for t in dump["tasks"]] == sorted(ids, key=lambda s: s.encode())
        assert dump["edges"] == [["B", "a"], ["B", "a-b"], ["a", "a:b"], ["b", "ab"]]
        assert state.successors("B") == ["a", "a-b"]

    backend.run(body)


# -- human input and cancel ----------------------------------------------------------------


async def waiting_run(store: Store) -> None:
    await new_run(store)
    await plan(
        store,
        1,
        ab_patch().add(TaskSpec(task_id=TaskId("c"), skill="fetch")).wait("c", "irreversible: pay"),
    )


def test_human_input_approve_and_reject_journal_the_answer(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await waiting_run(store)
        c = await task(store, "c")
        assert (c.state, c.wait_reason, c.wait_epoch) == ("waiting", "irreversible: pay", 1)
        ev = await store.add_human_input(RUN, TaskId("c"), decision="approve", payload={"ok": 1})
        assert (ev.seq, ev.kind, ev.task_id) == (2, EventKind.HUMAN_INPUT, "c")
        assert ev.data == {"decision": "approve", "payload": {"ok": 1}, "wait_epoch": 1}
        assert (await store.events(RUN))[-1] == ev
        # The planner resumes c, a later patch parks it again: a new epoch, a new answer.
        await plan(store, ev.seq, GraphPatch().resume("c", {"ok": 1}))
        (tick,) = await store.append_events(RUN, [completed("a")])
        await plan(store, tick.seq, GraphPatch().wait("c", "again"))
        ev2 = await store.add_human_input(RUN, TaskId("c"), decision="reject", payload=None)
        assert ev2.data == {"decision": "reject", "payload": None, "wait_epoch": 2}

    backend.run(body)


def test_human_input_refusals(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await waiting_run(store)
        await store.add_human_input(RUN, TaskId("c"), decision="approve", payload=1)
        last = await store.last_seq(RUN)
        with pytest.raises(ApprovalRefused, match="already answered"):  # a replay
            await store.add_human_input(RUN, TaskId("c"), decision="reject", payload=2)
        with pytest.raises(ApprovalRefused, match="not waiting"):
            await store.add_human_input(RUN, TaskId("a"), decision="approve", payload=None)
        with pytest.raises(ApprovalRefused, match="no task"):
            await store.add_human_input(RUN, TaskId("zz"), decision="approve", payload=None)
        with pytest.raises(UsageError, match="approve or reject"):
            await store.add_human_input(RUN, TaskId("c"), decision="maybe", payload=None)  # type: ignore[arg-type]
        assert await store.last_seq(RUN) == last  # a refusal journals nothing
        state = (await store.load_run(RUN)).state
        await store.commit_patches(
            RUN, [], validate(state, GraphPatch().finish("succeeded"), SKILLS)
        )
        with pytest.raises(ApprovalRefused, match="already succeeded"):
            await store.add_human_input(RUN, TaskId("c"), decision="approve", payload=None)

    backend.run(body)


def test_request_cancel(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        ev = await store.request_cancel(RUN, "user pressed stop")
        assert (ev.seq, ev.kind, ev.data) == (
            2,
            "cancel_requested",
            {"reason": "user pressed stop"},
        )
        assert (await store.load_run(RUN)).unplanned[-1] == ev
        state = (await store.load_run(RUN)).state
        delta = validate(state, GraphPatch().finish("cancelled", {"kind": "cancelled"}), SKILLS)
        await store.commit_patches(RUN, [PatchRecord(event_seq=2, ops=[])], delta)
        with pytest.raises(UsageError, match="already cancelled"):
            await store.request_cancel(RUN, "again")
        assert await store.last_seq(RUN) == 2

    backend.run(body)


# -- effects -------------------------------------------------------------------------------


def test_effect_journal(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        assert await store.get_effect(RUN, "k1") is None
        first = await store.intend_effect(effect("k1", arguments={"amount": 10.0}))
        assert first == effect("k1", arguments={"amount": 10.0})
        # Intending the same key again returns what is journaled, not the new arguments.
        assert await store.intend_effect(effect("k1", arguments={"amount": 99})) == first
        await store.intend_effect(effect("k0", call_index=1))
        await store.intend_effect(effect("k2", call_index=0, task_id="0"))
        await store.finish_effect(RUN, "k1", status="done", result={"paid": True})
        got = await store.get_effect(RUN, "k1")
        assert got == replace(first, status="done", result={"paid": True})
        assert await store.intend_effect(effect("k1")) == got
        with pytest.raises(ReplayDivergence):
            await store.finish_effect(RUN, "k1", status="failed", error={"m": "late"})
        with pytest.raises(ReplayDivergence):
            await store.finish_effect(RUN, "nope", status="done")
        await store.finish_effect(RUN, "k0", status="failed", error={"type": "ToolTimeout"})
        assert [(e.key, e.status) for e in await store.effects(RUN)] == [
            ("k2", "intended"),
            ("k1", "done"),
            ("k0", "failed"),
        ]
        assert (await store.get_effect(RUN, "k0")).error == {"type": "ToolTimeout"}  # type: ignore[union-attr]

    backend.run(body)


def test_patch_record_keeps_the_proposal_note(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        note = ProposalNote(
            accepted=False,
            reason="not_allowed",
            detail="op 0 adds skill 'rm' outside the allowlist",
            ops=[{"op": "add", "task_id": "x", "skill": "rm"}],
            raw_sha256="ab" * 32,
            model="smollm2",
            input_tokens=120,
            output_tokens=17,
            cost_usd=0.25,
            latency_ms=12.5,
        )
        fallback = PatchRecord(
            event_seq=1, ops=ab_patch().to_json(), planner="fallback", proposal=note
        )
        delta = validate((await store.load_run(RUN)).state, ab_patch(), SKILLS)
        await store.commit_patches(RUN, [fallback], delta)
        (ev,) = await store.append_events(RUN, [completed("a")])
        accepted = PatchRecord(
            event_seq=ev.seq,
            ops=[],
            planner="llm",
            proposal=ProposalNote(accepted=True, ops=[], raw_sha256="cd" * 32, model="m"),
        )
        await store.commit_patches(RUN, [accepted], Delta())
        assert await store.patches(RUN) == [fallback, accepted]
        assert (await store.load_run(RUN)).unplanned == ()

    backend.run(body)


def test_evidence_refs_in_order_idempotent_keys_and_caps(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)
        await new_run(store, RunId("run-2"))
        user = SourceRef(kind="user", uri="run:params/question", event_seq=1)
        tool = SourceRef(kind="tool", uri="tool:search", task_id=TaskId("a"))

        def item(key: str, text: str, src: SourceRef = tool) -> NewEvidence:
            return NewEvidence(key=key, kind="text", content=text, source=src)

        caps = {"max_item_chars": 10, "max_run_chars": 25}
        e1 = await store.add_evidence(RUN, item("q", "why?", user), **caps)
        assert (e1.ref, e1.source, e1.truncated, e1.content) == ("E1", user, False, "why?")
        e2 = await store.add_evidence(RUN, item("t0", "x" * 30), **caps)
        assert (e2.ref, e2.content, e2.truncated, e2.chars) == ("E2", "x" * 10, True, 30)
        assert e2.sha256 == sha256_text("x" * 30) and "per-item cap" in (e2.note or "")
        # A replayed key returns what is stored, whatever the new content.
        assert await store.add_evidence(RUN, item("t0", "other"), **caps) == e2
        # The run cap: 14 of 25 chars used, so 11 are left and the item cap (10) binds ...
        e3 = await store.add_evidence(RUN, item("t1", "y" * 12), **caps)
        assert (e3.ref, e3.content) == ("E3", "y" * 10)
        # ... then 1 is left: the run cap binds and says so.
        e4 = await store.add_evidence(RUN, item("t2", "zzz"), **caps)
        assert (e4.ref, e4.content, e4.truncated) == ("E4", "z", True)
        assert "run's evidence cap" in (e4.note or "")
        e5 = await store.add_evidence(RUN, item("t3", "w"), **caps)
        assert (e5.content, e5.truncated, e5.chars) == ("", True, 1)
        assert await store.evidence(RUN) == [e1, e2, e3, e4, e5]
        # Refs count per run.
        other = await store.add_evidence(RunId("run-2"), item("t0", "a"), **caps)
        assert other.ref == "E1"
        with pytest.raises(RunNotFound):
            await store.add_evidence(RunId("nope"), item("k", "a"), **caps)

    backend.run(body)


# -- schema, reopening, concurrency ----------------------------------------------------------


def test_reopen_keeps_everything_and_open_is_idempotent(backend: Backend) -> None:
    async def body(store: Store) -> tuple[object, ...]:
        await store.open()  # a second open is a no-op
        await waiting_run(store)
        return (await store.dump(RUN), await store.events(RUN), await store.patches(RUN))

    before = backend.run(body)

    async def again(store: Store) -> tuple[object, ...]:
        return (await store.dump(RUN), await store.events(RUN), await store.patches(RUN))

    assert backend.run(again) == before


def test_schema_too_new_is_refused(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await new_run(store)

    backend.run(body)
    backend.sql("UPDATE meta SET value = '999' WHERE key = 'schema_version'")

    async def reopen() -> None:
        store = backend.store()
        with pytest.raises(SchemaTooNew, match="schema version 999") as err:
            await store.open()
        assert err.value.found == 999  # type: ignore[attr-defined]
        await store.close()

    asyncio.run(reopen())
    assert backend.sql("SELECT value FROM meta WHERE key = 'schema_version'") == [("999",)]


def test_concurrent_opens_migrate_once(backend: Backend) -> None:
    async def main() -> None:
        stores = [backend.store() for _ in range(4)]
        opened = await asyncio.gather(*(s.open() for s in stores), return_exceptions=True)
        try:
            assert [e for e in opened if e is not None] == []
            await new_run(stores[0])
            assert (await stores[3].get_run(RUN)).app == "demo"
        finally:
            await asyncio.gather(*(s.close() for s in stores))

    asyncio.run(main())
    version = str(SQLITE_VERSION if backend.kind == "sqlite" else PG_VERSION)
    assert backend.sql("SELECT value FROM meta WHERE key = 'schema_version'") == [(version,)]


def test_concurrent_appends_from_two_connections_never_share_a_seq(backend: Backend) -> None:
    async def writer(store: Store, tag: str, n: int) -> None:
        for i in range(n):
            await store.append_events(RUN, [completed(f"{tag}{i}")] * (1 + i % 2))

    async def main() -> list[int]:
        one, two = backend.store(), backend.store()
        await one.open()
        await two.open()
        try:
            await new_run(one)
            await asyncio.gather(writer(one, "x", 40), writer(two, "y", 40))
            return [e.seq for e in await one.events(RUN)]
        finally:
            await one.close()
            await two.close()

    seqs = asyncio.run(main())
    assert seqs == list(range(1, 2 + 2 * 60))


def test_concurrent_appends_from_two_processes_never_share_a_seq(
    backend: Backend, tmp_path: Path
) -> None:
    async def body(store: Store) -> None:
        await new_run(store)

    backend.run(body)
    go = tmp_path / "go"
    n = 60
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "_seq_writer.py"), backend.url, RUN, tag, str(n), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for tag in ("p", "q")
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        go.touch()
        for proc in procs:
            assert proc.wait(timeout=60) == 0
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    async def check(store: Store) -> None:
        events = await store.events(RUN)
        assert [e.seq for e in events] == list(range(1, 2 + 2 * n))
        for tag in "pq":
            mine = [e.task_id for e in events if e.task_id and e.task_id.startswith(tag)]
            assert mine == [f"{tag}{i}" for i in range(n)]  # each writer's order is kept

    backend.run(check)


# -- JSON round trip -------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)
_runs = iter(range(10**9))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(value=json_values)
def test_json_round_trips_to_the_same_canonical_text(backend: Backend, value: JSON) -> None:
    """What goes in comes out with the same canonical text: 1.0 stays a float, -0.0 keeps
    its sign, 1e16 is not an int, "\\u0000" survives."""
    run_id = RunId(f"json-{next(_runs)}")
    text = dumps(value)

    async def body(store: Store) -> list[str]:
        await store.create_run(
            NewRun(run_id=run_id, app="j", params=value, max_events=9, token_hash="t")
        )
        patch = GraphPatch().add(TaskSpec(task_id=TaskId("t"), skill="fetch", input=value))
        loaded = await store.load_run(run_id)
        await store.commit_patches(
            run_id,
            [PatchRecord(event_seq=1, ops=patch.to_json())],
            validate(loaded.state, patch, SKILLS),
        )
        await store.append_events(run_id, [completed("t", value)])
        eff = replace(effect("k", arguments=value), run_id=run_id)
        await store.intend_effect(eff)
        await store.finish_effect(run_id, "k", status="done", result=value)
        loaded = await store.load_run(run_id)
        dump = await store.dump(run_id)
        return [
            dumps(loaded.info.params),
            dumps(loaded.state.task("t").input),
            dumps((await store.events(run_id))[-1].data),
            dumps((await store.patches(run_id))[0].ops[0]["input"]),
            dumps((await store.get_effect(run_id, "k")).result),  # type: ignore[union-attr]
            dumps(dump["run"]["params"]),  # type: ignore[index]
            dumps(dump["effects"][0]["arguments"]),  # type: ignore[index]
        ]

    assert backend.run(body) == [text] * 7
