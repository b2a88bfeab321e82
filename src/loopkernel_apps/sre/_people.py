"""Who may investigate what: the service's scope table (``docs/sre.md``, "The service").

A JSON file (``LOOPKERNEL_SRE_SERVICE``, or ``--people FILE``) names each user, the token
that signs them in on the Investigations page (``token_sha256``, or ``token`` for a test),
the namespaces and clusters they may investigate, and their limits::

    {"users": {"alice": {"token_sha256": "…", "namespaces": ["shop"], "clusters": ["eu"],
                         "per_hour": 30, "max_queued": 3}},
     "dumps": {"shop-1201": "/srv/dumps/shop-1201"},
     "clusters": {"eu": {"kubeconfig": "/etc/lk/eu.yaml", "context": "eu"}},
     "uploads": "/var/lib/loopkernel/uploads", "max_upload_bytes": 20000000,
     "namespaces": {"shop": {"separate_duties": true}}}

This table is the investigator's own, apart from the inspector's operator tokens: an
operator may approve and cancel runs; a user here may only ask questions, in their scope.
A question outside one's scope is refused by ``check_scope`` before anything is read.
``namespaces`` says which namespaces separate duties: a fix there must be approved by a user
other than the one who requested it (``_fixes``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopkernel import UsageError
from loopkernel_apps.sre._scope import other_namespaces

__all__ = ["People", "ScopeRefused", "User", "check_scope", "load_people"]

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""An uploaded dump archive's bound, compressed, unless the file says otherwise."""


class ScopeRefused(UsageError):
    """A question its asker may not ask: refused before anything is read or journaled."""

    code = "scope_refused"


@dataclass(frozen=True, kw_only=True, slots=True)
class User:
    """One named user of the service."""

    name: str
    """The name journaled with every question they ask."""
    namespaces: frozenset[str]
    """The namespaces they may investigate (``*``: any)."""
    clusters: frozenset[str] = frozenset()
    """The live clusters (names in the file's ``clusters``) they may read."""
    per_hour: int = 30
    """Questions per rolling hour."""
    max_queued: int = 3
    """Questions of theirs not finished yet, at most."""
    token_sha256: str = ""
    """The SHA-256 (hex) of the token that signs them in on the page."""

    def may_read(self, namespace: str) -> bool:
        return "*" in self.namespaces or namespace in self.namespaces


@dataclass(frozen=True, kw_only=True, slots=True)
class People:
    """The whole table: users, the server's named dumps and clusters, the upload bounds."""

    users: Mapping[str, User]
    dumps: Mapping[str, str] = field(default_factory=dict)
    """Dump folders on the server, by the name the page offers."""
    clusters: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Live clusters: name -> ``kubeconfig`` and ``context`` for ``sre collect``'s client."""
    uploads: str = ""
    """Where uploaded archives are unpacked (one folder per upload)."""
    max_upload_bytes: int = MAX_UPLOAD_BYTES
    separate_duties: frozenset[str] = frozenset()
    """Namespaces whose fixes need an approver other than their requester (``*``: all)."""

    def separates(self, namespace: str) -> bool:
        return "*" in self.separate_duties or namespace in self.separate_duties

    def by_token(self, token: str) -> User | None:
        """The user this token signs in, if any (constant-time compare per user)."""
        digest = hashlib.sha256(token.strip().encode()).hexdigest()
        found = None
        for user in self.users.values():
            if user.token_sha256 and hmac.compare_digest(user.token_sha256, digest):
                found = user
        return found

    def user(self, name: str) -> User:
        found = self.users.get(name)
        if found is None:
            raise ScopeRefused(f"refused: {name!r} is not a user of the investigation service")
        return found


def _user(name: str, raw: Mapping[str, Any]) -> User:
    token = raw.get("token")
    digest = str(raw.get("token_sha256") or "")
    if token is not None:
        if len(str(token)) < 16:
            raise UsageError(f"user {name}: a token needs at least 16 characters")
        digest = hashlib.sha256(str(token).encode()).hexdigest()
    namespaces = raw.get("namespaces")
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise UsageError(f"user {name}: namespaces must be a list of names")
    limits = {k: raw[k] for k in ("per_hour", "max_queued") if k in raw}
    for key, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"user {name}: {key} must be a positive whole number")
    return User(
        name=name,
        namespaces=frozenset(namespaces),
        clusters=frozenset(raw.get("clusters") or ()),
        token_sha256=digest,
        **limits,
    )


def load_people(path: str | Path) -> People:
    """The table in ``path``; one line naming what is wrong otherwise."""
    try:
        raw = json.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the service file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"the service file {path} is not JSON: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("users"), dict):
        raise UsageError(f"the service file {path} needs a 'users' object")
    return People(
        users={str(n): _user(str(n), u) for n, u in raw["users"].items()},
        dumps={str(k): str(v) for k, v in (raw.get("dumps") or {}).items()},
        clusters={str(k): dict(v) for k, v in (raw.get("clusters") or {}).items()},
        uploads=str(raw.get("uploads") or ""),
        max_upload_bytes=int(raw.get("max_upload_bytes") or MAX_UPLOAD_BYTES),
        separate_duties=_separated(path, raw.get("namespaces") or {}),
    )


def _separated(path: str | Path, raw: Any) -> frozenset[str]:
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise UsageError(f"the service file {path}: 'namespaces' maps a name to its rules")
    return frozenset(str(ns) for ns, rules in raw.items() if rules.get("separate_duties"))


def check_scope(user: User, namespace: str, question: str, cluster: str | None = None) -> None:
    """``ScopeRefused`` when ``user`` may not read ``namespace`` (or ``cluster``), or the
    question names a namespace they may not read. Pure: nothing is read."""
    if not user.may_read(namespace):
        raise ScopeRefused(f"refused: {user.name} may not investigate namespace {namespace}")
    for other in other_namespaces(question, namespace):
        if not user.may_read(other):
            raise ScopeRefused(
                f"refused: the question names namespace {other}, "
                f"which {user.name} may not investigate"
            )
    if cluster is not None and cluster not in user.clusters:
        raise ScopeRefused(f"refused: {user.name} may not read cluster {cluster}")
