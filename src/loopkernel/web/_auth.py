"""Who may read and write through the inspector.

- The **operator token** is the server's: printed by ``serve`` at start, or read from a
  file. It authorizes every write, and every read when reads are locked. A browser signs
  in once (``POST /login``) and gets a session of its own: a random id in a cookie
  (HttpOnly, SameSite=Strict), held in this process's memory with an expiry
  (``session_seconds``), revoked by ``POST /logout`` and by a restart. A script sends
  ``Authorization: Bearer TOKEN``.
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
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

__all__ = ["CSRF_COOKIE", "SESSION_COOKIE", "Auth"]

SESSION_COOKIE = "lk_session"
CSRF_COOKIE = "lk_csrf"


@dataclass(kw_only=True)
class Auth:
    """The server's operator token and the checks derived from it."""

    operator_token: str
    """The token that ``serve`` printed or read."""
    require_for_reads: bool = False
    """Reads need the operator token too."""
    session_seconds: float = 12 * 3600.0
    """How long a sign-in lasts."""
    clock: Callable[[], float] = time.monotonic
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _sessions: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Session id -> when it expires (``clock`` time) and its CSRF token."""

    def new_session(self) -> tuple[str, str]:
        """A fresh session for one sign-in: its cookie value and its CSRF token, minted
        here (never the ``lk_csrf`` cookie the browser came with: a page on another port
        of this host may have planted that one)."""
        now = self.clock()
        for sid, (until, _) in list(self._sessions.items()):  # forget the expired ones
            if until <= now:
                del self._sessions[sid]
        sid = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(24)
        self._sessions[sid] = (now + self.session_seconds, csrf)
        return sid, csrf

    def session_csrf(self, request: Request) -> str | None:
        """The CSRF token of the request's live session, if it has one."""
        sid = request.cookies.get(SESSION_COOKIE)
        found = None if sid is None else self._sessions.get(sid)
        if found is None or found[0] <= self.clock():
            return None
        return found[1]

    def end_session(self, request: Request) -> None:
        """Revoke the request's session (sign out)."""
        sid = request.cookies.get(SESSION_COOKIE)
        if sid is not None:
            self._sessions.pop(sid, None)

    def session_ok(self, request: Request) -> bool:
        sid = request.cookies.get(SESSION_COOKIE)
        found = None if sid is None else self._sessions.get(sid)
        if found is None:
            return False
        if found[0] <= self.clock():
            self._sessions.pop(sid or "", None)
            return False
        return True

    def sign(self, text: str) -> str:
        """A signature of ``text`` under this process's key (for notices)."""
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()[:32]

    def signed(self, text: str, signature: str | None) -> bool:
        return signature is not None and hmac.compare_digest(self.sign(text), signature)

    def is_operator_token(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(
            token.strip().encode(), self.operator_token.encode()
        )

    def is_bearer(self, request: Request) -> bool:
        """A script that sent the operator token as ``Authorization: Bearer``."""
        header = request.headers.get("authorization", "")
        return header.lower().startswith("bearer ") and self.is_operator_token(header[7:])

    def is_operator(self, request: Request) -> bool:
        """A signed-in browser or a script with the bearer token."""
        return self.is_bearer(request) or self.session_ok(request)

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
