"""Execution traces: workers note ``start``/``done`` lines into ``LOOPKERNEL_TRACE``.

Crash tests count the lines to prove that finished tasks never ran again. The file is
opened in append mode per line (O_APPEND writes of one short line are atomic), so a
SIGKILL leaves whole lines only.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

__all__ = ["read_trace", "trace"]


def trace(what: str, task_id: str) -> None:
    """Append ``"<what> <task_id>"`` to the file ``LOOPKERNEL_TRACE`` names, if it is set."""
    path = os.environ.get("LOOPKERNEL_TRACE")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{what} {task_id}\n".encode())
    finally:
        os.close(fd)


def read_trace(path: str | os.PathLike[str]) -> Counter[tuple[str, str]]:
    """Count ``(what, task_id)`` lines of a trace file."""
    counts: Counter[tuple[str, str]] = Counter()
    file = Path(path)
    if not file.exists():
        return counts
    for line in file.read_text().splitlines():
        what, _, task_id = line.partition(" ")
        counts[(what, task_id)] += 1
    return counts
