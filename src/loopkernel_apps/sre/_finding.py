"""A detector's finding and the small readers every detector shares."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EXEC_NOT_FOUND", "Finding"]

EXEC_NOT_FOUND = re.compile(
    r"exec:? \\?\"?([^\"\\\s:]+)\\?\"?: (?:executable file not found|no such file or directory)"
)
"""The runtime's message when a container's command is not in the image (every detector that
reads a terminated or waiting message sets it apart)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One detector's observation."""

    detector: str
    """One of ``DETECTORS``."""
    pod: str
    container: str | None
    text: str
    """The claim, in one sentence."""
    quote: str
    """Text the cited evidence holds verbatim."""
    identifiers: tuple[str, ...]
    """Names the claim makes that the evidence must hold."""
    refs: tuple[str, ...]
    """Evidence refs it was observed in (empty when run over the dump)."""
    weight: int = 0
    """Restarts, event counts: how often it happened."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "pod": self.pod,
            "container": self.container,
            "text": self.text,
            "quote": self.quote,
            "identifiers": list(self.identifiers),
            "refs": list(self.refs),
            "weight": self.weight,
            "extra": self.extra,
        }


def _refs(*refs: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r for r in refs if r))


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = pod.get("spec", {})
    return {
        c.get("name", ""): c for c in spec.get("containers", []) + spec.get("initContainers", [])
    }


def _statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    st = pod.get("status", {})
    return list(st.get("containerStatuses", []) or []) + list(
        st.get("initContainerStatuses", []) or []
    )


def _same(events: list[dict[str, Any]], ev: dict[str, Any]) -> list[str | None]:
    """The refs of every item holding an event with this message (describe and events)."""
    return [i["ref"] for i in events if i["event"].get("message") == ev.get("message")]


def _unhealthy(pod: dict[str, Any]) -> bool:
    st = pod.get("status", {})
    if st.get("phase") in ("Pending", "Failed", "Unknown"):
        return True
    for cs in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or []):
        completed = cs.get("state", {}).get("terminated", {}).get("reason") == "Completed"
        if (int(cs.get("restartCount", 0)) > 0 or not cs.get("ready", False)) and not completed:
            return True
    return False
