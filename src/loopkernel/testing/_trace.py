"""Execution traces: workers note ``start``/``done`` lines into ``LOOPKERNEL_TRACE``.

Crash tests count the lines to prove that finished tasks never ran again. Each line is
written whole and fsynced by ``append_line`` (a short write is an error, not a fragment),
and a torn last line is not counted.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from loopkernel._jsonl import append_line

__all__ = ["read_trace", "trace"]


def trace(what: str, task_id: str) -> None:
    """Append ``"<what> <task_id>"`` to the file ``LOOPKERNEL_TRACE`` names, if it is set."""
    path = os.environ.get("LOOPKERNEL_TRACE")
    if not path:
        return
    append_line(path, f"{what} {task_id}\n".encode())


def read_trace(path: str | os.PathLike[str]) -> Counter[tuple[str, str]]:
    """Count ``(what, task_id)`` lines of a trace file."""
    counts: Counter[tuple[str, str]] = Counter()
    file = Path(path)
    if not file.exists():
        return counts
    text = file.read_text()
    for line in text[: text.rfind("\n") + 1].splitlines():  # not a torn last line
        what, _, task_id = line.partition(" ")
        counts[(what, task_id)] += 1
    return counts
