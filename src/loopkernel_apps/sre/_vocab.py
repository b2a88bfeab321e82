"""The failure vocabulary Kubernetes emits, as data: one row per reason and message shape.

Each row names where Kubernetes writes it (``Source``: a container's waiting or terminated
reason, an exit code, a pod's status reason or condition, an event's reason whatever its
``type``), the component that writes it, the message shapes with their variables named
(``{volume}``, ``{name}`` … as in Kubernetes' own format strings), the detector it feeds,
the fact a report cites, and a remediation template. A template is offered only when every
slot is filled from evidence (``fill`` returns ``None`` otherwise).

``tests/sre/test_vocab.py`` builds a message from each row's ``example`` (the documented
shape, variables filled) and checks that the row's shape reads it and its detector exists;
a coverage test fails when a row has no detector or no example, or a detector no row.
The detectors read structured fields first (reasons, exit codes, conditions, owner
references, uids); the shapes are for where Kubernetes puts the meaning in text.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

__all__ = ["Row", "Source", "fill", "match", "row", "slots"]


class Source(StrEnum):
    """Where Kubernetes writes a reason."""

    WAITING = "container.state.waiting.reason"
    TERMINATED = "container.state.terminated.reason"
    EXIT_CODE = "container.state.terminated.exitCode"
    POD_STATUS = "pod.status.reason"
    CONDITION = "pod.status.conditions"
    EVENT = "event.reason"
    LOG = "log line"


@dataclass(frozen=True, kw_only=True)
class Row:
    """One reason Kubernetes emits, how to read it, and what it means."""

    reason: str
    """The reason as Kubernetes spells it (or the error class, for a log row)."""
    source: Source
    component: str
    """Who writes it: kubelet, scheduler, attachdetach-controller, replicaset-controller …"""
    detector: str
    """The detector this row feeds (one of ``DETECTORS``)."""
    shapes: tuple[str, ...] = ()
    """Message shapes, variables in braces; empty when the reason alone is the fact."""
    example: str
    """A message in the documented shape, for the row's test (the reason when no shape)."""
    fact: str
    """What the report states, with the shape's variables as slots."""
    remedy: str = ""
    """The remediation, with slots; "" when the detector's own template applies."""
    event_type: str | None = None
    """``Warning`` or ``Normal`` for events (a failure may be either)."""

    @cached_property
    def patterns(self) -> tuple[re.Pattern[str], ...]:
        return tuple(_compile(s) for s in self.shapes)


_VARIABLE = {
    "rest": r".*",
    "taint": r"\{[^}]*\}",
    "pods": r".+",
    "path": r"\S+",
}
_WORD = r"[^\s\"',\[\]]+"


def _compile(shape: str) -> re.Pattern[str]:
    """A shape's regex: literal text (any run of spaces), each ``{variable}`` a named group."""
    out, pos = [], 0
    for m in re.finditer(r"\{(\w+)\}", shape):
        out.append(re.escape(shape[pos : m.start()]).replace("\\ ", r"\s+"))
        out.append(f"(?P<{m.group(1)}>{_VARIABLE.get(m.group(1), _WORD)})")
        pos = m.end()
    out.append(re.escape(shape[pos:]).replace("\\ ", r"\s+"))
    return re.compile("".join(out))


def slots(template: str) -> tuple[str, ...]:
    return tuple(f for _, f, _, _ in string.Formatter().parse(template) if f)


def fill(template: str, values: dict[str, object]) -> str | None:
    """The template with its slots filled, or ``None`` when a slot has no value."""
    names = slots(template)
    if any(values.get(n) in (None, "", "?") for n in names):
        return None
    return template.format(**{n: values[n] for n in names})


def match(row: Row, message: str) -> dict[str, str] | None:
    """The variables of the first shape of ``row`` that reads ``message`` (``{}`` when the
    row has no shape), or ``None``."""
    if not row.shapes:
        return {}
    for p in row.patterns:
        m = p.search(message)
        if m:
            return {k: v for k, v in m.groupdict().items() if v is not None} | {"quote": m.group(0)}
    return None


def row(
    reason: str,
    source: Source,
    component: str,
    detector: str,
    example: str,
    fact: str,
    *shapes: str,
    remedy: str = "",
    event_type: str | None = None,
) -> Row:
    return Row(
        reason=reason,
        source=source,
        component=component,
        detector=detector,
        shapes=shapes,
        example=example,
        fact=fact,
        remedy=remedy,
        event_type=event_type,
    )
