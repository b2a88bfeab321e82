"""The one SQL engine under both stores: tables named once (export, fork, delete and the
schema agree), a run deleted whole, faults translated where the connection is used, and
SQLite work kept off the event loop while another process holds the write lock."""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from loopkernel.client import Client
from loopkernel.errors import RunHeld, RunNotFound, StoreUnavailable, UsageError
from loopkernel.evidence import NewEvidence, SourceRef
from loopkernel.graph import Delta, EventKind, GraphPatch, TaskSpec, validate
from loopkernel.ids import RunId, TaskId
from loopkernel.store import EffectRecord, NewEvent, NewRun, PatchRecord, SQLiteStore, Store
from loopkernel.store._engine import SQLStore
from loopkernel.store._fork import fork_statements
from loopkernel.store._lease import Holder
from loopkernel.store._schema import DATABASE_TABLES, SQLITE_TEXT_TABLES, TABLES

if TYPE_CHECKING:
    from lk_stores import Backend

SKILLS = frozenset({"fetch", "think"})
R1, R2 = RunId("r1"), RunId("r2")


async def fill(store: Store, run_id: RunId) -> None:
    """A run with rows in every table of the schema but ``forks`` (a fork of it has one)."""
    await store.create_run(
        NewRun(run_id=run_id, app="demo", params={}, max_events=100, token_hash="h")
    )
    patch = (
        GraphPatch()
        .add(TaskSpec(task_id=TaskId("a"), skill="fetch"))
        .add(TaskSpec(task_id=TaskId("b"), skill="think"), after=["a"])
        .wait("b", "ok?")
    )
    delta = validate((await store.load_run(run_id)).state, patch, SKILLS)
    await store.commit_patches(run_id, [PatchRecord(event_seq=1, ops=patch.to_json())], delta)
    await store.add_human_input(run_id, TaskId("b"), decision="approve", payload=None)
    key = f"{run_id}/a/0"
    record = EffectRecord(
        run_id=run_id,
        key=key,
        task_id=TaskId("a"),
        call_index=0,
        tool="search",
        effect="read_only",
        arguments={"q": 1},
        status="intended",
        arguments_digest="sha256:abc",
    )
    await store.intend_effect(record)
    await store.finish_effect(run_id, key, status="done", result={"hits": 1})
    source = SourceRef(kind="tool", uri="tool:search", task_id=TaskId("a"))
    item = NewEvidence(key=f"{run_id}-e", kind="text", content="seen", source=source)
    await store.add_evidence(run_id, item, max_item_chars=100, max_run_chars=100)


def rows_by_table(backend: Backend, run_id: str) -> dict[str, int]:
    return {
        t.name: backend.sql(f"SELECT COUNT(*) FROM {t.name} WHERE run_id = '{run_id}'")[0][0]
        for t in TABLES
    }


def tables_in(backend: Backend) -> set[str]:
    if backend.kind == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE type = 'table'"
    else:
        query = (
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    return {row[0] for row in backend.sql(query)}


# -- tables named once -----------------------------------------------------------------------


def test_the_schema_module_names_every_table_the_migrations_create(backend: Backend) -> None:
    backend.run(lambda store: fill(store, R1))
    text_index = set(SQLITE_TEXT_TABLES) if backend.kind == "sqlite" else set()
    assert tables_in(backend) == {t.name for t in TABLES} | set(DATABASE_TABLES) | text_index
    filled = rows_by_table(backend, R1)
    assert {name for name, n in filled.items() if n == 0} == {"forks"}


def test_fork_writes_every_table_the_schema_says_it_writes() -> None:
    from loopkernel.graph import GraphState
    from loopkernel.store import Fork, RunInfo

    info = RunInfo(
        run_id=R1,
        app="a",
        params={},
        status="running",  # type: ignore[arg-type]
        verdict=None,
        max_events=1,
        created_at=0.0,
        updated_at=0.0,
        last_seq=0,
    )
    fork = Fork(
        source=info,
        at_seq=0,
        run_id=R2,
        token_hash="h",
        events=(),
        patches=(),
        state=GraphState(run_id=R2, app="a", params={}),
        effects=(),
    )
    written = {table for table, _, _ in fork_statements(fork, 0.0)}
    told = {t.name for t in TABLES if t.fork in ("copied", "derived", "new")}
    assert written == told
    # A table a fork leaves alone says why, in the schema module.
    assert all(t.fork.startswith("none: ") for t in TABLES if t.name not in written)


def test_export_keeps_the_rows_of_its_run_alone_in_every_table(tmp_path: Path) -> None:
    db, out = tmp_path / "runs.db", tmp_path / "r1.db"

    async def body() -> None:
        async with Client(str(db)) as client:
            await fill(client.store, R1)
            await fill(client.store, R2)
            await client.fork(R1, at=2, new_run_id="r1-fork")
            await client.export(R1, out)

    asyncio.run(body())
    with sqlite3.connect(out) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for name in names:
            if name in DATABASE_TABLES or name in SQLITE_TEXT_TABLES:
                continue
            runs = {r[0] for r in conn.execute(f"SELECT DISTINCT run_id FROM {name}")}
            assert runs <= {R1}, (name, runs)  # r2's evidence rows leaked before
        assert conn.execute("SELECT COUNT(*) FROM evidence").fetchone()[0] == 1
    conn.close()
    assert (out.stat().st_mode & 0o777) == 0o600


# -- delete ---------------------------------------------------------------------------------


def test_delete_run_removes_every_row_of_the_run_and_nothing_else(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await fill(store, R1)
        await fill(store, R2)
        client = Client(store=store)
        await client.fork(R1, at=2, new_run_id="r1-fork")
        await store.delete_run(RunId("r1-fork"))  # its forks row goes with it
        await store.delete_run(R1)
        with pytest.raises(RunNotFound):
            await store.get_run(R1)
        with pytest.raises(RunNotFound):
            await store.delete_run(R1)
        assert [i.run_id for i in await store.list_runs()] == [R2]

    backend.run(body)
    assert set(rows_by_table(backend, "r1").values()) == {0}
    assert set(rows_by_table(backend, "r1-fork").values()) == {0}
    kept = rows_by_table(backend, "r2")
    assert {name for name, n in kept.items() if n == 0} == {"forks"}


def test_delete_run_refuses_a_run_under_a_live_lease(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await fill(store, R1)
        claim = await store.acquire(R1, Holder.here(), 30)
        with pytest.raises(RunHeld):
            await store.delete_run(R1)
        assert (await store.get_run(R1)).last_seq == 2  # nothing removed
        await store.release(R1, claim.epoch)
        await store.delete_run(R1)  # released: gone
        with pytest.raises(RunNotFound):
            await store.get_run(R1)

    backend.run(body)


def test_arguments_digest_round_trips(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await fill(store, R1)
        (stored,) = await store.effects(R1)
        assert stored.arguments_digest == "sha256:abc"
        assert (await store.get_effect(R1, stored.key)) == stored

    backend.run(body)


# -- faults translated where the connection is used; never blocking the loop ----------------

HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


def test_no_store_method_bypasses_the_engine() -> None:
    # Every coroutine of the SQLite store is the engine's, but for these few, which open,
    # close, wait, copy or vacuum and translate their faults as the engine does.
    own = {
        name
        for name, fn in vars(SQLiteStore).items()
        if inspect.iscoroutinefunction(fn) and not name.startswith("__")
    }
    assert own == {
        "_submit",
        "_call_quiet",
        "open",
        "close",
        "checkpoint",
        "reclaim",
        "export",
        "wait_for_journal",
        "wait_for_work",
    }
    assert issubclass(SQLiteStore, SQLStore)


def test_a_held_write_lock_never_stalls_the_loop_and_every_write_says_unavailable(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    period = 0.05

    async def ticker(gaps: list[float], stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(period)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def setup() -> None:
        store = SQLiteStore(db)
        await store.open()
        await fill(store, R1)
        await store.close()

    gaps: list[float] = []

    async def body() -> None:
        store = SQLiteStore(db, lock_wait_s=2.0)
        await store.open()
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(gaps, stop))
        source = SourceRef(kind="tool", uri="tool:x", task_id=TaskId("a"))
        item = NewEvidence(key="k2", kind="text", content="x", source=source)
        writes = {
            "add_evidence": store.add_evidence(R1, item, max_item_chars=9, max_run_chars=99),
            "append_events": store.append_events(
                R1, [NewEvent(kind=EventKind.TASK_COMPLETED, task_id=TaskId("a"))]
            ),
            "commit_patches": store.commit_patches(R1, [PatchRecord(event_seq=9, ops=[])], Delta()),
            "finish_effect": store.finish_effect(R1, "nope", status="done"),
        }
        # All at once: each waits (asynchronously) its whole lock_wait_s, then gives up.
        outcomes = await asyncio.gather(*writes.values(), return_exceptions=True)
        for name, outcome in zip(writes, outcomes, strict=True):
            # Never a raw sqlite3 error (add_evidence's was), never a blocked loop.
            assert isinstance(outcome, StoreUnavailable), (name, outcome)
            assert "locked" in str(outcome)
        # Reads go on while the lock is held (WAL), through the same engine.
        assert [e.ref for e in await store.evidence(R1)] == ["E1"]
        stop.set()
        await tick
        await store.close()

    asyncio.run(setup())
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        asyncio.run(body())
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()
    # The writes waited two seconds for the lock and the loop ticked on: a wait that blocked
    # it would show a gap of two seconds (1.9 s was seen). The slack is the loaded
    # machine's scheduling, not the store's.
    assert len(gaps) >= 20
    assert max(gaps) < period + 0.45, sorted(gaps)[-5:]


def _lock_wait_s(store: Store) -> float:
    assert isinstance(store, SQLiteStore)
    return store.lock_wait_s


def test_the_lock_wait_has_one_name_from_the_environment_to_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopkernel.store import DEFAULT_LOCK_WAIT_S, open_store
    from loopkernel.store._lockwait import lock_wait_at_most, lock_wait_s_within

    db = tmp_path / "runs.db"
    monkeypatch.delenv("LOOPKERNEL_SQLITE_LOCK_WAIT_S", raising=False)
    monkeypatch.delenv("LOOPKERNEL_SQLITE_BUSY_TIMEOUT", raising=False)
    assert _lock_wait_s(open_store(str(db))) == DEFAULT_LOCK_WAIT_S == 10.0
    monkeypatch.setenv("LOOPKERNEL_SQLITE_LOCK_WAIT_S", "0.25")
    assert _lock_wait_s(open_store(str(db))) == 0.25
    monkeypatch.delenv("LOOPKERNEL_SQLITE_LOCK_WAIT_S")
    monkeypatch.setenv("LOOPKERNEL_SQLITE_BUSY_TIMEOUT", "3")  # the older name, still read
    assert _lock_wait_s(open_store(str(db))) == 3.0
    monkeypatch.setenv("LOOPKERNEL_SQLITE_LOCK_WAIT_S", "nope")
    with pytest.raises(UsageError, match="LOOPKERNEL_SQLITE_LOCK_WAIT_S must be seconds"):
        open_store(str(db))
    assert SQLiteStore(db, lock_wait_s=1.5).lock_wait_s == 1.5
    with pytest.warns(DeprecationWarning, match="lock_wait_s"):
        assert SQLiteStore(db, busy_timeout=2.5).lock_wait_s == 2.5
    assert not hasattr(SQLiteStore(db), "busy_timeout")
    # One bound in a context, read by both dialects.
    assert lock_wait_s_within(4.0) == 4.0
    with lock_wait_at_most(1.0):
        assert lock_wait_s_within(4.0) == 1.0
        with lock_wait_at_most(-1.0):
            assert lock_wait_s_within(4.0) == 0.0
