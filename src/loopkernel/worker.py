"""Workers: processes, on one machine or many, that execute the runs handed to them.

::

    loop until stopped:
        while a slot is free: claim a run (store.claim_run: lease, new epoch)
            execute it with the app it was started with, through store.fenced(run, epoch)
            heartbeat its lease every lease/3; LeaseLost -> cancel that run, write nothing
            it ends or waits for a human -> release the lease
        wait for a NOTIFY (a run became claimable), a free slot, or the poll interval

The unit a worker owns is a whole run: planning stays serial per run, as in one process,
and a run's tasks run concurrently inside the worker that owns it. Another worker takes
the run over when the lease expires (the owner died, hung or lost the database) and
resumes it by the same recovery rules as ``loopkernel resume``. A run that waits for a
human holds no lease; an answer or a cancel request makes it claimable again.
See ``docs/workers.md``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loopkernel._hold import hold_lease
from loopkernel._waits import read_waits
from loopkernel.client import Client
from loopkernel.errors import LeaseLost, LoopKernelError, StoreUnavailable, UsageError
from loopkernel.executor import ExecutionConfig, RunOutcome
from loopkernel.graph import RunStatus
from loopkernel.ids import RunId
from loopkernel.store import Claim, Store
from loopkernel.store._lease import LOCAL, QUEUED, Can, ClaimFilter

__all__ = ["RunWorker", "WorkerConfig", "WorkerStats", "default_worker_id"]

Log = Callable[[str], None]


def default_worker_id() -> str:
    """``host:pid``: unique among live workers, and says where to look."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _shown(can: Can) -> str:
    also = (
        ""
        if can.compatible_with is None
        else f" (resumes {', '.join(can.compatible_with) or 'no other'})"
    )
    return f"{can.app} {can.version}{also}"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerConfig:
    """How a worker claims and holds runs."""

    worker_id: str = field(default_factory=default_worker_id)
    """The name its leases carry (``runs.owner``)."""
    concurrency: int = 8
    """Runs executed at once."""
    poll_seconds: float = 1.0
    """How often an idle worker looks for work without a notification (expired leases
    are noticed this way; PostgreSQL notifies of everything else)."""
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    """How each claimed run is executed: ``lease_s``, how long a claim or a heartbeat
    holds a run (a dead worker's runs are taken over this long after its last heartbeat,
    plus up to ``poll_seconds``); ``concurrency``, tasks at once within one run."""
    apps: frozenset[str] = frozenset()
    """Apps run besides the installed ones (entry points), e.g. ``module:attribute``. The
    worker claims only runs of these apps at a version it can resume (``Can``); a run of
    any other app or version is left for a worker that has it."""
    adopt_orphans: bool = False
    """Also claim runs of a ``loopkernel run``/``resume`` that died (their lease ran out);
    the runs become the workers' (``--adopt-orphans``)."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise UsageError("a worker needs a concurrency of at least 1")
        if not self.poll_seconds > 0:
            raise UsageError("poll_seconds must be positive")
        if not self.worker_id:
            raise UsageError("worker_id must not be empty")
        if self.worker_id.startswith((LOCAL, QUEUED)):
            raise UsageError(
                f"worker_id must not start with {LOCAL!r} or {QUEUED!r}: those name local "
                "executors in the lease"
            )

    @property
    def lease_seconds(self) -> float:
        """``execution.lease_s``."""
        return self.execution.lease_s

    @property
    def heartbeat_seconds(self) -> float:
        """A lease is renewed three times per lease period: two heartbeats may be late."""
        return self.execution.lease_s / 3


@dataclass(kw_only=True, slots=True)
class WorkerStats:
    """What a worker did, for logs, tests and benchmarks."""

    claimed: int = 0
    """Runs claimed (a run taken over counts again)."""
    ended: int = 0
    """Runs that finished (any terminal status) under this worker."""
    parked: int = 0
    """Runs that stopped to wait for a human."""
    lost: int = 0
    """Runs stopped because their lease was taken over: nothing more was written."""
    errors: int = 0
    """Runs stopped by an error (their lease runs out, then a worker tries again)."""
    released: int = 0
    """Runs given back unfinished at shutdown."""


class RunWorker:
    """Claims runs from ``store`` and executes them until ``stop()``.

    ``store`` must be open; it is shared by every run the worker executes (each through
    its own fenced view). ``serve()`` returns the stats once stopped.
    """

    def __init__(self, store: Store, config: WorkerConfig | None = None, *, log: Log = _stderr):
        self.store = store
        self.config = config or WorkerConfig()
        self.stats = WorkerStats()
        self._log = log
        self._runs: dict[RunId, asyncio.Task[None]] = {}
        """Per run in hand, the task that executes it and then does its bookkeeping."""
        self._executing: dict[RunId, asyncio.Task[RunOutcome]] = {}
        """Per run in hand, the executor itself (``Client.execute``), while it runs."""
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        """``serve``'s, while it serves: the owner of every task the worker starts."""
        self._only = ClaimFilter(can=(), adopt_orphans=self.config.adopt_orphans)
        """What ``claim_run`` may give this worker: set by ``serve()`` from the apps."""
        self._said: set[RunId] = set()
        self._next_look = 0.0

    @property
    def running(self) -> frozenset[RunId]:
        """The runs this worker executes now."""
        return frozenset(self._runs)

    def log(self, message: str) -> None:
        self._log(f"worker {self.config.worker_id}: {message}")

    def stop(self) -> None:
        """Stop claiming; stop the runs in hand and release their leases (they resume on
        another worker, or on this one when it starts again). Safe from a signal handler."""
        self._stopping.set()
        self._changed.set()

    async def serve(self) -> WorkerStats:
        """Claim and execute runs until ``stop()``.

        Every task the worker starts is owned by one ``asyncio.TaskGroup``, this call's: the
        task of each run in hand and the listener for notifications. When ``serve`` leaves
        (``stop()``, a cancellation, or an error no run's bookkeeping expected), the runs
        are stopped between two steps, their leases given back, and every task has ended;
        such an error leaves ``serve`` (in an ``ExceptionGroup``) instead of being lost.
        """
        cfg = self.config
        self._only = ClaimFilter(can=self._capabilities(), adopt_orphans=cfg.adopt_orphans)
        self.log(
            f"serving {self.store!r}: {cfg.concurrency} runs at once, lease {cfg.lease_seconds}s"
        )
        self.log("executes " + (", ".join(_shown(c) for c in self._only.can or ()) or "no app"))
        await self.store.wait_for_work(0)  # listen before the first look: nothing is missed
        async with asyncio.TaskGroup() as group:
            self._group = group
            listener = group.create_task(self._listen(), name="worker notifications")
            try:
                await self._rounds()
            finally:
                listener.cancel()
                await self._shutdown()
                self._group = None
        self.log(f"stopped: {self.stats}")
        return self.stats

    async def _rounds(self) -> None:
        """Claim while slots are free; then wait until something changed: a notification
        or the poll interval (``_listen``), a run that ended, or ``stop()``."""
        while not self._stopping.is_set():
            self._changed.clear()
            await self._fire_schedules()
            await self._claim_all()
            if self._stopping.is_set():
                break
            await self._changed.wait()

    async def _listen(self) -> None:
        """One look per notification (PostgreSQL) or per poll interval: one LISTEN for
        the worker's life, so that what arrives between two looks is not missed."""
        poll = self.config.poll_seconds
        while True:
            try:
                await self.store.wait_for_work(poll)
            except StoreUnavailable as exc:
                self.log(f"cannot wait for notifications: {exc}; polling every {poll}s")
                await asyncio.sleep(poll)
            self._changed.set()

    async def _fire_schedules(self) -> None:
        """Start the runs of due schedules (``loopkernel._schedules``), once per due time."""
        from loopkernel._schedules import fire_due

        try:
            started = await fire_due(Client(store=self.store), time.time(), self.log)
        except (StoreUnavailable, UsageError) as exc:
            self.log(f"cannot start scheduled runs: {exc}; trying again next round")
            return
        for run_id in started:
            self.log(f"schedule: {run_id} enqueued")

    async def _claim_all(self) -> None:
        """Claim runs while slots are free and there are runs to claim."""
        cfg = self.config
        while len(self._runs) < cfg.concurrency and not self._stopping.is_set():
            try:
                claim = await self.store.claim_run(cfg.worker_id, cfg.lease_seconds, self._only)
            except StoreUnavailable as exc:
                self.log(f"cannot claim: {exc}; trying again in {cfg.poll_seconds}s")
                return
            if claim is None:
                await self._say_unclaimable()
                return
            self.stats.claimed += 1
            self.log(f"claimed {claim.run_id} (epoch {claim.epoch})")
            assert self._group is not None, "claims are made inside serve()"
            task = self._group.create_task(self._execute(claim), name=f"run {claim.run_id}")
            self._runs[claim.run_id] = task
            task.add_done_callback(functools.partial(self._done, claim.run_id))

    async def _say_unclaimable(self) -> None:
        """Name, once each, the runs waiting for a worker that has their app and version."""
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + 10 * self.config.poll_seconds
        try:
            runs = await self.store.unclaimable(self._only)
        except StoreUnavailable:
            return
        for run_id, app, version in runs:
            if run_id not in self._said:
                self._said.add(run_id)
                self.log(f"{run_id} waits: no worker here for app {app} version {version}")

    def _capabilities(self) -> tuple[Can, ...]:
        """The installed apps and ``apps``, each at the version this process has."""
        from importlib.metadata import entry_points

        from loopkernel._app import load_app

        names = {ep.name for ep in entry_points(group="loopkernel.apps")} | self.config.apps
        found = []
        for name in sorted(names):
            try:
                app = load_app(name)
            except (UsageError, ImportError) as exc:
                self.log(f"cannot load app {name!r} ({exc}): its runs are left to others")
                continue
            found.append(
                Can(app=name, version=app.app_version(), compatible_with=app.compatible_with)
            )
        return tuple(found)

    def _done(self, run_id: RunId, _: asyncio.Task[None]) -> None:
        self._runs.pop(run_id, None)
        self._changed.set()

    async def _execute(self, claim: Claim) -> None:
        """Run one claimed run to its end (or its wait), then give the lease back."""
        run_id, epoch = claim.run_id, claim.epoch
        if self._stopping.is_set():  # claimed just before stop(): give it back untouched
            await self._released_at_shutdown(claim)
            return
        client = Client(store=self.store.fenced(run_id, epoch))
        # The executor alone, so that shutdown can stop it and not this bookkeeping. Owned
        # here: awaited on every path (a cancellation of this task cancels it and waits
        # for its end), it never outlives the run's task.
        run = asyncio.create_task(self._held(claim, client), name=f"execute {run_id}")
        self._executing[run_id] = run
        try:
            outcome = await run
        except asyncio.CancelledError:
            # Shutdown: the run stopped between two steps, all it did is journaled.
            await self._released_at_shutdown(claim)
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return
        except LeaseLost as exc:  # a heartbeat or a write was refused
            self._lease_lost(run_id, f"refused: {exc}")
            return
        except LoopKernelError as exc:
            self.stats.errors += 1
            self.log(
                f"{run_id} stopped: {type(exc).__name__}: {exc}; its lease runs out and a "
                "worker tries again"
            )
            return
        except Exception as exc:  # an app that cannot even be built, say
            self.stats.errors += 1
            self.log(f"{run_id} stopped by {type(exc).__name__}: {exc}; a worker tries again")
            return
        finally:
            self._executing.pop(run_id, None)
        if await self._release(claim) is False:
            # It ended (or waits) under another worker: a late reader, not its finisher.
            self._lease_lost(run_id, f"another worker had taken it over; it is {outcome.status}")
            return
        await self._ended(outcome)

    async def _released_at_shutdown(self, claim: Claim) -> None:
        if await self._release(claim):
            self.stats.released += 1
            self.log(
                f"released {claim.run_id} at shutdown (epoch {claim.epoch}); it resumes elsewhere"
            )

    def _lease_lost(self, run_id: RunId, why: str) -> None:
        self.stats.lost += 1
        self.log(f"lost the lease on {run_id} ({why}); stopped it, writing nothing more")

    async def _ended(self, outcome: RunOutcome) -> None:
        if outcome.status is RunStatus.WAITING:
            self.stats.parked += 1
            try:
                waits = "; ".join(w.line() for w in await read_waits(self.store, outcome.run_id))
            except (StoreUnavailable, LoopKernelError) as exc:
                waits = f"waiting (not read: {exc})"
            self.log(f"{outcome.run_id} {waits or 'waiting'}; lease released")
        else:
            self.stats.ended += 1
            self.log(f"{outcome.run_id} {outcome.status.value}")

    async def _release(self, claim: Claim) -> bool | None:
        """True if released, False if it was no longer ours, None if the store failed."""
        try:
            return await self.store.release(claim.run_id, claim.epoch)
        except StoreUnavailable as exc:
            self.log(f"could not release {claim.run_id} ({exc}); its lease runs out instead")
            return None

    async def _held(self, claim: Claim, client: Client) -> RunOutcome:
        """Execute a claimed run under its lease (``hold_lease``: heartbeats; the run is
        stopped with ``LeaseLost`` if another worker took it over)."""

        def missed(exc: StoreUnavailable) -> None:
            # The run's own writes fail the same way; if the lease runs out meanwhile,
            # fencing refuses whatever this worker tries to write after that.
            self.log(f"heartbeat for {claim.run_id} failed: {exc}")

        cfg = self.config
        async with hold_lease(self.store, claim, lease_s=cfg.lease_seconds, on_fault=missed):
            return await client.run_owned(claim.run_id, config=cfg.execution, apps=cfg.apps)

    async def _shutdown(self) -> None:
        """Stop each run in hand between two steps, then let each finish its bookkeeping.

        Only the executors are cancelled, never the bookkeeping around them: a run that
        ended just before ``stop()`` is still released and counted as ended, and one that
        was stopped is released and counted as released.
        """
        for run in list(self._executing.values()):
            run.cancel()
        await asyncio.gather(*list(self._runs.values()), return_exceptions=True)
