"""Schedules: a cron expression that starts runs of an app at its due times, with a policy.

A worker looks at the schedules on every round (``fire_due``). A schedule is a small state
machine in its row, and every change of it is a compare-and-set on the row's revision
(``Store.write_schedule``), journaled in ``schedule_events`` in the same transaction. A
round does one of two things to a schedule:

* **decide** (``decide``, a pure function): the due times that have come since
  ``next_due`` (each one ``jitter`` late, by a hash of the name and the due time, so every
  worker agrees), and those ``trigger`` and ``backfill`` asked for, go through the catch-up
  window (older than it: counted ``missed``, not run) and the overlap policy, against the
  previous run (``last_run``) still going or not. The outcome -- runs to start
  (``pending``), to start when the previous one ends (``buffer``), to cancel -- is written
  before anything is started;
* **act** (``_act``): start the ``pending`` runs, ask the ``cancel`` ones to stop, and
  clear both (a second compare-and-set).

A run's id is the schedule's name and its due time (``NAME.20261201T1005Z``; a trigger's
has seconds): the runs table's primary key on it makes a start idempotent, so two workers,
or a worker resuming what a SIGKILL cut short, start each decided run once. Two workers
deciding at once: the first write wins and the other's decision is dropped unacted.

Overlap policies (Temporal's ``ScheduleOverlapPolicy``), when the previous run goes on:
``skip`` (counted ``skipped``), ``buffer_one`` (one buffered, later ones skipped),
``buffer_all`` (all buffered, started one at a time), ``cancel_other`` (the previous run is
asked to cancel; the new one starts once it has ended), ``allow_all`` (started anyway).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace

from loopkernel._cron import Cron, zone
from loopkernel._hooks import crashpoint
from loopkernel.errors import RunNotFound, UsageError
from loopkernel.graph import TERMINAL_RUN, EventKind
from loopkernel.ids import RunId
from loopkernel.store import Schedule, Store
from loopkernel.store._protocol import OVERLAP_POLICIES

__all__ = [
    "OVERLAP_POLICIES",
    "Schedule",
    "backfill",
    "change",
    "decide",
    "fire_due",
    "jitter_of",
    "pause",
    "resume",
    "schedule_run_id",
    "trigger",
]

NEVER = 253402300799.0
"""``next_due`` of an expression that never comes due again (9999-12-31)."""
MAX_TIMES = 10_000
"""Due times one round decides at most (the rest wait for the next round)."""
MAX_BACKFILL = 1000
"""Due times one ``backfill`` asks for at most."""

Events = list[tuple[str, str | None, str]]


def schedule_run_id(name: str, due: float, *, seconds: bool = False) -> RunId:
    """``NAME.20261201T1005Z``; with ``seconds`` (a trigger) ``NAME.20261201T100512Z``."""
    shape = "%Y%m%dT%H%M%SZ" if seconds else "%Y%m%dT%H%MZ"
    return RunId(f"{name}.{time.strftime(shape, time.gmtime(due))}")


def jitter_of(name: str, due: float, jitter: float) -> float:
    """How late due time ``due`` starts: in ``[0, jitter)``, the same on every worker."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.sha256(f"{name}@{due:.3f}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * jitter


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _cron_times(s: Schedule, now: float) -> tuple[list[float], float]:
    """The due times from ``next_due`` that have come by ``now`` (jitter counted), at most
    ``MAX_TIMES``, and the first that has not."""
    cron, tz = Cron.parse(s.cron), zone(s.tz)
    come: list[float] = []
    due: float | None = s.next_due
    while due is not None and due < NEVER and len(come) < MAX_TIMES:
        if due + jitter_of(s.name, due, s.jitter) > now:
            break
        come.append(due)
        due = cron.next_after(due, tz)
    return come, NEVER if due is None else due


class _Round:
    """The working state of one decision (``decide``)."""

    def __init__(self, s: Schedule, going: bool) -> None:
        self.s = s
        self.pending: list[str] = []
        self.buffer = list(s.buffer)
        self.cancel: list[str] = []
        self.counts = dict(s.counts)
        self.events: Events = []
        self.busy = going

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def skip(self, run_id: str, why: str) -> None:
        self.count("skipped")
        self.events.append(("skipped", run_id, why))

    def hold(self, run_id: str, why: str) -> None:
        self.buffer.append(run_id)
        self.count("buffered")
        self.events.append(("buffered", run_id, why))

    def due(self, run_id: str, overlap: str, origin: str) -> None:
        """One due time through the overlap policy."""
        previous = self.pending[-1] if self.pending else self.s.last_run
        if overlap == "allow_all" or not self.busy:
            self.pending.append(run_id)
            self.busy = True
        elif overlap == "skip":
            self.skip(run_id, f"{origin}: {previous} is still going (overlap skip)")
        elif overlap == "buffer_one" and self.buffer:
            self.skip(run_id, f"{origin}: {self.buffer[0]} is buffered already (buffer_one)")
        elif overlap in ("buffer_one", "buffer_all"):
            self.hold(run_id, f"{origin}: after {previous} ends ({overlap})")
        elif self.pending:  # cancel_other, the previous one not started yet: replaced
            self.skip(self.pending.pop(), f"replaced by {run_id} before it started (cancel_other)")
            self.pending.append(run_id)
        else:  # cancel_other: the previous run is asked to stop, this one waits for it
            assert previous is not None
            if previous not in self.cancel:
                self.cancel.append(previous)
            for dropped in self.buffer:
                self.skip(dropped, f"replaced by {run_id} in the buffer (cancel_other)")
            self.buffer = []
            self.hold(run_id, f"{origin}: after {previous} is cancelled (cancel_other)")


def decide(
    s: Schedule, now: float, going: bool, ran: frozenset[str] = frozenset()
) -> tuple[Schedule, Events]:
    """The next state of ``s`` at ``now`` (the module docstring), ``going``: its previous
    run has not ended; ``ran``: the runs asked for (``backfill``) that exist already, not
    run again. ``s`` has nothing ``pending`` or to ``cancel``."""
    r = _Round(s, going)
    if r.buffer and not r.busy:  # the previous run ended: the buffer's head starts
        r.pending.append(r.buffer.pop(0))
        r.busy = True
    for run_id, due, overlap in s.requests:
        if run_id in ran:
            r.count("existed")
            r.events.append(("existed", run_id, f"asked for {when(due)}: ran already"))
            continue
        r.due(run_id, overlap or s.overlap, f"asked for {when(due)}")
    next_due = s.next_due
    if s.paused is None:
        come, next_due = _cron_times(s, now)
        missed = [d for d in come if now - d > s.catchup_window]
        if missed:
            r.count("missed", len(missed))
            r.events.append(
                (
                    "missed",
                    None,
                    f"{len(missed)} due times from {when(missed[0])} to {when(missed[-1])}, "
                    f"older than the catch-up window ({s.catchup_window:g} s): not run",
                )
            )
        for due in come[len(missed) :]:
            r.due(schedule_run_id(s.name, due), s.overlap, f"due {when(due)}")
    changed = replace(
        s,
        next_due=next_due,
        pending=tuple(r.pending),
        buffer=tuple(r.buffer),
        cancel=tuple(r.cancel),
        requests=(),
        counts=r.counts,
    )
    return changed, r.events


async def _going(store: Store, run_id: str | None) -> bool:
    if run_id is None:
        return False
    try:
        return (await store.get_run(RunId(run_id))).status not in TERMINAL_RUN
    except RunNotFound:
        return False


async def _exists(store: Store, run_id: str) -> bool:
    try:
        await store.get_run(RunId(run_id))
    except RunNotFound:
        return False
    return True


async def fire_due(client: object, now: float, log: Callable[[str], None]) -> list[RunId]:
    """One round over the schedules (the module docstring); the ids of the runs started
    or found started. ``client`` is a ``loopkernel.client.Client``."""
    from loopkernel.client import Client

    assert isinstance(client, Client)
    store = client.store
    out: list[RunId] = []
    for s in await store.due_schedules(now):
        if s.pending or s.cancel:  # decided by a round a crash or a race cut short
            out += await _act(client, s, log)
            continue
        ran = frozenset([q[0] for q in s.requests if await _exists(store, q[0])])
        changed, events = decide(s, now, await _going(store, s.last_run), ran)
        if changed == s:
            continue
        if not await store.write_schedule(changed, events):
            continue  # another worker decided first; the next round reads its decision
        for kind, run_id, detail in events:
            if kind != "buffered":
                log(f"schedule {s.name}: {kind} {run_id or ''} {detail}".replace("  ", " "))
        crashpoint("schedule_decided")
        if changed.pending or changed.cancel:
            out += await _act(client, replace(changed, rev=changed.rev + 1), log)
    return out


async def _act(client: object, s: Schedule, log: Callable[[str], None]) -> list[RunId]:
    """Ask the ``cancel`` runs to stop, start the ``pending`` ones, clear both."""
    from loopkernel.client import Client

    assert isinstance(client, Client)
    store = client.store
    events: Events = []
    for run_id in s.cancel:
        if not await _going(store, run_id):
            continue
        journal = await store.events(RunId(run_id))
        if any(e.kind is EventKind.CANCEL_REQUESTED for e in journal):
            continue  # asked already (an earlier due time, or a round cut short)
        reason = f"schedule {s.name}: a newer due time (overlap cancel_other)"
        with suppress(UsageError):  # it ended meanwhile
            await client.cancel(run_id, reason, finish_waiting=False)
            events.append(("cancel_requested", run_id, reason))
            log(f"schedule {s.name}: asked {run_id} to cancel (cancel_other)")
    started: list[RunId] = []
    for run_id in s.pending:
        if await _start(client, s, RunId(run_id), log):
            started.append(RunId(run_id))
            events.append(("started", run_id, f"{s.app}"))
    counts = dict(s.counts)
    counts["started"] = counts.get("started", 0) + len(started)
    asked = sum(1 for kind, _, _ in events if kind == "cancel_requested")
    if asked:
        counts["cancelled"] = counts.get("cancelled", 0) + asked
    last = s.pending[-1] if s.pending else s.last_run
    done = replace(s, pending=(), cancel=(), last_run=last, counts=counts)
    await store.write_schedule(done, events)  # lost: another worker did the same first
    return started


async def _start(client: object, s: Schedule, run_id: RunId, log: Callable[[str], None]) -> bool:
    """Start (if no one has) and enqueue ``run_id``; ``False`` if it cannot start."""
    from loopkernel.client import Client

    assert isinstance(client, Client)
    store = client.store
    try:
        await store.get_run(run_id)
    except RunNotFound:
        try:
            await client.start(s.app, scenario=s.scenario, overrides=s.params, run_id=run_id)
        except UsageError as exc:
            try:
                await store.get_run(run_id)  # another worker started it meanwhile
            except RunNotFound:
                log(f"schedule {s.name}: cannot start {run_id}: {exc}")
                return False
    crashpoint("schedule_started")
    with suppress(UsageError):  # it has finished already: another worker ran it
        await store.enqueue(run_id)
    return True


# -- Operators' changes (``loopkernel schedule pause|resume|update|trigger|backfill``) --


async def change(
    store: Store, name: str, edit: Callable[[Schedule], tuple[Schedule, Events]]
) -> Schedule:
    """Apply ``edit`` to schedule ``name`` by compare-and-set, again if a worker wrote
    first; the schedule as stored."""
    for _ in range(50):
        found = [s for s in await store.schedules() if s.name == name]
        if not found:
            raise UsageError(f"no schedule {name!r}")
        changed, events = edit(found[0])
        if await store.write_schedule(changed, events):
            return replace(changed, rev=changed.rev + 1)
    raise UsageError(f"schedule {name}: changed by workers 50 times in a row; try again")


def pause(s: Schedule, note: str) -> tuple[Schedule, Events]:
    return replace(s, paused=note), [("paused", None, note)]


def resume(s: Schedule, now: float) -> tuple[Schedule, Events]:
    """Unpause: the due times that passed while paused are counted, not run (as
    Temporal's), and the schedule goes on from the first after ``now``."""
    if s.paused is None:
        return s, []
    cron, tz = Cron.parse(s.cron), zone(s.tz)
    passed = len(cron.times(s.next_due - 1e-6, now, tz)[:MAX_TIMES]) if s.next_due <= now else 0
    counts = dict(s.counts)
    if passed:
        counts["paused"] = counts.get("paused", 0) + passed
    following = cron.next_after(now, tz)
    following = NEVER if following is None else following
    changed = replace(s, paused=None, next_due=following, counts=counts)
    return changed, [("resumed", None, f"{passed} due times passed while paused, not run")]


def trigger(s: Schedule, now: float, overlap: str | None) -> tuple[Schedule, Events]:
    """Ask for a run now (a worker's next round starts it, through the overlap policy)."""
    run_id = schedule_run_id(s.name, now, seconds=True)
    changed = replace(s, requests=(*s.requests, (run_id, now, overlap)))
    return changed, [("triggered", run_id, f"overlap {overlap or s.overlap}")]


def backfill(
    s: Schedule, start: float, end: float, overlap: str | None
) -> tuple[Schedule, Events, int]:
    """Ask for the runs of the due times in ``[start, end]``, as if they had come then
    (their run ids are the cron runs': one that ran already is not run again)."""
    if end < start:
        raise UsageError(f"backfill: the end {when(end)} is before the start {when(start)}")
    times = Cron.parse(s.cron).times(start - 1e-6, end, zone(s.tz))
    if len(times) > MAX_BACKFILL:
        raise UsageError(
            f"backfill: {len(times)} due times; at most {MAX_BACKFILL} at once (split the range)"
        )
    asked = tuple((schedule_run_id(s.name, d), d, overlap) for d in times)
    detail = f"{len(times)} due times from {when(start)} to {when(end)}, overlap "
    detail += overlap or s.overlap
    return replace(s, requests=(*s.requests, *asked)), [("backfill", None, detail)], len(times)
