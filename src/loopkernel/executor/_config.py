"""How a run is executed, as two values handed down whole (httpx's ``Timeout`` and
``Limits`` are the model): ``ExecutionConfig``, the knobs (numbers, units in their names),
from the command line to ``Client.execute`` to the ``Kernel``, embedded in a worker's
``WorkerConfig``; and ``KernelParts``, the objects a kernel is built with beside its
planner and workers (tool and model layers, observer, guard, clock, versions).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

from loopkernel.errors import UsageError
from loopkernel.graph import Event, GraphPatch, GraphState
from loopkernel.store import PatchRecord

if TYPE_CHECKING:
    from loopkernel.executor._context import ModelCaller, ToolCaller
    from loopkernel.executor._timers import ApprovalTimeout
    from loopkernel.planner import Snapshot

__all__ = [
    "DEFAULT_KEEP_FINISHED",
    "DEFAULT_LEASE_S",
    "DEFAULT_STORE_RETRY_S",
    "ExecutionConfig",
    "KernelParts",
    "Observer",
    "PatchGuard",
    "check_keep_finished",
]


class PatchGuard(Protocol):
    """Policy as the executor consults it: on every patch, before it is validated and applied.

    Raise ``TripwireFired`` or ``BudgetExceeded`` to stop the run as ``escalated``: the
    proposed patch is journaled as rejected by ``policy`` with the reason, once.
    """

    def check_patch(self, snapshot: Snapshot, event: Event, patch: GraphPatch) -> None: ...


Observer = Callable[[Event, GraphState, PatchRecord | None], None]
"""Called after each event is planned (with its patch record) and at run_finished."""

DEFAULT_KEEP_FINISHED = 1000
"""``keep_finished`` when none is given: a run of up to about this many tasks never evicts
one; a longer run's memory stays flat."""
DEFAULT_LEASE_S = 10.0
"""How long a local executor's lease lasts without a heartbeat (one every third of it):
how long another machine waits to take over a run whose executor died."""
DEFAULT_STORE_RETRY_S = 60.0
"""Seconds ``execute`` keeps retrying a store that does not answer before it gives up."""


def check_keep_finished(keep_finished: int | None) -> None:
    """``UsageError`` unless ``keep_finished`` is None or a whole number >= 0."""
    if keep_finished is None:
        return
    if isinstance(keep_finished, bool) or not isinstance(keep_finished, int):
        raise UsageError(f"keep_finished must be a whole number, not {keep_finished!r}")
    if keep_finished < 0:
        raise UsageError(f"keep_finished must be at least 0, not {keep_finished}")


def _positive(name: str, value: float, *, zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if zero else value > 0)
    if isinstance(value, bool) or not ok:
        bound = ">= 0" if zero else "> 0"
        raise UsageError(f"{name} must be a number of seconds {bound}, not {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionConfig:
    """The knobs of one execution of a run; checked when made."""

    concurrency: int = 16
    """Tasks of one run running at once."""
    poll_s: float = 0.2
    """Seconds between looks at the journal for events other processes appended."""
    cancel_grace_s: float = 5.0
    """Seconds a task cancelled in flight has to end before the run goes on without it."""
    keep_finished: int | None = None
    """Succeeded tasks kept in memory (older ones read back when asked for); ``None``:
    ``DEFAULT_KEEP_FINISHED``."""
    lease_s: float = DEFAULT_LEASE_S
    """The run's lease (``Client.execute``): renewed every third of it."""
    store_retry_s: float = DEFAULT_STORE_RETRY_S
    """Seconds in all ``Client.execute`` retries a store that does not answer."""
    lock_wait_s: float | None = None
    """At most this many seconds per store call waiting for another process's write lock
    (SQLite); ``None``: the store's own ``lock_wait_s`` (``SQLiteStore(lock_wait_s=...)``,
    ``LOOPKERNEL_SQLITE_LOCK_WAIT_S``, default ``DEFAULT_LOCK_WAIT_S``, 10 s). Within
    ``Client.execute`` the wait never passes what is left of ``store_retry_s``."""

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise UsageError(f"concurrency must be a whole number, not {self.concurrency!r}")
        if self.concurrency < 1:
            raise UsageError(f"max_concurrency must be at least 1, not {self.concurrency}")
        check_keep_finished(self.keep_finished)
        _positive("poll_s", self.poll_s)
        _positive("cancel_grace_s", self.cancel_grace_s, zero=True)
        _positive("lease_s", self.lease_s)
        _positive("store_retry_s", self.store_retry_s, zero=True)
        if self.lock_wait_s is not None:
            _positive("lock_wait_s", self.lock_wait_s, zero=True)

    @property
    def kept(self) -> int:
        """``keep_finished`` with its default applied."""
        return DEFAULT_KEEP_FINISHED if self.keep_finished is None else self.keep_finished

    def with_(self, **changes: Any) -> ExecutionConfig:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)


@dataclass(frozen=True, kw_only=True, slots=True)
class KernelParts:
    """What a ``Kernel`` is built with beside its store, planner and workers."""

    tools: ToolCaller | None = None
    """``ctx.call_tool``: the run's tool layer (``loopkernel.tools.ToolLayer``)."""
    models: ModelCaller | None = None
    """``ctx.complete``: the run's model layer (``loopkernel.models.ModelLayer``)."""
    observer: Observer | None = None
    """Told of every journaled event (tests, progress lines)."""
    guard: PatchGuard | None = None
    """Checks every patch before it is validated (``Policy.guard()``)."""
    clock: Callable[[], float] = time.time
    """Wall time in seconds since the epoch, for timers (tests pass a fake one)."""
    approval_timeout: ApprovalTimeout | None = None
    """What an unanswered approval turns into, and when."""
    app_version: str | None = None
    """Recorded on the runs it starts and on every patch it journals."""
    compatible_with: Collection[str] | None = field(default=None)
    """Versions whose runs this one resumes (``None``: any; executor/_versions.py)."""


_KNOBS = {
    "max_concurrency": "concurrency",
    "poll_interval": "poll_s",
    "cancel_grace": "cancel_grace_s",
    "keep_finished": "keep_finished",
}
_PARTS = frozenset(f.name for f in fields(KernelParts))


def legacy_kernel_options(
    config: ExecutionConfig | None, parts: KernelParts | None, options: dict[str, Any]
) -> tuple[ExecutionConfig, KernelParts]:
    """``Kernel(...)``'s keyword arguments of before ``ExecutionConfig``, folded into the
    two values, with a ``DeprecationWarning`` naming the new spelling."""
    config = config or ExecutionConfig()
    parts = parts or KernelParts()
    if not options:
        return config, parts
    unknown = sorted(set(options) - set(_KNOBS) - _PARTS)
    if unknown:
        raise TypeError(f"Kernel() got unexpected keyword argument(s) {', '.join(unknown)}")
    knobs = {_KNOBS[k]: v for k, v in options.items() if k in _KNOBS}
    held = {k: v for k, v in options.items() if k in _PARTS}
    warnings.warn(
        f"Kernel({', '.join(f'{k}=' for k in options)}) is deprecated: pass "
        "config=ExecutionConfig(...) and parts=KernelParts(...)",
        DeprecationWarning,
        stacklevel=3,
    )
    return replace(config, **knobs), replace(parts, **held)
