"""A whole log read: the decisive error, what it names, recovery, and upstream failures."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopkernel_apps.sre._logs._entities import (
    UPSTREAM_KEYS,
    entities,
    split_upstream,
    structured_status,
)
from loopkernel_apps.sre._logs._kinds import (
    CREDENTIAL_KINDS,
    ERRNO_KINDS,
    Kinded,
    exception_kind,
    status_kind,
    text_kind,
)
from loopkernel_apps.sre._logs._lines import Line, parse_line
from loopkernel_apps.sre._logs._records import (
    Entities,
    ErrorKind,
    ErrorReading,
    Format,
    Level,
    Record,
    Recovery,
    Runtime,
    UpstreamFailure,
)
from loopkernel_apps.sre._logs._traces import group

__all__ = ["LogReading", "read_log", "read_record"]

MAX_RECORDS = 200
"""Records a reading keeps (the last ones)."""
MAX_ERRORS = 50
"""Error readings a reading keeps (the last ones)."""
MAX_UPSTREAM_FAILURES = 20
CONTEXT_LINES = 3
"""Lines of context on each side of a cited line."""
MAX_QUOTE = 500
MAX_STEP_BACK = 20
"""Error records looked back over when the last ones only say the program ends."""
STEP_BACK_GAP = 3
"""A generic error line is stepped over only when the error before it is this close."""
MAX_WARNINGS = 20

_IMPLICIT_ERROR = re.compile(
    r"(?i:\b(?:failed|failure|fatal|cannot|can't|could not|couldn't|unable to|refused|denied"
    r"|panic|timed out|aborting|segmentation fault|core dumped|out of memory)\b|\berror:)"
    r"|\b[A-Z]\w*(?:Error|Exception)\b"
)
"""A line with no level that still says something failed (Go's ``log``, ``print``)."""
_WRAPPER = re.compile(
    r"(?i)(?:\bexit(?:ing|ed)?\b|exit (?:status|code) \d+|shutting down|shutdown"
    r"|\bstopp(?:ed|ing)\b|giving up|see above|terminat(?:ed|ing)|aborting"
    r"|application run failed|process exited"
    r"|unhandled error, exiting)"
)
"""A line that only says the program is ending: the cause is the error before it."""
_SUCCESS = re.compile(
    r"(?i)\b(?:re-?connected|connection (?:re-?)?established|recovered|succeeded|successfully"
    r"|listening on|server started|started (?:on|at) |ready to accept|is ready|now healthy"
    r"|back online|connected to)\b"
)
"""A line that shows the program working again after an error."""
_WEAK_FOR_AUTH = {ErrorKind.CONNECTION_REFUSED, ErrorKind.UPSTREAM_5XX, ErrorKind.TIMEOUT,
                  ErrorKind.CRASH, ErrorKind.OTHER}


def _parts(record: Record) -> list[str]:
    """The record's texts, the most specific first: the innermost cause, the outer causes,
    the message, the structured error."""
    parts: list[str] = []
    if record.trace is not None:
        for cause in reversed(record.trace.chain):
            parts.append(f"{cause.exception_type}: {cause.message}" if cause.exception_type
                         else cause.message)
    parts.append(record.message)
    if record.error:
        parts.append(record.error)
    return parts


def _structured_kind(record: Record, ents: Entities) -> Kinded | None:
    if ents.errno is not None and ents.errno.upper() in ERRNO_KINDS:
        return Kinded(kind=ERRNO_KINDS[ents.errno.upper()], signal=f"errno {ents.errno}")
    status = structured_status(record)
    if status is not None:
        kind = status_kind(status, from_upstream=ents.host is not None or ents.url is not None)
        if kind is not None:
            return Kinded(kind=kind, signal=f"status {status}")
    chain = reversed(record.trace.chain) if record.trace is not None else ()
    names = [c.exception_type for c in chain] + [record.field("error.type", "exc_type", "type")]
    for name in names:
        kind = exception_kind(name)
        if kind is not None:
            return Kinded(kind=kind, signal=f"exception {name}")
    return None


def classify(record: Record, ents: Entities) -> Kinded:
    """The record's kind: structured fields first, then its text; a refused credential in the
    text outranks a connection, timeout or upstream reading of the fields."""
    structured = _structured_kind(record, ents)
    parts = _parts(record)
    credential = next(
        (k for k in (text_kind(p, only=CREDENTIAL_KINDS) for p in parts) if k is not None), None
    )
    if credential is not None and (structured is None or structured.kind in _WEAK_FOR_AUTH):
        return credential
    textual = next((k for k in map(text_kind, parts) if k is not None), None)
    if structured is not None:
        return structured
    if textual is not None:
        return textual
    trace = record.trace
    if trace is not None and trace.runtime in (Runtime.GO, Runtime.RUST):
        return Kinded(kind=ErrorKind.CRASH, signal=f"{trace.runtime.value} panic")
    return Kinded(kind=ErrorKind.OTHER, signal="no signal")


def _cap(text: str, limit: int) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_record(record: Record, lines: Sequence[Line]) -> ErrorReading:
    """One record read against its log's lines (for the quote and the context)."""
    ents = entities(record, " | ".join(_parts(record)))
    kinded = classify(record, ents)
    line = record.trace.innermost.line if record.trace is not None else record.first_line
    lo, hi = max(1, line - CONTEXT_LINES), min(len(lines), line + CONTEXT_LINES)
    context = tuple((n, _cap(lines[n - 1].raw, 300)) for n in range(lo, hi + 1))
    return ErrorReading(record=record, kind=kinded.kind, signal=kinded.signal, entities=ents,
                        line=line, quote=_cap(lines[line - 1].raw, MAX_QUOTE), context=context)


_REQUEST_ERROR = re.compile(
    r"(?i)(?:request log error|unable to retrieve container logs|failed to (?:get|retrieve|read)"
    r" (?:container )?logs|previous terminated container \S+ in pod \S+ not found"
    r"|error from server \(BadRequest\): container \S+ in pod|\(no log: \d+)"
)
"""A line the kubelet, kubectl or a collector wrote because the log could not be read: never
the program's own words."""
_YES = {"true", "1", "yes"}


def _is_request_error(record: Record) -> bool:
    return record.format is Format.PLAIN and bool(_REQUEST_ERROR.search(record.message[:500]))


def _is_candidate(record: Record) -> bool:
    if _is_request_error(record):
        return False
    if record.level >= Level.ERROR or record.trace is not None:
        return True
    if record.level is not Level.NONE:
        return False
    text = record.message if record.error is None else f"{record.message} {record.error}"
    return bool(_IMPLICIT_ERROR.search(text[:2000]))


def _is_wrapper(reading: ErrorReading) -> bool:
    """Only says the program ends, with nothing of its own to classify."""
    record = reading.record
    said = record.message if record.error is None else f"{record.message} {record.error}"
    return (record.trace is None and reading.kind is ErrorKind.OTHER
            and bool(_WRAPPER.search(said[:2000])))


def _is_informative(reading: ErrorReading) -> bool:
    """Says what went wrong: a trace, or a line whose kind is known."""
    return reading.record.trace is not None or reading.kind is not ErrorKind.OTHER


def _recovered(reading: ErrorReading, later: Sequence[Record]) -> Record | None:
    """The first later record that shows the program working again (an answer below 400
    from the upstream the error names, or a line saying it reconnected, started, succeeded).
    A server answering its own clients 200 is no recovery: a failing health check of a
    dependency and a working ``/search`` live side by side."""
    if (reading.record.field("recovered", "handled") or "").lower() in _YES:
        return reading.record  # the line says so itself
    upstream = reading.entities.upstream
    for record in later:
        if record.level >= Level.WARNING or _is_candidate(record):
            continue
        status = structured_status(record)
        if status is not None and status < 400 and upstream is not None:
            other = record.field(*UPSTREAM_KEYS)
            if other is not None and _upstream_key(other) == upstream:
                return record
        if _SUCCESS.search(record.message[:2000]):
            return record
    return None


def _upstream_key(value: str) -> str:
    host, port, _ = split_upstream(value)
    if host is None:
        return value
    return host if port is None else f"{host}:{port}"


@dataclass(kw_only=True, slots=True)
class _Run:
    """An open run of 5xx answers from one upstream (mutable while the log is read)."""

    upstream: str
    statuses: set[int]
    count: int
    first: Record
    last: Record

    def close(self, *, ended: bool) -> UpstreamFailure:
        return UpstreamFailure(
            upstream=self.upstream, statuses=tuple(sorted(self.statuses)), count=self.count,
            first_line=self.first.first_line, last_line=self.last.last_line,
            first_seconds=self.first.seconds, last_seconds=self.last.seconds, ended=ended,
        )


_THREE_DIGITS = re.compile(r"\b[1-5]\d\d\b")


def _answer(record: Record) -> tuple[str, int] | None:
    """``(upstream, status)`` when the record reports an upstream's answer: a structured line
    with both fields, or a plain line naming ``host:port`` (or a URL) and a status."""
    if record.format in (Format.JSON, Format.LOGFMT):
        status, where = structured_status(record), record.field(*UPSTREAM_KEYS)
        if status is None or where is None:
            return None
        return _upstream_key(where), status
    if record.format is not Format.PLAIN or not _THREE_DIGITS.search(record.message[:2000]):
        return None
    ents = entities(record, record.message)
    if ents.status is None or ents.upstream is None:
        return None
    return ents.upstream, ents.status


def upstream_failures(records: Sequence[Record]) -> tuple[UpstreamFailure, ...]:
    """Per upstream, each run of consecutive answers of 500 or more (an answer below 500
    from the same upstream ends it); the longest ``MAX_UPSTREAM_FAILURES`` runs, in log
    order."""
    open_runs: dict[str, _Run] = {}
    done: list[UpstreamFailure] = []
    for record in records:
        answer = _answer(record)
        if answer is None:
            continue
        key, status = answer
        run = open_runs.get(key)
        if status >= 500:
            if run is None:
                open_runs[key] = _Run(upstream=key, statuses={status}, count=1, first=record,
                                      last=record)
            else:
                run.statuses.add(status)
                run.count += 1
                run.last = record
        elif run is not None:
            done.append(open_runs.pop(key).close(ended=True))
    done.extend(run.close(ended=False) for run in open_runs.values())
    longest = sorted(done, key=lambda f: (-f.count, f.first_line))[:MAX_UPSTREAM_FAILURES]
    return tuple(sorted(longest, key=lambda f: f.first_line))


def _choose(records: Sequence[Record], lines: Sequence[Line]) -> tuple[int, ErrorReading] | None:
    """The decisive error: the last error-level record or trace, stepping back over lines
    that only say the program ends ("exiting", "exit status 1"), and over generic error lines
    (no kind, no trace) that follow closely on one that says what went wrong ("cannot start
    without a mail relay" after "SMTP_HOST is not set"; gunicorn's "Worker failed to boot"
    after the traceback)."""
    candidates = [i for i, r in enumerate(records) if _is_candidate(r)][-MAX_STEP_BACK:]
    latest: tuple[int, ErrorReading] | None = None
    for pos in range(len(candidates) - 1, -1, -1):
        i = candidates[pos]
        reading = read_record(records[i], lines)
        if _is_informative(reading):
            return i, reading
        if latest is None:
            latest = (i, reading)
        if not _is_wrapper(reading):
            if latest[1].record is not reading.record and _is_wrapper(latest[1]):
                latest = (i, reading)
            if pos == 0 or i - candidates[pos - 1] > STEP_BACK_GAP:
                break
    return latest


def _warnings(records: Sequence[Record], lines: Sequence[Line]) -> tuple[ErrorReading, ...]:
    """The last warnings that name a failure (a slow upstream, a refused connection)."""
    last = [r for r in records if r.level is Level.WARNING][-MAX_WARNINGS:]
    read = (read_record(r, lines) for r in last)
    return tuple(w for w in read if w.kind is not ErrorKind.OTHER)


@dataclass(frozen=True, kw_only=True, slots=True)
class LogReading:
    """A container's log as an engineer reads it."""

    container: str | None
    line_count: int
    record_count: int
    records: tuple[Record, ...]
    """The last ``MAX_RECORDS`` records."""
    errors: tuple[ErrorReading, ...]
    """The last ``MAX_ERRORS`` error records, read."""
    decisive: ErrorReading | None
    """The error that ended the program, or ``None`` (no error, or the log shows recovery)."""
    recovery: Recovery | None
    """The last error when a later line shows the program recovered from it."""
    upstream_failures: tuple[UpstreamFailure, ...]
    warnings: tuple[ErrorReading, ...] = ()
    """The last ``MAX_WARNINGS`` warnings, those that name a failure (never decisive)."""
    request_errors: tuple[tuple[int, str], ...] = ()
    """``(line, text)`` of lines saying the log itself could not be read: the log is missing
    evidence, never a cause."""

    @property
    def kind(self) -> ErrorKind | None:
        return None if self.decisive is None else self.decisive.kind

    def to_json(self) -> dict[str, Any]:
        """A JSON value of the reading (records left out: the errors carry theirs)."""
        return {
            "container": self.container,
            "line_count": self.line_count,
            "record_count": self.record_count,
            "kind": None if self.kind is None else self.kind.value,
            "decisive": None if self.decisive is None else self.decisive.to_json(),
            "recovery": None if self.recovery is None else self.recovery.to_json(),
            "errors": [e.to_json() for e in self.errors],
            "warnings": [w.to_json() for w in self.warnings],
            "upstream_failures": [f.to_json() for f in self.upstream_failures],
            "request_errors": [list(r) for r in self.request_errors],
            "summary": self.summary(),
        }

    def summary(self) -> str:
        """Deterministic sentences: the decisive line with its kind and entities, the
        recovery, the failing upstreams."""
        who = f"Container {self.container}" if self.container else "The log"
        out: list[str] = []
        if self.decisive is not None:
            d = self.decisive
            out.append(f"{who}: decisive line {d.line} ({d.kind.value}, {d.signal}): "
                       f"{_cap(d.quote.strip(), 240)}{_named(d.entities)}.")
        elif self.recovery is not None:
            r = self.recovery
            out.append(f"{who}: the error at line {r.error.line} ({r.error.kind.value}) was "
                       f"followed by recovery at line {r.line}: {_cap(r.quote.strip(), 160)}.")
        elif self.warnings:
            w = self.warnings[-1]
            out.append(f"{who}: no error in {self.line_count} lines; its last warning that "
                       f"names a failure is line {w.line} ({w.kind.value}): "
                       f"{_cap(w.quote.strip(), 160)}.")
        elif self.request_errors:
            line, text = self.request_errors[-1]
            whose = f"The log of container {self.container}" if self.container else "The log"
            out.append(f"{whose} could not be read (line {line}): {_cap(text, 160)}.")
        else:
            out.append(f"{who}: no error in {self.line_count} lines.")
        out.extend(_upstream_sentence(f) for f in self.upstream_failures)
        return " ".join(out)


def _named(ents: Entities) -> str:
    named = [
        f"{label} {value}"
        for label, value in (
            ("upstream", ents.upstream), ("url", ents.url), ("status", ents.status),
            ("key", ents.config_key), ("path", ents.path), ("user", ents.user),
            ("exception", ents.exception_type), ("errno", ents.errno),
        )
        if value is not None
    ]
    return f" [{'; '.join(named)}]" if named else ""


def _upstream_sentence(f: UpstreamFailure) -> str:
    statuses = "/".join(str(s) for s in f.statuses)
    took = f" for {f.duration_seconds:g} s" if f.duration_seconds is not None else ""
    end = "" if f.ended else ", until the end of the log"
    return (f"Upstream {f.upstream} answered {statuses}{took} ({f.count} answers, lines "
            f"{f.first_line}-{f.last_line}{end}).")


def _split(text: str) -> list[str]:
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return [p.removesuffix("\r") for p in parts]


def read_log(text: str, *, container: str | None = None) -> LogReading:
    """Read a container's log (see the package docstring)."""
    lines = [parse_line(n, raw) for n, raw in enumerate(_split(text), start=1)]
    records = group(lines)
    chosen = _choose(records, lines)
    decisive: ErrorReading | None = None
    recovery: Recovery | None = None
    if chosen is not None:
        index, reading = chosen
        back = _recovered(reading, records[index + 1:])
        if back is None:
            decisive = reading
        else:
            recovery = Recovery(error=reading, line=back.first_line,
                                quote=_cap(lines[back.first_line - 1].raw, MAX_QUOTE))
    tail = [r for r in records if _is_candidate(r)][-MAX_ERRORS:]
    errors = tuple(
        decisive if decisive is not None and r is decisive.record else read_record(r, lines)
        for r in tail
    )
    return LogReading(
        container=container, line_count=len(lines), record_count=len(records),
        records=tuple(records[-MAX_RECORDS:]), errors=errors, decisive=decisive,
        recovery=recovery, upstream_failures=upstream_failures(records),
        warnings=_warnings(records, lines),
        request_errors=tuple((r.first_line, _cap(r.message, MAX_QUOTE)) for r in records
                             if _is_request_error(r))[:MAX_ERRORS],
    )
