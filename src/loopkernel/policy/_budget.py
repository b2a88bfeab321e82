"""Budgets: money, tool calls, tasks and wall time, as data with ``check_*`` methods.

``None`` means unlimited. A check raises ``BudgetExceeded`` *before* the limit would be
passed, naming the limit, its value and what was observed, so the verdict a run keeps says
which number to raise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loopkernel.errors import BudgetExceeded, UsageError

__all__ = ["Budget", "Usage"]

_EPSILON = 1e-9
"""Money is summed in floats; a sum that lands a hair above the limit is still within it."""


def _check_limit(name: str, value: float | None, *, integer: bool) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"Budget.{name} must be a number or None, not {value!r}")
    if integer and not isinstance(value, int):
        raise UsageError(f"Budget.{name} must be a whole number or None, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"Budget.{name} must be finite and >= 0 (None means unlimited)")


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """What a run has used so far, as the tool layer's effect journal counts it."""

    tool_calls: int = 0
    """Tool calls sent (journaled results and calls in flight)."""
    spent_usd: float = 0.0
    """Money the journaled results report spending."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """Limits of one run. ``None`` means unlimited; ``Budget()`` limits nothing."""

    max_usd: float | None = None
    """Money the run's tool calls may spend, in USD."""
    max_tool_calls: int | None = None
    """Tool calls the run may send."""
    max_tasks: int | None = None
    """Tasks the run's graph may hold."""
    max_wall_seconds: float | None = None
    """Seconds an execution of the run may take (time parked for a human does not count)."""

    def __post_init__(self) -> None:
        _check_limit("max_usd", self.max_usd, integer=False)
        _check_limit("max_tool_calls", self.max_tool_calls, integer=True)
        _check_limit("max_tasks", self.max_tasks, integer=True)
        _check_limit("max_wall_seconds", self.max_wall_seconds, integer=False)

    def check_spend(self, spent: float, cost: float = 0.0) -> None:
        """Raise if spending ``cost`` on top of ``spent`` would pass ``max_usd``."""
        if self.max_usd is None:
            return
        total = spent + cost
        if total > self.max_usd + _EPSILON:
            raise BudgetExceeded(
                f"spending {cost:.4f} USD on top of {spent:.4f} USD would pass "
                f"max_usd={self.max_usd:g} (total {total:.4f}); raise Budget.max_usd to allow it",
                limit="max_usd",
                maximum=self.max_usd,
                observed=round(total, 6),
                spent=round(spent, 6),
                cost=round(cost, 6),
            )

    def check_tool_calls(self, made: int) -> None:
        """Raise if one more call after ``made`` would pass ``max_tool_calls``."""
        if self.max_tool_calls is not None and made + 1 > self.max_tool_calls:
            raise BudgetExceeded(
                f"tool call #{made + 1} would pass max_tool_calls={self.max_tool_calls}; "
                "raise Budget.max_tool_calls to allow it",
                limit="max_tool_calls",
                maximum=self.max_tool_calls,
                observed=made + 1,
            )

    def check_tasks(self, count: int) -> None:
        """Raise if a graph of ``count`` tasks would pass ``max_tasks``."""
        if self.max_tasks is not None and count > self.max_tasks:
            raise BudgetExceeded(
                f"the graph would hold {count} tasks, more than max_tasks={self.max_tasks}; "
                "raise Budget.max_tasks to allow it",
                limit="max_tasks",
                maximum=self.max_tasks,
                observed=count,
            )

    def check_wall(self, elapsed: float) -> None:
        """Raise if ``elapsed`` seconds have passed ``max_wall_seconds``."""
        if self.max_wall_seconds is not None and elapsed > self.max_wall_seconds:
            raise BudgetExceeded(
                f"the run has taken {elapsed:.3f} s, more than "
                f"max_wall_seconds={self.max_wall_seconds:g}; raise Budget.max_wall_seconds",
                limit="max_wall_seconds",
                maximum=self.max_wall_seconds,
                observed=round(elapsed, 3),
            )
