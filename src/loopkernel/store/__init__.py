"""Stores: protocols sized to their callers (``Journal``, ``Effects``, ``Leases``,
``Catalog``; ``Store`` is all four) over one SQL engine, embedded SQLite, and PostgreSQL
behind an extra."""

from __future__ import annotations

import os

from loopkernel.errors import UsageError, install_hint
from loopkernel.store._codec import digest_of, dump_of_state
from loopkernel.store._kb import Knowledge, NewPassage, Passage
from loopkernel.store._lockwait import DEFAULT_LOCK_WAIT_S
from loopkernel.store._protocol import (
    Archive,
    ArchiveSource,
    Catalog,
    Claim,
    EffectRecord,
    Effects,
    Fork,
    Journal,
    Leases,
    LoadedRun,
    NewEvent,
    NewRun,
    PatchRecord,
    ProposalNote,
    Reclaimed,
    RunInfo,
    Schedule,
    ScheduleEvent,
    Store,
)
from loopkernel.store._sqlite import SQLiteStore

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_LOCK_WAIT_S",
    "Archive",
    "ArchiveSource",
    "Catalog",
    "Claim",
    "EffectRecord",
    "Effects",
    "Fork",
    "Journal",
    "Knowledge",
    "Leases",
    "LoadedRun",
    "NewEvent",
    "NewPassage",
    "NewRun",
    "Passage",
    "PatchRecord",
    "ProposalNote",
    "Reclaimed",
    "RunInfo",
    "SQLiteStore",
    "Schedule",
    "ScheduleEvent",
    "Store",
    "digest_of",
    "dump_of_state",
    "open_store",
]

DEFAULT_DB = "runs.db"


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """A store for ``url``: a path or ``sqlite:///path`` (SQLite), ``postgresql://...``.

    ``None`` reads ``LOOPKERNEL_DB``, then falls back to ``runs.db``. The store is not
    opened yet: ``await store.open()``. ``create=False``: opening a SQLite path or a
    PostgreSQL database that holds no LoopKernel database raises ``NotADatabase`` instead
    of making one (nothing is written).
    """
    url = url or os.environ.get("LOOPKERNEL_DB") or DEFAULT_DB
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from loopkernel.store._postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise UsageError(
                f"the PostgreSQL store needs the postgres extra: {install_hint('postgres')} ({exc})"
            ) from None
        store: Store = PostgresStore(url, create=create)
        return store
    if url.startswith("sqlite:///"):
        url = url.removeprefix("sqlite:///")
    elif "://" in url:
        raise UsageError(
            f"unknown database URL {url!r}: use a file path, sqlite:///, postgresql://"
        )
    return SQLiteStore(url, create=create, lock_wait_s=_lock_wait_s())


_LOCK_WAIT_ENV = "LOOPKERNEL_SQLITE_LOCK_WAIT_S"
"""Seconds, in all, a SQLite write waits for another process's write lock (the store's
``lock_wait_s``); ``LOOPKERNEL_SQLITE_BUSY_TIMEOUT``, its name before, is still read."""


def _lock_wait_s() -> float:
    """``LOOPKERNEL_SQLITE_LOCK_WAIT_S`` (else the older ``LOOPKERNEL_SQLITE_BUSY_TIMEOUT``):
    seconds, in all, a write waits (off the loop, with an async backoff) for another
    process's write lock."""
    name = _LOCK_WAIT_ENV
    raw = os.environ.get(name)
    if not raw:
        name = "LOOPKERNEL_SQLITE_BUSY_TIMEOUT"
        raw = os.environ.get(name)
    if not raw:
        return DEFAULT_LOCK_WAIT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise UsageError(f"{name} must be seconds >= 0, not {raw!r}")
    return seconds
