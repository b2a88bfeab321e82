"""The scheduler's ``FailedScheduling`` message, clause by clause, weighed against the pod.

The scheduler writes one message for every node it filtered out, grouped by the reason::

    0/5 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/
    control-plane: }, 2 Insufficient memory, 2 node(s) didn't match pod anti-affinity rules.
    preemption: 0/5 nodes are available: 1 Preemption is not helpful for scheduling, ...

(older releases: ``1 node(s) had taint {K: V}, that the pod didn't tolerate``). Every
clause is parsed (``parse``); ``decisive`` drops the clauses that cannot be the cause for
this pod (a control-plane taint for a workload that does not tolerate it: application pods
never belong there; a taint the pod tolerates) and keeps the kind that rules out the most
of the remaining nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["CONTROL_PLANE_TAINTS", "Clause", "ClauseKind", "decisive", "parse"]


class ClauseKind(StrEnum):
    """What a clause says ruled a group of nodes out."""

    TAINT = "taint"
    INSUFFICIENT = "insufficient"
    NODE_SELECTOR = "node_selector"
    ANTI_AFFINITY = "pod_anti_affinity"
    POD_AFFINITY = "pod_affinity"
    TOPOLOGY_SPREAD = "topology_spread"
    UNBOUND_CLAIM = "unbound_claim"
    VOLUME_NODE_AFFINITY = "volume_node_affinity"
    CORDONED = "cordoned"
    PORTS = "ports"
    TOO_MANY_PODS = "too_many_pods"
    VOLUME_LIMIT = "volume_limit"
    OTHER = "other"


_SHAPES: tuple[tuple[ClauseKind, re.Pattern[str]], ...] = (
    (ClauseKind.TAINT, re.compile(r"had (?:untolerated )?taints? \{(?P<subject>[^}]*)\}")),
    (ClauseKind.TAINT, re.compile(r"had untolerated taint\(s\)()")),
    (ClauseKind.INSUFFICIENT, re.compile(r"Insufficient (?P<subject>[\w./-]+)")),
    (ClauseKind.ANTI_AFFINITY, re.compile(r"(?i)anti-affinity()")),
    (ClauseKind.POD_AFFINITY, re.compile(r"(?i)didn't match pod affinity()")),
    (ClauseKind.NODE_SELECTOR, re.compile(r"(?i)didn't match (?:Pod's )?node (?:affinity|sel)()")),
    (ClauseKind.TOPOLOGY_SPREAD, re.compile(r"(?i)topology spread()")),
    (ClauseKind.UNBOUND_CLAIM, re.compile(r"(?i)unbound (?:immediate )?PersistentVolumeClaims()")),
    (ClauseKind.UNBOUND_CLAIM, re.compile(r'(?i)persistentvolumeclaim "(?P<subject>[\w.-]+)"')),
    (ClauseKind.VOLUME_NODE_AFFINITY, re.compile(r"(?i)volume node affinity conflict()")),
    (ClauseKind.CORDONED, re.compile(r"(?i)were unschedulable()")),
    (ClauseKind.PORTS, re.compile(r"(?i)free ports()")),
    (ClauseKind.TOO_MANY_PODS, re.compile(r"(?i)Too many pods()")),
    (ClauseKind.VOLUME_LIMIT, re.compile(r"(?i)max volume count()")),
)

CONTROL_PLANE_TAINTS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
"""Taints that keep application pods off control-plane nodes: never an application's cause."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Clause:
    """One group of nodes and why the scheduler filtered it out."""

    count: int
    """How many nodes the clause is about."""
    kind: ClauseKind
    subject: str
    """The taint (``key: value``), the resource, or the claim the clause names; "" if none."""
    text: str
    """The clause as the scheduler wrote it."""

    @property
    def taint_key(self) -> str:
        return self.subject.split(":", 1)[0].split("=", 1)[0].strip()


_HEAD = re.compile(r"(?:(?P<ok>\d+)/(?P<total>\d+) nodes are available: )?(?P<body>.*)", re.S)
_SPLIT = re.compile(r",\s+(?=\d+\s)")


def parse(message: str) -> tuple[int | None, tuple[Clause, ...]]:
    """``(nodes in the cluster or None, every clause)`` of a FailedScheduling message;
    the preemption post-filter's part (``preemption: …``) is not about the nodes."""
    first = re.split(r"\.?\s+preemption:", message, maxsplit=1)[0]
    m = _HEAD.match(first.strip())
    assert m is not None  # the pattern matches any text
    total = int(m.group("total")) if m.group("total") else None
    clauses = []
    for part in _SPLIT.split(m.group("body").strip().rstrip(".")):
        cm = re.match(r"(\d+) (.*)", part.strip(), re.S)
        count, rest = (int(cm.group(1)), cm.group(2)) if cm else (0, part.strip())
        kind, subject = ClauseKind.OTHER, ""
        for k, shape in _SHAPES:
            hit = shape.search(rest)
            if hit:
                kind, subject = k, (hit.group(1) or "").strip()
                break
        if rest:
            clauses.append(Clause(count=count, kind=kind, subject=subject, text=part.strip()))
    return total, tuple(clauses)


def _tolerates(pod: dict[str, Any], key: str) -> bool:
    for t in pod.get("spec", {}).get("tolerations", []) or []:
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") == key:
            return True
    return False


def decisive(message: str, pod: dict[str, Any]) -> tuple[Clause | None, tuple[Clause, ...]]:
    """``(the clause that keeps the pod off the nodes it belongs on, the clauses set aside)``.

    A control-plane taint the pod does not tolerate is set aside (an application pod never
    belongs on those nodes), and so is a taint the pod tolerates; so are the nodes its own
    node selector/affinity excludes when another clause is about the nodes it selects; of
    what is left, the clause about the most nodes decides (ties: the scheduler's order)."""
    _, clauses = parse(message)
    aside, kept = [], []
    for c in clauses:
        if c.kind is ClauseKind.TAINT and (
            c.taint_key in CONTROL_PLANE_TAINTS or _tolerates(pod, c.taint_key)
        ):
            aside.append(c)
        else:
            kept.append(c)
    if not kept:
        return None, tuple(aside)
    wanted = [c for c in kept if c.kind is not ClauseKind.NODE_SELECTOR]
    if wanted and len(wanted) < len(kept):
        # the pod's own selector says where it belongs: the nodes it excludes are not the
        # question, what keeps it off the nodes it selects is
        aside += [c for c in kept if c.kind is ClauseKind.NODE_SELECTOR]
        kept = wanted
    best = max(kept, key=lambda c: c.count)
    return best, tuple(aside)
