"""Planners: the protocol, the snapshot they read, a base class with defaults, and patterns.

``Flow`` and its patterns (``for_each``, ``retry``, ``repeat``, ``quorum``, ``gate``,
``guard``) describe a run's shape as typed values and compile to ordinary patches
(``docs/planner.md``).
"""

from loopkernel.planner._flow import (
    At,
    Flow,
    Node,
    Step,
    for_each,
    gate,
    guard,
    quorum,
    repeat,
    retry,
)
from loopkernel.planner._protocol import BasePlanner, Planner, Proposal, Snapshot
from loopkernel.planner._schema import bounded, max_reply_chars, reply_tokens

__all__ = [
    "At",
    "BasePlanner",
    "Flow",
    "Node",
    "Planner",
    "Proposal",
    "Snapshot",
    "Step",
    "bounded",
    "for_each",
    "gate",
    "guard",
    "max_reply_chars",
    "quorum",
    "repeat",
    "reply_tokens",
    "retry",
]
