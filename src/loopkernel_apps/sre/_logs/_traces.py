"""Multi-line stack traces of the common runtimes, grouped into one record each.

Each runtime is a row of ``TRACE_SHAPES``: a test that a line opens a trace (looking at most
one line ahead) and a reader that consumes the trace's lines and returns the chain of
exceptions, outermost first. A reader only moves forward, so grouping is linear.

========  ==============================================================================
runtime   shape
========  ==============================================================================
python    ``Traceback (most recent call last):`` … ``Type: message``, chained by
          ``During handling of the above exception…`` / ``The above exception was the
          direct cause…`` (printed innermost first)
go        ``panic: …`` or ``fatal error: …``, ``[signal SIGSEGV …]``, ``goroutine N [running]:``
java      ``Exception in thread "main" x.y.Z: msg`` or ``x.y.Z: msg`` then ``\tat …``;
          ``Caused by: …`` (innermost last), ``... N more``
node      ``Error: msg`` then ``    at …``, a ``{ code: 'ECONNREFUSED', … }`` block, nested
          ``[cause]: …``; ``[UnhandledPromiseRejection: …]``; ``FATAL ERROR: …``
dotnet    ``Unhandled exception. System.X: msg``, `` ---> System.Y: inner``, ``   at …``
rust      ``thread 'main' panicked at …`` (message on the line or the next), ``note: run with
          `RUST_BACKTRACE=1` …``, ``stack backtrace:``
========  ==============================================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loopkernel_apps.sre._logs._lines import Line
from loopkernel_apps.sre._logs._records import Cause, Format, Level, Record, Runtime, Trace

__all__ = ["TRACE_SHAPES", "group"]

MAX_TRACE_LINES = 400
"""A trace longer than this is cut: the rest of it is read as ordinary lines."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Read:
    end: int
    """Index after the trace's last line."""
    chain: tuple[Cause, ...]
    level: Level
    fields: tuple[tuple[str, str], ...] = ()


_Opens = Callable[[Sequence[Line], int], bool]
_Reader = Callable[[Sequence[Line], int], _Read]


def _body(lines: Sequence[Line], i: int) -> str:
    return lines[i].body if i < len(lines) else ""


def _limit(i: int, n: int) -> int:
    return min(n, i + MAX_TRACE_LINES)


# --- Python -------------------------------------------------------------------------------

_PY_START = re.compile(r"Traceback \(most recent call last\):\s*$")
_PY_FRAME = re.compile(r'\s+File "([^"]*)", line (\d+)(?:, in (\S+))?')
_PY_CHAIN = re.compile(
    r"(During handling of the above exception|The above exception was the direct cause)"
)
_EXC_LINE = re.compile(r"([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_VALIDATION = re.compile(r"\d+ validation errors? for ")
_BARE_FIELD = re.compile(r"[\w.]+$")


def _py_opens(lines: Sequence[Line], i: int) -> bool:
    return bool(_PY_START.match(lines[i].body))


def _py_message(lines: Sequence[Line], j: int, stop: int, message: str) -> tuple[int, str]:
    """The exception's message with its continuation lines (indented ones; pydantic's field
    paths after ``N validation errors for``); the index after them."""
    parts = [message]
    validation = bool(_VALIDATION.match(message))
    k = j + 1
    while k < stop:
        body = lines[k].body
        indented = body[:1] in (" ", "\t") and body.strip() != ""
        if not (indented or (validation and _BARE_FIELD.match(body))):
            break
        parts.append(body.strip())
        k += 1
    return k, " ".join(p for p in parts if p)


def _chain_follows(lines: Sequence[Line], j: int, stop: int) -> bool:
    """Whether another exception of the same chain follows after blank lines."""
    while j < stop and not lines[j].body.strip():
        j += 1
    return j < stop and bool(_PY_CHAIN.match(lines[j].body) or _PY_START.match(lines[j].body))


def _py_read(lines: Sequence[Line], i: int) -> _Read:
    stop = _limit(i, len(lines))
    causes: list[Cause] = []
    frame: str | None = None
    j, end = i + 1, i + 1
    while j < stop:
        body = lines[j].body
        if _PY_START.match(body) or _PY_CHAIN.match(body) or not body.strip():
            j += 1
            continue
        if body[:1] in (" ", "\t"):
            m = _PY_FRAME.match(body)
            if m is not None:
                frame = f"{m.group(1)}:{m.group(2)}" + (f" in {m.group(3)}" if m.group(3) else "")
            j += 1
            continue
        m = _EXC_LINE.match(body)
        etype, message = (m.group(1), m.group(2) or "") if m else (None, body.strip())
        number = lines[j].number
        j, message = _py_message(lines, j, stop, message)
        causes.append(Cause(exception_type=etype, message=message, line=number, frame=frame))
        frame, end = None, j
        if not _chain_follows(lines, j, stop):
            break
    if not causes:
        only = Cause(exception_type=None, message=lines[i].body.strip(), line=lines[i].number,
                     frame=None)
        return _Read(end=j, chain=(only,), level=Level.ERROR)
    return _Read(end=end, chain=tuple(reversed(causes)), level=Level.ERROR)


# --- Go -----------------------------------------------------------------------------------

_GO_START = re.compile(r"(panic|fatal error): (.*)$")
_GO_LINE = re.compile(
    r"(\s*$|\[signal |goroutine \d+ \[|\t|created by |runtime stack:|\s+panic: "
    r"|exit status \d+|\.\.\.additional frames elided|[\w./*()%\[\]{}-]+\(.*\)\s*$)"
)
_GO_FUNC = re.compile(r"([\w./*()%\[\]{}-]+)\(.*\)\s*$")


def _go_opens(lines: Sequence[Line], i: int) -> bool:
    return bool(_GO_START.match(lines[i].body))


def _go_read(lines: Sequence[Line], i: int) -> _Read:
    stop = _limit(i, len(lines))
    m = _GO_START.match(lines[i].body)
    assert m is not None
    message = m.group(2).removesuffix(" [recovered]").strip()
    frame: str | None = None
    func: str | None = None
    j, end = i + 1, i + 1
    while j < stop and _GO_LINE.match(lines[j].body):
        body = lines[j].body
        fm = _GO_FUNC.match(body)
        if fm is not None and frame is None:
            name = fm.group(1)
            func = None if name.startswith(("panic", "runtime.")) else name
        elif body.startswith("\t") and func is not None and frame is None:
            frame = f"{func} {body.strip().split(' +', 1)[0]}"
        if body.strip():
            end = j + 1
        j += 1
    etype = "runtime error" if message.startswith("runtime error:") else None
    if m.group(1) == "fatal error":
        etype = "fatal error"
    cause = Cause(exception_type=etype, message=message, line=lines[i].number, frame=frame)
    return _Read(end=end, chain=(cause,), level=Level.FATAL)


# --- Java (and the JVM languages) ---------------------------------------------------------

_JAVA_THREAD = re.compile(r'Exception in thread "[^"]*" ([\w$.]+)(?::\s?(.*))?$')
_JAVA_EXC = re.compile(r"([a-z][\w$]*(?:\.[\w$]+)+)(?::\s?(.*))?$")
_JAVA_FRAME = re.compile(r"\s+at ([\w$.<>/@:-]+\(.*\))\s*$")
_JAVA_MORE = re.compile(r"\s+\.\.\. \d+ (?:more|common frames omitted)")
_JAVA_CAUSED = re.compile(r"Caused by: ([\w$.]+)(?::\s?(.*))?$")
_JAVA_SUPPRESSED = re.compile(r"\s+(?:Suppressed|Caused by): ")


def _java_opens(lines: Sequence[Line], i: int) -> bool:
    body = lines[i].body
    if _JAVA_THREAD.match(body):
        return True
    nxt = _body(lines, i + 1)
    return bool(_JAVA_EXC.match(body) and (_JAVA_FRAME.match(nxt) or _JAVA_CAUSED.match(nxt)))


def _with_frame(cause: Cause, frame: str | None) -> Cause:
    if cause.frame is not None or frame is None:
        return cause
    return Cause(exception_type=cause.exception_type, message=cause.message, line=cause.line,
                 frame=frame)


def _java_read(lines: Sequence[Line], i: int) -> _Read:
    stop = _limit(i, len(lines))
    head = _JAVA_THREAD.match(lines[i].body) or _JAVA_EXC.match(lines[i].body)
    assert head is not None
    causes = [Cause(exception_type=head.group(1), message=head.group(2) or "",
                    line=lines[i].number, frame=None)]
    j = i + 1
    while j < stop:
        body = lines[j].body
        caused = _JAVA_CAUSED.match(body)
        frame = _JAVA_FRAME.match(body)
        if caused is not None:
            causes.append(Cause(exception_type=caused.group(1), message=caused.group(2) or "",
                                line=lines[j].number, frame=None))
        elif frame is not None:
            causes[-1] = _with_frame(causes[-1], frame.group(1))
        elif not (_JAVA_MORE.match(body) or _JAVA_SUPPRESSED.match(body)):
            break
        j += 1
    fatal = lines[i].body.startswith("Exception in thread")
    return _Read(end=j, chain=tuple(causes), level=Level.FATAL if fatal else Level.ERROR)


# --- Node.js ------------------------------------------------------------------------------

_NODE_EXC = re.compile(r"([A-Z][\w$]*)(?: \[([\w_]+)\])?: (.*)$")
_NODE_BRACKET = re.compile(r"\[([A-Z][\w$]*)(?: \[([\w_]+)\])?: (.*?)\]?\s*\{?\s*$")
_NODE_FATAL = re.compile(r"FATAL ERROR: (.*)$")
_NODE_FRAME = re.compile(r"\s+at (.*\S)\s*$")
_NODE_CAUSE = re.compile(r"\s+\[cause\]: ([A-Z][\w$]*)(?: \[([\w_]+)\])?: (.*?)\s*\{?\s*$")
_NODE_PROP = re.compile(r"\s+(\w+): (.*?),?\s*$")
_NODE_TAIL = re.compile(
    r"(\s*$|Node\.js v\d|\}\s*$|\s+\[\w+\]: |\s+\w+: |\s+at |Emitted '\w+' event on .* at:\s*$)"
)


def _node_opens(lines: Sequence[Line], i: int) -> bool:
    body = lines[i].body
    if _NODE_FATAL.match(body) or body.startswith("[UnhandledPromiseRejection: "):
        return True
    if _NODE_BRACKET.match(body) and _body(lines, i + 1).startswith("  "):
        return True
    return bool(_NODE_EXC.match(body) and _NODE_FRAME.match(_body(lines, i + 1))
                and not _JAVA_FRAME.match(_body(lines, i + 1)))


def _node_head(line: Line) -> Cause:
    body = line.body
    fatal = _NODE_FATAL.match(body)
    if fatal is not None:
        return Cause(exception_type=None, message=fatal.group(1), line=line.number, frame=None)
    m = _NODE_EXC.match(body) or _NODE_BRACKET.match(body)
    assert m is not None
    return Cause(exception_type=m.group(1), message=m.group(3).rstrip("] {"),
                 line=line.number, frame=None)


def _node_read(lines: Sequence[Line], i: int) -> _Read:
    stop = _limit(i, len(lines))
    causes = [_node_head(lines[i])]
    props: list[tuple[str, str]] = []
    j, end = i + 1, i + 1
    while j < stop and _NODE_TAIL.match(lines[j].body):
        body = lines[j].body
        cause, frame, prop = _NODE_CAUSE.match(body), _NODE_FRAME.match(body), None
        if cause is not None:
            causes.append(Cause(exception_type=cause.group(1), message=cause.group(3),
                                line=lines[j].number, frame=None))
        elif frame is not None:
            causes[-1] = _with_frame(causes[-1], frame.group(1))
        else:
            prop = _NODE_PROP.match(body)
        if prop is not None:
            props.append((prop.group(1), prop.group(2).strip("'\"")))
        if body.strip():
            end = j + 1
        j += 1
    level = Level.FATAL if _NODE_FATAL.match(lines[i].body) else Level.ERROR
    return _Read(end=end, chain=tuple(causes), level=level, fields=tuple(props))


# --- .NET ---------------------------------------------------------------------------------

_DOTNET_START = re.compile(r"Unhandled [eE]xception[.:] ([\w.`]+)(?: \((\w+)\))?: (.*)$")
_DOTNET_EXC = re.compile(r"([A-Z]\w*(?:\.\w+)+)(?: \((\w+)\))?: (.*)$")
_DOTNET_INNER = re.compile(r"\s*---> ([\w.`]+)(?: \((\w+)\))?: (.*)$")
_DOTNET_FRAME = re.compile(r"\s+at (.*?)(?: in .*)?\s*$")
_DOTNET_END = re.compile(r"\s+--- End of ")


def _dotnet_opens(lines: Sequence[Line], i: int) -> bool:
    body = lines[i].body
    if _DOTNET_START.match(body):
        return True
    nxt = _body(lines, i + 1)
    return bool(_DOTNET_EXC.match(body)
                and (_DOTNET_INNER.match(nxt) or (_DOTNET_FRAME.match(nxt) and " in " in nxt)
                     or nxt.startswith("   at ")))


def _dotnet_read(lines: Sequence[Line], i: int) -> _Read:
    stop = _limit(i, len(lines))
    head = _DOTNET_START.match(lines[i].body) or _DOTNET_EXC.match(lines[i].body)
    assert head is not None
    causes = [Cause(exception_type=head.group(1), message=head.group(3), line=lines[i].number,
                    frame=None)]
    j = i + 1
    while j < stop:
        body = lines[j].body
        inner = _DOTNET_INNER.match(body)
        frame = _DOTNET_FRAME.match(body)
        if inner is not None:
            causes.append(Cause(exception_type=inner.group(1), message=inner.group(3),
                                line=lines[j].number, frame=None))
        elif frame is not None and body.lstrip().startswith("at "):
            causes[-1] = _with_frame(causes[-1], frame.group(1))
        elif not _DOTNET_END.match(body):
            break
        j += 1
    fatal = lines[i].body.startswith("Unhandled")
    return _Read(end=j, chain=tuple(causes), level=Level.FATAL if fatal else Level.ERROR)


# --- Rust ---------------------------------------------------------------------------------

_RUST_START = re.compile(r"thread '([^']*)' panicked at (.*)$")
_RUST_OLD = re.compile(r"'(.*)', (\S+:\d+:\d+)$")
_RUST_TAIL = re.compile(r"(note: |stack backtrace:|\s+\d+: |\s+at |\s*$)")


def _rust_opens(lines: Sequence[Line], i: int) -> bool:
    return bool(_RUST_START.match(lines[i].body))


def _rust_read(lines: Sequence[Line], i: int) -> _Read:
    stop = _limit(i, len(lines))
    m = _RUST_START.match(lines[i].body)
    assert m is not None
    rest = m.group(2).strip()
    old = _RUST_OLD.match(rest)
    j, cited = i + 1, lines[i].number
    if old is not None:  # before Rust 1.73: panicked at 'message', src/main.rs:10:5
        message, frame = old.group(1), old.group(2)
    else:  # panicked at src/main.rs:10:5: then the message on the next lines
        frame, parts = rest.rstrip(":"), []
        if j < stop and lines[j].body.strip() and not _RUST_TAIL.match(lines[j].body):
            cited = lines[j].number
        while j < stop and lines[j].body.strip() and not _RUST_TAIL.match(lines[j].body):
            parts.append(lines[j].body.strip())
            j += 1
        message = " ".join(parts)
    end = j
    while j < stop and _RUST_TAIL.match(lines[j].body):
        if lines[j].body.strip():
            end = j + 1
        j += 1
    cause = Cause(exception_type=None, message=message, line=cited, frame=frame)
    return _Read(end=end, chain=(cause,), level=Level.FATAL)


TRACE_SHAPES: tuple[tuple[Runtime, _Opens, _Reader], ...] = (
    (Runtime.PYTHON, _py_opens, _py_read),
    (Runtime.GO, _go_opens, _go_read),
    (Runtime.RUST, _rust_opens, _rust_read),
    (Runtime.DOTNET, _dotnet_opens, _dotnet_read),
    (Runtime.JAVA, _java_opens, _java_read),
    (Runtime.NODE, _node_opens, _node_read),
)
"""Each runtime's trace: whether a line opens one, and the reader that consumes it."""

_MAYBE = re.compile(r"(Traceback|panic|fatal|thread '|Unhandled|Exception|FATAL|\[|[\w$.]+(?::|$))")
"""A cheap test every opener needs to pass: the first characters of some trace's head."""


def _trace_record(lines: Sequence[Line], i: int, runtime: Runtime, read: _Read) -> Record:
    first = lines[i].record
    return Record(
        first_line=lines[i].number,
        last_line=lines[read.end - 1].number,
        format=Format.TRACE,
        level=read.level,
        message=read.chain[-1].message,
        timestamp=first.timestamp,
        seconds=first.seconds,
        trace=Trace(runtime=runtime, chain=read.chain, fields=read.fields),
    )


def group(lines: Sequence[Line]) -> list[Record]:
    """The records of a log: each trace one record, every other line its own."""
    records: list[Record] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if line.record.format is Format.PLAIN and _MAYBE.match(line.body):
            for runtime, opens, read in TRACE_SHAPES:
                if opens(lines, i):
                    got = read(lines, i)
                    records.append(_trace_record(lines, i, runtime, got))
                    i = max(got.end, i + 1)
                    break
            else:
                records.append(line.record)
                i += 1
        else:
            records.append(line.record)
            i += 1
    return records
