"""Identifiers. Plain strings at run time; distinct types for the type checker.

Run ids and task ids share one grammar, :data:`ID_PATTERN`: a letter or digit, then up to
127 letters, digits and ``. _ : -``. No slash, no space, nothing that a path, a shell, a
URL or a ``pg_notify`` payload could misread. It is checked at every door (``Kernel.start``,
the client, patch validation, the CLI) before anything is written.
"""

from __future__ import annotations

import re
import secrets
from typing import NewType

from loopkernel.errors import UsageError

__all__ = ["ID_PATTERN", "MAX_ID", "RunId", "TaskId", "check_id", "new_run_id", "valid_id"]

RunId = NewType("RunId", str)
"""A run's identity, unique in its store."""

TaskId = NewType("TaskId", str)
"""A task's identity, unique in its run."""

MAX_ID = 128
"""Longest run id or task id, in characters."""

ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
"""The grammar of run ids and task ids."""

_ID = re.compile(ID_PATTERN)


def valid_id(value: object) -> bool:
    """Whether ``value`` is a string that follows :data:`ID_PATTERN`."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def check_id(value: object, what: str = "run id") -> str:
    """``value`` if it is a valid id, else a ``UsageError`` that says what is wrong."""
    if valid_id(value):
        return str(value)
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise UsageError(f"{what} is empty; leave it out for a random one")
    shown = value if len(value) <= 40 else value[:37] + "..."
    if len(value) > MAX_ID:
        raise UsageError(f"{what} {shown!r} is {len(value)} characters long; at most {MAX_ID}")
    raise UsageError(
        f"{what} {shown!r} is not allowed: use letters, digits and . _ : - "
        "(starting with a letter or digit)"
    )


def new_run_id() -> RunId:
    """A fresh random run id, short enough to type."""
    return RunId("run-" + secrets.token_hex(6))
