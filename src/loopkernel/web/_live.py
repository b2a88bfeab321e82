"""Live updates: one watcher per server, one poller per watched run, one wake-up per stream.

The **watcher** waits on the client's ``wait_for_journal`` (SQLite: ``PRAGMA
data_version`` on a read connection, no lock held; PostgreSQL: ``LISTEN
loopkernel_journal``). After each wake-up (or ``poll_seconds`` without one) it asks each
watched run's **hub** to refresh: the hub reads the run's row and its new patches and
compares a fingerprint (status, updated time, last seq, task counts, last planned seq).
Only when that moved does the hub read what changed (the graph, the new events), bump its
version and set the ``asyncio.Event`` of each of its subscribers. N open pages of one run
cost one read per change, not N; a run that did not change costs two small reads per poll
and wakes nobody.

The hub also keeps the run's **recent journal** (the events its streams still need, and
at least the last ``RING``; at most ``RING_MAX``), their commit times and the patches
answering them, and each journal row rendered once: every stream of
the run takes its new events, times, patches and row HTML from there, so a change costs
one journal read and one render however many pages watch it, and a viewer adds no work
to the store's thread (which the run itself writes through). A stream more than
``CATCHUP_EVENTS`` behind the head (its viewer did not read: the write of its last chunk
waited on a full send buffer; or it reconnected from long ago) is moved to **catch-up**:
it is sent a ``catchup`` message naming exactly the events it skips (from seq A to B),
then the live window from the head, never every row; the hub keeps nothing for it past
that window, so a slow viewer never holds the hub, the others or the run back. A hub
refreshes at most every ``Watcher.min_gap`` seconds, so a run that commits hundreds of
events a second is read in batches, not once per commit.

Streams share no lock and no condition: each waits on its own event, so a stream that is
cancelled (its browser went away) touches nothing another stream waits on, and a hub
whose refresh fails is skipped (and retried) without holding up the others.

A **stream** sends, in order:

- ``journal`` messages, ``id:`` = the event's seq, one per event after the last one the
  browser has (``Last-Event-ID`` on reconnect, else ``?after=``): none lost, none doubled;
- a ``catchup`` message, ``id:`` = B, ``{"skipped": N, "from": A, "to": B}``, in place
  of the events A..B when the stream fell more than ``CATCHUP_EVENTS`` behind;
- ``patch`` messages when the patch answering an event already sent is committed (the
  kernel plans events in seq order, so the unplanned ones are always the newest);
- ``state`` messages when the run changed, as **deltas** against what this stream sent:
  the header, the rows of the tasks that changed, the graph's boxes that changed (the
  whole graph only when its shape changed), the approval forms only when what waits
  changed;
- ``keepalive`` messages after ``keepalive_seconds`` without anything else (the page
  treats a silence of three of them as a dead stream and says so);
- ``end`` once the run is finished and its journal sent, after which the page closes the
  stream.

Streams are bounded (``max_streams``): the slot is taken before the check, in one step
with no ``await`` between, so a burst of connections can never overshoot the cap; one more
is answered 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from loopkernel.client import Client, approver_text
from loopkernel.graph import (
    JSON,
    TERMINAL_RUN,
    UNPLANNED_EVENTS,
    Event,
    EventKind,
    GraphState,
    TaskState,
)
from loopkernel.store import PatchRecord, RunInfo
from loopkernel.web._graph import natural_key
from loopkernel.web._views import failure_traceback, preview

__all__ = ["Failure", "Hub", "Renderers", "Snapshot", "Watcher", "failures_of", "once", "stream"]

log = logging.getLogger("loopkernel.web")
T = TypeVar("T")

KEEPALIVE_SECONDS = 15.0
RING = 2048
"""Events of a run a hub keeps for its streams (with their times, patches and rows) once
every stream has sent them."""
RING_MAX = 50_000
"""Events a hub keeps at most: a stream further behind catches up by itself."""
MIN_GAP = 0.1
"""A hub reads its run at most this often (seconds)."""
RESEND_WINDOW = 64
"""On reconnect, patches of this many events before ``Last-Event-ID`` are sent again: a
patch committed while the browser was away replaces the placeholder it still shows."""
CHUNK_EVENTS = 256
"""Journal rows a stream writes at most at once (~250 KB): a viewer's memory stays
bounded however fast the run journals (200 viewers of a 10,000-event burst held 4.4 GB
as one chunk each)."""
CATCHUP_EVENTS = 512
"""A stream more than this many events behind the head of its run (it did not read: a
slow viewer, its send buffer full; or a reconnect from long ago) is sent every row no
more: it gets a ``catchup`` marker (the events it skips, from seq A to B) and then the
live window from the head (``CATCHUP_TAIL`` rows). About the page's DOM window
(``JOURNAL_TAIL``): rows further behind would leave the page as soon as they came. At
most ``RING``, so a skipping stream always finds its rows in the hub's window."""
CATCHUP_TAIL = 64
"""The rows before the head a stream in catch-up is sent after its marker."""
PENDING_KEPT = 4 * RESEND_WINDOW
"""Unplanned rows a stream waits for the patch of, at most (the newest): events nobody
plans (a store-level writer's) cost a stream nothing past that."""


FAILURES_SHOWN = 5
"""Failed tasks whose error and traceback the run page shows (the first, by id)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """A failed task as the run page's failure card shows it."""

    task_id: str
    type: str
    """The error's type (``ValueError``), or ``error`` when the error does not say."""
    message: str
    """The error's message, cut at 300 characters."""
    traceback: str | None
    """Of its latest failure (its ``task_failed`` event keeps it), when one was journaled."""


async def failures_of(client: Client, run_id: str, state: GraphState) -> tuple[Failure, ...]:
    """The run's failed tasks (at most ``FAILURES_SHOWN``, by id): each one's error and
    the traceback of its latest failure."""
    failed = sorted(state.in_state(TaskState.FAILED), key=lambda t: natural_key(t.task_id))
    out = []
    for task in failed[:FAILURES_SHOWN]:
        events = await client.task_events(run_id, task.task_id)
        error = task.error if isinstance(task.error, dict) else {"message": task.error}
        kind, message = error.get("type"), error.get("message")
        out.append(
            Failure(
                task_id=task.task_id,
                type=kind if isinstance(kind, str) else "error",
                message=preview(message if message is not None else task.error, 300),
                traceback=failure_traceback(task, events),
            )
        )
    return tuple(out)


@dataclass(frozen=True, kw_only=True, slots=True)
class Snapshot:
    """A run as its hub last read it: shared by every stream of the run."""

    version: int
    info: RunInfo
    state: GraphState
    late: frozenset[str]
    """Tasks whose result arrived after they were cancelled."""
    answered: dict[str, str]
    """Waiting tasks whose current wait a human answered (journaled, not yet planned) ->
    the decision."""
    answered_by: dict[str, str] = field(default_factory=dict)
    """The same tasks -> who answered, as one line (``approver_text``)."""
    cancel_requested: bool
    """A ``cancel_requested`` event is journaled and the run is not finished yet."""
    pending: dict[str, dict[str, JSON]] = field(default_factory=dict)
    """Waiting tasks whose current wait is a tool call parked for approval -> that call,
    as its ``approval_required`` event journaled it (tool, key, effect, redacted
    arguments, cost)."""
    planned: int
    """The highest seq a patch answers: every event up to it is planned."""
    times: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    """task -> (started, finished), epoch seconds (``Client.task_times``)."""
    failures: tuple[Failure, ...] = ()
    """The run's failed tasks the page shows (at most ``FAILURES_SHOWN``, by id)."""
    memo: dict[object, object] = field(default_factory=dict, compare=False, repr=False)
    """What the streams of the run render from this snapshot, rendered once for all of
    them (``once``): the header, task rows, boxes and their marks."""
    key: str
    """A digest of what the snapshot was read at (status, times, seqs, counts): equal for
    equal states, so a page rendered from it tells its stream it needs no catching up."""


async def _graph_of(client: Client, info: RunInfo) -> GraphState:
    """The run's graph, from the store's ``graph_of`` where it has one: without the scan
    of the whole journal ``Client.graph`` (``load_run``) makes on every refresh."""
    read = getattr(client.store, "graph_of", None)
    if read is None:
        return await client.graph(info.run_id)
    state: GraphState = await read(info)
    return state


def once(snap: Snapshot, key: object, make: Callable[[], T]) -> T:
    """``make()`` for ``key`` of this snapshot, made by the first stream that asks and
    shared by every other: a change costs one render, not one per viewer."""
    memo = snap.memo
    if key not in memo:
        memo[key] = make()
    return memo[key]  # type: ignore[return-value]


@dataclass(kw_only=True)
class Hub:
    """One watched run: its fingerprint, its last snapshot and its subscribers."""

    client: Client
    run_id: str
    version: int = 0
    snapshot: Snapshot | None = None
    subscribers: set[asyncio.Event] = field(default_factory=set)
    _key: tuple[object, ...] | None = None
    _planned: int = 0
    _seen: int = 0
    _late: set[str] = field(default_factory=set)
    _humans: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    """task -> (wait epoch, decision, who answered) of its latest human input."""
    _asks: dict[str, tuple[int, dict[str, JSON]]] = field(default_factory=dict)
    """task -> (wait epoch, call) of its latest approval_required event with a call."""
    _cancel: bool = False
    _failures: tuple[tuple[tuple[str, int], ...], tuple[Failure, ...]] = ((), ())
    """(failed task, attempts) of the last read -> their failures: read again on change."""
    recent: list[Event] = field(default_factory=list)
    """The run's last events (at most ``2 * RING``), in seq order: every one after
    ``floor``."""
    floor: int = 0
    """Every event after this seq is in ``recent``."""
    recent_times: dict[int, float] = field(default_factory=dict)
    """seq -> commit time, for ``recent`` and the event before it."""
    recent_patches: dict[int, PatchRecord] = field(default_factory=dict)
    """event seq -> the patch answering it, for the events after ``floor``."""
    rows: dict[tuple[int, bool], str] = field(default_factory=dict)
    """(seq, planned) -> the journal row's HTML, rendered once for every stream."""
    patch_rows: dict[int, str] = field(default_factory=dict)
    """event seq -> the ``patch`` message of the patch answering it, rendered once."""
    positions: dict[asyncio.Event, int] = field(default_factory=dict)
    """Each subscriber -> the last seq it sent: the window keeps what some still need."""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Only the refresh of this one run holds it (the watcher, or a stream's first read)."""

    async def refresh(self) -> bool:
        """Read the run's row; when it moved, read what changed and wake every subscriber.
        Whether it moved."""
        async with self._lock:
            info = await self.client.info(self.run_id)
            new = await self.client.patches(self.run_id, after=self._planned)
            if new:
                self._planned = max(p.event_seq for p in new)
                self.recent_patches.update((p.event_seq, p) for p in new)
            counts = tuple(sorted(info.task_counts.items()))
            key = (info.status, info.updated_at, info.last_seq, counts, self._planned)
            if key == self._key and self.snapshot is not None:
                return False
            await self._read_journal()
            state = await _graph_of(self.client, info)
            times = await self.client.task_times(self.run_id)
            failed = tuple(
                sorted((t.task_id, t.attempts) for t in state.in_state(TaskState.FAILED))
            )
            if failed != self._failures[0]:
                self._failures = (failed, await failures_of(self.client, self.run_id, state))
            self._key = key
            self.version += 1
            answered, answered_by = {}, {}
            for tid, (epoch, decision, by) in self._humans.items():
                task = state.get(tid)
                if task is not None and task.wait_epoch == epoch:
                    answered[tid], answered_by[tid] = decision, by
            pending = {
                tid: call
                for tid, (epoch, call) in self._asks.items()
                if (task := state.get(tid)) is not None
                and task.wait_epoch == epoch
                and task.state is TaskState.WAITING
            }
            self.snapshot = Snapshot(
                version=self.version,
                info=info,
                state=state,
                late=frozenset(self._late),
                answered=answered,
                answered_by=answered_by,
                pending=pending,
                cancel_requested=self._cancel and info.status not in TERMINAL_RUN,
                planned=self._planned,
                times=times,
                failures=self._failures[1],
                key=digest(repr(key)),
            )
        for wake in list(self.subscribers):
            wake.set()
        return True

    async def _read_journal(self) -> None:
        """The events journaled since the last read, with their times, into the window."""
        events = await self.client.events(self.run_id, after=self._seen)
        if not events:
            return
        for ev in events:
            self._note(ev)
        since = max(0, events[0].seq - 2)  # and the one before: a row shows the gap
        self.recent_times.update(await self.client.event_times(self.run_id, since))
        self.recent += events
        if len(self.recent) > 2 * RING:
            # Drop what every stream sent (but keep RING), and past RING_MAX drop anyway:
            # a burst of events is read once and shared, however many watch it.
            # A stream further behind than CATCHUP_EVENTS skips to the head: never kept for.
            needed = min(self.positions.values(), default=self._seen)
            needed = max(needed, self._seen - CATCHUP_EVENTS)
            keep = max(RING, self._seen - needed)
            del self.recent[: -min(keep, RING_MAX)]
        if self.floor < self.recent[0].seq - 1:
            self.floor = self.recent[0].seq - 1
            low = self.floor
            self.recent_times = {s: t for s, t in self.recent_times.items() if s >= low}
            self.recent_patches = {s: p for s, p in self.recent_patches.items() if s > low}
            self.rows = {k: v for k, v in self.rows.items() if k[0] > low}
            self.patch_rows = {s: m for s, m in self.patch_rows.items() if s > low}

    @property
    def head(self) -> int:
        """The last seq this hub read."""
        return self._seen

    def since(self, seq: int) -> list[Event] | None:
        """The events after ``seq`` this hub holds; ``None`` when some are not held."""
        if seq < self.floor:
            return None
        return self.recent[bisect.bisect_right(self.recent, seq, key=lambda e: e.seq) :]

    def patches_after(self, seq: int) -> dict[int, PatchRecord] | None:
        """The patches answering events after ``seq`` (event seq -> patch, the hub's own
        map: read it, never change it); ``None`` when some are not held."""
        return None if seq < self.floor else self.recent_patches

    def _note(self, ev: Event) -> None:
        self._seen = ev.seq
        if ev.kind is EventKind.LATE_RESULT_DISCARDED and ev.task_id is not None:
            self._late.add(ev.task_id)
        elif ev.kind is EventKind.HUMAN_INPUT and ev.task_id is not None:
            data = ev.data if isinstance(ev.data, dict) else {}
            epoch = data.get("wait_epoch")
            if isinstance(epoch, int):
                decision, by = str(data.get("decision")), approver_text(data.get("by"))
                self._humans[ev.task_id] = (epoch, decision, by)
        elif ev.kind is EventKind.APPROVAL_REQUIRED and ev.task_id is not None:
            data = ev.data if isinstance(ev.data, dict) else {}
            epoch, call = data.get("wait_epoch"), data.get("call")
            if isinstance(epoch, int) and isinstance(call, dict):
                self._asks[ev.task_id] = (epoch, call)
        elif ev.kind is EventKind.CANCEL_REQUESTED:
            self._cancel = True


@dataclass(kw_only=True)
class Watcher:
    """Wakes the hubs of the watched runs when some journal changed."""

    client: Client
    poll_seconds: float = 1.0
    """Longest wait for a wake-up before every hub checks its run anyway."""
    min_gap: float = MIN_GAP
    """Shortest time between two rounds of refreshes: a busy run is read in batches."""
    max_streams: int = 64
    active: int = 0
    """Open streams (slots taken)."""
    hubs: dict[str, Hub] = field(default_factory=dict)
    listeners: set[asyncio.Event] = field(default_factory=set)
    """Set whenever some journal moved (the runs lists' live views wait on them)."""
    _task: asyncio.Task[None] | None = None

    def reserve(self) -> bool:
        """Take a stream slot if one is free. Synchronous: nothing runs between the check
        and the count."""
        if self.active >= self.max_streams:
            return False
        self.active += 1
        return True

    def release(self) -> None:
        self.active -= 1

    def hub(self, run_id: str) -> Hub:
        found = self.hubs.get(run_id)
        if found is None:
            found = self.hubs[run_id] = Hub(client=self.client, run_id=run_id)
        return found

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
            began = time.monotonic()
            try:
                await self.client.wait_for_journal(self.poll_seconds)
            except Exception:  # the store is unreachable for now: poll until it is back
                await asyncio.sleep(self.poll_seconds)
            if time.monotonic() - began < self.poll_seconds:  # woken, not timed out
                for wake in self.listeners:
                    wake.set()
            if (rest := began + self.min_gap - time.monotonic()) > 0:
                await asyncio.sleep(rest)
            for run_id, hub in list(self.hubs.items()):
                if not hub.subscribers:
                    self.hubs.pop(run_id, None)
                    continue
                try:
                    await hub.refresh()
                except Exception:  # this run only; the others go on, this one next time
                    log.warning("live refresh of run %s failed", run_id, exc_info=True)


@dataclass(frozen=True, kw_only=True)
class Renderers:
    """HTML fragments the stream sends, rendered by the app's templates."""

    row: Callable[[Event, PatchRecord | None, dict[int, float]], str]
    """An event's row, given when events were journaled (seq -> time)."""
    patch: Callable[[int, PatchRecord], str]
    state: Callable[[Snapshot, dict[str, str]], dict[str, object]]
    """The ``state`` message as a delta: given the snapshot and what this stream sent
    before (part -> digest; updated in place), only what changed."""


def _message(kind: str, data: dict[str, object], seq: int | None = None) -> str:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


async def _journal_since(
    client: Client, hub: Hub, sent: int, floor: int
) -> tuple[list[Event], dict[int, float], dict[int, PatchRecord], bool]:
    """The events after ``sent`` with their times, the patches of the events after
    ``floor``, and whether they are the hub's (shared by every stream); a stream behind
    the hub's window reads them from the store for itself (catching up)."""
    held = hub.since(sent)
    patches = hub.patches_after(floor)
    if held is not None and patches is not None:
        return held, hub.recent_times, patches, True
    events = await client.events(hub.run_id, after=sent)
    times = await client.event_times(hub.run_id, max(0, sent - 1)) if events else {}
    found = await client.patches(hub.run_id, after=floor)
    return events, times, {p.event_seq: p for p in found}, False


def _row_message(
    hub: Hub | None, render: Renderers, ev: Event, p: PatchRecord | None, times: dict[int, float]
) -> str:
    """The ``journal`` message of one event: rendered once per hub when ``hub`` is given."""
    key = (ev.seq, p is not None)
    found = None if hub is None else hub.rows.get(key)
    if found is None:
        found = _message("journal", {"seq": ev.seq, "html": render.row(ev, p, times)}, seq=ev.seq)
        if hub is not None:
            hub.rows[key] = found
    return found


def _patch_message(
    hub: Hub | None, render: Renderers, seq: int, patches: dict[int, PatchRecord]
) -> str:
    """The ``patch`` message of the event ``seq``: rendered once per hub when ``hub`` is
    given."""
    found = None if hub is None else hub.patch_rows.get(seq)
    if found is None:
        found = _message("patch", {"seq": seq, "html": render.patch(seq, patches[seq])})
        if hub is not None:
            hub.patch_rows[seq] = found
    return found


def _journal_messages(
    hub: Hub | None,
    render: Renderers,
    events: list[Event],
    times: dict[int, float],
    patches: dict[int, PatchRecord],
    pending: set[int],
) -> list[str]:
    """The ``patch`` messages of the ``pending`` events now planned, then the ``journal``
    messages of ``events``; ``pending`` is updated in place."""
    out: list[str] = []
    for seq in sorted(pending):
        if seq in patches:
            pending.discard(seq)
            out.append(_patch_message(hub, render, seq, patches))
    for ev in events:
        p = patches.get(ev.seq)
        if p is None and ev.kind not in UNPLANNED_EVENTS:
            pending.add(ev.seq)
        out.append(_row_message(hub, render, ev, p, times))
    return out


def _catchup(sent: int, to: int) -> str:
    """The ``catchup`` message of a stream that skips the events after ``sent`` up to
    ``to`` (its ``id:`` is ``to``: a reconnect goes on from there)."""
    data: dict[str, object] = {"skipped": to - sent, "from": sent + 1, "to": to}
    return _message("catchup", data, seq=to)


async def stream(
    client: Client,
    watcher: Watcher,
    run_id: str,
    after: int,
    render: Renderers,
    *,
    planned: int = 0,
    keepalive_seconds: float = KEEPALIVE_SECONDS,
) -> AsyncIterator[str]:
    """The messages of one run page's stream, starting after seq ``after``; the page had
    the patches of every event up to ``planned``. The caller took the stream's slot
    (``Watcher.reserve``) and gives it back."""
    hub = watcher.hub(run_id)
    wake = asyncio.Event()
    hub.subscribers.add(wake)
    hub.positions[wake] = after
    watcher.start()
    try:
        yield f"retry: 1000\n\n: keepalive every {keepalive_seconds:g} s\n\n"
        if hub.snapshot is None:
            await hub.refresh()
        sent = after
        pending = set(range(max(1, planned + 1, after - RESEND_WINDOW + 1), after + 1))
        sent_parts: dict[str, str] = {}
        seen_version = 0
        while True:
            wake.clear()
            snap = hub.snapshot
            assert snap is not None
            if snap.version != seen_version:
                seen_version = snap.version
                chunk: list[str] = []
                if hub.head - sent > CATCHUP_EVENTS:  # it did not read: skip to the head
                    chunk.append(_catchup(sent, hub.head - CATCHUP_TAIL))
                    sent = hub.positions[wake] = hub.head - CATCHUP_TAIL
                    pending = {s for s in pending if s > hub.floor}
                floor = min(pending, default=sent + 1) - 1
                events, times, patches, shared = await _journal_since(client, hub, sent, floor)
                # What this wake-up brought goes out as one chunk (one write per stream per
                # change), at most CHUNK_EVENTS rows: a burst of thousands of events goes
                # out in bounded pieces, each one written before the next is made.
                behind = len(events) > CHUNK_EVENTS
                events = events[:CHUNK_EVENTS]
                chunk += _journal_messages(
                    hub if shared else None, render, events, times, patches, pending
                )
                if events:
                    sent = hub.positions[wake] = events[-1].seq
                if len(pending) > PENDING_KEPT:  # the newest: a kernel plans in seq order
                    pending = set(sorted(pending)[-PENDING_KEPT:])
                first = not sent_parts
                delta = render.state(snap, sent_parts)
                if delta or first:  # the first one even if empty: the page is current
                    chunk.append(_message("state", {"status": snap.info.status.value, **delta}))
                info = snap.info
                ended = info.status in TERMINAL_RUN and sent >= info.last_seq
                if ended:
                    chunk.append(_message("end", {"status": info.status.value}))
                if chunk:
                    yield "".join(chunk)
                if ended:
                    return
                if behind:
                    seen_version = 0  # the rest of the burst, at once
                    continue
                if hub.snapshot is not None and hub.snapshot.version != seen_version:
                    continue  # it moved while this stream was sending
            try:
                await asyncio.wait_for(wake.wait(), keepalive_seconds)
            except TimeoutError:
                yield _message("keepalive", {"version": seen_version})
    finally:
        hub.subscribers.discard(wake)
        hub.positions.pop(wake, None)
