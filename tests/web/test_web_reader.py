"""A viewer never waits on the run it watches: the inspector's hubs and pages read through
``Client.reader()``, a read-only view on a connection of its own (SQLite: a query-only
connection on a thread of its own; PostgreSQL: a connection of its own), never through the
store's writer thread, which the run commits its steps on."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from lk_web import make_run, run_async
from loopkernel.client import Client
from loopkernel.errors import UsageError
from loopkernel.graph import EventKind
from loopkernel.ids import RunId
from loopkernel.store import NewEvent
from loopkernel.web._app import _lifespan, create_app
from loopkernel.web._auth import Auth
from loopkernel.web._live import Watcher


def _busy(client: Client) -> tuple[threading.Event, Any]:
    """Hold the store's one writer thread (as a long commit would) until the event is set."""
    gate = threading.Event()
    held = client.store._on_thread(lambda: gate.wait(60))  # type: ignore[attr-defined]
    return gate, held


def test_a_hub_reads_its_run_while_the_store_thread_is_held(db_path: Path) -> None:
    run_id, _ = make_run(db_path, "lk_testapps:gate")

    async def go() -> None:
        async with Client(str(db_path)) as client:
            reader = client.reader()
            assert reader is not None and reader.store is not client.store
            async with reader:
                gate, held = _busy(client)
                try:
                    watcher = Watcher(client=reader, poll_seconds=0.05)
                    hub = watcher.hub(run_id)
                    async with asyncio.timeout(10):  # through the writer: never, until set
                        assert await hub.refresh()
                        assert hub.snapshot is not None
                        assert hub.snapshot.info.status.value == "waiting"
                        assert [e.seq for e in hub.recent] == list(
                            range(1, hub.snapshot.info.last_seq + 1)
                        )
                        assert await reader.usage(run_id)
                        assert await reader.run_counts() == {"waiting": 1}
                finally:
                    gate.set()
                    await held
                # What the store writes next is read by the reader's next read.
                news = [NewEvent(kind=EventKind.TOOL_RESTARTED, data={"n": 1})]
                (new,) = await client.store.append_events(RunId(run_id), news)
                assert (await reader.events(run_id, after=new.seq - 1))[0].seq == new.seq

    run_async(go())


def test_the_reader_refuses_every_write(db_path: Path) -> None:
    run_id, _ = make_run(db_path, "lk_testapps:gate")

    async def go() -> None:
        async with Client(str(db_path)) as client:
            reader = client.reader()
            assert reader is not None
            async with reader:
                news = [NewEvent(kind=EventKind.TOOL_RESTARTED, data={"n": 1})]
                with pytest.raises(UsageError, match="read-only"):
                    await reader.store.append_events(RunId(run_id), news)
                with pytest.raises(UsageError, match="read-only"):
                    await reader.cancel(run_id, "no")
                assert (await client.info(run_id)).status.value == "waiting"

    run_async(go())


def test_the_app_reads_through_the_reader_once_it_serves(db_path: Path) -> None:
    """The lifespan opens the reader and hands it to the watcher, the hubs and the pages;
    with the store's thread held, the page's reads still answer."""
    run_id, _ = make_run(db_path, "lk_testapps:gate")

    async def go() -> None:
        async with Client(str(db_path)) as client:
            app = create_app(client, auth=Auth(operator_token="t" * 24))
            lk = app.state.inspector
            assert lk.reads is client
            async with _lifespan(app):
                assert lk.reads is not client and lk.watcher.client is lk.reads
                gate, held = _busy(client)
                try:
                    async with asyncio.timeout(10):
                        snap = await lk.snapshot_of(run_id)
                        assert snap.info.run_id == run_id
                finally:
                    gate.set()
                    await held
            assert lk.reads.store._db is None  # closed with the app  # type: ignore[attr-defined]

    run_async(go())


@pytest.mark.postgres
def test_the_postgres_reader_has_a_connection_of_its_own(pg_backend: Any) -> None:
    """Every pooled connection of the store held (as a burst of writes would hold them),
    the reader still reads, and follows the journal's ``LISTEN``."""
    url = pg_backend.url
    run_id, _ = make_run(url, "lk_testapps:gate")

    async def go() -> None:
        async with Client(url) as client:
            reader = client.reader()
            assert reader is not None
            async with reader:
                store: Any = client.store
                pool = store._pool
                held = [pool.getconn() for _ in range(store.max_size)]
                try:
                    async with asyncio.timeout(20):
                        hub = Watcher(client=reader).hub(run_id)
                        assert await hub.refresh()
                        assert hub.snapshot is not None
                        assert hub.snapshot.info.status.value == "waiting"
                finally:
                    for conn in held:
                        pool.putconn(conn)
                with pytest.raises(UsageError, match="read-only"):
                    await reader.cancel(run_id, "no")

    run_async(go())
