"""Who may read and write through the inspector.

- The **operator token** is the server's: printed by ``serve`` at start, or read from a
  file; its holder is named ``operator``. **Named operators** (``serve --operators FILE``:
  ``NAME SHA256-OF-TOKEN`` per line) each have a token of their own, and every decision
  and cancel is journaled with the name of whoever made it. A token authorizes every
  write, and every read when reads are locked. A browser signs in once (``POST /login``)
  and gets a session of its own: a random id in a cookie (HttpOnly, SameSite=Strict),
  held in this process's memory with an expiry (``session_seconds``) and the operator's
  name, revoked by ``POST /logout``, one or all of them by ``POST /sessions/revoke`` (at
  once, no restart), and by a restart. A script sends ``Authorization: Bearer TOKEN``.
- A **run's approval token** (printed once by ``loopkernel run``) authorizes writes to
  that run only; it is typed into the form and checked by the client API against the
  stored hash. Hashes are never sent to a browser.
- **CSRF**: every form carries a token and a POST is refused unless it is the expected
  one and its ``Origin``, when sent, is the server's own. Signed in, the token is the
  session's, minted by the server at sign-in (a ``lk_csrf`` cookie planted by a page on
  another port of this host is replaced then, and never accepted for the session);
  before, it is the ``lk_csrf`` cookie's (SameSite=Strict). Cookies are ``Secure`` when
  the request came over HTTPS (directly, or through a proxy uvicorn trusts, whose
  ``X-Forwarded-Proto`` says so), and the answer then carries HSTS. A POST with a valid
  ``Authorization: Bearer`` needs no CSRF token: a browser never adds that header to a
  cross-site request by itself.
- **Notices** shown after an action travel in the redirect's URL signed with a key of this
  process: a ``?notice=`` that the server did not write is not shown.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

__all__ = [
    "CSRF_COOKIE",
    "OPERATOR",
    "SESSION_COOKIE",
    "Auth",
    "Session",
    "read_operators",
    "token_hash",
]


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


SESSION_COOKIE = "lk_session"
CSRF_COOKIE = "lk_csrf"


OPERATOR = "operator"
"""The name of the server's own token's holder (``serve``'s printed or ``--token-file``
token)."""


def token_hash(token: str) -> str:
    """What an operators file keeps of a token: its SHA-256, hex."""
    return hashlib.sha256(token.strip().encode()).hexdigest()


def read_operators(text: str, where: str = "the operators file") -> dict[str, str]:
    """``NAME SHA256`` lines (``#`` comments, blank lines) -> name -> token hash. A name
    is letters, digits, ``.-_@``; a hash is 64 hex digits; a name or a hash given twice
    is refused (``ValueError``, naming the line)."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, digest = line.partition(" ")
        digest = digest.strip().removeprefix("sha256:").lower()
        if not _NAME.fullmatch(name) or not _HEX.fullmatch(digest):
            raise ValueError(f"{where}, line {n}: expected NAME SHA256-OF-TOKEN")
        if name in out or name == OPERATOR or digest in out.values():
            raise ValueError(f"{where}, line {n}: {name} or its token is there twice")
        out[name] = digest
    return out


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Session:
    """One sign-in, as the sessions page lists it (never its cookie value)."""

    handle: str
    """A public name for it (a keyed hash of its id), to revoke it by."""
    name: str
    """The operator who signed in."""
    expires_in: float
    """Seconds left."""


@dataclass(kw_only=True)
class Auth:
    """The server's operator tokens and the checks derived from them."""

    operator_token: str
    """The token that ``serve`` printed or read (its holder: ``operator``)."""
    operators: dict[str, str] = field(default_factory=dict)
    """Named operators: name -> SHA-256 of their token (``read_operators``)."""
    require_for_reads: bool = False
    """Reads need an operator token too."""
    session_seconds: float = 12 * 3600.0
    """How long a sign-in lasts."""
    clock: Callable[[], float] = time.monotonic
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _sessions: dict[str, tuple[float, str, str]] = field(default_factory=dict)
    """Session id -> when it expires (``clock`` time), its CSRF token, the operator."""

    def new_session(self, name: str = OPERATOR) -> tuple[str, str]:
        """A fresh session for one sign-in of ``name``: its cookie value and its CSRF
        token, minted here (never the ``lk_csrf`` cookie the browser came with: a page on
        another port of this host may have planted that one)."""
        now = self.clock()
        for sid, (until, _, _) in list(self._sessions.items()):  # forget the expired ones
            if until <= now:
                del self._sessions[sid]
        sid = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(24)
        self._sessions[sid] = (now + self.session_seconds, csrf, name)
        return sid, csrf

    def _live(self, request: Request) -> tuple[float, str, str] | None:
        """The request's session, while it lasts (an expired one is forgotten)."""
        sid = request.cookies.get(SESSION_COOKIE)
        found = None if sid is None else self._sessions.get(sid)
        if found is None:
            return None
        if found[0] <= self.clock():
            self._sessions.pop(sid or "", None)
            return None
        return found

    def session_csrf(self, request: Request) -> str | None:
        """The CSRF token of the request's live session, if it has one."""
        found = self._live(request)
        return None if found is None else found[1]

    def end_session(self, request: Request) -> None:
        """Revoke the request's session (sign out)."""
        sid = request.cookies.get(SESSION_COOKIE)
        if sid is not None:
            self._sessions.pop(sid, None)

    def session_ok(self, request: Request) -> bool:
        return self._live(request) is not None

    def handle_of(self, sid: str) -> str:
        return self.sign("session\n" + sid)[:16]

    def sessions(self) -> list[Session]:
        """The live sessions, soonest to expire first."""
        now = self.clock()
        live = sorted((until, sid, name) for sid, (until, _, name) in self._sessions.items())
        return [
            Session(handle=self.handle_of(sid), name=name, expires_in=until - now)
            for until, sid, name in live
            if until > now
        ]

    def revoke(self, handle: str | None) -> int:
        """End the session of ``handle``, or every session (``None``): at once, for every
        later request. How many were ended."""
        ended = [sid for sid in self._sessions if handle is None or self.handle_of(sid) == handle]
        for sid in ended:
            del self._sessions[sid]
        return len(ended)

    def sign(self, text: str) -> str:
        """A signature of ``text`` under this process's key (for notices)."""
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()[:32]

    def signed(self, text: str, signature: str | None) -> bool:
        return signature is not None and hmac.compare_digest(self.sign(text), signature)

    def who(self, token: str | None) -> str | None:
        """The operator ``token`` belongs to, or ``None`` (every comparison in constant
        time, all of them made)."""
        if token is None:
            return None
        found = OPERATOR if _same(token.strip(), self.operator_token) else None
        digest = token_hash(token)
        for name, expected in self.operators.items():
            if hmac.compare_digest(digest, expected) and found is None:
                found = name
        return found

    def is_operator_token(self, token: str | None) -> bool:
        return self.who(token) is not None

    def _bearer(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        return self.who(header[7:]) if header.lower().startswith("bearer ") else None

    def is_bearer(self, request: Request) -> bool:
        """A script that sent an operator token as ``Authorization: Bearer``."""
        return self._bearer(request) is not None

    def operator_name(self, request: Request) -> str | None:
        """Who the request acts as: the bearer token's operator, else the signed-in one."""
        found = self._bearer(request)
        if found is not None:
            return found
        session = self._live(request)
        return None if session is None else session[2]

    def is_operator(self, request: Request) -> bool:
        """A signed-in browser or a script with a bearer token."""
        return self.operator_name(request) is not None

    def may_read(self, request: Request) -> bool:
        return not self.require_for_reads or self.is_operator(request)

    def csrf_ok(self, request: Request, submitted: str | None) -> bool:
        """The form's token is the session's (signed in), else the ``lk_csrf`` cookie's;
        and the ``Origin``, when sent, is this server."""
        expected = self.session_csrf(request) or request.cookies.get(CSRF_COOKIE)
        if not expected or not submitted or not hmac.compare_digest(expected, submitted):
            return False
        origin = request.headers.get("origin")
        if origin is None:  # not every browser sends it on a same-origin form post
            return True
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        return origin == own
