"""The one door every value passes before it is journaled.

Run parameters (``--set``, ``Client.start``; an investigator's question is one), approval
payloads (CLI, web inspector, API, worker), tool arguments and results, a worker's result
and a model's reply all enter the journal through :func:`admit` (or :func:`parse`, for
JSON text from a command line, a file or an HTTP body). A value that passes is one that
every store can keep and give back equal, on any later resume:

- text is valid Unicode: no lone surrogate (``"\\ud800"`` in JSON, or the bytes of invalid
  UTF-8 that Python hands over from argv as ``\\udc80``-``\\udcff``), no NUL (PostgreSQL
  keeps no ``\\u0000``);
- numbers are finite (no ``NaN``, ``Infinity``), object keys are strings;
- depth, size and string length are bounded, by the limits of the value's :class:`Entry`
  in :data:`LIMITS` -- the one place they are written down (docs/cli.md repeats the table).

A refusal is a :class:`ValueRefused` (a ``UsageError``: exit 2 on the command line, 400
on the web) naming what was refused, the rule (:class:`Rule`) and where in the value.
Nothing here does I/O, and the walk is iterative: a value nested 100,000 deep is refused
as ``too_deep``, never a ``RecursionError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from loopkernel.errors import UsageError

__all__ = [
    "LIMITS",
    "Entry",
    "Limits",
    "Rule",
    "ValueRefused",
    "admit",
    "admit_text",
    "parse",
]


class Entry(StrEnum):
    """Where a value comes in: each entry has its limits in :data:`LIMITS`."""

    PARAMS = "run parameters"
    PAYLOAD = "approval payload"
    TOOL_ARGUMENTS = "tool arguments"
    TOOL_RESULT = "tool result"
    MODEL_REQUEST = "model request"
    TASK_RESULT = "task result"
    MODEL_REPLY = "model reply"


class Rule(StrEnum):
    """Why the door refused a value."""

    NOT_JSON = "not_json"
    """Not JSON text, or a Python value JSON has no form for (a set, bytes, a non-string key)."""
    NOT_UNICODE = "not_unicode"
    """A lone surrogate (invalid UTF-8 from argv, a file or HTTP arrives as one) or a NUL."""
    NOT_FINITE = "not_finite"
    """``NaN``, ``Infinity`` or ``-Infinity``."""
    TOO_DEEP = "too_deep"
    """Arrays and objects nested deeper than the entry's ``max_depth``."""
    TOO_LARGE = "too_large"
    """The value's JSON text is longer than the entry's ``max_bytes``."""
    STRING_TOO_LONG = "string_too_long"
    """One string (or key) is longer than the entry's ``max_string_bytes``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """The bounds of one entry."""

    max_depth: int
    """Arrays and objects nested at most this deep (a scalar is depth 0)."""
    max_bytes: int
    """The value's JSON text (UTF-8, compact) has at most this many bytes."""
    max_string_bytes: int
    """Each string and object key has at most this many bytes of UTF-8."""

    def __post_init__(self) -> None:
        if min(self.max_depth, self.max_bytes, self.max_string_bytes) < 1:
            raise ValueError(f"limits must be positive: {self}")


_KIB: Final = 1024
_MIB: Final = 1024 * _KIB

LIMITS: Final[Mapping[Entry, Limits]] = {
    Entry.PARAMS: Limits(max_depth=32, max_bytes=1 * _MIB, max_string_bytes=256 * _KIB),
    Entry.PAYLOAD: Limits(max_depth=16, max_bytes=64 * _KIB, max_string_bytes=64 * _KIB),
    Entry.TOOL_ARGUMENTS: Limits(max_depth=32, max_bytes=1 * _MIB, max_string_bytes=1 * _MIB),
    Entry.TOOL_RESULT: Limits(max_depth=64, max_bytes=16 * _MIB, max_string_bytes=8 * _MIB),
    Entry.TASK_RESULT: Limits(max_depth=64, max_bytes=16 * _MIB, max_string_bytes=8 * _MIB),
    Entry.MODEL_REQUEST: Limits(max_depth=32, max_bytes=4 * _MIB, max_string_bytes=4 * _MIB),
    Entry.MODEL_REPLY: Limits(max_depth=32, max_bytes=4 * _MIB, max_string_bytes=4 * _MIB),
}
"""The limits of every entry, in one place (docs/cli.md, "Values at the door")."""


class ValueRefused(UsageError):
    """A value the door refused: ``entry``, ``rule`` and ``where`` (a JSON path) say which,
    why and where. Nothing was journaled."""

    code = "value_refused"


def _refuse(entry: Entry, rule: Rule, where: str, detail: str) -> ValueRefused:
    at = "" if where == "$" else f" at {where}"
    return ValueRefused(
        f"{entry.value} refused ({rule.value}){at}: {detail}",
        entry=entry.value,
        rule=rule.value,
        where=where,
    )


def _printable(key: str) -> str:
    """A key as a path may show it: a lone surrogate escaped, never sent on."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def _check_text(text: str, entry: Entry, where: str, limit: int) -> int:
    """The UTF-8 size of ``text``, or ``ValueRefused``."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise _refuse(
            entry, Rule.NOT_UNICODE, where, f"a lone surrogate U+{ord(bad):04X} (not valid Unicode)"
        ) from None
    if "\x00" in text:
        raise _refuse(entry, Rule.NOT_UNICODE, where, "a NUL character (U+0000)")
    if size > limit:
        raise _refuse(
            entry, Rule.STRING_TOO_LONG, where, f"{size} bytes, at most {limit} bytes per string"
        )
    return size + 2


def _scalar_size(value: Any, entry: Entry, where: str) -> int:
    if value is None or isinstance(value, bool):
        return 5 if value is False else 4
    if isinstance(value, int):
        digits = math.floor(math.log10(abs(value))) + 2 if value else 1
        if digits > 4000:  # past int's str() limit: json.dumps would raise
            raise _refuse(entry, Rule.TOO_LARGE, where, f"an integer of about {digits} digits")
        return digits
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _refuse(entry, Rule.NOT_FINITE, where, f"{value!r} is not a JSON number")
        return len(repr(value))
    raise _refuse(entry, Rule.NOT_JSON, where, f"a {type(value).__name__} has no JSON form")


def admit(value: Any, entry: Entry) -> Any:
    """``value`` itself when it may enter as ``entry``, else ``ValueRefused``.

    The walk is iterative and stops at the first refusal; the size counted is that of the
    value's compact JSON text (escapes aside), so a value far over the limit is refused
    before any JSON of it is made."""
    limits = LIMITS[entry]
    size = 0
    stack: list[tuple[Any, int, str]] = [(value, 0, "$")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            size += _check_text(item, entry, where, limits.max_string_bytes)
        elif isinstance(item, dict | list | tuple):
            if depth + 1 > limits.max_depth:
                raise _refuse(
                    entry, Rule.TOO_DEEP, where, f"nested deeper than {limits.max_depth} levels"
                )
            size += 2 + max(len(item) - 1, 0)
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise _refuse(
                            entry, Rule.NOT_JSON, where, f"an object key {key!r} is not a string"
                        )
                    size += 1 + _check_text(key, entry, where, limits.max_string_bytes)
                    stack.append((child, depth + 1, f"{where}.{_printable(key[:40])}"))
            else:
                stack.extend((c, depth + 1, f"{where}[{i}]") for i, c in enumerate(item))
        else:
            size += _scalar_size(item, entry, where)
        if size > limits.max_bytes:
            raise _refuse(
                entry,
                Rule.TOO_LARGE,
                "$",
                f"larger than allowed: at most {limits.max_bytes} bytes of JSON",
            )
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse(text: str | bytes, entry: Entry) -> Any:
    """The JSON value of ``text`` (a command line's argument, a file, an HTTP body), through
    :func:`admit`. Bytes must be UTF-8; text longer than the entry's ``max_bytes`` is
    refused before it is parsed, and nesting past its ``max_depth`` before it is built."""
    limits = LIMITS[entry]
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _refuse(
                entry, Rule.NOT_UNICODE, "$", f"not UTF-8 (byte {exc.start}: {exc.reason})"
            ) from None
    if len(text) > limits.max_bytes:  # characters: at least one byte each
        raise _refuse(
            entry,
            Rule.TOO_LARGE,
            "$",
            f"larger than allowed: at most {limits.max_bytes} bytes of JSON",
        )
    _check_nesting(text, entry, limits.max_depth)
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError is one
        if "not a JSON number" in str(exc):
            raise _refuse(entry, Rule.NOT_FINITE, "$", str(exc)) from None
        raise _refuse(entry, Rule.NOT_JSON, "$", f"the text is not JSON: {exc}") from None
    return admit(value, entry)


def _check_nesting(text: str, entry: Entry, max_depth: int) -> None:
    """Refuse JSON text nested deeper than ``max_depth`` before it is parsed (the parser
    recurses). Brackets inside strings are not counted."""
    if text.count("[") + text.count("{") <= max_depth:
        return
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                raise _refuse(entry, Rule.TOO_DEEP, "$", f"nested deeper than {max_depth} levels")
        elif ch in "]}":
            depth -= 1


def admit_text(text: str, entry: Entry) -> str:
    """A plain string (a question, a ``--set`` value that is not JSON) through the door."""
    if not isinstance(text, str):
        raise _refuse(entry, Rule.NOT_JSON, "$", f"a {type(text).__name__}, not text")
    admit(text, entry)
    return text
