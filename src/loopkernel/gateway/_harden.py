"""The gateway process guards the keys it holds from other processes of the same user.

Once the providers have read their keys (``Gateway.__init__``), ``harden(names)``:

- makes the process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, Linux): no core dump,
  no ``ptrace`` attach, and ``/proc/PID/environ``, ``mem``, ``maps`` ... owned by root,
  so a same-user process cannot read them (root can: run the gateway as its own user);
- removes the key variables (and the gateway token) from ``os.environ``, so nothing the
  gateway starts inherits them;
- overwrites their values in the environment block the process was started with, which
  is what ``/proc/PID/environ`` shows (``os.environ`` is a copy), so not even a reader
  allowed through the first rule finds them there.

Each step is best effort where the platform lacks it (not Linux: only ``os.environ``).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable

__all__ = ["dumpable", "harden"]

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3


def _prctl(option: int, arg: int = 0) -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, arg, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def dumpable() -> bool | None:
    """Whether this process is dumpable (None: unknown on this platform)."""
    value = _prctl(_PR_GET_DUMPABLE)
    return None if value is None or value < 0 else bool(value)


def _wipe_initial_environ(names: frozenset[str]) -> int:
    """Overwrite the values of ``names`` in the process's initial environment block (the
    memory ``/proc/self/environ`` reads); the number of values wiped."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[50 - 3]), int(fields[51 - 3])  # env_start, env_end (Linux 3.5+)
    except (OSError, ValueError, IndexError):
        return 0
    if not 0 < start < end or end - start > 16 * 1024 * 1024:
        return 0
    block = (ctypes.c_char * (end - start)).from_address(start)
    raw = bytes(block)
    wiped, offset = 0, 0
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and value and name.decode("latin-1") in names:
            at = offset + len(name) + 1
            ctypes.memset(start + at, 0, len(value))
            wiped += 1
        offset += len(entry) + 1
    return wiped


def harden(names: Iterable[str]) -> dict[str, object]:
    """Apply the module's three steps for the variables ``names``; what was done."""
    wanted = frozenset(n for n in names if n)
    removed = sorted(n for n in wanted if os.environ.pop(n, None) is not None)
    done = _prctl(_PR_SET_DUMPABLE, 0)
    wiped = _wipe_initial_environ(wanted) if sys.platform.startswith("linux") else 0
    return {"non_dumpable": done == 0, "removed": removed, "wiped": wiped}
