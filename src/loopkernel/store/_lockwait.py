"""The lock wait: one knob, one name (``lock_wait_s``), one home.

How long, in all, a store call waits for a write lock another process holds (SQLite's;
PostgreSQL bounds its wait for a connection by the same bound) before it is
``StoreUnavailable``: the store's ``lock_wait_s`` (``SQLiteStore(lock_wait_s=...)``,
``LOOPKERNEL_SQLITE_LOCK_WAIT_S``), bounded in a context by ``lock_wait_at_most``
(``Client.execute``: what is left of ``ExecutionConfig.store_retry_s``, or
``ExecutionConfig.lock_wait_s``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["DEFAULT_LOCK_WAIT_S", "lock_wait_at_most", "lock_wait_s_bound", "lock_wait_s_within"]

DEFAULT_LOCK_WAIT_S = 10.0
"""``lock_wait_s`` when none is given: seconds, in all, a store call waits for a write lock
another process holds before it is ``StoreUnavailable``."""

_LOCK_WAIT_S_BOUND: ContextVar[float | None] = ContextVar("loopkernel_lock_wait_s", default=None)
"""What ``lock_wait_at_most`` set: an upper bound on the store's ``lock_wait_s`` for the
calls made in this context (``Client.execute`` sets what is left of ``store_retry_s``:
the retries' bound is a total time, not attempts x lock waits)."""


@contextmanager
def lock_wait_at_most(seconds: float) -> Iterator[None]:
    """Within the block, no store call waits longer than ``seconds`` for a held lock."""
    token = _LOCK_WAIT_S_BOUND.set(seconds)
    try:
        yield
    finally:
        _LOCK_WAIT_S_BOUND.reset(token)


def lock_wait_s_within(own: float) -> float:
    """``own`` (a store's ``lock_wait_s``, a connect timeout), never more than the bound
    ``lock_wait_at_most`` set in this context; at least 0."""
    bound = _LOCK_WAIT_S_BOUND.get()
    return own if bound is None else max(0.0, min(own, bound))


def lock_wait_s_bound() -> float | None:
    """What is left of the total ``lock_wait_at_most`` set in this context, or None."""
    return _LOCK_WAIT_S_BOUND.get()
