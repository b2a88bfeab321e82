"""What both stores share about leases: the fence a view carries, the rules and the errors.

A run is *enqueued* (served by workers) when its ``lease_until`` is not NULL; a run that
``loopkernel run`` executes in its own process never is, and nothing here touches it.
An enqueued run is claimable when it is ``running`` and ``lease_until`` has passed
(``0`` after ``enqueue`` or ``release``). ``lease_epoch`` grows by one at every claim and
every release; a fenced write compares it, under the run's write lock, with the epoch
its worker was given, so a worker whose lease was taken over cannot write anything more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loopkernel.errors import LeaseLost, UsageError
from loopkernel.graph import UNPLANNED_EVENTS
from loopkernel.ids import RunId

__all__ = ["CHANNEL", "Fence", "check_lease_seconds", "lease_lost", "unplanned_kinds"]

CHANNEL = "loopkernel_runnable"
"""The PostgreSQL NOTIFY channel: a run became claimable (the payload is its id)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Fence:
    """What a fenced view checks before each write."""

    run_id: RunId
    """The only run the view writes."""
    epoch: int
    """The lease epoch the writer was given by ``claim_run``."""

    def check_run(self, run_id: RunId) -> None:
        if run_id != self.run_id:
            raise UsageError(
                f"this store view is fenced to run {self.run_id}; it cannot write run {run_id}",
                run_id=run_id,
            )

    def check_epoch(self, current: int | None, owner: str | None) -> None:
        """``current``: the run's ``lease_epoch`` read under its write lock."""
        if current != self.epoch:
            raise lease_lost(self.run_id, self.epoch, current, owner)


def lease_lost(run_id: RunId, epoch: int, current: int | None, owner: str | None) -> LeaseLost:
    holder = f"worker {owner!r}" if owner else "no worker"
    return LeaseLost(
        f"run {run_id}: lease epoch {epoch} is over (now {current}, held by {holder}); "
        "this worker must stop the run and write nothing more for it",
        run_id=run_id,
        epoch=epoch,
        current=-1 if current is None else current,
    )


def check_lease_seconds(lease_seconds: float) -> None:
    if not (math.isfinite(lease_seconds) and lease_seconds > 0):
        raise UsageError(f"lease_seconds must be a positive number, not {lease_seconds!r}")


def unplanned_kinds() -> tuple[str, ...]:
    """Event kinds no planner answers (``run_finished``); every other event waits for a
    patch, and one journaled after the last patch wakes a waiting run."""
    return tuple(sorted(kind.value for kind in UNPLANNED_EVENTS))
