"""The client API for synchronous code: scripts, notebooks, a Flask view.

::

    from loopkernel import sync

    with sync.Client("runs.db") as client:
        started = client.start("speculation", scenario="fast")
        outcome = client.execute(started.run_id)        # blocks until it ends or waits
        for task in client.waiting(started.run_id):
            client.decide(started.run_id, task.task_id, "approve", local=True)
        client.execute(started.run_id)

    outcome = sync.call(kernel.run("r1"))             # any coroutine, from sync code

Each method is the ``loopkernel.client.Client`` method of the same name, run to its end
on an event loop of its own in a background thread. So it works the same from a plain
script and from inside a running event loop (Jupyter, IPython, an ``async def`` that calls
sync code): the caller's thread blocks until the call is done, the caller's loop is never
re-entered, and nothing deadlocks. Called from that background thread itself (a worker or
an observer of a run this client executes) it refuses with ``UsageError`` instead of
waiting for itself; use the async ``Client`` there.

Ctrl-C (``KeyboardInterrupt``) while a call blocks cancels the call on its loop, waits for
it to unwind (an executing run gives its lease back; the run stays resumable), then
raises ``KeyboardInterrupt`` in the caller.

Stores and tool servers belong to the client's loop: open, use and close one
``sync.Client`` from the same thread or from several, but do not hand its store to
another loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from loopkernel.errors import UsageError

if TYPE_CHECKING:
    from loopkernel.client import Client as AsyncClient
    from loopkernel.client import Inspection, Pruned
    from loopkernel.executor import Observer, RunOutcome, StartedRun
    from loopkernel.graph import JSON, Event, RunStatus, Task
    from loopkernel.store import RunInfo

__all__ = ["Client", "call"]

T = TypeVar("T")


class _Loop:
    """An event loop running forever in a daemon thread; ``run`` blocks until a coroutine
    handed to it is done."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise UsageError(
                "a loopkernel.sync call from inside its own event loop (a worker or an "
                "observer of a run it executes) would wait for itself; use the async "
                "loopkernel.client.Client there"
            )
        if self._loop.is_closed():
            coro.close()
            raise UsageError("this loopkernel.sync client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()  # the coroutine unwinds on its loop: leases released, files closed
            concurrent.futures.wait([future])
            raise

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def drain() -> None:
            await self._loop.shutdown_asyncgens()
            await self._loop.shutdown_default_executor()  # threads of sync workers

        asyncio.run_coroutine_threadsafe(drain(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


_shared: _Loop | None = None
_shared_lock = threading.Lock()


def call(awaitable: Awaitable[T]) -> T:
    """Run ``awaitable`` to its end from synchronous code and return its result (or raise
    its error), on one background event loop shared by every ``call`` of the process.
    Works inside a running loop (Jupyter) too. Objects bound to a loop (an opened store,
    a ``Kernel`` holding one) must be used through ``call`` only, so that they stay on
    that one loop."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = _Loop("loopkernel-sync")
        loop = _shared

    async def wrapped() -> T:
        return await awaitable

    try:
        return loop.run(wrapped())
    except UsageError:
        if asyncio.iscoroutine(awaitable):
            awaitable.close()  # never started: no "was never awaited" warning
        raise


class Client:
    """``loopkernel.client.Client`` for synchronous code (see the module docstring).

    The store opens on the first call (or ``open()`` / ``with``) and closes with
    ``close()`` or at the end of the ``with`` block.
    """

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        require_token: bool | None = None,
    ) -> None:
        """The same arguments as the async ``Client``: ``create=False`` needs an existing
        database; ``require_token`` makes every approval need the run's token."""
        from loopkernel.client import Client as AsyncClient

        self._async: AsyncClient = AsyncClient(
            None if db is None else os.fspath(db), create=create, require_token=require_token
        )
        self._loop: _Loop | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> AsyncClient:
        """The async client underneath, for what this facade does not wrap (use it through
        ``run(...)`` so that it stays on this client's loop)."""
        return self._async

    def open(self) -> Client:
        with self._lock:
            if self._loop is None:
                loop = _Loop("loopkernel-sync-client")
                try:
                    loop.run(self._async.store.open())
                except BaseException:
                    loop.close()
                    raise
                self._loop = loop
        return self

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.run(self._async.store.close())
            finally:
                loop.close()

    def __enter__(self) -> Client:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, make: Callable[[AsyncClient], Coroutine[Any, Any, T]]) -> T:
        """``make(async_client)``'s coroutine run on this client's loop: for any async
        ``Client`` method this facade does not wrap."""
        self.open()
        assert self._loop is not None
        return self._loop.run(make(self._async))

    # -- the operations, one per async Client method -------------------------------

    def start(
        self,
        app: str,
        *,
        scenario: str | None = None,
        overrides: Mapping[str, JSON] | None = None,
        run_id: str | None = None,
        max_events: int | None = None,
        require_token: bool = False,
    ) -> StartedRun:
        """Journal a new run of ``app`` (not executed yet): its id and approval token."""
        from loopkernel.executor import DEFAULT_MAX_EVENTS

        async def go(c: AsyncClient) -> StartedRun:
            _, started = await c.start(
                app,
                scenario=scenario,
                overrides=overrides,
                run_id=run_id,
                max_events=DEFAULT_MAX_EVENTS if max_events is None else max_events,
                require_token=require_token,
            )
            return started

        return self.run(go)

    def execute(
        self,
        run_id: str,
        *,
        observer: Observer | None = None,
        max_concurrency: int = 16,
        store_retry: float | None = None,
        apps: Collection[str] | None = None,
        keep_finished: int | None = None,
    ) -> RunOutcome:
        """Run or resume ``run_id`` as its one executor until it ends or waits for a
        human (``Client.execute``); ``observer`` is called on this client's loop thread."""
        from loopkernel.client import Listeners
        from loopkernel.executor import ExecutionConfig

        config = ExecutionConfig(
            concurrency=max_concurrency,
            keep_finished=keep_finished,
            **({} if store_retry is None else {"store_retry_s": store_retry}),
        )
        listeners = Listeners(observer=observer)
        return self.run(lambda c: c.execute(run_id, config=config, listeners=listeners, apps=apps))

    def run_app(
        self,
        app: str,
        *,
        scenario: str | None = None,
        overrides: Mapping[str, JSON] | None = None,
        run_id: str | None = None,
        require_token: bool = False,
        max_concurrency: int = 16,
    ) -> tuple[StartedRun, RunOutcome]:
        """``start`` then ``execute``: what ``loopkernel run APP`` does."""
        started = self.start(
            app,
            scenario=scenario,
            overrides=overrides,
            run_id=run_id,
            require_token=require_token,
        )
        return started, self.execute(started.run_id, max_concurrency=max_concurrency)

    def decide(
        self,
        run_id: str,
        task_id: str,
        decision: Literal["approve", "reject"],
        *,
        payload: JSON = None,
        token: str | None = None,
        local: bool = False,
    ) -> Event:
        """Journal a human's answer to a waiting task (``Client.decide``): with the run's
        ``token``, or ``local=True`` when database access is the authority."""
        from loopkernel._people import Answerer

        answerer = Answerer(token=token, local=local)
        return self.run(
            lambda c: c.decide(run_id, task_id, decision, payload=payload, answerer=answerer)
        )

    def cancel(
        self,
        run_id: str,
        reason: str = "cancelled by an operator",
        *,
        token: str | None = None,
        local: bool = True,
    ) -> RunStatus:
        """Ask the run to stop (``Client.cancel``); a waiting run is finished at once."""
        return self.run(lambda c: c.cancel(run_id, reason, token=token, local=local))

    def info(self, run_id: str) -> RunInfo:
        return self.run(lambda c: c.info(run_id))

    def waiting(self, run_id: str) -> list[Task]:
        """The run's tasks that wait for a human, with their reasons."""
        return self.run(lambda c: c.waiting(run_id))

    def inspect(self, run_id: str, *, journal: bool = False, at: int | None = None) -> Inspection:
        return self.run(lambda c: c.inspect(run_id, journal=journal, at=at))

    def events(self, run_id: str, after: int = 0) -> list[Event]:
        return self.run(lambda c: c.events(run_id, after))

    def list_runs(
        self,
        limit: int = 50,
        *,
        status: RunStatus | None = None,
        app: str | None = None,
        before: tuple[float, str] | None = None,
    ) -> list[RunInfo]:
        return self.run(lambda c: c.list_runs(limit, status=status, app=app, before=before))

    def fork(self, run_id: str, *, at: int, new_run_id: str | None = None) -> StartedRun:
        return self.run(lambda c: c.fork(run_id, at=at, new_run_id=new_run_id))

    def delete(self, run_id: str) -> None:
        """Remove every row of the run (``Client.delete``)."""
        self.run(lambda c: c.delete(run_id))

    def prune(
        self,
        older_than: float,
        *,
        statuses: Collection[RunStatus] | None = None,
        dry_run: bool = False,
        vacuum: bool = False,
    ) -> Pruned:
        """Delete runs not changed for ``older_than`` seconds, and give their space back
        (``Client.prune``)."""
        from loopkernel.client import PRUNED_BY_DEFAULT

        chosen = PRUNED_BY_DEFAULT if statuses is None else statuses
        return self.run(
            lambda c: c.prune(older_than, statuses=chosen, dry_run=dry_run, vacuum=vacuum)
        )
