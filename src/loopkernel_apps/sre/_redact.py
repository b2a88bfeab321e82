"""Secret redaction for everything the SRE tools server returns: one entry, one marker.

``redact(value, secrets)`` walks a JSON value and

- replaces the value of every secret-looking key (``password``, ``token`` ...) and of every
  container ``env`` entry whose name looks secret (``DB_PASSWORD``, ``API_KEY`` ...);
- removes every literal in ``secrets`` (the values the pod specs of the dump hold for
  secret-looking variables) wherever it appears, so a secret a program prints
  verbatim is caught even without a ``key=`` in front of it;
- rewrites text with the project's redactor, ``loopkernel.evidence.redact_text``
  (``password=…`` and its kin, AWS keys, bearer tokens, PEM blocks, JWTs, API keys), plus
  the one shape it does not know, credentials in URLs (``EXTRA_PATTERNS``).

Every secret becomes ``loopkernel.evidence.marker(secret)``, ``[redacted:HASH]``: the
same marker the tool layer writes at its result boundary, so a report, its evidence and the
database use one redactor and one marker. This is the one function the server applies
(``tools`` calls it at the result boundary).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from loopkernel.evidence import MARKER, marker
from loopkernel.evidence import redact_text as project_redact_text

__all__ = ["EXTRA_PATTERNS", "redact", "redact_text", "secret_name", "secret_values"]

_SECRET_NAME = re.compile(
    r"(?i)(passw(or)?d|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"credential|auth|session[_-]?key|signing[_-]?key|dsn)"
)

EXTRA_PATTERNS: tuple[re.Pattern[str], ...] = (
    # user:password@ in a URL (postgres://app:pa55w0rd@db:5432/x): the password group
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:([^\s@/]+)@"),
)
"""Credential shapes the project's redactor does not cover; group 1 is the secret."""


def _mark_group(match: re.Match[str]) -> str:
    secret = match.group(1)
    if secret.startswith(MARKER):
        return match.group(0)
    start, end = match.span(1)
    offset = match.start(0)
    whole = match.group(0)
    return whole[: start - offset] + marker(secret) + whole[end - offset :]


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
    """``text`` with the literal ``secrets`` and every credential-shaped part marked."""
    for literal in secrets:
        if literal in text:
            text = text.replace(literal, marker(literal))
    text = project_redact_text(text)
    for pattern in EXTRA_PATTERNS:
        text = pattern.sub(_mark_group, text)
    return text


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``value`` (JSON) with secrets replaced by ``[redacted:HASH]``."""
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
            if (env_like and k == "value" and isinstance(v, str)) or (
                isinstance(v, str) and k not in ("name", "kind") and secret_name(k) and v
            ):
                out[k] = v if v.startswith(MARKER) else marker(v)
            else:
                out[k] = _walk(v, secrets)
        return out
    return value
