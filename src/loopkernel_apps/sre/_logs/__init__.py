"""The log reader: a container's log read as an engineer reads it. Pure, no I/O, linear in
the log's size.

    reading = read_log(text, container="api")
    reading.decisive      # ErrorReading | None: the error that ended the program
    reading.kind          # ErrorKind | None: what went wrong, across languages
    reading.summary()     # deterministic sentences a report can quote

**Records.** Each line is read once (``_lines``): up to two timestamp prefixes (RFC 3339 as
``kubectl logs --timestamps`` and most loggers write it, Go's ``log``, klog, syslog), then a
JSON object (``level``/``severity``/``lvl``, ``msg``/``message``, ``error``/``err``,
``status``/``status_code``, ``upstream``/``host``/``url``, ``ts``/``time``/``timestamp``,
``logger``, ``exception``/``stack``; nested keys dotted), logfmt (``level=error msg="…"``),
or plain text with its level (``ERROR``, ``[warn]``, ``fail:``, klog's ``E1203``). Multi-line
stack traces of Python, Go, the JVM, Node.js, .NET and Rust are grouped into one record with
their chain of exceptions, outermost first (``_traces``).

**The decisive error** is chosen by meaning: the last error-level record or trace before the
end of the log (the process exited there), stepping back over lines that only say the
program ends ("exiting", "exit status 1", "Application run failed"); a line without a level
counts when it says something failed; failing any error, the last warning that names a
failure. Within a trace, the line cited is the innermost cause (Python's first printed
exception, Java's last ``Caused by:``, .NET's last `` ---> ``, Node's last ``[cause]:``).
When a later line shows the program working again (an answer below 400 from the same
upstream, "reconnected", "listening on", "succeeded"), the error is no decisive one: it is
``recovery``, and ``decisive`` is ``None``.

**The kind** (``ErrorKind``) comes from structured fields first (errno names, SQLSTATEs,
Node's ``code``, HTTP statuses, exception classes), then from an ordered table of text
signals (``_kinds.TEXT_KINDS``); a refused credential is ``authentication`` even when the
line names the host and port it was refused at.

**Entities** (``Entities``): the upstream host and port, URL, HTTP status, the missing
variable or configuration key, a path, the exception type, the errno, the refused user.

**Upstream failures** (``UpstreamFailure``): in structured lines that carry both a status and
an upstream, each run of consecutive answers of 500 or more per upstream, with its first and
last line and timestamp ("upstream payments:8080 answered 503 for 10 s").

Bounds: a line is read up to 8,000 characters, a trace up to 400 lines; a reading keeps the
last 200 records, the last 50 error readings and the 20 longest upstream failures.
"""

from __future__ import annotations

from loopkernel_apps.sre._logs._kinds import TEXT_KINDS
from loopkernel_apps.sre._logs._reading import LogReading, read_log
from loopkernel_apps.sre._logs._records import (
    Cause,
    Entities,
    ErrorKind,
    ErrorReading,
    Format,
    Level,
    Record,
    Recovery,
    Runtime,
    Trace,
    UpstreamFailure,
)

__all__ = [
    "TEXT_KINDS",
    "Cause",
    "Entities",
    "ErrorKind",
    "ErrorReading",
    "Format",
    "Level",
    "LogReading",
    "Record",
    "Recovery",
    "Runtime",
    "Trace",
    "UpstreamFailure",
    "read_log",
]
