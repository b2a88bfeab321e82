"""The command line's exit codes (docs/cli.md), and the shape of a command's handler: one
module every command imports, so no command imports ``_main`` back."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine
from typing import Any

from loopkernel.graph import RunStatus

__all__ = [
    "BROKEN_PIPE",
    "EXIT_CODES",
    "HELD",
    "INCOMPATIBLE_VERSION",
    "NOT_A_DATABASE",
    "STORE_UNAVAILABLE",
    "TERMINATED",
    "TIMER_WAIT",
    "USAGE",
    "Handler",
]

EXIT_CODES: dict[RunStatus, int] = {
    RunStatus.SUCCEEDED: 0,
    RunStatus.FAILED: 1,
    RunStatus.WAITING: 3,
    RunStatus.ESCALATED: 4,
    RunStatus.CANCELLED: 5,
    RunStatus.RUNNING: 6,
}
"""A run's status as the exit code of the command that ran, resumed or inspected it."""
USAGE = 2
"""Bad arguments or a misuse (``UsageError``)."""
HELD = 7
"""Another executor holds the run (``RunHeld``)."""
STORE_UNAVAILABLE = 8
"""The store did not answer within ``--store-retry``."""
NOT_A_DATABASE = 9
"""No usable LoopKernel database at the path or URL."""
INCOMPATIBLE_VERSION = 10
"""This version of the app refuses to resume the run."""
TIMER_WAIT = 11
"""``wait`` returned while the run sleeps on a timer (no human is asked for anything)."""
TERMINATED = 143
"""SIGTERM stopped the command; a run it executed was stopped between two steps, its
tasks in flight cancelled and its lease given back (the resume command is printed)."""
BROKEN_PIPE = 141
"""The reader of stdout went away (as a shell reports SIGPIPE)."""

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
"""A command: parsed arguments in, exit code out."""
