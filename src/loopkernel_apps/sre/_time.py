"""Time against the dump's own "now": what is current, what is recent, what is history.

"Now" is the newest timestamp the dump holds (``dump_now``: the pods' status times and the
events'), never the reader's clock: a dump read a week later says the same. Three kinds of
fact, kept apart in the model, the report and the ranking:

- **current**: the state of a live object as the dump shows it (a container waiting in
  ``CrashLoopBackOff``, a pod ``Pending``, a node ``Ready=Unknown``);
- **recent**: events of live objects (the current uid) newer than the object;
- **history**: anything else: an event of another uid, a restart of a container that has
  been running and Ready for more than ``RECENT_S`` since, a ``lastState`` from days ago.
  History is stated with its date where it answers the question; it is never "failing"
  and never a verified cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

__all__ = ["RECENT_S", "ago", "recovered", "recovered_pod", "seconds"]

RECENT_S = 3600
"""A container Ready for longer than this (the API server's default event TTL) has recovered."""


def seconds(t: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, or None."""
    if not isinstance(t, str) or len(t) < 19:
        return None
    try:
        return datetime.fromisoformat(t[:19]).timestamp()
    except ValueError:
        return None


def ago(then: object, now: object) -> float | None:
    a, b = seconds(then), seconds(now)
    return None if a is None or b is None else b - a


def recovered(c: Mapping[str, Any], now: object) -> bool:
    """A triage container entry that runs and is Ready, and has been for ``RECENT_S``."""
    if c.get("state") != "running" or not c.get("ready"):
        return False
    since = ago(c.get("started"), now)
    return since is not None and since > RECENT_S


def recovered_pod(u: Mapping[str, Any], now: object) -> bool:
    """A triage entry whose containers all recovered (it restarted, long ago)."""
    cs = u.get("containers") or []
    return bool(cs) and u.get("phase") == "Running" and all(recovered(c, now) for c in cs)
