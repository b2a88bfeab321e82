"""The values the log reader returns: levels, formats, runtimes, kinds and records."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import IntEnum, StrEnum
from typing import Any

__all__ = [
    "Cause",
    "Entities",
    "ErrorKind",
    "ErrorReading",
    "Format",
    "Level",
    "Record",
    "Recovery",
    "Runtime",
    "Trace",
    "UpstreamFailure",
]


class Level(IntEnum):
    """How severe a record says it is; ``NONE`` when it says nothing."""

    NONE = 0
    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40
    FATAL = 50


class Format(StrEnum):
    """How a record was written."""

    PLAIN = "plain"
    JSON = "json"
    LOGFMT = "logfmt"
    TRACE = "trace"
    """A multi-line stack trace grouped into one record."""


class Runtime(StrEnum):
    """The runtime whose stack-trace shape a trace record has."""

    PYTHON = "python"
    GO = "go"
    JAVA = "java"
    NODE = "node"
    DOTNET = "dotnet"
    RUST = "rust"


class ErrorKind(StrEnum):
    """What went wrong, in words that hold across languages."""

    CONNECTION_REFUSED = "connection_refused"
    """The peer refused, reset or could not be reached (ECONNREFUSED, ECONNRESET, no route)."""
    DNS = "dns"
    TIMEOUT = "timeout"
    TLS = "tls"
    AUTHENTICATION = "authentication"
    """Credentials were refused: never a connection or upstream failure."""
    AUTHORIZATION = "authorization"
    UPSTREAM_5XX = "upstream_5xx"
    MISSING_CONFIG = "missing_config"
    """A variable, setting or file the program needs was not given."""
    INVALID_CONFIG = "invalid_config"
    """The configuration was given and is wrong: an unknown directive, a parse error."""
    MISSING_DEPENDENCY = "missing_dependency"
    """The image lacks a module, class or shared library the program loads."""
    PERMISSION = "permission"
    """The operating system refused: EACCES, read-only file system, EPERM."""
    OUT_OF_MEMORY = "out_of_memory"
    CRASH = "crash"
    """A panic, a segfault, an abort, an uncaught programming error."""
    OTHER = "other"


@dataclass(frozen=True, kw_only=True, slots=True)
class Cause:
    """One exception of a trace's chain."""

    exception_type: str | None
    """``KeyError``, ``java.net.ConnectException``; ``None`` for a Go or Rust panic."""
    message: str
    line: int
    """The 1-based line that names it."""
    frame: str | None
    """Its first stack frame, when the trace printed one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Trace:
    """A stack trace: its runtime and its chain of exceptions."""

    runtime: Runtime
    chain: tuple[Cause, ...]
    """Outermost first; the last one is the innermost cause."""
    fields: tuple[tuple[str, str], ...] = ()
    """Properties the runtime printed with it (Node's ``code: 'ECONNREFUSED'``)."""

    @property
    def innermost(self) -> Cause:
        return self.chain[-1]


@dataclass(frozen=True, kw_only=True, slots=True)
class Record:
    """One log record: a line, or a multi-line trace grouped into one."""

    first_line: int
    """1-based, inclusive."""
    last_line: int
    """1-based, inclusive."""
    format: Format
    level: Level
    message: str
    """The message without its timestamp and level (``msg`` of a structured line)."""
    error: str | None = None
    """A structured line's ``error``/``err``/``exception`` value."""
    timestamp: str | None = None
    """The timestamp as written."""
    seconds: float | None = None
    """The timestamp as seconds (POSIX; klog and syslog lines, which carry no year, in 2000)."""
    fields: tuple[tuple[str, str], ...] = ()
    """A structured line's fields, nested keys dotted, values as text."""
    trace: Trace | None = None

    def field(self, *names: str) -> str | None:
        """The value of the first of ``names`` the record has (case-insensitive; a dotted
        key also answers to its last part)."""
        wanted = [n.lower() for n in names]
        for name in wanted:
            for key, value in self.fields:
                low = key.lower()
                if low == name or low.rsplit(".", 1)[-1] == name:
                    return value
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Entities:
    """What an error line names."""

    host: str | None = None
    port: int | None = None
    url: str | None = None
    status: int | None = None
    """An HTTP status."""
    config_key: str | None = None
    """An environment variable or configuration key."""
    path: str | None = None
    exception_type: str | None = None
    errno: str | None = None
    """``ECONNREFUSED``, a SQLSTATE, a Node ``code``."""
    user: str | None = None
    """The user a refused login named."""

    @property
    def upstream(self) -> str | None:
        """``host:port`` (or the host alone) when the line names one."""
        if self.host is None:
            return None
        return self.host if self.port is None else f"{self.host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        """The entities named (``None`` ones left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorReading:
    """An error record read: its kind, what it names, and the line to cite."""

    record: Record
    kind: ErrorKind
    signal: str
    """What decided the kind: ``errno ECONNREFUSED``, ``status 503``, ``text 'no such host'``."""
    entities: Entities
    line: int
    """The line to cite: the innermost cause of a trace, else the record's first line."""
    quote: str
    """That line as the log holds it."""
    context: tuple[tuple[int, str], ...]
    """A few ``(line, text)`` around it."""

    def to_json(self) -> dict[str, Any]:
        record, trace = self.record, self.record.trace
        return {
            "line": self.line,
            "first_line": record.first_line,
            "last_line": record.last_line,
            "format": record.format.value,
            "level": record.level.name.lower(),
            "kind": self.kind.value,
            "signal": self.signal,
            "quote": self.quote,
            "entities": self.entities.to_json(),
            "runtime": None if trace is None else trace.runtime.value,
            "chain": [] if trace is None else [
                {"exception_type": c.exception_type, "message": c.message, "line": c.line,
                 "frame": c.frame} for c in trace.chain],
            "context": [list(c) for c in self.context],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Recovery:
    """An error the log shows was recovered from."""

    error: ErrorReading
    line: int
    """The later line that shows the recovery (the error's own when it says so itself)."""
    quote: str

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error.to_json(), "line": self.line, "quote": self.quote}


@dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamFailure:
    """A run of consecutive 5xx answers from one upstream in a structured log."""

    upstream: str
    statuses: tuple[int, ...]
    """The distinct statuses, ascending."""
    count: int
    first_line: int
    last_line: int
    first_seconds: float | None
    last_seconds: float | None
    ended: bool
    """A later answer from the same upstream was below 500."""

    @property
    def duration_seconds(self) -> float | None:
        if self.first_seconds is None or self.last_seconds is None:
            return None
        return self.last_seconds - self.first_seconds

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "statuses": list(self.statuses),
                "duration_seconds": self.duration_seconds}
