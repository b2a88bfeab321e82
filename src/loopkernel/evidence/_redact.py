"""Redaction of secrets, applied at the journal's boundary to every value that is stored:
tool arguments, results and errors; a worker's result and error; patches (task inputs,
verdicts), run parameters, approval payloads and evidence.

Two rules, both on by default:

* **Keys that look like secrets.** In a JSON object, the string value of a key such as
  ``password``, ``secret``, ``token``, ``api_key``, ``authorization``, ``private_key``,
  ``cookie`` (any case, ``-``/``_`` ignored) is replaced whole; inside a list or object
  under such a key, every string is. Numbers and booleans stay (``input_tokens: 12``).
* **Credentials in text.** Every string is scanned for common credential shapes: AWS
  access key ids, ``Bearer``/``Basic`` credentials, PEM blocks (a private key without its
  END line too), JSON Web Tokens, GitHub, GitLab, Slack, Stripe, Google, Hugging Face and
  ``sk-`` (OpenAI, Anthropic) API keys, and ``password=...`` / ``token: ...`` pairs.

**Opting out, per field.** A tool lists result paths in its defs (``keepSecrets``) and
argument paths (``keepArguments``); a worker is marked with ``@keep_secrets("a", "a.b")``
(the paths of its result that are journaled as they are). Nothing else opts out.

A secret becomes ``[redacted:HASH]``, HASH the first 12 hex digits of its SHA-256: equal
secrets stay comparable across runs and stores (a test can still say "the same key was
sent twice") without the value itself. The hash is not salted; it hides a secret, not a
guessable one (a short password can be found by trying candidates).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Collection
from typing import TypeVar

from loopkernel.graph import JSON

__all__ = [
    "KEEP_SECRETS",
    "MARKER",
    "is_secret_key",
    "keep_secrets",
    "marker",
    "redact",
    "redact_text",
]

F = TypeVar("F", bound=Callable[..., object])

KEEP_SECRETS = "__loopkernel_keep_secrets__"
"""The attribute ``keep_secrets`` sets on a worker."""


def keep_secrets(*paths: str) -> Callable[[F], F]:
    """Mark a worker: the paths of its result (``"token"``, ``"auth.header"``; list items
    share their list's path) are journaled as they are, not redacted::

        @keep_secrets("session.id")
        async def login(ctx: TaskContext) -> dict: ...
    """
    for path in paths:
        if not isinstance(path, str) or not path:
            raise TypeError(f"keep_secrets takes result paths like 'a.b', not {path!r}")

    def mark(worker: F) -> F:
        setattr(worker, KEEP_SECRETS, tuple(paths))
        return worker

    return mark


MARKER = "[redacted:"
"""How every redacted value begins."""

_SECRET_KEYS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "authorization",
    "accesskey",
    "privatekey",
    "credential",
    "cookie",
    "sessionid",
    "signature",
)
_NOT_SECRET = re.compile(r"tokens$|tokenizer|tokencount|^(max|input|output|total)tokens?")

_PATTERNS: tuple[tuple[re.Pattern[str], int], ...] = (
    # (pattern, group to replace; 0 = the whole match)
    (re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?-----END [A-Z0-9 ]+-----", re.S), 0),
    # a private key cut short (no END line): the body up to the end of the text
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:(?!-----END).)*\Z", re.S), 0),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|APKA)[0-9A-Z]{16}\b"), 0),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), 0),
    (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}\b"), 0),
    (re.compile(r"\bglpat-[0-9A-Za-z_-]{20,}"), 0),
    (re.compile(r"\bgithub_pat_[0-9A-Za-z_]{30,}"), 0),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), 0),
    (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), 0),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]+"), 0),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), 0),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), 0),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"), 0),
    (re.compile(r"\b(?:Bearer|Basic|Token)\s+([A-Za-z0-9._~+/=-]{8,})", re.I), 1),
    (
        re.compile(
            r"(?:\b|_)(?:password|passwd|pwd|passphrase|secret|token|api[_-]?key|"
            r"access[_-]?key|secret[_-]?key|client[_-]?secret|auth)"
            r"[\"']?\s*[=:]\s*[\"']?([^\s\"'&,;)\]}>]{3,})",
            re.I,
        ),
        1,
    ),
)


def _scoped(pattern: re.Pattern[str]) -> str:
    flags = ("i" if pattern.flags & re.I else "") + ("s" if pattern.flags & re.S else "")
    return f"(?{flags}:{pattern.pattern})" if flags else f"(?:{pattern.pattern})"


_ANY = re.compile("|".join(_scoped(p) for p, _ in _PATTERNS))
"""Every pattern at once: one scan tells a clean string (the common case) from one to
redact, so the journal's boundary costs one regex pass per string."""


def marker(secret: str) -> str:
    """``[redacted:HASH]`` for ``secret``: the same secret always gives the same marker."""
    return f"{MARKER}{hashlib.sha256(secret.encode()).hexdigest()[:12]}]"


@functools.lru_cache(maxsize=4096)  # a pure function of a key; a run has few keys
def is_secret_key(key: str) -> bool:
    """Whether an object key names a secret (``api_key``, ``X-Auth-Token``, ``password``)."""
    norm = re.sub(r"[^a-z0-9]", "", key.lower())
    if _NOT_SECRET.search(norm):
        return False
    return any(word in norm for word in _SECRET_KEYS) or norm == "auth"


def redact_text(text: str) -> str:
    """``text`` with every credential-shaped part replaced by its marker."""
    if not text or _ANY.search(text) is None:
        return text
    for pattern, group in _PATTERNS:
        text = pattern.sub(functools.partial(_replace, group=group), text)
    return text


_SHORT = 64
"""Strings up to this long are redacted through ``_short``'s cache: the ids, names and
small values a step journals again and again ("add", "t12", "noop") scan once each."""


@functools.lru_cache(maxsize=4096)  # a pure function of short text: bounded, ~0.5 MB at most
def _short(text: str) -> str:
    return redact_text(text)


def _replace(match: re.Match[str], *, group: int) -> str:
    secret = match.group(group)
    if secret.startswith(MARKER):
        return match.group(0)
    if group == 0:
        return marker(secret)
    start, end = match.span(group)
    whole = match.group(0)
    offset = match.start(0)
    return whole[: start - offset] + marker(secret) + whole[end - offset :]


def redact(value: JSON, *, keep: Collection[str] = ()) -> JSON:
    """``value`` with its secrets replaced (see the module doc). ``keep`` lists the paths
    (``"token"``, ``"auth.header"``; list items share their list's path) a tool declares
    as not secret: they are left exactly as they are."""
    if not keep:
        return _walk_all(value, False)
    return _walk(value, "", frozenset(keep), secret=False)


def _walk_all(value: JSON, secret: bool) -> JSON:
    """``_walk`` with nothing kept: no paths to build (the common case: a patch, an error)."""
    if isinstance(value, str):
        if secret and not value.startswith(MARKER):
            return marker(value)
        return _short(value) if len(value) <= _SHORT else redact_text(value)
    if isinstance(value, list):
        return [_walk_all(v, secret) for v in value]
    if isinstance(value, dict):
        return {k: _walk_all(v, secret or is_secret_key(str(k))) for k, v in value.items()}
    return value


def _walk(value: JSON, path: str, keep: frozenset[str], *, secret: bool) -> JSON:
    if path in keep:
        return value
    if isinstance(value, str):
        if secret and not value.startswith(MARKER):
            return marker(value)
        return _short(value) if len(value) <= _SHORT else redact_text(value)
    if isinstance(value, list):
        return [_walk(v, path, keep, secret=secret) for v in value]
    if isinstance(value, dict):
        return {
            k: _walk(
                v,
                f"{path}.{k}" if path else str(k),
                keep,
                secret=secret or is_secret_key(str(k)),
            )
            for k, v in value.items()
        }
    return value
