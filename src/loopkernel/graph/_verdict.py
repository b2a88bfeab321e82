"""Why a run stopped, as a value: ``Verdict``, the kernel's and the planners' own verdicts.

A verdict is what a ``finish`` op and the run row keep. The kernel and the shipped
planners write theirs as ``Verdict`` values (a kind from one enum, an optional message,
the details that kind carries); ``to_json`` is the journal form, the very object the
dict literals it replaced wrote, so journals and digests keep their bytes (the store
encodes with sorted keys). An error's verdict is ``LoopKernelError.verdict()``: its kind
is the error's stable ``code``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from loopkernel.graph._model import JSON

__all__ = ["Verdict", "VerdictKind"]


class VerdictKind(StrEnum):
    """Every verdict the kernel and the shipped planners write themselves."""

    RUNAWAY = "runaway"
    """The run passed its ``max_events``: ``max_events``, ``observed``."""
    CANCELLED = "cancelled"
    """Someone asked for the run's cancellation: ``reason``."""
    PLANNER_ERROR = "planner_error"
    """The planner raised: ``type``."""
    APPROVAL_TIMEOUT = "approval_timeout"
    """An approval was not answered in time and policy escalates: ``task_id``, ``reason``,
    ``after_seconds``."""
    PATCH_REJECTED = "patch_rejected"
    """The planner's patch broke a rule: ``rule``, ``event_seq``."""
    STALLED = "stalled"
    """Nothing can run, nothing waits, and the planner did not finish: ``stuck_tasks``."""
    EXECUTOR_ERROR = "executor_error"
    """Code the executor runs raised a bug: ``type``."""
    REJECTED = "rejected"
    """A human rejected a waiting task (a flow's planner): ``task_id``, ``by``."""
    GUARD = "guard"
    """A flow's guard refused to go on: ``reason``."""
    RETRIES_EXHAUSTED = "retries_exhausted"
    """A flow's retry loop ran out: ``task_id``, ``attempts``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """Why a run stopped."""

    kind: VerdictKind
    """What stopped it."""
    message: str | None = None
    """A sentence for a person, when the kind has one (omitted from the JSON when None)."""
    details: Mapping[str, JSON] = field(default_factory=dict)
    """The facts the kind carries (``VerdictKind`` lists them per kind)."""

    def __post_init__(self) -> None:
        clash = {"kind", "message"} & set(self.details)
        if clash:
            raise ValueError(f"a verdict's details may not name {sorted(clash)}")

    def to_json(self) -> dict[str, JSON]:
        """The journal form: ``{"kind": ..., "message": ..., **details}``."""
        out: dict[str, JSON] = {"kind": self.kind.value}
        if self.message is not None:
            out["message"] = self.message
        out.update(self.details)
        return out
