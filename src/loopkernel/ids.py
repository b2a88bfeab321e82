"""Identifiers. Plain strings at run time; distinct types for the type checker."""

from __future__ import annotations

import secrets
from typing import NewType

__all__ = ["RunId", "TaskId", "new_run_id"]

RunId = NewType("RunId", str)
"""A run's identity, unique in its store."""

TaskId = NewType("TaskId", str)
"""A task's identity, unique in its run."""


def new_run_id() -> RunId:
    """A fresh random run id, short enough to type."""
    return RunId("run-" + secrets.token_hex(6))
