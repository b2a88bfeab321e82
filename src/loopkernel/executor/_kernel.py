"""The loop: start ready tasks, wake on the first completion, journal it, plan, patch.

::

    start or resume:
        plan every journaled event that has no patch yet (exactly once)
        put tasks a crash left running back to ready
    loop:
        start ready tasks whose predecessors all succeeded (up to max_concurrency)
        wake on the first completion -- not for the slowest sibling
        the completions' events numbered in memory, after the last seq this executor knows
        one patch per event, validated, applied in memory, then one synced transaction:
            the events, the tasks' new states, the patches, the next tasks marked running
        (with a planner that awaits, the events are committed first, before it is asked)
        cancel in flight what a patch cancelled
    until the run is finished, or all that is left waits for a human (status waiting)
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from loopkernel import telemetry
from loopkernel._hooks import crashpoint
from loopkernel._waits import gate_timeouts
from loopkernel.errors import (
    BudgetExceeded,
    LeaseLost,
    LoopKernelError,
    PatchRejected,
    RunError,
    StoreUnavailable,
    TransientFault,
    TripwireFired,
    UsageError,
    family_of,
)
from loopkernel.executor._config import (
    DEFAULT_KEEP_FINISHED,
    ExecutionConfig,
    KernelParts,
    check_keep_finished,
    legacy_kernel_options,
)
from loopkernel.executor._context import (
    NeedsApproval,
    TaskContext,
    TaskServices,
    Worker,
)
from loopkernel.executor._evidence import EvidenceBook
from loopkernel.executor._outcomes import (
    clean,
    clean_patch_json,
    clean_proposal,
    event_data,
    kept_by,
    late_result,
    latest,
    merge_deltas,
    outcome_of,
)
from loopkernel.executor._spill import SpillArchive, evict
from loopkernel.executor._start import started, task_of
from loopkernel.executor._timers import (
    due,
    is_approval_wait,
    next_wake,
    resolve,
    timer_event_data,
    timer_span,
)
from loopkernel.executor._versions import check_resumable
from loopkernel.graph import (
    JSON,
    TERMINAL_TASK,
    UNPLANNED_EVENTS,
    Delta,
    Event,
    EventKind,
    GraphPatch,
    GraphState,
    RunStatus,
    Task,
    TaskState,
    Verdict,
    VerdictKind,
    validate,
)
from loopkernel.graph.door import Entry, admit
from loopkernel.ids import RunId, TaskId, check_id, new_run_id
from loopkernel.planner import Flow, Planner, Proposal
from loopkernel.store import (
    Archive,
    ArchiveSource,
    LoadedRun,
    NewEvent,
    NewRun,
    PatchRecord,
    ProposalNote,
    Store,
    digest_of,
)

if TYPE_CHECKING:
    from loopkernel.telemetry._otel import Span, Tracer

__all__ = [
    "DEFAULT_KEEP_FINISHED",
    "DEFAULT_MAX_EVENTS",
    "Kernel",
    "RunOutcome",
    "StartedRun",
    "check_keep_finished",
    "hash_token",
]

_STOPS_THE_RUN = (StoreUnavailable, LeaseLost, TransientFault)
"""Errors a task may raise that are no verdict on the task: the store did not answer, the
run is another executor's now, a tool fault may pass. The executor stops, writing nothing
of the task, and the run stays resumable (the task runs again when it resumes)."""

DEFAULT_MAX_EVENTS = 100_000
"""The runaway guard's default: far above any run the shipped apps make (tens of events)."""

_EVICT_LOOKS = 64
"""At most this many finished tasks are looked at for eviction per step, so that a step's
cost stays bounded when old tasks cannot go yet (their successors have not finished)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StartedRun:
    run_id: RunId
    """The new run."""
    token: str
    """The approval token: whoever holds it may approve or reject the run's waiting tasks."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOutcome:
    run_id: RunId
    status: RunStatus
    """``waiting`` when the executor stopped because only a human can move the run on."""
    verdict: JSON
    """Why the run stopped."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOKEN_REQUIRED = "token-required:"
"""Prefix of a run's stored token hash when its approvals need the token even from a
caller with database access (``Kernel.start(require_token=True)``)."""


class Kernel:
    """Runs one application's runs: its planner, its worker registry, one store."""

    def __init__(
        self,
        store: Store,
        planner: Planner,
        workers: Mapping[str, Callable[[TaskContext], Any]],
        *,
        config: ExecutionConfig | None = None,
        parts: KernelParts | None = None,
        **legacy: Any,
    ) -> None:
        """``config``: the execution's knobs (``ExecutionConfig``: concurrency, poll,
        cancel grace, ``keep_finished``); ``parts``: what the kernel works with beside its
        planner and workers (``KernelParts``: tool and model layers, observer, guard,
        clock, approval timeout, versions). The keyword arguments of before both
        (``max_concurrency=``, ``tools=`` ...) still work, with a ``DeprecationWarning``.

        ``keep_finished``: keep at most about this many succeeded tasks in memory and
        read older ones back from the store when a planner or a worker asks for them, so
        that a long run's memory stays flat (docs/performance.md, "Memory"). ``None``
        (the default): ``DEFAULT_KEEP_FINISHED`` (1,000). A store that reads tasks back
        synchronously (SQLite) is read; on one that cannot (PostgreSQL) the executor
        keeps what it evicts in a temporary file of its own (``SpillArchive``).
        ``workers``: ``async def`` callables, or plain ``def`` ones, which run in a thread
        (``as_async_worker`` states how they are cancelled)."""
        config, parts = legacy_kernel_options(config, parts, legacy)
        self.config = config
        self.parts = parts
        self.store = store
        self.planner = planner
        self.workers = {skill: as_async_worker(skill, w) for skill, w in workers.items()}
        if isinstance(planner, Flow):
            planner.check_workers(self.workers)
        self.tools = parts.tools
        self.models = parts.models
        self.max_concurrency = config.concurrency
        self.poll_interval = config.poll_s
        self.cancel_grace = config.cancel_grace_s
        self.observer = parts.observer
        self.guard = parts.guard
        self.keep_finished = config.kept
        self.clock = parts.clock
        """Wall time in seconds since the epoch, for timers (tests pass a fake one)."""
        self.approval_timeout = parts.approval_timeout
        self.app_version = parts.app_version
        """Recorded on the runs it starts and on every patch it journals."""
        self.compatible_with = parts.compatible_with
        """Versions whose runs this one resumes (``None``: any; executor/_versions.py)."""

    async def start(
        self,
        *,
        app: str,
        params: JSON = None,
        run_id: str | None = None,
        max_events: int = DEFAULT_MAX_EVENTS,
        require_token: bool = False,
    ) -> StartedRun:
        """Create a run and journal ``run_started``; ``run()`` executes it.

        ``require_token``: approvals of this run need its token even from a caller with
        write access to the store (see ``Client.decide``)."""
        if max_events < 2:
            raise UsageError(f"max_events must be at least 2, not {max_events}")
        admit(params, Entry.PARAMS)  # before anything is journaled: loopkernel.graph.door
        params = clean(params)  # secrets nowhere: a worker sees what the journal keeps
        rid = new_run_id() if run_id is None else RunId(check_id(run_id))
        token = "lk_" + secrets.token_urlsafe(24)  # never "-...": it follows --token
        tracer, trace = telemetry.tracer(), None
        if tracer:  # the run's span: every execution of the run joins its trace
            span = tracer.start(f"run {app}", {"loopkernel.run_id": rid, "loopkernel.app": app})
            trace = tracer.traceparent(span)
            tracer.end(span)
        await self.store.create_run(
            NewRun(
                run_id=rid,
                app=app,
                params=params,
                max_events=max_events,
                token_hash=(TOKEN_REQUIRED if require_token else "") + hash_token(token),
                trace=trace,
                app_version=self.app_version,
            )
        )
        return StartedRun(run_id=rid, token=token)

    async def run(self, run_id: str, *, loaded: LoadedRun | None = None) -> RunOutcome:
        """Execute (or resume) a run until it ends or waits; ``loaded``: read under its lease."""
        return await _RunLoop(self, RunId(run_id)).execute(loaded)

    async def digest(self, run_id: str) -> str:
        return digest_of(await self.store.dump(RunId(run_id)))


class _RunLoop:
    """One execution of one run; owns every asyncio task it starts."""

    def __init__(self, kernel: Kernel, run_id: RunId) -> None:
        self.k = kernel
        self.store = kernel.store
        self.run_id = run_id
        self.state: GraphState
        self.max_events = 0
        self.known_seq = 0
        self.ready: dict[TaskId, None] = {}
        self.running: dict[asyncio.Task[JSON], TaskId] = {}
        self.cancelled: dict[asyncio.Task[JSON], TaskId] = {}
        self.landed: list[asyncio.Task[JSON]] = []
        """Tasks that ended since the loop last looked (each one's done callback)."""
        self.wakeup: asyncio.Future[None] | None = None
        """Set by the first task to end while the loop waits (``_completions``)."""
        self.unyielded = False
        """A task landed without the loop having run since (``_launch``, ``EAGER``)."""
        self.tick: asyncio.TimerHandle | None = None
        """The poll timer: a wait ends at the latest when it fires (``_completions``)."""
        self.last_poll = 0.0
        self.book = EvidenceBook(kernel.store, run_id)
        self.services = TaskServices(tools=kernel.tools, models=kernel.models, book=self.book)
        self.tracer = telemetry.tracer()
        self.span: Span | None = None
        self.one_step = not inspect.iscoroutinefunction(kernel.planner.plan)
        """Commit each step's completions with their patches, in one synced transaction.
        Not with a planner that awaits (a model call): its completions are written first,
        so that what it answered is never planned from an event the journal lost."""
        self.journal: list[Event] = []
        """Completions numbered after ``known_seq`` but not yet written: they commit with
        the patches that answer them (``Store.commit_step``)."""
        self.journal_tasks: list[Task] = []
        self.carry: list[Event] = []
        """Events another process appended while a step was being planned, still to plan."""
        self.finished: deque[TaskId] = deque()
        """Succeeded tasks still in memory, oldest first, when finished tasks are evicted."""
        self.archive: Archive | None = None
        """Where evicted tasks are read back from (``ExecutionConfig(keep_finished=...)``): the
        store, or a ``SpillArchive`` of this execution's own where the store cannot."""

    # -- the loop --------------------------------------------------------------------------

    async def execute(self, loaded: LoadedRun | None = None) -> RunOutcome:
        try:
            outcome = await self._execute(loaded)
        except BaseException as exc:
            if self.tracer and self.span:
                self.tracer.end(self.span, error=exc)
            raise
        finally:
            if self.tick is not None:
                self.tick.cancel()
            if isinstance(self.archive, SpillArchive):
                self.archive.close()
        if self.tracer and self.span:
            self.tracer.end(self.span, {"loopkernel.status": outcome.status.value})
        return outcome

    async def _execute(self, loaded: LoadedRun | None) -> RunOutcome:
        loaded = loaded or await self.store.load_run(self.run_id)
        if self.tracer:
            # A trace of its own, as long as this execution, linked to the run's span: a
            # run that lasts days is not one root span that ended when the run was created.
            self.span = self.tracer.start(
                f"execute {self.run_id}",
                {"loopkernel.run_id": self.run_id, "loopkernel.resumed": loaded.info.last_seq > 1},
                links=(loaded.info.trace,),
            )
        self.state = loaded.state
        store = self.store
        self.archive = store.archive(self.run_id) if isinstance(store, ArchiveSource) else None
        succeeded = self.state.in_state(TaskState.SUCCEEDED)
        succeeded.sort(key=lambda t: t.done_seq or 0)
        self.finished.extend(t.task_id for t in succeeded)
        self.max_events = loaded.info.max_events
        self.known_seq = loaded.info.last_seq
        if self.state.finished:
            return self._outcome()
        check_resumable(
            run_id=self.run_id,
            run_version=loaded.info.app_version,
            app_version=self.k.app_version,
            compatible_with=self.k.compatible_with,
            tasks=self.state.resident(),
            skills=self.k.workers.keys(),
        )
        if loaded.info.status is not RunStatus.RUNNING:
            await self.store.set_status(self.run_id, RunStatus.RUNNING)
        try:
            crashed = [t.task_id for t in self.state.in_state(TaskState.RUNNING)]
            self.ready = {t.task_id: None for t in self.state.in_state(TaskState.READY)}
            await self.book.load()
            await self.book.from_params(self.state.params)
            await self._plan(list(loaded.unplanned))  # with the crashed tasks still running
            await self._recover_running(crashed)
            # A resumed run loaded every task: shed them now, not 64 a step.
            self._evict(self.k.keep_finished, looks=len(self.finished))
            while not self.state.finished:
                if self.ready:  # a chain's next task was started with its step's commit
                    await self._start_ready()
                if not self.running and not self.cancelled:
                    if await self._plan(await self._external_events(force=True)):
                        continue
                    if self.state.finished:
                        break
                    if self.state.in_state(TaskState.WAITING):
                        wake = next_wake(self.state.in_state(TaskState.WAITING))
                        await self.store.set_status(self.run_id, RunStatus.WAITING, wake_at=wake)
                        self.state.status = RunStatus.WAITING
                        return self._outcome()
                    await self._stall()
                    break
                done = await self._completions()
                # Another process's events first: ours are numbered after them.
                events = (
                    await self._external_events(force=not done)
                    if not done or self.carry or self._poll_due()
                    else []
                )
                events.extend(await self._journal(done))
                await self._plan(sorted(events, key=lambda e: e.seq))
        except BaseException as exc:
            await self._abandon(exc)
            raise
        await self._drain_cancelled()
        return self._outcome()

    async def _completions(self) -> set[asyncio.Task[JSON]]:
        """The tasks that ended since the last look, after waiting up to ``poll_interval``
        for the first if none has: ``asyncio.wait(FIRST_COMPLETED)``, without hooking and
        unhooking every task in flight at every step (each has one done callback,
        ``_landed``, for its whole life)."""
        if self.landed:
            if self.unyielded:
                # Tasks that ended as they started (EAGER): the loop is let run once all
                # the same, so that a long chain of them never holds up the process's
                # other work (heartbeats, other runs), as commits that need no wait would.
                self.unyielded = False
                await asyncio.sleep(0)
        else:
            loop = asyncio.get_running_loop()
            self.wakeup = wakeup = loop.create_future()
            if self.tick is None:
                # One timer for many waits, not one made and cancelled per step: it ends
                # the wait it finds (so none lasts longer than poll_interval), and the
                # next wait after it fired arms a new one.
                self.tick = loop.call_later(self.k.poll_interval, self._ticked)
            try:
                await wakeup
            finally:
                self.wakeup = None
        landed, self.landed = self.landed, []
        return {f for f in landed if f in self.running or f in self.cancelled}

    def _ticked(self) -> None:
        self.tick = None
        if self.wakeup is not None:
            _release(self.wakeup)

    def _landed(self, fut: asyncio.Task[JSON]) -> None:
        self.landed.append(fut)
        if self.wakeup is not None:
            _release(self.wakeup)

    def _outcome(self) -> RunOutcome:
        return RunOutcome(run_id=self.run_id, status=self.state.status, verdict=self.state.verdict)

    async def _recover_running(self, crashed: Sequence[TaskId]) -> None:
        """Tasks a crash left ``running`` (and no patch cancelled) go back to ``ready``."""
        back = [
            replace(self.state.tasks[tid], state=TaskState.READY)
            for tid in crashed
            if self.state.tasks[tid].state is TaskState.RUNNING
        ]
        if back:
            await self.store.append_events(self.run_id, [], back)
            for task in back:
                self.state.tasks[task.task_id] = task
                self.ready[task.task_id] = None

    def _pick(self) -> list[Task]:
        """Mark as many startable ready tasks running (in memory) as concurrency allows."""
        free = self.k.max_concurrency - len(self.running)
        if free <= 0 or not self.ready:
            return []
        picked: list[Task] = []
        for tid in list(self.ready):
            if len(picked) >= free:
                break
            task = self.state.tasks[tid]
            if task.state is not TaskState.READY:
                del self.ready[tid]
                continue
            if not self.state.startable(tid):
                continue
            del self.ready[tid]
            task = task.evolve(state=TaskState.RUNNING, attempts=task.attempts + 1)
            self.state.tasks[tid] = task
            picked.append(task)
        return picked

    def _launch(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            return
        loop = asyncio.get_running_loop()
        for task in tasks:
            ctx = TaskContext(
                state=self.state,
                task_id=task.task_id,
                attempt=task.attempts,
                upto_seq=self.known_seq,
                services=self.services,
            )
            worker = self.k.workers[task.skill]
            if self.tracer:
                attributes = {
                    "loopkernel.run_id": self.run_id,
                    "loopkernel.task_id": task.task_id,
                    "loopkernel.skill": task.skill,
                    "loopkernel.attempt": task.attempts,
                }
                span = self.tracer.start(f"task {task.task_id}", attributes, parent=self.span)
                fut = task_of(loop, _traced(self.tracer, span, worker, ctx))
            else:
                fut = task_of(loop, started(worker, ctx))
            self.running[fut] = task.task_id
            if fut.done():  # it ran to its end as it started (EAGER): no callback to wait for
                self._landed(fut)
                self.unyielded = True
            else:
                fut.add_done_callback(self._landed)

    async def _start_ready(self) -> None:
        """Start what is startable, with its own (unsynced) write of the running states."""
        picked = self._pick()
        if picked:
            await self.store.append_events(self.run_id, [], picked)
            self._launch(picked)

    def _poll_due(self) -> bool:
        """Whether ``poll_interval`` has passed since the store was last looked at."""
        return time.monotonic() - self.last_poll >= self.k.poll_interval

    async def _external_events(self, *, force: bool = False) -> list[Event]:
        """Events another process journaled (approvals, cancel requests) since we last looked.

        Looked for at most every ``poll_interval`` while work completes, always when idle.
        """
        carried, self.carry = self.carry, []
        now = time.monotonic()
        if not force and now - self.last_poll < self.k.poll_interval:
            return carried
        self.last_poll = now
        if await self.store.last_seq(self.run_id) <= self.known_seq:
            return carried + await self._fire_timers()
        events = await self.store.events(self.run_id, after=self.known_seq)
        self.known_seq = max(self.known_seq, events[-1].seq) if events else self.known_seq
        return carried + events + await self._fire_timers()

    async def _fire_timers(self) -> list[Event]:
        """Journal ``timer_fired`` for each waiting task whose timer has come, with the
        task's ``wake_at`` cleared in the same write: fired once (executor/_timers.py)."""
        ready = due(self.state.in_state(TaskState.WAITING), self.k.clock())
        if not ready:
            return []
        history = await self.store.events(self.run_id) if self.k.approval_timeout else []
        patches = await self.store.patches(self.run_id)
        gates = gate_timeouts(r.ops for r in patches if r.outcome == "applied")
        fired = [
            NewEvent(
                kind=EventKind.TIMER_FIRED,
                task_id=t.task_id,
                data=timer_event_data(
                    t, is_approval_wait(history, t), gates.get((t.task_id, t.wake_at or 0.0))
                ),
            )
            for t in ready
        ]
        cleared = [t.evolve(wake_at=None) for t in ready]
        events = await self.store.append_events(self.run_id, fired, cleared)
        crashpoint("timer_fired")
        if self.tracer:
            for ev, task in zip(events, ready, strict=True):
                attributes = timer_span(ev, task, self.k.clock())
                self.tracer.event(f"timer {task.task_id}", attributes, parent=self.span)
        for task in cleared:
            self.state.tasks[task.task_id] = task
        return await self._with_gaps(events)

    async def _journal(self, done: Iterable[asyncio.Task[JSON]]) -> list[Event]:
        """One transaction for every completion that landed together."""
        for fut in done:
            if fut in self.running and not fut.cancelled():
                _stop_if_not_a_verdict(fut.exception(), self.run_id, self.running[fut])
        new_events: list[NewEvent] = []
        changed: dict[TaskId, Task] = {}
        for fut in sorted(done, key=lambda f: (self.running.get(f) or self.cancelled.get(f)) or ""):
            if fut in self.cancelled:
                tid = self.cancelled.pop(fut)
                late = late_result(fut)
                if late is not None:
                    new_events.append(
                        NewEvent(kind=EventKind.LATE_RESULT_DISCARDED, task_id=tid, data=late)
                    )
                continue
            tid = self.running.pop(fut)
            task = self.state.tasks[tid]
            crashpoint("task_returned")
            # One step numbers its events itself: the task learns its done_seq here.
            seq = self.known_seq + len(new_events) + 1 if self.one_step else None
            worker = self.k.workers.get(task.skill)
            kind, task = outcome_of(fut, task, seq, keep=kept_by(worker))
            if kind is EventKind.APPROVAL_REQUIRED and self.k.approval_timeout is not None:
                task = task.evolve(wake_at=self.k.clock() + self.k.approval_timeout.seconds)
            changed[tid] = task
            new_events.append(NewEvent(kind=kind, task_id=tid, data=event_data(kind, task, fut)))
        if not new_events:
            return []
        succeeded = [t.task_id for t in changed.values() if t.state is TaskState.SUCCEEDED]
        candidates = {s for tid in succeeded for s in self.state.successors(tid)}
        for task in self.state.promotions(sorted(candidates), changed):
            changed[task.task_id] = task
        if self.one_step:
            events = [
                Event(
                    run_id=self.run_id,
                    seq=self.known_seq + i,
                    kind=ev.kind,
                    task_id=ev.task_id,
                    data=ev.data,
                )
                for i, ev in enumerate(new_events, 1)
            ]
        else:
            events = await self.store.append_events(self.run_id, new_events, list(changed.values()))
        seq_of = {e.task_id: e.seq for e in events}
        for task in changed.values():
            if task.state in TERMINAL_TASK and task.done_seq is None:
                task = task.evolve(done_seq=seq_of.get(task.task_id))
            self.state.tasks[task.task_id] = task
            if task.state is TaskState.READY:
                self.ready[task.task_id] = None
            elif task.state is TaskState.SUCCEEDED:
                self.finished.append(task.task_id)
            if self.one_step:
                self.journal_tasks.append(task)
        crashpoint("event_committed")
        if self.one_step:
            self.journal.extend(events)
            self.known_seq = events[-1].seq
            return events
        return await self._with_gaps(events)

    async def _moved(self, written: Sequence[Event]) -> None:
        """Another process appended while our step was planned: the store wrote our events
        after its; follow their seqs, and plan its events next."""
        moved = {p.seq: w.seq for p, w in zip(self.journal, written, strict=True)}
        for task in list(self.state.resident()):  # an evicted task's seq is older
            if task.done_seq in moved:
                self.state.tasks[task.task_id] = task.evolve(done_seq=moved[task.done_seq])
        base = self.journal[0].seq - 1
        self.carry.extend(
            e for e in await self.store.events(self.run_id, after=base) if e.seq < written[0].seq
        )
        self.known_seq = max(self.known_seq, written[-1].seq)

    async def _with_gaps(self, ours: list[Event]) -> list[Event]:
        """Our events, plus any another process slipped in between (seen by a seq gap)."""
        if not ours:
            return ours
        if ours[0].seq == self.known_seq + 1:
            self.known_seq = ours[-1].seq
            return ours
        mine = {e.seq for e in ours}
        theirs = [
            e
            for e in await self.store.events(self.run_id, after=self.known_seq)
            if e.seq not in mine and e.seq < ours[-1].seq
        ]
        self.known_seq = max(self.known_seq, ours[-1].seq)
        return sorted([*theirs, *ours], key=lambda e: e.seq)

    # -- planning --------------------------------------------------------------------------

    async def _plan(self, events: Sequence[Event]) -> bool:
        """Answer each event with one patch; commit them together. True if any was planned."""
        events = [e for e in events if e.kind not in UNPLANNED_EVENTS]
        if not events and not self.journal:
            return False
        records: list[PatchRecord] = []
        deltas: list[Delta] = []
        for event in events:
            self.known_seq = max(self.known_seq, event.seq)
            if self.state.finished:
                records.append(
                    PatchRecord(
                        event_seq=event.seq,
                        ops=[],
                        planner="kernel",
                        reason="the run had already finished",
                    )
                )
                continue
            if event.kind is EventKind.HUMAN_INPUT:
                await self.book.from_event(event)
            record, delta = await (
                self._plan_traced(event) if self.tracer else self._plan_one(event)
            )
            self.state.apply(delta)
            for task in delta.tasks:
                if task.state is TaskState.READY:
                    self.ready[task.task_id] = None
            records.append(record)
            deltas.append(delta)
            if self.k.observer is not None:
                self.k.observer(event, self.state, record)
        merged = merge_deltas(deltas)
        if self.k.app_version is not None:
            records = [replace(r, app_version=self.k.app_version) for r in records]
        # The completions' tasks, and those the patches made startable marked running, are
        # written in the same transaction.
        picked = [] if self.state.finished else self._pick()
        if picked or self.journal_tasks:
            merged = merged.with_tasks(latest([*self.journal_tasks, *merged.tasks, *picked]))
        crashpoint("before_patch")
        final = None
        if merged.finish is not None:
            status, verdict = merged.finish
            final = NewEvent(
                kind=EventKind.RUN_FINISHED, data={"status": status.value, "verdict": verdict}
            )
        if self.journal:
            written, finished = await self.store.commit_step(
                self.run_id, self.journal, records, merged, final
            )
            if written[0].seq != self.journal[0].seq:
                await self._moved(written)
            self.journal, self.journal_tasks = [], []
        else:
            finished = await self.store.commit_patches(self.run_id, records, merged, final)
        if finished is not None:
            self.known_seq = max(self.known_seq, finished.seq)
            if self.k.observer is not None:
                self.k.observer(finished, self.state, None)
        crashpoint("patch_committed")
        self._launch(picked)
        for fut, tid in list(self.running.items()):
            if tid in merged.cancelled_running:
                del self.running[fut]
                self.cancelled[fut] = tid
                fut.cancel()
        self._evict(self.k.keep_finished)
        return bool(events)

    def _evict(self, keep: int, *, looks: int = _EVICT_LOOKS) -> None:
        """Drop from memory the oldest succeeded tasks past ``keep`` whose successors have
        all finished too; everything they were is committed by now (``GraphState.evict``).
        One whose successors have not finished goes to the back of the line. At most
        ``looks`` tasks are looked at. Where the store cannot read them back, they go to
        this execution's ``SpillArchive`` first (made at the first eviction)."""
        if len(self.finished) <= keep:
            return
        tasks = self.state.tasks
        succs = self.state.succs
        out: list[TaskId] = []
        for _ in range(min(len(self.finished) - keep, looks)):
            tid = self.finished.popleft()
            task = dict.get(tasks, tid)
            if task is None or task.state is not TaskState.SUCCEEDED:
                continue
            # A successor that is not in memory was evicted, so it has finished.
            if all(
                (s := dict.get(tasks, after)) is None or s.state in TERMINAL_TASK
                for after in succs.get(tid, ())
            ):
                out.append(tid)
            else:
                self.finished.append(tid)
        if not out:
            return
        if self.archive is None:
            self.archive = SpillArchive()
        if isinstance(self.archive, SpillArchive):
            self.archive.keep((tasks[t] for t in out), self.state.preds, self.state.succs)
        evict(self.state, out, self.archive)

    async def _plan_traced(self, event: Event) -> tuple[PatchRecord, Delta]:
        """``_plan_one`` in a span of its own when tracing is on."""
        if not self.tracer:
            return await self._plan_one(event)
        attributes = {
            "loopkernel.run_id": self.run_id,
            "loopkernel.event.seq": event.seq,
            "loopkernel.event.kind": event.kind.value,
        }
        span = self.tracer.start(f"plan {event.kind.value}", attributes, parent=self.span)
        with self.tracer.current(span):
            record, delta = await self._plan_one(event)
        ops = ",".join(str(op.get("op")) for op in record.ops or [] if isinstance(op, dict))
        self.tracer.end(
            span,
            {
                "loopkernel.patch.ops": ops or "(wait)",
                "loopkernel.patch.outcome": record.outcome,
                "loopkernel.planner": record.planner,
            },
        )
        return record, delta

    async def _plan_one(self, event: Event) -> tuple[PatchRecord, Delta]:
        if event.seq > self.max_events:
            verdict = Verdict(
                kind=VerdictKind.RUNAWAY,
                message=f"run passed max_events={self.max_events} (event seq {event.seq}); "
                "raise it with --max-events if the run is legitimately this long",
                details={"max_events": self.max_events, "observed": event.seq},
            )
            return self._kernel_finish(event, "failed", verdict, "runaway guard")
        if event.kind is EventKind.CANCEL_REQUESTED:
            reason = (event.data or {}).get("reason")
            verdict = Verdict(kind=VerdictKind.CANCELLED, details={"reason": reason})
            return self._kernel_finish(event, "cancelled", verdict, "cancel requested")
        if event.kind is EventKind.TRIPWIRE:
            # the error's own verdict (``LoopKernelError.verdict``), naming its task
            fired = {**event.data["error"], "task_id": event.task_id}
            return self._kernel_finish(event, "escalated", fired, "tripwire")
        asked = event
        if event.kind is EventKind.TIMER_FIRED:
            answered = self._timer_fired(event)
            if not isinstance(answered, Event):
                return answered
            asked = answered  # an approval's timeout, rejected: the planner decides
        try:
            proposed = self.k.planner.plan(self.state, asked)
            if type(proposed) is not GraphPatch and inspect.isawaitable(proposed):
                proposed = await proposed
            patch = proposed
            if not isinstance(patch, GraphPatch | Proposal):
                raise TypeError(f"plan() returned {type(patch).__name__}, not GraphPatch")
            patch = resolve(patch, self.k.clock())
        except _STOPS_THE_RUN:
            raise  # the store did not answer a read (an evicted task's): no verdict on the plan
        except Exception as exc:
            verdict = Verdict(
                kind=VerdictKind.PLANNER_ERROR, message=str(exc), details={"type": family_of(exc)}
            )
            return self._kernel_finish(event, "failed", verdict, "the planner raised")
        if isinstance(patch, Proposal):
            return self._judge(event, clean_proposal(patch))
        return self._settle(event, *clean_patch_json(patch))

    def _timer_fired(self, event: Event) -> tuple[PatchRecord, Delta] | Event:
        """The kernel's answer to ``timer_fired`` (executor/_timers.py), or the event to ask
        the planner instead: a rejection, when an approval timed out and policy rejects."""
        data = event.data if isinstance(event.data, dict) else {}
        task = self.state.get(event.task_id or "")
        if (
            task is None
            or task.state is not TaskState.WAITING
            or task.wait_epoch != data.get("wait_epoch")
        ):
            return self._kernel_patch(event, GraphPatch(), "the wait was already answered")
        if data.get("timer") != "approval_timeout":
            return self._kernel_patch(event, GraphPatch().resume(task.task_id), "timer fired")
        timeout = self.k.approval_timeout
        gate = data.get("on_timeout")  # a wait op's own deadline (a Flow's gate)
        if (gate or (timeout.action if timeout else "reject")) == "escalate":
            after: dict[str, JSON] = (
                {"after_seconds": timeout.seconds}
                if gate is None and timeout
                else {"deadline": data.get("due")}
            )
            verdict = Verdict(
                kind=VerdictKind.APPROVAL_TIMEOUT,
                details={"task_id": task.task_id, "reason": task.wait_reason, **after},
            )
            return self._kernel_finish(event, "escalated", verdict, "approval timed out")
        return replace(
            event,
            kind=EventKind.HUMAN_INPUT,
            data={
                "decision": "reject",
                "payload": {"by": "timeout"},
                "wait_epoch": task.wait_epoch,
            },
        )

    def _kernel_patch(
        self, event: Event, patch: GraphPatch, reason: str
    ) -> tuple[PatchRecord, Delta]:
        delta = validate(self.state, patch, self.k.workers.keys())
        return PatchRecord(
            event_seq=event.seq, ops=patch.to_json(), planner="kernel", reason=reason
        ), delta

    def _judge(self, event: Event, proposal: Proposal) -> tuple[PatchRecord, Delta]:
        """A proposal: applied if the guard and ``validate`` pass it, else its fallback."""
        reason, detail = proposal.reason, proposal.detail
        if proposal.patch is not None and reason is None:
            try:
                if self.k.guard is not None:
                    self.k.guard.check_patch(self.state, event, proposal.patch)
                delta = validate(self.state, proposal.patch, self.k.workers.keys())
            except (TripwireFired, BudgetExceeded) as exc:
                reason, detail = "policy", exc.message
            except PatchRejected as exc:
                reason, detail = str(exc.attrs.get("rule") or "rejected"), exc.message
            else:
                note = proposal_note(proposal, accepted=True)
                record = PatchRecord(
                    event_seq=event.seq,
                    ops=proposal.patch.to_json(),
                    planner=proposal.source,
                    proposal=note,
                )
                return record, delta
        record, delta = self._settle(event, proposal.fallback)
        note = proposal_note(proposal, accepted=False, reason=reason, detail=detail)
        planner = "fallback" if record.planner == "planner" else record.planner
        return replace(record, planner=planner, proposal=note), delta

    def _settle(
        self, event: Event, patch: GraphPatch, ops: list[dict[str, JSON]] | None = None
    ) -> tuple[PatchRecord, Delta]:
        """A planner's patch: the guard, then ``validate``; a refusal ends the run.
        ``ops``: the patch's journal form, where the caller has it already."""
        if ops is None:
            ops = patch.to_json()
        if self.k.guard is not None:
            try:
                self.k.guard.check_patch(self.state, event, patch)
            except (TripwireFired, BudgetExceeded) as exc:
                _, delta = self._kernel_finish(event, "escalated", exc.verdict(), exc.message)
                return PatchRecord(
                    event_seq=event.seq,
                    ops=ops,
                    outcome="rejected",
                    planner="policy",
                    reason=exc.message,
                ), delta
        try:
            delta = validate(self.state, patch, self.k.workers.keys())
        except PatchRejected as exc:
            verdict = Verdict(
                kind=VerdictKind.PATCH_REJECTED,
                message=exc.message,
                details={"rule": exc.attrs.get("rule"), "event_seq": event.seq},
            )
            _, delta = self._kernel_finish(event, "failed", verdict, exc.message)
            return PatchRecord(
                event_seq=event.seq, ops=ops, outcome="rejected", reason=exc.message
            ), delta
        return PatchRecord(event_seq=event.seq, ops=ops), delta

    def _kernel_finish(
        self, event: Event, status: str, verdict: Verdict | JSON, reason: str
    ) -> tuple[PatchRecord, Delta]:
        kept = verdict.to_json() if isinstance(verdict, Verdict) else verdict
        patch = GraphPatch().finish(status, clean(kept))  # type: ignore[arg-type]
        delta = validate(self.state, patch, self.k.workers.keys())
        return PatchRecord(
            event_seq=event.seq, ops=patch.to_json(), planner="kernel", reason=reason
        ), delta

    async def _stall(self) -> None:
        """Nothing runs, nothing waits for a human, and the planner did not finish the run."""
        stuck = sorted(t.task_id for t in self.state.resident() if t.state not in TERMINAL_TASK)
        verdict = Verdict(
            kind=VerdictKind.STALLED,
            message="no task can run and the planner did not finish the run",
            details={"stuck_tasks": list(stuck[:20])},
        ).to_json()
        patch = GraphPatch().finish("failed", verdict)
        delta = validate(self.state, patch, self.k.workers.keys())
        self.state.apply(delta)
        final = NewEvent(kind=EventKind.RUN_FINISHED, data={"status": "failed", "verdict": verdict})
        await self.store.commit_patches(self.run_id, [], delta, final)

    # -- endings ---------------------------------------------------------------------------

    async def _drain_cancelled(self) -> None:
        """Let tasks cancelled in flight end; journal any late result as discarded."""
        if not self.cancelled:
            return
        done, _ = await asyncio.wait(list(self.cancelled), timeout=self.k.cancel_grace)
        events = [
            NewEvent(kind=EventKind.LATE_RESULT_DISCARDED, task_id=self.cancelled[f], data=late)
            for f in sorted(done, key=lambda f: self.cancelled[f])
            if (late := late_result(f)) is not None
        ]
        if events:
            journaled = await self.store.append_events(self.run_id, events)
            await self.store.commit_patches(
                self.run_id,
                [
                    PatchRecord(
                        event_seq=e.seq,
                        ops=[],
                        planner="kernel",
                        reason="the run had already finished",
                    )
                    for e in journaled
                ],
                Delta(),
            )

    async def _abandon(self, exc: BaseException) -> None:
        """The loop itself stopped on an error; tasks in flight are cancelled.

        A ``LoopKernelError`` (the store did not answer, the lease was lost, a fault the
        tool layer could not get past) and an interruption (Ctrl-C, cancellation) leave the
        run as it was journaled -- ``running``, resumable -- and write nothing more: the
        store may be down, or the run may belong to another executor now. Anything else is
        a bug in code the executor runs (its own, an observer's): resuming would hit it
        again, so the run is finished ``failed`` with an ``executor_error`` verdict that
        names it, if the store still takes the write.
        """
        for fut in [*self.running, *self.cancelled]:
            fut.cancel()
        if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError | LoopKernelError):
            return
        if not isinstance(exc, Exception):  # SystemExit, GeneratorExit: not a verdict
            return
        bug = Verdict(
            kind=VerdictKind.EXECUTOR_ERROR, message=str(exc), details={"type": family_of(exc)}
        )
        verdict = clean(bug.to_json())
        try:
            # What the store holds, not our memory: the bug may have struck between a
            # patch applied here and its commit.
            journaled = (await self.store.load_run(self.run_id)).state
            if journaled.finished:
                return
            patch = GraphPatch().finish("failed", verdict)
            delta = validate(journaled, patch, self.k.workers.keys())
            final = NewEvent(
                kind=EventKind.RUN_FINISHED, data={"status": "failed", "verdict": verdict}
            )
            await self.store.commit_patches(self.run_id, [], delta, final)
        except Exception:
            pass  # the store failed too: the run stays resumable, the error is raised


def _stop_if_not_a_verdict(exc: BaseException | None, run_id: RunId, task_id: TaskId) -> None:
    """Raise what stops the executor instead of failing the task (``_STOPS_THE_RUN``); a
    run error whose retries were spent (``LoopKernelError.gave_up``: the tool layer or the
    model journal gave up on a fault that may pass) is ``TransientFault``."""
    if isinstance(exc, _STOPS_THE_RUN):
        raise exc
    if isinstance(exc, RunError) and exc.gave_up:
        sent = exc.attrs.get("sent")
        why = (
            "an irreversible tool is not re-sent"
            if exc.attrs.get("effect") == "irreversible"
            else f"sent {sent} time(s) by its retry policy"
        )
        raise TransientFault(
            f"task {task_id!r} stopped on a fault that may pass: {exc.message} "
            f"({exc.family}; {why}). The run was left running; resuming it re-sends "
            "the call under the same idempotency key",
            run_id=run_id,
            task_id=task_id,
            cause=exc.family,
            **{k: v for k, v in exc.attrs.items() if k in ("tool", "kind", "sent", "effect")},
        ) from exc


def proposal_note(
    p: Proposal, *, accepted: bool, reason: str | None = None, detail: str | None = None
) -> ProposalNote:
    """The journal's record of a proposal, beside the patch that was applied."""
    return ProposalNote(
        accepted=accepted,
        reason=reason,
        detail=None if detail is None else detail[:500],
        ops=p.ops if p.ops is not None or p.patch is None else p.patch.to_json(),
        raw_sha256=p.raw_sha256,
        model=p.model,
        input_tokens=p.input_tokens,
        output_tokens=p.output_tokens,
        cost_usd=p.cost_usd,
        latency_ms=p.latency_ms,
    )


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _is_async(worker: object) -> bool:
    """An ``async def`` function, a partial of one, or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(worker):
        return True
    return inspect.iscoroutinefunction(type(worker).__call__)


def as_async_worker(skill: str, worker: object) -> Worker:
    """The worker as the executor awaits it. An async callable is kept as it is; a plain
    ``def`` is run in a thread of the event loop's default executor (``asyncio.to_thread``),
    so it never blocks the loop. A plain callable that returns an awaitable (a lambda that
    calls an ``async def``) has it awaited on the loop. Anything that is not callable is a
    ``UsageError`` here, at ``Kernel(...)``, not a failed run later.

    Cancellation of a sync worker (a patch cancelled its task, the run was cancelled): its
    task is cancelled on the loop at once and whatever the thread returns later is
    discarded, never journaled; the thread itself cannot be interrupted and runs to its
    end (``asyncio.run`` waits for it when the loop closes).
    """
    if not callable(worker):
        raise UsageError(
            f"worker for skill {skill!r} is a {type(worker).__name__}, not a callable "
            "that takes the task's context"
        )
    if _is_async(worker):
        return worker
    sync: Callable[[TaskContext], object] = worker

    async def threaded(ctx: TaskContext) -> JSON:
        result = await asyncio.to_thread(sync, ctx)
        if inspect.isawaitable(result):
            return await result
        return result

    threaded.__name__ = getattr(worker, "__name__", skill)
    threaded.__qualname__ = threaded.__name__
    threaded.__wrapped__ = worker  # type: ignore[attr-defined]
    return threaded


async def _traced(tracer: Tracer, span: Span, worker: Worker, ctx: TaskContext) -> JSON:
    """The worker inside the task's span: its tool and model calls nest under it."""
    with tracer.current(span):
        try:
            result = await worker(ctx)
        except asyncio.CancelledError:
            tracer.end(span, {"loopkernel.outcome": "cancelled"})
            raise
        except BaseException as exc:
            parked = isinstance(exc, NeedsApproval)
            outcome = {"loopkernel.outcome": "waiting" if parked else "failed"}
            tracer.end(span, outcome, error=None if parked else exc)
            raise
        this = asyncio.current_task()
        if this is not None and this.cancelling():  # it returned after a cancel: discarded
            tracer.end(span, {"loopkernel.outcome": "cancelled", "loopkernel.late_result": True})
        else:
            tracer.end(span, {"loopkernel.outcome": "succeeded"})
        return result
