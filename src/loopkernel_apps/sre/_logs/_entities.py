"""The entities an error line names: upstream host and port, URL, HTTP status, the
variable, key or path that is missing, the exception type, the errno, the refused user.

Structured fields answer first; the text is read with bounded, anchored patterns.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from loopkernel_apps.sre._logs._kinds import ERRNO_KINDS
from loopkernel_apps.sre._logs._records import Entities, Record

__all__ = [
    "CODE_KEYS",
    "STATUS_KEYS",
    "UPSTREAM_KEYS",
    "entities",
    "split_upstream",
    "structured_status",
]

UPSTREAM_KEYS = ("upstream", "upstream_addr", "upstream_host", "host", "url", "target",
                 "addr", "address", "peer", "remote", "backend", "server", "endpoint",
                 "service", "dependency")
"""The fields a structured line names the remote side in."""
STATUS_KEYS = ("upstream_status", "status", "status_code", "statuscode", "http.status_code",
               "response_code", "code")
"""The fields an HTTP status is in (``upstream_status`` first: nginx logs both)."""
CODE_KEYS = ("code", "errno", "error.code", "err.code", "error_code", "sqlstate", "syscall_err")

_URL = re.compile(r"\b(?:https?|grpcs?|wss?|postgres(?:ql)?|mysql|redis|amqps?|mongodb)://"
                  r"[^\s\"'<>`,)\]}]+")
_HOST_PORT = re.compile(
    r"(?<![\w.:/-])((?:\d{1,3}\.){3}\d{1,3}|\[[0-9a-fA-F:]+\]|[A-Za-z][\w-]*(?:\.[\w-]+)*)"
    r":([1-9]\d{1,4})\b(?![:.]\d)"
)
_HOST_NAMED = re.compile(
    r"(?i)(?:lookup|host(?:name)?|resolve host|getaddrinfo (?:ENOTFOUND|EAI_AGAIN)"
    r"|UnknownHostException:|translate host name|server at)[ =:]*[\"']?"
    r"([A-Za-z0-9][\w-]*(?:\.[\w-]+)*)[\"']?"
)
_PORT_NAMED = re.compile(r"(?i)\bport[ =:]*[\"']?([1-9]\d{1,4})\b")
_STATUS_TEXT = re.compile(
    r"(?i)(?:status(?: code)?|http(?:/[\d.]+)?(?: status)?|returned|response(?: code)?"
    r"|responded with|got)[ :=]*(?:status )?([1-5]\d\d)\b"
    r"|\b([1-5]\d\d) (?:Internal Server Error|Bad Gateway|Service Unavailable|Gateway Time-?out"
    r"|Unauthorized|Forbidden|Not Found|Too Many Requests)"
)
_CONFIG_KEY = (
    re.compile(r"KeyError: ['\"]([\w.-]+)['\"]"),
    re.compile(r"(?i)env(?:ironment)?(?: variable| var)?\s+['\"`]?([A-Z][A-Z0-9_]+)"),
    re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)['\"`]? (?:is not set|must be set|is required"
               r"|not defined|is missing|is unset|is undefined|is empty)"),
    re.compile(r"(?i)missing (?:required )?(?:env(?:ironment)? variable|setting|config(?:uration)?"
               r"(?: key)?|option|property|key|parameter)s?[ :]+['\"`]?([\w.-]+)"),
    re.compile(r"(?i)required (?:key|setting|option|property|env(?:ironment)? variable|field)s? "
               r"['\"`]?([\w.-]+)"),
    re.compile(r"(?i)could not resolve placeholder '([\w.-]+)'"),
    re.compile(r"validation errors? for \w+ ([\w.]+) Field required"),
)
_PATH = re.compile(r"['\"](/[^'\"\s]{1,300})['\"]"
                   r"|(?<![\w:/.])(/(?:[\w.@+-]{1,100}/){0,20}[\w.@+-]{1,100})")
_ERRNO = re.compile(
    r"\b(" + "|".join(sorted((k for k in ERRNO_KINDS if k[:1] == "E"), key=len, reverse=True))
    + r")\b"
)
_USER = re.compile(r"(?i)for user [\"']?([\w.@$-]+)[\"']?|user [\"']([\w.@$-]+)[\"']")


def split_upstream(value: str) -> tuple[str | None, int | None, str | None]:
    """``(host, port, url)`` of a structured upstream value: a URL, ``host:port`` or a host."""
    value = value.strip()
    if "://" in value:
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            return None, None, value
        return parts.hostname, port, value
    m = _HOST_PORT.fullmatch(value)
    if m is not None:
        return m.group(1), int(m.group(2)), None
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*", value):
        return value, None, None
    return None, None, None


def structured_status(record: Record) -> int | None:
    value = record.field(*STATUS_KEYS)
    if value is None or not value.isdigit():
        return None
    status = int(value)
    return status if 100 <= status <= 599 else None


def _text_status(text: str) -> int | None:
    m = _STATUS_TEXT.search(text)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def _text_host(text: str) -> tuple[str | None, int | None]:
    for m in _HOST_PORT.finditer(text):
        host = m.group(1)
        if not host[0].isdigit() or host.count(".") == 3:
            return host, int(m.group(2))
    named = _HOST_NAMED.search(text)
    port = _PORT_NAMED.search(text)
    if named is not None:
        return named.group(1), int(port.group(1)) if port else None
    return None, None


def _first_group(patterns: tuple[re.Pattern[str], ...], text: str) -> str | None:
    for pattern in patterns:
        m = pattern.search(text)
        if m is not None:
            return next(g for g in m.groups() if g)
    return None


def _errno(record: Record, text: str) -> str | None:
    code = record.field(*CODE_KEYS)
    if record.trace is not None:
        code = code or next((v for k, v in record.trace.fields if k in ("code", "errno")), None)
    if code and not code.lstrip("-").isdigit():
        return code
    m = _ERRNO.search(text)
    return m.group(1) if m else None


def entities(record: Record, text: str) -> Entities:
    """What ``record`` names; ``text`` is its readable text (message, error, trace chain)."""
    host: str | None = None
    port: int | None = None
    url: str | None = None
    upstream = record.field(*UPSTREAM_KEYS)
    if upstream is not None:
        host, port, url = split_upstream(upstream)
    if url is None:
        m = _URL.search(text)
        url = m.group(0).rstrip(":.;") if m else None
    if host is None and url is not None:
        host, port, _ = split_upstream(url)
    if host is None:
        host, port = _text_host(text)
    status = structured_status(record) or _text_status(text)
    path = _PATH.search(text)
    path_value = next((g for g in path.groups() if g), None) if path else None
    user = _USER.search(text)
    trace = record.trace
    return Entities(
        host=host,
        port=port,
        url=url,
        status=status,
        config_key=_first_group(_CONFIG_KEY, text),
        path=path_value,
        exception_type=trace.innermost.exception_type if trace else record.field("error.type",
                                                                                   "exc_type"),
        errno=_errno(record, text),
        user=next((g for g in user.groups() if g), None) if user else None,
    )
