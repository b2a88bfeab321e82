"""Live updates: one watcher per server, one server-sent-event stream per open run page.

The **watcher** waits on the client's ``wait_for_journal`` (SQLite: ``PRAGMA
data_version`` on a read connection, no lock held; PostgreSQL: ``LISTEN
loopkernel_journal``) and bumps a version that every stream waits on: N open pages cost one
poll, not N.

A **stream** sends, in order:

- ``journal`` messages, ``id:`` = the event's seq, one per event after the last one the
  browser has (``Last-Event-ID`` on reconnect, else ``?after=``): none lost, none doubled;
- ``patch`` messages when the patch answering an event already sent is committed (the
  kernel plans events in seq order, so the unplanned ones are always the newest);
- ``state`` messages (status, counts, graph, tasks) whenever the run changed;
- ``end`` once the run is finished and its journal sent, after which the page closes the
  stream.

Streams are bounded (``max_streams``): one more is answered 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from loopkernel.client import Client
from loopkernel.graph import TERMINAL_RUN, Event, EventKind
from loopkernel.store import PatchRecord, RunInfo

__all__ = ["Renderers", "Watcher", "stream"]

KEEPALIVE_S = 15.0
RESEND_WINDOW = 64
"""On reconnect, patches of this many events before ``Last-Event-ID`` are sent again: a
patch committed while the browser was away replaces the placeholder it still shows."""


@dataclass(kw_only=True)
class Watcher:
    """Wakes every stream when some journal changed."""

    client: Client
    poll_s: float = 1.0
    version: int = 0
    active: int = 0
    """Open streams."""
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        while True:
            try:
                await self.client.wait_for_journal(self.poll_s)
            except Exception:  # the store is unreachable for now: poll until it is back
                await asyncio.sleep(self.poll_s)
            async with self._changed:
                self.version += 1
                self._changed.notify_all()

    async def wait(self, seen: int, seconds: float) -> int:
        """The version once it is past ``seen``, or after ``seconds``."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.version != seen), seconds
                )
            return self.version


@dataclass(frozen=True, kw_only=True)
class Renderers:
    """HTML fragments the stream sends, rendered by the app's templates."""

    row: Callable[[Event, PatchRecord | None], str]
    patch: Callable[[int, PatchRecord], str]
    state: Callable[[str, RunInfo], Awaitable[dict[str, str]]]


def _message(kind: str, data: dict[str, object], seq: int | None = None) -> str:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def stream(
    client: Client,
    watcher: Watcher,
    run_id: str,
    after: int,
    render: Renderers,
    disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The messages of one run page's stream, starting after seq ``after``."""
    watcher.active += 1
    try:
        yield "retry: 1000\n\n"
        sent = after
        pending = set(range(max(1, after - RESEND_WINDOW + 1), after + 1))
        last_state: tuple[object, ...] | None = None
        planned = 0
        version = watcher.version
        while True:
            info = await client.info(run_id)
            events = await client.events(run_id, after=sent)
            floor = min(pending, default=sent + 1) - 1
            patches = {p.event_seq: p for p in await client.patches(run_id, after=floor)}
            for seq in sorted(pending):
                if seq in patches:
                    pending.discard(seq)
                    yield _message("patch", {"seq": seq, "html": render.patch(seq, patches[seq])})
            for ev in events:
                p = patches.get(ev.seq)
                if p is None and ev.kind is not EventKind.RUN_FINISHED:
                    pending.add(ev.seq)
                html = render.row(ev, p)
                yield _message("journal", {"seq": ev.seq, "html": html}, seq=ev.seq)
                sent = ev.seq
            planned = max(planned, max(patches, default=0))
            counts = tuple(sorted(info.task_counts.items()))  # a task started or stopped
            key = (info.status, info.updated_at, info.last_seq, planned, counts)
            if key != last_state:
                last_state = key
                yield _message("state", {**(await render.state(run_id, info))})
            if info.status in TERMINAL_RUN and sent >= info.last_seq:
                yield _message("end", {"status": info.status.value})
                return
            while True:
                new = await watcher.wait(version, KEEPALIVE_S)
                if await disconnected():
                    return
                if new != version:
                    version = new
                    break
                yield ": keepalive\n\n"
    finally:
        watcher.active -= 1
