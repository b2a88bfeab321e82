"""What both stores share about leases: the fence a view carries, the rules and the errors.

Every executor owns the run it executes under a lease: workers take one with
``claim_run``; ``loopkernel run``/``resume`` and ``Client.execute`` take one with
``acquire`` (one named run). ``lease_epoch`` grows by one at every claim, acquire and
release; a fenced write compares it, under the run's write lock, with the epoch its
executor was given, so an executor whose lease was taken over cannot write anything more.

A run is *enqueued* (served by workers) when its ``lease_until`` is not NULL and its
``owner`` is not a local holder's. It is claimable when it is ``running`` and
``lease_until`` has passed (``0`` after ``enqueue`` or ``release``).

A process that is not a worker writes its ``Holder`` into ``owner`` (no extra column):
``local:SINCE:PID:HOST`` for a run no worker serves (workers never claim it, and its
release puts ``lease_until`` back to NULL), ``queued:SINCE:PID:HOST`` for an enqueued run
that a local process took while its lease was free (its release hands it back to the
workers). So the refusal a second executor gets can say who holds the run and since when.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopkernel.errors import LeaseLost, RunHeld, UsageError
from loopkernel.graph import UNPLANNED_EVENTS
from loopkernel.ids import RunId

__all__ = [
    "CHANNEL",
    "LOCAL",
    "QUEUED",
    "UNVERSIONED",
    "Can",
    "ClaimFilter",
    "Fence",
    "Holder",
    "check_lease_seconds",
    "describe_owner",
    "lease_lost",
    "run_held",
    "unplanned_kinds",
    "wake_due",
]

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


UNVERSIONED = "0"
"""The version of a run (or app) that records none."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Can:
    """One app a worker can execute, and the run versions it may resume."""

    app: str
    """The app's name as runs record it (``runs.app``: an entry point's name, or
    ``module:attribute``)."""
    version: str
    """The version this worker has (``App.app_version()``)."""
    compatible_with: tuple[str, ...] | None = None
    """Other run versions it resumes (``App.compatible_with``); ``None``: any."""

    def where(self) -> tuple[str, tuple[Any, ...]]:
        """The SQL condition on a ``runs`` row, and its parameters."""
        if self.compatible_with is None:
            return "app = ?", (self.app,)
        versions = (self.version, *self.compatible_with)
        marks = ", ".join("?" * len(versions))
        return f"(app = ? AND COALESCE(app_version, '{UNVERSIONED}') IN ({marks}))", (
            self.app,
            *versions,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimFilter:
    """Which runs a worker may claim (``claim_run``): what it declares it can execute."""

    can: Sequence[Can] | None = None
    """Apps and versions it executes; ``None``: any run (no filter), ``()``: none."""
    adopt_orphans: bool = False
    """Also take runs of a ``loopkernel run``/``resume`` that died (a local holder whose
    lease ran out): they become the workers' from then on."""

    def where(self) -> tuple[str, tuple[Any, ...]]:
        """`` AND ...`` for the claim's inner ``SELECT``, and its parameters."""
        apps, params = self.apps()
        return self.owners() + f" AND {apps}", params

    def claim(self, now: str, skip_locked: str) -> tuple[str, tuple[Any, ...]]:
        """``claim_run``'s statement (the owner and lease seconds first, then these
        parameters): the oldest claimable run this filter lets through, taken."""
        which, params = self.where()
        sql = (
            f"UPDATE runs SET owner = ?, lease_epoch = lease_epoch + 1, lease_until = {now} + ? "
            "WHERE run_id = (SELECT run_id FROM runs WHERE status = 'running' "
            f"AND lease_until IS NOT NULL AND lease_until <= {now}{which} "
            f"ORDER BY created_at, run_id LIMIT 1{skip_locked}) "
            "RETURNING run_id, lease_epoch"
        )
        return sql, params

    def unclaimable(self, now: str, limit: int) -> tuple[str, tuple[Any, ...]]:
        """``(run, app, version)`` of the first ``limit`` claimable runs this filter keeps
        out."""
        apps, params = self.apps()
        sql = (
            f"SELECT run_id, app, COALESCE(app_version, '{UNVERSIONED}') FROM runs "
            f"WHERE status = 'running' AND lease_until IS NOT NULL AND lease_until <= {now}"
            f"{self.owners()} AND NOT {apps} ORDER BY created_at, run_id LIMIT ?"
        )
        return sql, (*params, limit)

    def owners(self) -> str:
        """`` AND ...`` on ``owner``: local holders' runs only when adopting orphans."""
        return "" if self.adopt_orphans else f" AND (owner IS NULL OR owner NOT LIKE '{LOCAL}%')"

    def apps(self) -> tuple[str, tuple[Any, ...]]:
        """The condition on ``app``/``app_version`` (``1 = 1`` for any), its parameters."""
        if self.can is None:
            return "1 = 1", ()
        if not self.can:
            return "1 = 0", ()
        terms = [c.where() for c in self.can]
        params = tuple(p for _, ps in terms for p in ps)
        return "(" + " OR ".join(t for t, _ in terms) + ")", params


LOCAL = "local:"
"""``owner`` prefix of a local holder of a run no worker serves."""
QUEUED = "queued:"
"""``owner`` prefix of a local holder of an enqueued run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Holder:
    """A process that executes a run without being a worker (``loopkernel run``/``resume``)."""

    host: str
    """``socket.gethostname()`` of the holder."""
    pid: int
    """Its process id."""
    since: float
    """When it took the lease (seconds since the epoch)."""

    @classmethod
    def here(cls) -> Holder:
        return cls(host=socket.gethostname(), pid=os.getpid(), since=time.time())

    def owner(self, prefix: str) -> str:
        """The ``owner`` column's value; ``prefix`` is ``LOCAL`` or ``QUEUED``."""
        return f"{prefix}{self.since:.3f}:{self.pid}:{self.host}"

    @classmethod
    def parse(cls, owner: str | None) -> Holder | None:
        """The holder an ``owner`` value names, or ``None`` (a worker, or nobody)."""
        if not owner or not owner.startswith((LOCAL, QUEUED)):
            return None
        try:
            since, pid, host = owner.split(":", 1)[1].split(":", 2)
            return cls(host=host, pid=int(pid), since=float(since))
        except ValueError:
            return None

    def is_dead_here(self) -> bool:
        """True only if the holder ran on this machine and its process is gone: its lease
        may be taken over before it runs out (it died without releasing it)."""
        if self.host != socket.gethostname() or self.pid == os.getpid():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:  # a zombie (killed, not yet reaped by its parent) is dead too
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except (OSError, IndexError):
            return False


def _clock(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def describe_owner(owner: str | None) -> str:
    """``owner`` for a human: ``loopkernel pid 42 on host h since ...`` or ``worker 'w'``."""
    holder = Holder.parse(owner)
    if holder is not None:
        return f"pid {holder.pid} on host {holder.host} since {_clock(holder.since)}"
    return f"worker {owner!r}" if owner else "nobody"


def run_held(
    run_id: RunId, owner: str | None, lease_until: float | None, epoch: int, now: float
) -> RunHeld:
    """The one-line refusal a second executor gets."""
    until = lease_until or now
    return RunHeld(
        f"run {run_id} is held by another executor: {describe_owner(owner)}; its lease ends "
        f"at {_clock(until)} (in {max(0.0, until - now):.0f} s) unless renewed. Nothing was "
        "written; resume it once that executor has stopped",
        run_id=run_id,
        holder=owner or "",
        lease_until=until,
        epoch=epoch,
    )


def lease_lost(run_id: RunId, epoch: int, current: int | None, owner: str | None) -> LeaseLost:
    return LeaseLost(
        f"run {run_id}: lease epoch {epoch} is over (now {current}, held by "
        f"{describe_owner(owner)}); this executor must stop the run and write nothing more "
        "for it",
        run_id=run_id,
        epoch=epoch,
        current=-1 if current is None else current,
    )


def wake_due(now: str) -> str:
    """The statement that makes enqueued ``waiting`` runs whose timer came ``running``
    (claimable), run before each claim."""
    return (
        "UPDATE runs SET status = 'running', wake_at = NULL WHERE status = 'waiting' "
        f"AND wake_at IS NOT NULL AND wake_at <= {now} AND lease_until IS NOT NULL"
    )


def check_lease_seconds(lease_seconds: float) -> None:
    if not (math.isfinite(lease_seconds) and lease_seconds > 0):
        raise UsageError(f"lease_seconds must be a positive number, not {lease_seconds!r}")


def unplanned_kinds() -> tuple[str, ...]:
    """Event kinds no planner answers (``run_finished``); every other event waits for a
    patch, and one journaled after the last patch wakes a waiting run."""
    return tuple(sorted(kind.value for kind in UNPLANNED_EVENTS))
