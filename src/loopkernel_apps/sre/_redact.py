"""Secret redaction for everything the SRE tools server returns: patterns as data, one entry.

``redact(value, secrets)`` walks a JSON value and

- replaces the value of every secret-looking key (``password``, ``token`` ...) and of every
  container ``env`` entry whose name looks secret (``DB_PASSWORD``, ``API_KEY`` ...);
- rewrites text with the patterns in ``TEXT_PATTERNS``: ``password=…`` and its kin in log
  lines, AWS access keys, bearer tokens, PEM blocks, credentials in URLs;
- removes every literal in ``secrets`` (the values the pod specs of the dump hold for
  secret-looking variables) wherever it appears, so a secret a program prints
  verbatim is caught even without a ``key=`` in front of it.

This is the one function the server applies (``tools`` calls it at the result boundary).
When ``loopkernel.evidence`` ships its redactor, point ``redact_text`` at it and keep
the structural walk and the ``secrets`` literals here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["MARK", "TEXT_PATTERNS", "redact", "redact_text", "secret_name", "secret_values"]

MARK = "[REDACTED]"

_SECRET_NAME = re.compile(
    r"(?i)(passw(or)?d|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"credential|auth|session[_-]?key|signing[_-]?key|dsn)"
)

TEXT_PATTERNS: tuple[tuple[str, str], ...] = (
    # PEM blocks first: their bodies would otherwise be cut into pieces by the rest.
    (
        r"-----BEGIN ([A-Z0-9 ]+)-----[\s\S]*?-----END \1-----",
        "-----BEGIN \\1-----" + MARK + "-----END \\1-----",
    ),
    (r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}", "\\1 " + MARK),
    (r"(?i)(authorization\s*[:=]\s*)(basic|token)\s+\S+", "\\1\\2 " + MARK),
    (r"\b(AKIA|ASIA)[0-9A-Z]{16}\b", MARK),
    (
        r"(?i)\b(aws_secret_access_key|aws_session_token)(\s*[=:]\s*)[\"']?[A-Za-z0-9/+=]{16,}[\"']?",
        "\\1\\2" + MARK,
    ),
    (r"(?i)([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@", "\\1" + MARK + "@"),
    (
        r"(?i)\b([\w.-]*(?:passw(?:or)?d|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|"
        r"client[_-]?secret)[\w.-]*)(\"?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&\"']+)",
        "\\1\\2" + MARK,
    ),
)
"""``(regex, replacement)`` pairs, applied in order to every string."""

_COMPILED = [(re.compile(p), r) for p, r in TEXT_PATTERNS]


def secret_name(name: str) -> bool:
    """Whether a variable or key name looks like it holds a secret."""
    return bool(_SECRET_NAME.search(name))


def secret_values(pods: Iterable[dict[str, Any]]) -> list[str]:
    """The literal values of secret-looking env vars in these pods' specs (length >= 6)."""
    found: set[str] = set()
    for pod in pods:
        spec = pod.get("spec", {})
        for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            for env in c.get("env", []) or []:
                value = env.get("value")
                if isinstance(value, str) and len(value) >= 6 and secret_name(env.get("name", "")):
                    found.add(value)
    return sorted(found, key=lambda s: (-len(s), s))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    for literal in secrets:
        if literal in text:
            text = text.replace(literal, MARK)
    for pattern, replacement in _COMPILED:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``value`` (JSON) with secrets replaced by ``[REDACTED]``."""
    literals = tuple(secrets)
    return _walk(value, literals)


def _walk(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, list):
        return [_walk(v, secrets) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        named = value.get("name")
        env_like = isinstance(named, str) and "value" in value and secret_name(named)
        for k, v in value.items():
            if (env_like and k == "value") or (
                isinstance(v, str) and k not in ("name", "kind") and secret_name(k) and v
            ):
                out[k] = MARK
            else:
                out[k] = _walk(v, secrets)
        return out
    return value
