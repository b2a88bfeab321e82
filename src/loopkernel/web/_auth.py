"""Who may read and write through the inspector.

- The **operator token** is the server's: printed by ``serve`` at start, or read from a
  file. It authorizes every write, and every read when reads are locked. A browser signs
  in once (``POST /login``) and gets a session cookie derived from it (HttpOnly,
  SameSite=Strict); a script sends ``Authorization: Bearer TOKEN``.
- A **run's approval token** (printed once by ``loopkernel run``) authorizes writes to
  that run only; it is typed into the form and checked by the client API against the
  stored hash. Hashes are never sent to a browser.
- **CSRF**: every form carries the value of the ``lk_csrf`` cookie (SameSite=Strict) and a
  POST is refused unless both are present and equal, and its ``Origin``, when sent, is the
  server's own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
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
    _session_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def session_value(self) -> str:
        """The session cookie's value: an HMAC of the token under a key that lives and dies
        with this server process, so the cookie is not the token and a restart logs out."""
        return hmac.new(self._session_key, self.operator_token.encode(), hashlib.sha256).hexdigest()

    def is_operator_token(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(
            token.strip().encode(), self.operator_token.encode()
        )

    def is_operator(self, request: Request) -> bool:
        """A signed-in browser or a script with the bearer token."""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer ") and self.is_operator_token(header[7:]):
            return True
        cookie = request.cookies.get(SESSION_COOKIE)
        return cookie is not None and hmac.compare_digest(cookie, self.session_value)

    def may_read(self, request: Request) -> bool:
        return not self.require_for_reads or self.is_operator(request)

    @staticmethod
    def csrf_ok(request: Request, submitted: str | None) -> bool:
        cookie = request.cookies.get(CSRF_COOKIE)
        if not cookie or not submitted or not hmac.compare_digest(cookie, submitted):
            return False
        origin = request.headers.get("origin")
        if origin is None:  # not every browser sends it on a same-origin form post
            return True
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        return origin == own
