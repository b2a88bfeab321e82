"""A damaged SQLite file is detected, not trusted (docs/durability.md, "A damaged file").

SQLite keeps no checksums: a page overwritten by a bad disk, a torn copy or a stray
``dd`` is read as whatever it now holds, until a b-tree walk trips on it, or never. So
the store asks SQLite to walk the file itself, at two moments only (never on the hot
path):

- **on open**, before anything is written to it (``PRAGMA quick_check``: every b-tree
  page, every cell, the free list; O(file size), about a millisecond per MiB; the index
  contents too with ``LOOPKERNEL_SQLITE_CHECK=full``, ``integrity_check``; ``off`` skips
  the walk, for a file known good and too big to walk at every open);
- **at the first error of any kind** from SQLite (a malformed page met by a query, an
  I/O error, a row whose text is not UTF-8): the same walk decides whether the file is
  damaged or the error is something else (a held lock, a full disk).

A damaged file is refused with ``NotADatabase`` (exit 9) and one line that says what to
do; from then on the store writes nothing to it, reads included refused: a partial
answer from a damaged file is a wrong answer.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from loopkernel.errors import NotADatabase

__all__ = ["CHECK_ENV", "Check", "check_of_env", "content_damage", "damaged", "walk"]

CHECK_ENV = "LOOPKERNEL_SQLITE_CHECK"
"""The variable that picks the walk on open: ``quick`` (default), ``full`` or ``off``."""


class Check(StrEnum):
    """How a file is walked on open (at an error, ``OFF`` still walks it quickly)."""

    QUICK = "quick"
    FULL = "full"
    OFF = "off"


def check_of_env(env: Mapping[str, str] = os.environ) -> Check:
    """The walk ``LOOPKERNEL_SQLITE_CHECK`` asks for; an unknown value is the default."""
    text = env.get(CHECK_ENV, "").strip().lower()
    return Check(text) if text in {c.value for c in Check} else Check.QUICK


def damaged(path: Path, detail: str) -> NotADatabase:
    """The one refusal of a damaged file: what was found, and the way back."""
    return NotADatabase(
        f"{path} is damaged ({detail}); LoopKernel will not read or write it. Restore your "
        f"last copy (loopkernel export), or salvage what SQLite can: "
        f"sqlite3 {path} .recover | sqlite3 {path}.recovered && "
        f"loopkernel --db {path}.recovered runs (docs/durability.md)",
        path=str(path),
        reason="damaged",
    )


def walk(db: sqlite3.Connection, path: Path, check: Check) -> NotADatabase | None:
    """The file's damage as the refusal to raise, or ``None`` when the walk finds none.
    A walk that itself fails on the file (a page it cannot read) is damage too; one that
    fails for another reason (a held lock) is not judged: ``None``."""
    pragma = "integrity_check(5)" if check is Check.FULL else "quick_check(5)"
    try:
        rows = db.execute(f"PRAGMA {pragma}").fetchall()
    except sqlite3.DatabaseError as exc:
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        if code in (11, 26) or "malformed" in str(exc) or "not a database" in str(exc):
            return damaged(path, " ".join(str(exc).split()))
        return None
    found = [str(r[0]) for r in rows if r and r[0] != "ok"]
    if not found:
        return None
    detail = "; ".join(" ".join(f.split()) for f in found[:2])
    return damaged(path, f"{pragma.partition('(')[0]}: {detail[:300]}")


def content_damage(exc: BaseException) -> str | None:
    """Why ``exc`` says a stored value cannot be what LoopKernel wrote (text that is not
    UTF-8, JSON that does not parse), or ``None``."""
    if isinstance(exc, UnicodeDecodeError | json.JSONDecodeError):
        return f"a stored value cannot be read: {type(exc).__name__}"
    if isinstance(exc, sqlite3.OperationalError) and "Could not decode" in str(exc):
        return "a stored text is not UTF-8"
    return None
