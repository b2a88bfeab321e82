"""The store interface: what the executor, the CLI and the tool layer need of a database.

The protocols are sized to their callers: ``Journal`` (the executor), ``Effects`` (tools
and models), ``Leases`` (the client and workers), ``Catalog`` (the CLI and the web
inspector); ``Store`` is all four. Two implementations, SQLite and PostgreSQL, one SQL
engine (``_engine``), pass one conformance suite (``tests/store/test_conformance.py``,
``tests/store/test_leases.py``). Every method is one transaction.

One executor per run: a worker claims a run handed to it with ``enqueue`` (``claim_run``),
any other executor takes the lease of the run it names (``acquire``); either holds it
with ``heartbeat`` and gives it back with ``release``, and writes through
``fenced(run_id, epoch)``, a view of the store whose every write for the run checks, in
its own transaction, that the lease epoch is still its own (``docs/workers.md``,
``docs/durability.md``). Approvals and cancel requests are written by other processes
without a lease: the executor reads them from the journal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol, runtime_checkable

from loopkernel.evidence import Evidence, NewEvidence
from loopkernel.graph import (
    JSON,
    Delta,
    Event,
    EventKind,
    GraphState,
    RunStatus,
    Task,
)
from loopkernel.ids import RunId, TaskId
from loopkernel.store._kb import Knowledge
from loopkernel.store._lease import ClaimFilter, Holder

__all__ = [
    "Archive",
    "ArchiveSource",
    "Catalog",
    "Claim",
    "EffectRecord",
    "Effects",
    "Fork",
    "Journal",
    "Leases",
    "LoadedRun",
    "NewEvent",
    "NewRun",
    "PatchRecord",
    "ProposalNote",
    "Reclaimed",
    "RunInfo",
    "Store",
]


@dataclass(frozen=True)
class Reclaimed:
    """What ``Store.reclaim`` gave back: the database's bytes on disk (main file and WAL)
    before and after, and how (``incremental vacuum``, ``vacuum``)."""

    before: int
    after: int
    how: str


@dataclass(frozen=True, kw_only=True, slots=True)
class NewEvent:
    """An event to append; the store gives it its ``seq``."""

    kind: EventKind
    """What happened."""
    task_id: TaskId | None = None
    """The task it concerns."""
    data: JSON = None
    """Detail."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NewRun:
    """A run to create: what its ``runs`` row starts with."""

    run_id: RunId
    app: str
    """The app it runs (``module:attr``)."""
    params: JSON
    """Its parameters, admitted and cleaned."""
    max_events: int
    """The run's event budget."""
    token_hash: str
    """The approval token's hash (``TOKEN_REQUIRED`` first when a token is required)."""
    trace: str | None = None
    """The run span's ``traceparent`` (``RunInfo.trace``)."""
    app_version: str | None = None
    """The starting app's version (``RunInfo.app_version``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProposalNote:
    """What a model proposed for an event, kept beside the patch that was applied.

    ``accepted``: the proposal is the applied patch (``planner="llm"``). Otherwise the
    fallback's patch was applied (``planner="fallback"``) and ``reason`` names the rule the
    proposal broke (``bad_json``, ``unknown_op``, ``not_allowed``, ``cycle``, ``policy``,
    ``model_timeout`` ...; docs/models.md lists them).
    """

    accepted: bool
    """Whether the proposal was applied."""
    reason: str | None = None
    """The named rule a rejected proposal broke; ``None`` when accepted."""
    detail: str | None = None
    """One line on the rejection."""
    ops: JSON = None
    """The proposal's ops when it parsed as a patch, else ``None``."""
    raw_sha256: str | None = None
    """SHA-256 of the model's raw reply (``None`` when no reply came)."""
    model: str | None = None
    """The model that answered."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float | None = None
    """The model call's latency as the gateway measured it."""

    def to_json(self) -> dict[str, JSON]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: JSON) -> ProposalNote | None:
        """The note ``to_json`` wrote (a missing field takes its default's value)."""
        if not isinstance(data, dict):
            return None
        got: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        got["accepted"] = bool(got["accepted"])
        got["input_tokens"] = int(got["input_tokens"] or 0)
        got["output_tokens"] = int(got["output_tokens"] or 0)
        got["cost_usd"] = float(got["cost_usd"] or 0.0)
        return cls(**got)


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchRecord:
    """The journaled answer to one event: unique per ``(run_id, event_seq)``."""

    event_seq: int
    """The event it answers."""
    ops: JSON
    """``GraphPatch.to_json()`` of what was applied (or proposed, when rejected)."""
    outcome: Literal["applied", "rejected"] = "applied"
    """Whether it changed the graph."""
    reason: str | None = None
    """Why it was rejected, or which planner fell back."""
    planner: str = "planner"
    """Who made the applied patch: ``planner``, ``kernel`` (recovery, cancel, runaway), or
    for a planner that proposes (``LLMPlanner``) ``llm`` or ``fallback``."""
    proposal: ProposalNote | None = None
    """A proposing planner's proposal: its rejection reason, raw-reply hash, model, usage."""
    app_version: str | None = None
    """The version of the app whose executor journaled it (``App.version``); ``None`` in
    runs journaled before versions were recorded."""


OVERLAP_POLICIES = ("skip", "buffer_one", "buffer_all", "cancel_other", "allow_all")
"""What a due time does while the schedule's previous run is still going (Temporal's
``ScheduleOverlapPolicy`` names, lower case; ``loopkernel._schedules``)."""

CATCHUP_WINDOW = 365 * 86400.0
"""Temporal's default: a due time missed by more than a year is counted, not run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """One row of ``schedules``: what it starts, its policy, and its decided state."""

    name: str
    """Unique; the prefix of its runs' ids."""
    cron: str
    """Five fields, in ``tz`` (``loopkernel._cron``)."""
    app: str
    """The app each run starts (a name or ``module:attribute``)."""
    params: dict[str, JSON]
    """``--set`` overrides of the app's defaults."""
    next_due: float
    """The next due time not decided yet, seconds since the epoch (before jitter)."""
    last_run: str | None = None
    """The id of the last run it started: the one an overlap policy looks at."""
    overlap: str = "skip"
    """One of ``OVERLAP_POLICIES``."""
    catchup_window: float = CATCHUP_WINDOW
    """Seconds: a due time older than this when a worker comes to it is missed."""
    jitter: float = 0.0
    """Seconds: each due time starts up to this late, by a hash of name and due time."""
    tz: str = "UTC"
    """The IANA time zone the cron fields are read in."""
    scenario: str | None = None
    """The app scenario of its runs (``--scenario``)."""
    paused: str | None = None
    """``None``, or why it is paused (``schedule pause --note``)."""
    pending: tuple[str, ...] = ()
    """Runs decided to start, not yet known started (the next round starts them)."""
    buffer: tuple[str, ...] = ()
    """Runs to start, in order, once the previous run has ended (``buffer_*``,
    ``cancel_other``)."""
    cancel: tuple[str, ...] = ()
    """Runs to ask to cancel (``cancel_other``), not yet asked."""
    requests: tuple[tuple[str, float, str | None], ...] = ()
    """``(run id, due time, overlap or None)`` from ``trigger`` and ``backfill``."""
    counts: dict[str, int] = field(default_factory=dict)
    """What its due times came to: started, skipped, buffered, missed, cancelled ..."""
    rev: int = 0
    """Every change is a compare-and-set on this (``write_schedule``)."""

    @property
    def busy(self) -> bool:
        """Something is decided and not done: a worker looks even before ``next_due``."""
        return bool(self.pending or self.buffer or self.cancel or self.requests)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleEvent:
    """One row of ``schedule_events``: a decision or an operator's change."""

    name: str
    rev: int
    """The revision the change made."""
    n: int
    at: float
    kind: str
    """added, paused, resumed, updated, triggered, backfill, started, skipped, buffered,
    missed, cancel_requested."""
    run_id: str | None
    detail: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunInfo:
    """A run's row."""

    run_id: RunId
    app: str
    params: JSON
    status: RunStatus
    verdict: JSON
    max_events: int
    created_at: float
    updated_at: float
    last_seq: int
    task_counts: dict[str, int] = field(default_factory=dict)
    trace: str | None = None
    """The W3C ``traceparent`` of the run's span, when it was created with tracing on."""
    app_version: str | None = None
    """The version of the app that started the run (``App.version``), if recorded."""
    owner: str | None = field(default=None, compare=False)
    """Who holds or last held its lease (``runs.owner``: a worker id or a local holder)."""
    lease_until: float | None = field(default=None, compare=False)
    """When that lease ends, by the database's clock (``0``: handed to the workers,
    ``None``: no executor and no worker queue)."""
    wake_at: float | None = field(default=None, compare=False)
    """While it waits on a timer: the earliest wake-up time of its tasks."""
    seen_at: float | None = field(default=None, compare=False)
    """The database's clock when this row was read."""

    @property
    def owner_lost_at(self) -> float | None:
        """When the lease of a ``running`` run ran out with nobody giving it back (its
        executor died or hung): the time its owner was lost, else ``None``."""
        if self.status is not RunStatus.RUNNING or self.owner is None:
            return None
        if self.lease_until is None or self.seen_at is None or self.lease_until <= 0:
            return None
        return self.lease_until if self.lease_until <= self.seen_at else None


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadedRun:
    """Everything an executor needs to pick a run up."""

    info: RunInfo
    """The run row."""
    state: GraphState
    """The materialized graph."""
    unplanned: tuple[Event, ...]
    """Events with no patch yet, in seq order: planned next, exactly once."""
    free_epoch: int | None = None
    """The run's lease epoch when nobody held it at this read, else ``None``. A lease
    taken after the read with the next epoch proves nobody wrote under a lease between
    (``Client.execute`` then hands this read down instead of reading again)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EffectRecord:
    """One tool call in the effect journal."""

    run_id: RunId
    key: str
    """The idempotency key: ``run_id/task_id/call_index``."""
    task_id: TaskId
    call_index: int
    tool: str
    effect: str
    """``read_only``, ``idempotent`` or ``irreversible``."""
    arguments: JSON
    status: Literal["intended", "done", "failed"]
    result: JSON = None
    error: JSON = None
    arguments_digest: str | None = None
    """A hash of the tool call's raw arguments, as the tool layer computed it, or ``None``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """A run a worker now owns: write through ``store.fenced(run_id, epoch)``."""

    run_id: RunId
    """The run."""
    epoch: int
    """The lease epoch: bumped by every claim and release, so an older one is dead."""
    owner: str
    """The worker that claimed it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Fork:
    """What ``Store.fork_run`` writes, all of it read from the source beforehand, so the
    fork is exactly the prefix that was replayed even if the source is still running."""

    source: RunInfo
    """The run forked from."""
    at_seq: int
    """The last event of the source the fork keeps."""
    run_id: RunId
    """The new run."""
    token_hash: str
    """SHA-256 of the fork's own approval token."""
    events: tuple[Event, ...]
    """The source's events up to ``at_seq``."""
    patches: tuple[PatchRecord, ...]
    """Their patches (an event a crash left unplanned stays unplanned)."""
    state: GraphState
    """The graph as of ``at_seq``, with the status the fork starts in."""
    effects: tuple[EffectRecord, ...]
    """The source's finished effects the fork keeps, already under the fork's keys."""
    trace: str | None = None
    """The ``traceparent`` of the fork's run span (linked to its source's), when traced."""


class Archive(Protocol):
    """Where a run's evicted tasks are read back from, synchronously (a planner reads its
    snapshot without awaiting): what the store committed, which for a finished task is
    final. Errors are ``StoreUnavailable``. The executor's ``ArchivedTasks`` (a
    ``graph.TaskTable``) reads through it; graph/ itself never does."""

    def task(self, task_id: TaskId) -> Task | None: ...

    def tasks(self) -> list[Task]: ...

    def edges(self, task_id: TaskId) -> tuple[list[TaskId], list[TaskId]]:
        """``(predecessors, successors)`` of the task, as committed."""
        ...

    def all_edges(self) -> list[tuple[TaskId, TaskId]]:
        """Every committed edge ``(src, dst)`` of the run."""
        ...


@runtime_checkable
class ArchiveSource(Protocol):
    """A store that reads a run's tasks back synchronously, where an executor that evicts
    finished tasks from memory (``ExecutionConfig(keep_finished=...)``) reads them: SQLite.
    PostgreSQL answers only asynchronously, so its executor keeps what it evicts in a
    temporary file of its own (``executor/_spill.py``)."""

    def archive(self, run_id: RunId) -> Archive: ...


@runtime_checkable
class Journal(Protocol):
    """What the executor needs: a run's state and journal, a step committed at a time."""

    async def create_run(self, run: NewRun) -> Event:
        """Insert the run (status ``running``) and its ``run_started`` event, seq 1."""

    async def load_run(self, run_id: RunId) -> LoadedRun: ...

    async def get_run(self, run_id: RunId) -> RunInfo: ...

    async def set_status(
        self,
        run_id: RunId,
        status: RunStatus,
        verdict: JSON = None,
        *,
        wake_at: float | None = None,
    ) -> None:
        """Set a non-terminal status (``running``, ``waiting``) and checkpoint when quiescent.
        ``wake_at``: a waiting run's earliest timer (seconds since the epoch), which
        ``claim_run`` and ``due_runs`` look for; any other status clears it."""

    async def append_events(
        self, run_id: RunId, events: Sequence[NewEvent], tasks: Sequence[Task] = ()
    ) -> list[Event]:
        """Append events (seq assigned here) and write ``tasks``' new values, atomically.

        Tasks whose event makes them terminal get ``done_seq`` set by the caller only after
        the seq is known, so the store fills ``done_seq`` for each task whose id an event
        names and whose state is terminal.
        """

    async def commit_patches(
        self,
        run_id: RunId,
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None = None,
    ) -> Event | None:
        """Record patches and apply their combined ``delta`` atomically.

        A duplicate ``(run_id, event_seq)`` raises ``ReplayDivergence``: an event is planned
        once. With ``delta.finish`` the run's status and verdict are written and ``final``
        (a ``run_finished`` event) is appended in the same transaction.
        """

    async def commit_step(
        self,
        run_id: RunId,
        journal: Sequence[Event],
        records: Sequence[PatchRecord],
        delta: Delta,
        final: NewEvent | None = None,
    ) -> tuple[list[Event], Event | None]:
        """A durable step in one transaction: append ``journal`` (events the executor
        numbered after the last seq it knows, not yet written), then ``commit_patches``.

        ``delta.tasks`` carries the tasks' new values (``done_seq`` set from ``journal``).
        If another process appended in between, the events are written after its and the
        records' ``event_seq`` and the tasks' ``done_seq`` move with them. Returns the
        events as written and the ``run_finished`` event, if any.
        """

    async def events(self, run_id: RunId, after: int = 0) -> list[Event]: ...

    async def patches(self, run_id: RunId, after: int = 0) -> list[PatchRecord]:
        """The run's patches answering events after seq ``after``, by event seq."""

    async def last_seq(self, run_id: RunId) -> int: ...

    async def add_human_input(
        self,
        run_id: RunId,
        task_id: TaskId,
        *,
        decision: Literal["approve", "reject"],
        payload: JSON,
        by: JSON = None,
    ) -> Event:
        """Journal a human's answer to a waiting task; refuse a replay (``ApprovalRefused``).
        ``by``: who answered, as the caller knows it (never a token), kept in the event's
        data; the event's journal time says when.

        An enqueued run that was ``waiting`` becomes ``running`` again: claimable.
        """

    async def request_cancel(self, run_id: RunId, reason: str, by: JSON = None) -> Event:
        """Journal ``cancel_requested`` (with ``by``: who asked, as ``approver`` writes
        it); the executor (now or at resume) finishes the run.

        An enqueued run that was ``waiting`` becomes ``running`` again: claimable.
        """

    async def checkpoint(self) -> None:
        """Make the main database file complete on its own (SQLite); a no-op elsewhere."""

    async def reclaim(self, *, full: bool = False) -> Reclaimed | None:
        """Give the space of deleted rows back to the file system and say how much (SQLite:
        an incremental vacuum, or with ``full`` a ``VACUUM`` that makes an older file
        incremental; then the WAL folded in and truncated). None where the server's own
        vacuum reuses the space (PostgreSQL's autovacuum)."""

    async def wait_for_journal(self, seconds: float) -> None:
        """Return when some run's journal may have changed (any writer, any process), or
        after ``seconds``. SQLite: ``PRAGMA data_version`` polled on a read connection of
        its own, holding no lock; PostgreSQL: ``LISTEN loopkernel_journal``."""


@runtime_checkable
class Effects(Protocol):
    """What tools and models need: the effect journal and the run's evidence."""

    async def get_effect(self, run_id: RunId, key: str) -> EffectRecord | None: ...

    async def intend_effect(self, record: EffectRecord) -> EffectRecord:
        """Insert an ``intended`` effect; if the key exists, return what is there."""

    async def finish_effect(
        self,
        run_id: RunId,
        key: str,
        *,
        status: Literal["done", "failed"],
        result: JSON = None,
        error: JSON = None,
    ) -> None: ...

    async def effects(self, run_id: RunId) -> list[EffectRecord]: ...

    async def add_evidence(
        self, run_id: RunId, item: NewEvidence, *, max_item_chars: int, max_run_chars: int
    ) -> Evidence:
        """Record ``item`` as the run's next ref (``E<n>``), in one transaction; an item
        whose key is already there is returned as stored (a replay adds nothing). Its
        content is cut to ``max_item_chars`` and so that the run's stored evidence stays
        within ``max_run_chars``; the hash and length kept are the full text's."""

    async def evidence(self, run_id: RunId) -> list[Evidence]:
        """The run's evidence in ref order."""


@runtime_checkable
class Leases(Protocol):
    """What the client and workers need: one executor per run (``docs/workers.md``)."""

    async def enqueue(self, run_id: RunId) -> None:
        """Hand the run to the workers: from now on ``claim_run`` may give it out whenever
        it is ``running`` and nobody holds its lease. Idempotent; a finished run is refused.
        """

    async def claim_run(
        self, worker_id: str, lease_seconds: float, only: ClaimFilter | None = None
    ) -> Claim | None:
        """Take the oldest enqueued run that is ``running`` and whose lease is free or has
        expired: set its owner, bump its epoch, hold it for ``lease_seconds``. ``None``
        when there is none. Two workers never get the same run at once. First, enqueued
        ``waiting`` runs whose timer is due (``wake_at``) become ``running``. ``only``:
        the apps and versions the worker can execute, and whether it adopts the runs of a
        dead ``loopkernel run`` (``ClaimFilter``); a run it cannot execute is left for
        another worker, never claimed."""

    async def unclaimable(self, only: ClaimFilter, limit: int = 10) -> list[tuple[RunId, str, str]]:
        """Runs ``claim_run`` would give out but for ``only``'s apps and versions: ``(run,
        app, version)``, oldest first. What a worker says no worker of its kind can run."""

    async def due_runs(self, now: float, limit: int = 100) -> list[RunId]:
        """Waiting runs whose timer (``wake_at``) is due at ``now``, earliest first,
        enqueued or not: what ``loopkernel serve`` and ``resume`` wake (``loopkernel._waker``;
        a worker's ``claim_run`` wakes enqueued ones itself)."""

    async def acquire(
        self,
        run_id: RunId,
        holder: Holder,
        lease_seconds: float,
        *,
        takeover: int | None = None,
    ) -> Claim:
        """Take the lease of one run for a process that is not a worker (``loopkernel
        run``/``resume``, ``Client.execute``): free or run out, it becomes ``holder``'s for
        ``lease_seconds`` under a new epoch (write through ``fenced(run_id, epoch)``, renew
        with ``heartbeat``, give back with ``release``). Held by someone else: ``RunHeld``
        naming the holder and when its lease ends, and nothing is written -- unless the
        epoch is still ``takeover`` (the caller knows that holder is dead)."""

    async def heartbeat(self, run_id: RunId, epoch: int, lease_seconds: float) -> None:
        """Extend the lease to ``lease_seconds`` from now; ``LeaseLost`` if the epoch moved."""

    async def release(self, run_id: RunId, epoch: int) -> bool:
        """Give the lease back (bumping the epoch, so the old one is dead). A released run
        that is waiting but was answered meanwhile becomes ``running``, i.e. claimable.
        False, and nothing changes, if ``epoch`` is no longer the run's: it was taken over.
        """

    def fenced(self, run_id: RunId, epoch: int) -> Store:
        """A view of this store (same connection) whose every write for ``run_id`` first
        checks, inside its transaction, that the run's lease epoch is still ``epoch``, and
        otherwise raises ``LeaseLost`` having written nothing. It writes no other run;
        closing it leaves the connection to this store."""

    async def wait_for_work(self, seconds: float) -> None:
        """Return when a run may have become claimable (enqueued, answered, cancelled,
        released: PostgreSQL's LISTEN/NOTIFY), or after ``seconds`` (polling)."""


@runtime_checkable
class Catalog(Protocol):
    """What the CLI and the web inspector need: runs listed, read whole, forked, exported
    (SQLite's ``export``), deleted."""

    async def list_runs(
        self,
        limit: int = 100,
        *,
        status: RunStatus | None = None,
        app: str | None = None,
        before: tuple[float, str] | None = None,
    ) -> list[RunInfo]:
        """Runs newest first (``created_at``, then ``run_id``, descending), optionally of one
        status and one app. ``before`` is the ``(created_at, run_id)`` of the last run of the
        previous page: keyset pagination on an index, as fast on page 2,000 as on page 1."""

    async def token_hash(self, run_id: RunId) -> str: ...

    async def dump(self, run_id: RunId) -> dict[str, JSON]:
        """Canonical rows of the run (no timestamps, no attempt counters) for the digest."""

    async def fork_run(self, fork: Fork) -> RunInfo:
        """Write ``fork`` as a new run, in one transaction; ``UsageError`` if its id is
        taken, ``RunNotFound`` if the source is gone."""

    async def origin(self, run_id: RunId) -> tuple[RunId, int] | None:
        """``(source run, seq)`` if ``run_id`` was forked, else ``None``."""

    async def delete_run(self, run_id: RunId) -> None:
        """Remove every row of the run (every table of the schema that has a ``run_id``,
        its fork record included) in one transaction. ``RunHeld`` while a live lease holds
        it (nothing is removed), ``RunNotFound`` if there is no such run."""


@runtime_checkable
class Schedules(Protocol):
    """The schedules of a database (``loopkernel schedule``; workers start their runs)."""

    async def add_schedule(self, schedule: Schedule) -> None:
        """``UsageError`` if one has that name already."""

    async def schedules(self) -> list[Schedule]:
        """All, by name."""

    async def remove_schedule(self, name: str) -> None:
        """``UsageError`` if there is none of that name."""

    async def due_schedules(self, now: float) -> list[Schedule]:
        """Those a worker has to look at: not paused with ``next_due`` at or before ``now``,
        or ``busy``."""

    async def write_schedule(
        self, schedule: Schedule, events: Sequence[tuple[str, str | None, str]]
    ) -> bool:
        """Store ``schedule`` if its row still is at ``schedule.rev`` (the first caller
        wins), at revision ``rev + 1``, with ``events`` (kind, run id, detail) in
        ``schedule_events``, in one transaction; ``False`` if another change came first."""

    async def schedule_events(self, name: str) -> list[ScheduleEvent]:
        """The journal of a schedule, oldest first."""


class Store(Journal, Effects, Leases, Catalog, Schedules, Knowledge, Protocol):
    """A durable home for runs, every role at once. Implementations: ``SQLiteStore``,
    ``PostgresStore``, both one engine (``_engine.SQLStore``)."""

    url: str

    async def open(self) -> None:
        """Connect and migrate the schema to the current version."""

    async def close(self) -> None:
        """Checkpoint (SQLite: fold the WAL into the .db file) and disconnect."""
