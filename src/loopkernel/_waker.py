"""Waking runs whose timer is due, beside the web inspector (``loopkernel serve``).

::

    every poll (``poll_seconds``):
        store.due_runs(now)                      # waiting runs whose wake_at has come
        for each run not in hand, not backing off, of an app this process may run:
            Client.execute(run)                  # the lease `resume` takes, heartbeats and all
                RunHeld   -> another executor (resume, a worker) has it: leave it to it
                the kernel fires the timer (``timer_fired``, once) and runs on until the
                run ends or waits again; then the lease is given back

Exactly once is the executor's, not this loop's: ``timer_fired`` is journaled under the
run's lease, in the same write that clears the task's ``wake_at`` (``executor/_timers``).
A second executor meanwhile is refused the lease (``RunHeld``, exit 7 for ``resume``), or
a worker cannot claim it (the lease has not run out), or it comes after and finds the
timer fired. A serve killed while it executes a run leaves it as any killed executor does:
resumable, taken over at once on the same machine, else when its lease runs out.

Which runs: those of installed apps (entry points ``loopkernel.apps``) and of the names in
``apps`` (``serve --app``), local runs and runs handed to workers alike; a run of any other
app is left alone (said once), never failed: a worker or ``resume`` with that app wakes it.
A run the executor leaves ``waiting`` with its timer still due (the app's clock is behind
this one's), or that failed to execute, is looked at again after a back-off that doubles,
up to a minute, for as long as it stays due.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Callable, Collection

from loopkernel._app import registered
from loopkernel.client import Client
from loopkernel.errors import LeaseLost, LoopKernelError, RunHeld, RunNotFound, StoreUnavailable
from loopkernel.executor import ExecutionConfig
from loopkernel.graph import RunStatus
from loopkernel.ids import RunId

__all__ = ["TimerWaker"]

Log = Callable[[str], None]

MAX_BACKOFF_SECONDS = 60.0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class TimerWaker:
    """Executes the runs whose timer is due, until cancelled (``serve()``)."""

    def __init__(
        self,
        client: Client,
        *,
        poll_seconds: float = 1.0,
        apps: Collection[str] = (),
        concurrency: int = 4,
        store_retry: float = 10.0,
        log: Log = _stderr,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.poll_seconds = poll_seconds
        self.apps = frozenset(apps)
        self.concurrency = concurrency
        self.store_retry = store_retry
        self.woken = 0
        """Runs this waker executed to their end or their next wait."""
        self._log = log
        self._monotonic = monotonic
        self._in_hand: dict[RunId, asyncio.Task[None]] = {}
        self._later: dict[RunId, tuple[float, float]] = {}
        """Per run left due by its own executor: (monotonic time to look again, back-off)."""
        self._said: set[tuple[RunId, str]] = set()

    def log(self, message: str) -> None:
        self._log(f"loopkernel serve: {message}")

    def _once(self, run_id: RunId, why: str, message: str) -> None:
        if (run_id, why) not in self._said:
            self._said.add((run_id, why))
            self.log(message)

    async def serve(self) -> None:
        """Look for due timers every ``poll_seconds`` until cancelled; on cancellation the
        runs in hand stop between two steps and give their leases back."""
        try:
            while True:
                await self.wake_due()
                await asyncio.sleep(self.poll_seconds)
        finally:
            for task in self._in_hand.values():
                task.cancel()
            if self._in_hand:
                await asyncio.gather(*self._in_hand.values(), return_exceptions=True)

    async def settle(self) -> None:
        """Wait until the runs in hand have ended or stopped to wait again."""
        while self._in_hand:
            await asyncio.gather(*self._in_hand.values(), return_exceptions=True)

    async def wake_due(self) -> list[RunId]:
        """Start executing every due run that may be woken now; the ids started."""
        try:
            due = await self.client.store.due_runs(time.time())
        except StoreUnavailable as exc:
            self.log(f"cannot look for due timers: {exc}; trying again in {self.poll_seconds}s")
            return []
        for run_id in set(self._later) - set(due):  # no longer due: its back-off is over
            del self._later[run_id]
        started = []
        now = self._monotonic()
        for run_id in due:
            if len(self._in_hand) >= self.concurrency:
                break
            if run_id in self._in_hand or self._later.get(run_id, (0.0, 0.0))[0] > now:
                continue
            if not await self._may_run(run_id):
                continue
            task = asyncio.create_task(self._wake(run_id), name=f"wake {run_id}")
            self._in_hand[run_id] = task
            task.add_done_callback(functools.partial(self._done, run_id))
            started.append(run_id)
        return started

    def _done(self, run_id: RunId, _: asyncio.Task[None]) -> None:
        self._in_hand.pop(run_id, None)

    async def _may_run(self, run_id: RunId) -> bool:
        try:
            info = await self.client.store.get_run(run_id)
        except (RunNotFound, StoreUnavailable):
            return False
        if info.app in self.apps or (":" not in info.app and registered(info.app)):
            return True
        self._once(
            run_id,
            "app",
            f"{run_id}: its timer is due, but app {info.app!r} is not installed here (serve "
            "--app NAME runs it); left for a worker or `resume`",
        )
        return False

    async def _wake(self, run_id: RunId) -> None:
        try:
            config = ExecutionConfig(store_retry_s=self.store_retry)
            outcome = await self.client.execute(run_id, config=config, apps=self.apps)
        except RunHeld:
            self._once(run_id, "held", f"{run_id}: held by another executor; left to it")
            return
        except LeaseLost as exc:
            self.log(f"{run_id}: taken over by another executor, stopped ({exc})")
            return
        except LoopKernelError as exc:
            self.log(f"{run_id}: {type(exc).__name__}: {exc}; tried again later")
            self._back_off(run_id)
            return
        except Exception as exc:  # an app that cannot even be built: never stop serving
            self.log(f"{run_id}: stopped by {type(exc).__name__}: {exc}; tried again later")
            self._back_off(run_id)
            return
        self.woken += 1
        self._said = {said for said in self._said if said[0] != run_id}
        if outcome.status is RunStatus.WAITING:
            self._back_off(run_id)  # kept only while its timer stays due (wake_due)
        else:
            self._later.pop(run_id, None)
        self.log(f"woke {run_id}: {outcome.status.value}")

    def _back_off(self, run_id: RunId) -> None:
        _, last = self._later.get(run_id, (0.0, 0.0))
        backoff = min(MAX_BACKOFF_SECONDS, max(self.poll_seconds, last * 2))
        self._later[run_id] = (self._monotonic() + backoff, backoff)
