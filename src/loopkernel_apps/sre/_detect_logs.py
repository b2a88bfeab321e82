"""The log detectors: what a program wrote before it stopped.

``missing_env``, ``dns_resolution``, ``cert_expired``, ``config_invalid`` match known
phrasings; ``crash_log_reason`` takes the decisive line of the last instance
(``decisive_line``). A line that reports a failed log *request* is never read as the
program's own (``log_request_errors``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from loopkernel_apps.sre._finding import Finding, _containers, _refs, _statuses

__all__ = ["decisive_line", "is_strong", "log_detectors", "log_request_errors"]


_MISSING_ENV = [
    re.compile(r"KeyError: ['\"]([A-Z][A-Z0-9_]{2,})['\"]"),
    re.compile(
        r"(?i)(?:env(?:ironment)?(?: variable| var)?|variable)\s+"
        r"['\"`]?([A-Z][A-Z0-9_]{2,})['\"`]?"
        r"\s+(?:is\s+)?(?:not set|unset|missing|undefined|not defined|is required|must be set"
        r"|empty)"
    ),
    re.compile(
        r"(?i)missing (?:required )?env(?:ironment)?(?: variable| var)?:?\s+['\"`]?"
        r"([A-Z][A-Z0-9_]{2,})"
    ),
    re.compile(
        r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)['\"`]? (?:is not set|must be set|is required|not defined"
        r"|missing value|is missing|is unset|is undefined|is empty)"
    ),
]
_DNS = [
    re.compile(r"(?i)could not resolve host:?\s*['\"]?([\w.-]+\.[\w-]+)"),
    re.compile(r"getaddrinfo (?:ENOTFOUND|EAI_AGAIN) ([\w.-]+)"),
    re.compile(r"lookup ([\w.-]+)(?: on [\d.:\[\]]+)?: (?:no such host|server misbehaving)"),
    re.compile(
        r"(?i)(?:failed to resolve|unknown host|unable to resolve)\s+['\"]?([\w.-]+\.[\w-]+)"
    ),
    re.compile(
        r"(?i)(?:host|hostname)[= ]['\"]?([\w.-]+\.[\w-]+)['\"]?.*"
        r"(?:Name or service not known|Temporary failure in name resolution|nodename nor servname)"
    ),
    re.compile(r"UnknownHostException:\s*([\w.-]+)"),
    re.compile(
        r"(?<![\w.-])([a-z][\w-]*(?:\.[\w-]+)*): (?:Name or service not known|Temporary failure "
        r"in name resolution|nodename nor servname provided|No address associated with hostname)"
    ),
]
_CERT = [
    re.compile(r"x509: certificate has expired or is not yet valid[^\n]*"),
    re.compile(r"(?i)certificate (?:has )?expired[^\n]*"),
    re.compile(r"(?i)CERTIFICATE_VERIFY_FAILED[^\n]*expired[^\n]*"),
]
_CONFIG = [
    re.compile(r"(?i)\b(?:invalid|malformed|bad) config(?:uration)?\b"),
    re.compile(r"(?i)\bconfig(?:uration)? (?:error|invalid|is invalid|validation failed)\b"),
    re.compile(r"(?i)failed to (?:load|parse|read|validate) (?:the )?config"),
    re.compile(r"\[emerg\][^\n]*(?:unknown directive|invalid|unexpected)"),
    re.compile(r"(?i)(?:yaml|json|toml): (?:line \d+|unmarshal|cannot unmarshal)"),
    re.compile(r"(?i)unknown (?:configuration )?(?:key|field|option|directive) ['\"]"),
]
_FATAL = re.compile(
    r"(\bpanic:|(?i:\bfatal\b)|\bcritical\b|\bCRITICAL\b|\bemerg\b|Traceback|^[\w.$]*(Error|Exception)\b"
    r"|\b[A-Z][\w.$]*(Error|Exception):|^Caused by: |\bERROR\b|(?i:^error\b|\berror:)"
    r"|(?i:\blevel\W{1,3}(?:error|err|fatal|crit)\b|\[(?:error|err|crit|fatal)\])"
    r"|^E\d{4} \d|exit(ed|ing)? with)"
)
"""An error line in any program's words: a level (``ERROR``, ``level=error``, ``"level":"error"``,
``[error]``, klog's ``E1201``), an exception's name, ``error:``. The bare word in prose ("no
error handler registered", ``error=null``) is not one."""


def _log_lines(text: str) -> list[str]:
    return [
        ln.rstrip() for ln in text.splitlines() if ln.strip() and not _LOG_REQUEST_ERROR.search(ln)
    ]


def _first(patterns: list[re.Pattern[str]], lines: list[str]) -> tuple[str, re.Match[str]] | None:
    for line in reversed(lines):  # the latest occurrence is the one that ended the run
        for p in patterns:
            m = p.search(line)
            if m:
                return line, m
    return None


def log_detectors(
    log: dict[str, Any], pod: dict[str, Any] | None, pod_ref: str | None
) -> Iterator[Finding]:
    name, c, ref = log["pod"], log["container"], log["ref"]
    lines = _log_lines(str(log.get("text") or ""))
    which = "previous" if log.get("previous") else "current"
    spec = _containers(pod or {}).get(c, {})
    found = _first(_MISSING_ENV, lines)
    if found is not None:
        line, m = found
        var = m.group(1)
        env_names = {e.get("name") for e in spec.get("env", []) or []}
        has_from = bool(spec.get("envFrom"))
        if var not in env_names and pod is not None and not has_from:
            text = (
                f"Container {c} of pod {name} stops because environment variable {var} is "
                f"not set; the container spec defines no {var} (and no envFrom)."
            )
            yield Finding(
                detector="missing_env",
                pod=name,
                container=c,
                text=text,
                quote=line.strip(),
                identifiers=(var,),
                refs=_refs(ref),
                extra={"variable": var, "log": which},
            )
    found = _first(_DNS, lines)
    if found is not None:
        line, m = found
        host = m.group(1)
        text = f"Container {c} of pod {name} cannot resolve host {host} ({which} log)."
        yield Finding(
            detector="dns_resolution",
            pod=name,
            container=c,
            text=text,
            quote=line.strip(),
            identifiers=(host,),
            refs=_refs(ref),
            extra={"host": host, "log": which},
        )
    found = _first(_CERT, lines)
    if found is not None:
        line, m = found
        text = f"Container {c} of pod {name} fails a TLS handshake: a certificate has expired."
        yield Finding(
            detector="cert_expired",
            pod=name,
            container=c,
            text=text,
            quote=line.strip(),
            identifiers=(),
            refs=_refs(ref),
            extra={"log": which},
        )
    found = _first(_CONFIG, lines)
    if found is not None and _crashed(pod, c):
        line, m = found
        text = f"Container {c} of pod {name} exits on a configuration error ({which} log)."
        yield Finding(
            detector="config_invalid",
            pod=name,
            container=c,
            text=text,
            quote=line.strip(),
            identifiers=(),
            refs=_refs(ref),
            extra={"log": which},
        )
    yield from _crash_reason(log, pod, pod_ref, lines)


def _crashed(pod: dict[str, Any] | None, container: str) -> bool:
    for cs in _statuses(pod or {}):
        if cs.get("name") != container:
            continue
        if int(cs.get("restartCount", 0)) > 0:
            return True
        term = (cs.get("state") or {}).get("terminated") or {}
        return bool(term) and int(term.get("exitCode", 0)) != 0
    return False


_LOG_REQUEST_ERROR = re.compile(
    r"(?i)(request log error|unable to retrieve container logs|failed to (?:get|retrieve|read) "
    r"(?:container )?logs|previous terminated container \S+ in pod \S+ not found"
    r"|error from server \(BadRequest\)|\(no log: \d+)"
)
"""A failed log *request* (kubelet, kubectl or the collector wrote it): never a cause, and the
log it stands for is missing evidence."""

_STRONG = re.compile(
    r"(\bpanic:|^fatal error:|\bFATAL\b|\bCRITICAL\b|\bcritical\b|\[emerg\]|^Exception in thread"
    r"|(?i:unhandled exception|uncaught exception)|^Traceback \(most recent call last\)"
    r"|\bSEVERE\b|level=fatal|level=panic|\bfatal:)"
)
_FRAME = re.compile(r"^\s+(?:at |File \"|/\S+\.\w+:\d+|\S+\.(?:go|rs|py|js|ts|java|rb):\d+)")


def log_request_errors(text: str) -> list[str]:
    """The lines of a log that say the log itself could not be read."""
    return [ln.strip() for ln in text.splitlines() if _LOG_REQUEST_ERROR.search(ln)]


def decisive_line(lines: list[str]) -> tuple[str, str | None] | None:
    """``(line, stack frame)``: the first panic or fatal line of the instance (for a Python
    traceback, the exception line that ends it), else its first error line. Lines that
    report a failed log request are skipped; a generic wrapper printed after the fatal line
    is never chosen over it."""
    lines = [ln for ln in lines if not _LOG_REQUEST_ERROR.search(ln)]
    for i, line in enumerate(lines):
        if not _STRONG.search(line):
            continue
        if line.startswith("Traceback"):
            frame = None
            for later in lines[i + 1 :]:
                if later.lstrip().startswith("File "):
                    frame = later.strip()
                elif not later[:1].isspace() and not later.startswith("During handling"):
                    return later.strip(), frame
            return line.strip(), frame
        return _root_of(lines, i, 12)
    exceptions = [i for i, line in enumerate(lines) if _EXCEPTION.match(line)]
    if exceptions:  # an exception printed with its stack: its innermost "Caused by"
        return _root_of(lines, exceptions[0], 9)
    errors = [i for i, line in enumerate(lines) if _FATAL.search(line)]
    if not errors:
        return None
    # No fatal line: the program's last error before it ended, unless that is only a
    # wrapper saying it ended ("exiting", "exit status 1", "giving up").
    causal = [i for i in errors if not _WRAPPER.search(lines[i])]
    i = causal[-1] if causal else errors[0]
    frame = next((ln.strip() for ln in lines[i + 1 : i + 9] if _FRAME.match(ln)), None)
    return lines[i].strip(), frame


_EXCEPTION = re.compile(
    r"^(?:Exception in thread \S+ )?[a-z][\w$]*(?:\.[\w$]+)+(?:Exception|Error)(?::|$)"
)
"""A JVM-style exception line (``com.acme.FooException: …``), at the start of a line."""
_CAUSED_BY = re.compile(r"^Caused by: ")
_STACK = re.compile(r"^\s+(?:at |\.\.\. \d+ )|^Caused by: |^\s*$")


def _root_of(lines: list[str], i: int, reach: int) -> tuple[str, str | None]:
    """Line ``i`` with its frame; when a chain of ``Caused by:`` follows in its stack, the
    innermost one with its first frame (the root of the exception)."""
    chosen = i
    for j in range(i + 1, len(lines)):
        if not _STACK.match(lines[j]):
            break
        if _CAUSED_BY.match(lines[j]):
            chosen = j
    after = lines[chosen + 1 : chosen + reach]
    return lines[chosen].strip(), next((ln.strip() for ln in after if _FRAME.match(ln)), None)


_WRAPPER = re.compile(
    r"(?i)(\bexit(?:ing|ed)?\b|exit status \d+|shutting down|\bstopp(?:ed|ing)\b|giving up"
    r"|see above|terminated|aborting)"
)


def is_strong(line: str) -> bool:
    """A panic, a fatal line, the end of a traceback: the program said it was dying."""
    return (
        bool(_STRONG.search(line))
        or bool(re.match(r"^[\w.]*(Error|Exception)\b", line))
        or bool(_CAUSED_BY.match(line))
    )


def _crash_reason(
    log: dict[str, Any], pod: dict[str, Any] | None, pod_ref: str | None, lines: list[str]
) -> Iterator[Finding]:
    name, c = log["pod"], log["container"]
    if pod is None:
        return
    init_names = {ic.get("name") for ic in pod.get("spec", {}).get("initContainers", []) or []}
    if c in init_names:
        return  # init_container states an init container's failure
    restarted = [cs for cs in _statuses(pod) if cs.get("name") == c]
    if not restarted:
        return
    cs = restarted[0]
    term = (cs.get("lastState") or {}).get("terminated") or (cs.get("state") or {}).get(
        "terminated"
    )
    if not term or term.get("reason") == "OOMKilled" or int(term.get("exitCode", 0)) == 0:
        return
    if int(cs.get("restartCount", 0)) > 0 and not log.get("previous"):
        return  # the reason of a restart is in the previous instance's log
    found = decisive_line(lines)
    if found is None:
        return
    decisive, frame = found
    code = int(term.get("exitCode", 0))
    if code > 128 and not is_strong(decisive):
        return  # killed by a signal (128+N: a probe, a deadline, the node, SIGSEGV): an error
        # line is no reason, only a fatal one
    at = f" at {frame.removeprefix('at ')}" if frame else ""
    text = (
        f"Container {c} of pod {name} exited (exit code {code}, "
        f"{term.get('reason', 'Error')}); the decisive line of its "
        f"{'previous' if log.get('previous') else 'current'} log: {decisive!r}{at}"
    )
    yield Finding(
        detector="crash_log_reason",
        pod=name,
        container=c,
        text=text,
        quote=decisive,
        identifiers=(name, c, f"exit code {code}"),
        refs=_refs(log["ref"], pod_ref),
        weight=int(cs.get("restartCount", 0)),
        extra={"exit_code": code, "exit_code_ref": pod_ref, "frame": frame},
    )
