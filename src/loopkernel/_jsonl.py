"""Append-only JSON-lines files: whole lines, fsynced, a torn tail cut off on load.

Every JSON-lines file LoopKernel writes (a tool's ``KeyLedger``, looplab's run records, the
execution traces of ``loopkernel.testing``) goes through ``append_line`` and is read back
with ``load_lines``:

- a line is one ``write`` on an ``O_APPEND`` descriptor, then ``fsync``;
- a short write (a disk that filled up in the middle of the line) is an error: the
  fragment is cut off again and ``OSError(ENOSPC)`` raised, so the next line never lands
  glued to half of this one;
- on load, a last line without its newline (a crash, or a cut that failed) is a torn tail:
  it is dropped (and cut off the file when repairing), so whatever it recorded happens
  again -- a tool's effect is re-sent under its idempotency key. A line in the middle that
  is not a JSON object is never skipped: it is an error naming the file and the line.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from loopkernel.errors import UsageError

__all__ = ["append_line", "dump_line", "load_lines"]


def dump_line(entry: Any) -> bytes:
    """``entry`` as one canonical JSON line (sorted keys, no spaces, a newline)."""
    return (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode()


def append_line(path: str | os.PathLike[str], line: bytes, *, mode: int = 0o600) -> None:
    """Append ``line`` (one line, ending in a newline) whole and durably, or raise."""
    if not line.endswith(b"\n") or b"\n" in line[:-1]:
        raise ValueError("append_line writes exactly one line ending in a newline")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        start = os.fstat(fd).st_size
        written = os.write(fd, line)
        if written != len(line):
            # O_APPEND wrote at the end: cut what landed, so the file still ends in a
            # whole line, and refuse.
            os.ftruncate(fd, start)
            raise OSError(
                errno.ENOSPC,
                f"short write: {written} of {len(line)} bytes (the disk is full?); the "
                "fragment was cut off",
                os.fspath(path),
            )
        os.fsync(fd)
    finally:
        os.close(fd)


def load_lines(path: str | os.PathLike[str], *, repair: bool = True) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, oldest first (``[]`` if there is no file).

    A torn last line is dropped, and cut off the file when ``repair``; a bad line before
    it is a ``UsageError`` naming the file and the line.
    """
    file = Path(path)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        return []
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        data = data[:cut]
        if repair:
            os.truncate(file, cut)
    out = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{file} line {n} is not JSON ({exc}); it is not a torn tail, "
                "so it is not dropped: repair or move the file"
            ) from None
        if not isinstance(entry, dict):
            raise UsageError(f"{file} line {n} is not a JSON object")
        out.append(entry)
    return out
