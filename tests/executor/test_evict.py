"""``Kernel(keep_finished=N)``: succeeded tasks leave memory, and nothing can tell.

Each run here is made twice, once keeping every task in memory and once evicting all it
can (``keep_finished=0``) or nearly (``3``), and what the planner saw at every event,
what the workers saw (their results are in the digest), the digest and the verdict must
be the same. An observer checks that the evicting run did evict, and how much it kept.
A SIGKILL in the middle of an evicting run, resumed in a fresh process, ends with the
uninterrupted run's digest.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lk_stores import fresh_pg_schema
from loopkernel import (
    Event,
    EventKind,
    ExecutionConfig,
    GraphPatch,
    Kernel,
    KernelParts,
    SQLiteStore,
    TaskContext,
    TaskSpec,
    TaskState,
    UsageError,
)
from loopkernel.errors import StoreUnavailable
from loopkernel.executor._kernel import DEFAULT_KEEP_FINISHED
from loopkernel.graph import GraphState, TaskTable
from loopkernel.ids import RunId
from loopkernel.store import open_store
from loopkernel.store._postgres import PostgresStore

N = 24
"""Chain length: t00 .. t23."""


def _tid(i: int) -> str:
    return f"t{i:02d}"


class Reader:
    """A chain of ``N`` whose planner reads old tasks back at every event, and records it.

    Odd tasks see their ancestors' results, even ones everything; at t10 a task ``late``
    is added after t00 (long evicted by then: the edge reads it back); ``dup`` set, the
    planner re-adds t00 at t08, which must be refused as a duplicate either way.
    """

    def __init__(self, *, dup: bool = False) -> None:
        self.seen: list[Any] = []
        self.dup = dup

    def plan(self, snapshot: GraphState, event: Event) -> GraphPatch:
        if event.kind is EventKind.RUN_STARTED:
            return GraphPatch().add(TaskSpec(task_id=_tid(0), skill="work"))
        if event.kind is not EventKind.TASK_COMPLETED:
            return GraphPatch()
        tasks = snapshot.tasks
        first = snapshot.get(_tid(0))
        self.seen.append(
            {
                "event": event.seq,
                "len": len(tasks),
                "ids": sorted(tasks)[:3] + sorted(tasks)[-2:],
                "t00 in": _tid(0) in tasks,
                "t00": None if first is None else (first.state.value, first.result),
                "t00 succs": list(snapshot.successors(_tid(0))),
                "t01 preds": list(snapshot.predecessors(_tid(1))),
                "t02 by []": tasks[_tid(2)].done_seq if _tid(2) in tasks else None,
                "unknown": snapshot.get("nope"),
                "succeeded": len(snapshot.in_state(TaskState.SUCCEEDED)),
                "waiting": len(snapshot.in_state(TaskState.WAITING, TaskState.READY)),
                # (json, not str: a result read back from the store, as after a resume,
                # is the same JSON with its keys sorted)
                "results": sorted(json.dumps(t.result, sort_keys=True) for t in tasks.values()),
                "items": len(list(tasks.items())),
            }
        )
        done = event.task_id
        patch = GraphPatch()
        if done != "late":
            i = int(str(done)[1:]) + 1
            if i < N:
                scope = "ancestors" if i % 2 else "all"
                patch = patch.add(
                    TaskSpec(task_id=_tid(i), skill="work", evidence_scope=scope),
                    after=[_tid(i - 1)],
                )
            if i == 10:
                patch = patch.add(TaskSpec(task_id="late", skill="work"), after=[_tid(0)])
            if i == 8 and self.dup:
                patch = patch.add(TaskSpec(task_id=_tid(0), skill="work"))
        # From the snapshot, not from memory of earlier events: a resumed planner is new.
        ends = [snapshot.get(t) for t in ("late", _tid(N - 1))]
        if all(t is not None and t.state is TaskState.SUCCEEDED for t in ends):
            patch = patch.finish("succeeded", {"last": snapshot.task(_tid(N - 1)).result})
        return patch


async def work(ctx: TaskContext) -> Any:
    """What the worker sees of earlier tasks is its result, so the digest holds it."""
    return {
        "me": ctx.task_id,
        "sees": len(ctx.evidence),
        "first": ctx.evidence.get(_tid(0)),
        "preds": sorted(ctx.predecessors),
        "pred results": [ctx.predecessors[p]["me"] for p in sorted(ctx.predecessors)],
    }


class Watch:
    """The observer: the most tasks in memory at once, the most evicted, and where they
    were read back from."""

    def __init__(self) -> None:
        self.resident = 0
        self.evicted = 0
        self.first: int | None = None
        """Tasks in memory at the first event observed."""
        self.archive: str | None = None

    def __call__(self, event: Event, state: GraphState, record: object) -> None:
        resident = len(list(state.resident()))
        self.first = resident if self.first is None else self.first
        self.resident = max(self.resident, resident)
        tasks = state.tasks  # a plain dict until the first eviction
        self.evicted = max(self.evicted, tasks.evicted if isinstance(tasks, TaskTable) else 0)
        if isinstance(tasks, TaskTable):
            self.archive = type(tasks.archive).__name__


async def _run(db: Path | str, keep: int | None, *, dup: bool = False) -> dict[str, Any]:
    """The run in ``db``: a SQLite path, or a PostgreSQL URL."""
    store = SQLiteStore(db, synchronous="normal") if isinstance(db, Path) else open_store(db)
    await store.open()
    try:
        planner, watch = Reader(dup=dup), Watch()
        kernel = Kernel(
            store,
            planner,
            {"work": work},
            config=ExecutionConfig(keep_finished=keep),
            parts=KernelParts(observer=watch),
        )
        await kernel.start(app="evict", run_id="r1")
        outcome = await kernel.run("r1")
        return {
            "status": outcome.status.value,
            "verdict": outcome.verdict,
            "digest": await kernel.digest("r1"),
            "seen": planner.seen,
            "resident": watch.resident,
            "evicted": watch.evicted,
            "archive": watch.archive,
        }
    finally:
        await store.close()


@pytest.mark.parametrize("keep", [0, 3])
def test_an_evicting_run_sees_and_ends_as_one_that_keeps_every_task(
    tmp_path: Path, keep: int
) -> None:
    kept = asyncio.run(_run(tmp_path / "all.db", None))
    evicting = asyncio.run(_run(tmp_path / "evict.db", keep))
    assert kept["status"] == "succeeded", kept["verdict"]
    assert evicting["seen"] == kept["seen"]
    assert (evicting["status"], evicting["verdict"]) == (kept["status"], kept["verdict"])
    assert evicting["digest"] == kept["digest"]
    # It did evict: at the end, nearly the whole chain lived only in the store.
    assert kept["evicted"] == 0 and kept["resident"] == N + 1
    assert evicting["evicted"] >= N - keep - 4, evicting
    assert evicting["resident"] <= keep + 6, evicting
    # The workers saw the old results read back: t23 (odd) sees its 23 ancestors.
    last = kept["verdict"]["last"]
    assert last["sees"] == N - 1 and last["first"]["me"] == _tid(0)


def test_re_adding_an_evicted_task_is_refused_as_a_duplicate(tmp_path: Path) -> None:
    kept = asyncio.run(_run(tmp_path / "all.db", None, dup=True))
    evicting = asyncio.run(_run(tmp_path / "evict.db", 0, dup=True))
    assert kept["status"] == "failed"
    assert kept["verdict"]["rule"] == "duplicate_task", kept["verdict"]
    assert evicting["evicted"] > 0
    assert (evicting["status"], evicting["verdict"]) == (kept["status"], kept["verdict"])
    assert evicting["digest"] == kept["digest"]


def test_keep_finished_is_checked(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    for bad in (-1, True, 2.5, "3"):
        with pytest.raises(UsageError, match="keep_finished"):
            Kernel(store, Reader(), {"work": work}, config=ExecutionConfig(keep_finished=bad))  # type: ignore[arg-type]
    pg = PostgresStore("postgresql://nobody@127.0.0.1:1/none")  # no read-back: it spills
    assert (
        Kernel(pg, Reader(), {"work": work}, config=ExecutionConfig(keep_finished=10)).keep_finished
        == 10
    )
    assert Kernel(pg, Reader(), {"work": work}).keep_finished == DEFAULT_KEEP_FINISHED


@pytest.mark.postgres
@pytest.mark.parametrize(("keep", "dup"), [(0, False), (3, False), (0, True)])
def test_on_postgresql_evicted_tasks_are_spilled_and_nothing_can_tell(
    tmp_path: Path, pg_database: str, keep: int, dup: bool
) -> None:
    """PostgreSQL cannot be read on the loop, so the executor keeps what it evicts in a
    temporary SQLite file of its own; the planner, the workers, the digest and the
    verdict are those of the run that kept everything, on either store."""
    kept = asyncio.run(_run(fresh_pg_schema(pg_database), None, dup=dup))
    evicting = asyncio.run(_run(fresh_pg_schema(pg_database), keep, dup=dup))
    on_sqlite = asyncio.run(_run(tmp_path / "lite.db", keep, dup=dup))
    assert kept["evicted"] == 0 and kept["archive"] is None
    assert evicting["archive"] == "SpillArchive" and on_sqlite["archive"] == "SQLiteArchive"
    assert evicting["evicted"] > 0
    for other in (evicting, on_sqlite):
        assert other["seen"] == kept["seen"]
        assert (other["status"], other["verdict"]) == (kept["status"], kept["verdict"])
        assert other["digest"] == kept["digest"]
    if not dup:
        assert evicting["resident"] <= keep + 6, evicting


# -- a real crash in the middle of an evicting run ------------------------------------------

CHILD = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from executor.test_evict import child
asyncio.run(child({db!r}))
"""


async def child(db: str) -> None:
    """Run (or resume) ``r1`` in ``db`` evicting everything it can."""
    store = SQLiteStore(db, synchronous="normal")
    await store.open()
    kernel = Kernel(store, Reader(), {"work": work}, config=ExecutionConfig(keep_finished=0))
    if not [r for r in await store.list_runs() if r.run_id == "r1"]:
        await kernel.start(app="evict", run_id="r1")
    await kernel.run("r1")
    await store.close()


@pytest.mark.parametrize("point", ["patch_committed:15", "task_returned:12", "before_patch:20"])
def test_an_evicting_run_killed_midway_resumes_to_the_same_digest(
    tmp_path: Path, point: str
) -> None:
    tests = str(Path(__file__).resolve().parents[1])
    db = tmp_path / "crash.db"
    script = CHILD.format(tests=tests, db=str(db))
    env = dict(os.environ, LOOPKERNEL_CRASH_AT=point)
    killed = subprocess.run([sys.executable, "-c", script], env=env, timeout=300, check=False)
    assert killed.returncode == -9, f"no SIGKILL at {point}: exit {killed.returncode}"
    env.pop("LOOPKERNEL_CRASH_AT")
    resumed = subprocess.run([sys.executable, "-c", script], env=env, timeout=300, check=False)
    assert resumed.returncode == 0
    uninterrupted = asyncio.run(_run(tmp_path / "whole.db", None))

    async def digest() -> str:
        store = SQLiteStore(db)
        await store.open()
        try:
            return await Kernel(store, Reader(), {"work": work}).digest("r1")
        finally:
            await store.close()

    assert asyncio.run(digest()) == uninterrupted["digest"]


def test_a_resumed_run_sheds_the_finished_tasks_it_loaded_before_its_first_step(
    tmp_path: Path,
) -> None:
    """Stopped at t20 (a planner that raises a store fault leaves the run resumable),
    then resumed evicting: the first step already sees only a few tasks in memory."""

    class Stop(Reader):
        def plan(self, snapshot: GraphState, event: Event) -> GraphPatch:
            if event.task_id == _tid(20):
                raise StoreUnavailable("the test stops the run here")
            return super().plan(snapshot, event)

    async def go() -> tuple[int, Watch, str]:
        store = SQLiteStore(tmp_path / "runs.db", synchronous="normal")
        await store.open()
        try:
            kernel = Kernel(store, Stop(), {"work": work})
            await kernel.start(app="evict", run_id="r1")
            with pytest.raises(StoreUnavailable):
                await kernel.run("r1")
            loaded = len((await store.load_run(RunId("r1"))).state.tasks)
            watch = Watch()
            kernel = Kernel(
                store,
                Reader(),
                {"work": work},
                config=ExecutionConfig(keep_finished=0),
                parts=KernelParts(observer=watch),
            )
            outcome = await kernel.run("r1")
            assert outcome.status.value == "succeeded", outcome.verdict
            return loaded, watch, await kernel.digest("r1")
        finally:
            await store.close()

    loaded, watch, digest = asyncio.run(go())
    assert loaded >= 21
    assert watch.first is not None and watch.first <= 4, (loaded, watch.first)
    assert digest == asyncio.run(_run(tmp_path / "whole.db", None))["digest"]
