"""One line read: its timestamp prefix, then JSON, logfmt or plain text with a level.

Every pattern here is anchored or bounded and has no nested quantifier, so a line is read
in time linear in its length.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from loopkernel_apps.sre._logs._records import Format, Level, Record

__all__ = ["Line", "parse_line"]

MAX_LINE = 8_000
"""Characters of a line that are read; the rest is kept in ``raw`` only."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Line:
    """A line with its prefixes read; ``body`` is what trace grouping looks at."""

    number: int
    raw: str
    body: str
    record: Record


_LEVEL_WORDS: dict[str, Level] = {
    **dict.fromkeys(("trace", "trce", "debug", "dbug", "verbose"), Level.DEBUG),
    **dict.fromkeys(("info", "information", "informational", "notice"), Level.INFO),
    **dict.fromkeys(("warn", "warning"), Level.WARNING),
    **dict.fromkeys(("error", "err", "fail", "severe", "eror"), Level.ERROR),
    **dict.fromkeys(
        ("fatal", "critical", "crit", "panic", "dpanic", "emerg", "emergency", "alert"),
        Level.FATAL,
    ),
}
"""Level names as the common loggers write them (zap, logrus, slog, log4j, .NET, Python)."""
_PINO_LEVELS = {10: Level.DEBUG, 20: Level.DEBUG, 30: Level.INFO, 40: Level.WARNING,
                50: Level.ERROR, 60: Level.FATAL}
_KLOG_LEVELS = {"I": Level.INFO, "W": Level.WARNING, "E": Level.ERROR, "F": Level.FATAL}

LEVEL_KEYS = ("level", "severity", "lvl", "levelname", "loglevel", "log.level", "@l")
MESSAGE_KEYS = ("msg", "message", "@m", "@mt", "event")
ERROR_KEYS = ("error", "err", "error.message", "exception", "exc_info", "reason")
STACK_KEYS = ("stack", "stacktrace", "stack_trace", "error.stack", "exception", "exc_info")
TIME_KEYS = ("ts", "time", "timestamp", "@t", "@timestamp", "t", "datetime")

_MONTHS = {m: i + 1 for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"))}


def _iso_seconds(m: re.Match[str]) -> float | None:
    year, month, day, hh, mm, ss = (int(m.group(k)) for k in range(1, 7))
    frac = (m.group(7) or "0")[:6].ljust(6, "0")
    zone = m.group(8)
    tz = UTC
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0)))
    try:
        when = datetime(year, month, day, hh, mm, ss, int(frac), tzinfo=tz)
    except ValueError:
        return None
    return when.timestamp()


def _klog_seconds(m: re.Match[str]) -> float | None:
    try:
        when = datetime(2000, int(m.group(2)), int(m.group(3)), int(m.group(4)),
                        int(m.group(5)), int(m.group(6)), int(m.group(7)[:6].ljust(6, "0")),
                        tzinfo=UTC)
    except ValueError:
        return None
    return when.timestamp()


def _syslog_seconds(m: re.Match[str]) -> float | None:
    try:
        when = datetime(2000, _MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)),
                        int(m.group(4)), int(m.group(5)), tzinfo=UTC)
    except ValueError:
        return None
    return when.timestamp()


_ISO = (r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
        r"(Z|[+-]\d{2}:?\d{2})?")
_ISO_RE = re.compile(_ISO)
_PREFIXES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], float | None]], ...] = (
    (re.compile(r"\[?" + _ISO + r"(?: UTC)?\]?(?:[ \t]|$|(?=\[))"), _iso_seconds),
    (re.compile(r"\[?(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?()\]?"
                r"(?:[ \t]|$|(?=\[))"), _iso_seconds),
    (re.compile(r"([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{1,9})\s+\d+ [^\s\]]+\] ?"),
     _klog_seconds),
    (re.compile(r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(\d{1,2}) "
                r"(\d{2}):(\d{2}):(\d{2})[ \t]"), _syslog_seconds),
)
"""Timestamp prefixes: RFC 3339 (kubectl ``--timestamps``, most loggers), Go's ``log``, klog
(``E1203 10:00:00.123456 1 file.go:12]``), syslog. Each takes one blank after it: what
follows is the line's own (a trace's frames keep their indentation)."""


def _strip_prefixes(text: str) -> tuple[str, str | None, float | None, Level]:
    """The text after up to two timestamp prefixes, the first timestamp, its seconds, and
    klog's level letter."""
    stamp: str | None = None
    seconds: float | None = None
    level = Level.NONE
    for _ in range(2):
        for pattern, to_seconds in _PREFIXES:
            m = pattern.match(text)
            if m is None:
                continue
            if stamp is None:
                stamp, seconds = m.group(0).strip().strip("[]"), to_seconds(m)
            if pattern is _PREFIXES[2][0]:
                level = _KLOG_LEVELS[m.group(1)]
            text = text[m.end():]
            break
        else:
            break
    return text, stamp, seconds, level


_LEVEL_NAMES = (r"(trace|trce|debug|dbug|info|information|notice|warn|warning|error|err|eror"
                r"|fail|severe|fatal|critical|crit|panic|emerg|alert)")
_LEADING_LEVEL = re.compile(
    rf"(?:\[ ?{_LEVEL_NAMES} ?\]|<{_LEVEL_NAMES}>|{_LEVEL_NAMES}:)\s*", re.IGNORECASE
)
_BRACKET_LEVEL = re.compile(rf"\[ ?{_LEVEL_NAMES} ?\]", re.IGNORECASE)
"""A bracketed level inside a line's head (envoy's ``[…][1][warning][config]``, gunicorn's
``[…] [7] [ERROR]``)."""
"""A level that opens the text: ``ERROR:root:…``, ``[warn] …``, ``fail: Category[0]``."""
_INNER_LEVEL = re.compile(
    r"(?:^|[\s\[|(])(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|SEVERE|FATAL|CRITICAL|PANIC)"
    r"(?=[\s\]|):]|$)"
)
"""An upper-case level inside a line's head (``[main] ERROR o.s.Foo - …``)."""
_HEAD = 80


def _plain_level(text: str) -> tuple[Level, str]:
    m = _LEADING_LEVEL.match(text)
    if m is not None:
        word = next(g for g in m.groups() if g)
        return _LEVEL_WORDS[word.lower()], text[m.end():]
    m = _BRACKET_LEVEL.search(text[:_HEAD]) or _INNER_LEVEL.search(text[:_HEAD])
    if m is not None:
        word = next(g for g in m.groups() if g)
        return _LEVEL_WORDS[word.lower()], text
    return Level.NONE, text


def _flatten(value: Any, prefix: str, out: list[tuple[str, str]], depth: int) -> None:
    if isinstance(value, dict) and depth < 3:
        for key, inner in value.items():
            _flatten(inner, f"{prefix}.{key}" if prefix else str(key), out, depth + 1)
    elif isinstance(value, str):
        out.append((prefix, value))
    else:
        out.append((prefix, json.dumps(value, sort_keys=True, default=str)))


def _json_fields(body: str) -> tuple[tuple[str, str], ...] | None:
    if not (body.startswith("{") and body.rstrip().endswith("}")):
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    out: list[tuple[str, str]] = []
    _flatten(value, "", out, 0)
    return tuple(out)


_LOGFMT_PAIR = re.compile(r'([A-Za-z_@][\w.@-]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)')
_LOGFMT_START = re.compile(r"[A-Za-z_@][\w.@-]*=")


def _logfmt_fields(body: str) -> tuple[tuple[str, str], ...] | None:
    if not _LOGFMT_START.match(body):
        return None
    pairs: list[tuple[str, str]] = []
    for m in _LOGFMT_PAIR.finditer(body):
        value = m.group(2)
        if value.startswith('"'):
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        pairs.append((m.group(1), value))
    return tuple(pairs) if len(pairs) >= 2 else None


def _structured_level(value: str | None) -> Level:
    if value is None:
        return Level.NONE
    if value.isdigit():
        return _PINO_LEVELS.get(int(value), Level.NONE)
    return _LEVEL_WORDS.get(value.strip().lower(), Level.NONE)


def _structured_time(value: str | None) -> tuple[str | None, float | None]:
    if value is None:
        return None, None
    try:
        number = float(value)
    except ValueError:
        m = _ISO_RE.match(value)
        return value, (_iso_seconds(m) if m else None)
    return value, (number / 1000.0 if number > 1e11 else number)


def _structured(
    number: int, fields: tuple[tuple[str, str], ...], fmt: Format, stamp: str | None,
    seconds: float | None,
) -> Record:
    probe = Record(first_line=number, last_line=number, format=fmt, level=Level.NONE,
                   message="", fields=fields)
    level = _structured_level(probe.field(*LEVEL_KEYS))
    ts, secs = _structured_time(probe.field(*TIME_KEYS))
    return Record(
        first_line=number,
        last_line=number,
        format=fmt,
        level=level,
        message=probe.field(*MESSAGE_KEYS) or "",
        error=probe.field(*ERROR_KEYS),
        timestamp=stamp or ts,
        seconds=seconds if seconds is not None else secs,
        fields=fields,
    )


def parse_line(number: int, raw: str) -> Line:
    """Read one line (``number`` is 1-based)."""
    text = raw[:MAX_LINE].rstrip()
    body, stamp, seconds, klog_level = _strip_prefixes(text)
    for fmt, reader in ((Format.JSON, _json_fields), (Format.LOGFMT, _logfmt_fields)):
        fields = reader(body)
        if fields is not None:
            return Line(number=number, raw=raw, body=body,
                        record=_structured(number, fields, fmt, stamp, seconds))
    level, message = _plain_level(body)
    if klog_level is not Level.NONE:
        level = klog_level
    record = Record(first_line=number, last_line=number, format=Format.PLAIN, level=level,
                    message=message.strip(), timestamp=stamp, seconds=seconds)
    return Line(number=number, raw=raw, body=body, record=record)
