"""The ground floor's hooks: crash points, the signal that parks a task, and what a call
needs to know of the task that makes it. The executor, the tool layer and the model layer
all reach these here, so no room imports another room's private module.

Crash points for crash tests: ``LOOPKERNEL_CRASH_AT=<point>[:<n>]``.

At the n-th pass (default 1) through ``crashpoint(point)`` the process sends itself
SIGKILL: no ``finally`` block, no ``atexit``, no flush, exactly as ``kill -9`` from outside.
With the variable unset a crash point costs one comparison.

Points the kernel passes through:

``task_returned``     a worker returned, before its event is committed
``event_committed``   the completions' events are numbered, before the planner is asked.
                      With a planner whose ``plan`` is not a coroutine function they are
                      not written yet: they commit in one transaction with the patches
                      that answer them (``Store.commit_step``), so a crash here loses the
                      step and the task runs again on resume. With an awaiting planner
                      they were committed first, as their own transaction.
``before_patch``      a patch is planned and validated, before it is committed (with the
                      step's events, in one-transaction steps)
``patch_committed``   after a patch commit, before the tasks it readied start
``timer_fired``       a due timer's ``timer_fired`` event is written (and the task's
                      wake-up time cleared), before it is planned
``schedule_decided``  a worker wrote a schedule's decision (runs to start, to buffer, to
                      cancel), before acting on it
``schedule_started``  a worker started a schedule's run, before enqueueing it
``tool_sent``         the tool layer journaled a call as intended, before sending it
``tool_returned``     a tool call returned, before its result is journaled
``model_sent``        ``ctx.complete`` journaled a model call as intended, before sending it
``model_returned``    the gateway answered a model call, before the answer is journaled
``batch_written``     the SQLite store's group commit: every step of the group ran its
                      statements, before its ``COMMIT`` (nothing of the group is durable)
``batch_committed``   after the group's ``COMMIT``, before any of its steps is answered
                      (all of it is durable; no run has acknowledged its step yet)
``run_returned``      ``Client.execute``: the run finished or waits for a human, and the
                      store is not closed yet (so the .db file alone must already hold it)
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Protocol

from loopkernel.graph import JSON
from loopkernel.ids import RunId, TaskId

__all__ = ["POINTS", "CallContext", "NeedsApproval", "crashpoint"]

POINTS = frozenset(
    {
        "task_returned",
        "event_committed",
        "before_patch",
        "patch_committed",
        "timer_fired",
        "schedule_decided",
        "schedule_started",
        "tool_sent",
        "tool_returned",
        "model_sent",
        "model_returned",
        "run_returned",
        "batch_written",
        "batch_committed",
    }
)


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    point, _, count = spec.partition(":")
    if point not in POINTS:
        raise SystemExit(
            f"LOOPKERNEL_CRASH_AT={spec!r}: unknown point {point!r}; "
            f"known: {', '.join(sorted(POINTS))}"
        )
    try:
        n = int(count) if count else 1
    except ValueError:
        raise SystemExit(
            f"LOOPKERNEL_CRASH_AT={spec!r}: the count after ':' must be a number"
        ) from None
    return point, n


_TARGET = _parse(os.environ.get("LOOPKERNEL_CRASH_AT"))
_passes = 0


def crashpoint(point: str) -> None:
    """SIGKILL this process if ``LOOPKERNEL_CRASH_AT`` names ``point`` and its count is reached."""
    global _passes
    if _TARGET is None or _TARGET[0] != point:
        return
    _passes += 1
    if _passes >= _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)


class NeedsApproval(Exception):
    """Raised inside a worker (usually by the tool layer's policy hook) to park its task.

    The task goes ``waiting`` with ``reason``; an approval resumes it and the worker runs
    again from its top. Tool calls it made before are replayed from the effect journal,
    so nothing above the pause happens twice.
    """

    def __init__(
        self,
        reason: str,
        *,
        tool: str | None = None,
        cost_usd: float | None = None,
        call: Mapping[str, JSON] | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tool = tool
        self.cost_usd = cost_usd
        """What the call waiting for approval is expected to cost, when the policy says."""
        self.call = call
        """The call waiting for approval, as the journal keeps it (filled in by the effect
        journal): ``tool``, ``key``, ``effect``, ``arguments`` (redacted), ``cost_usd``.
        The executor journals it in the ``approval_required`` event, so a human sees what
        they approve before anything of the call is sent or written as an effect."""


class CallContext(Protocol):
    """What the effect journal and its callers (tools, models) read of the calling task:
    ``loopkernel.TaskContext`` is one."""

    @property
    def run_id(self) -> RunId: ...
    @property
    def task_id(self) -> TaskId: ...
    @property
    def attempt(self) -> int: ...
    @property
    def human_input(self) -> JSON:
        """What a human answered when the task was last resumed."""

    @property
    def wait_epoch(self) -> int:
        """How many times the task was parked."""

    @property
    def wait_reason(self) -> str | None:
        """Why the task was last parked (kept after its approval), or ``None``."""
