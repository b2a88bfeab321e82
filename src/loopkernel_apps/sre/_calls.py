"""A tool call of the investigation as a value: who asked for it (``CallBy``), what came of
it (``CallStatus``), and the record a task's result keeps (``CallRecord``).

A task's result holds its calls as JSON (``CallRecord.to_json``), so the journal, the run
digest and the report are the bytes they were when the records were dicts;
``CallRecord.from_json`` reads one back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from loopkernel import JSON

__all__ = ["CallBy", "CallRecord", "CallStatus"]


class CallBy(StrEnum):
    """Whose budget a call is made in."""

    RULES = "rules"
    """The run's own bounds (``max_tool_calls``, ``max_evidence_chars``)."""
    MODEL = "model"
    """The model's budget, apart from the rules' (``model_calls``, ``MODEL_CHARS``)."""


class CallStatus(StrEnum):
    """What came of a call."""

    OK = "ok"
    """Made, and it answered: ``result`` is what it read."""
    REFUSED = "refused"
    """Made, and the tool refused it (out of scope): ``result`` says why."""
    FAILED = "failed"
    """Made, and it raised: ``error``."""
    SKIPPED = "skipped"
    """Not made: its budget was spent (``note``)."""
    DUPLICATE = "duplicate"
    """Not made: the run already made it (``note``)."""

    @property
    def made(self) -> bool:
        """Whether the call was made (and so spent its budget)."""
        return self in _MADE


_MADE = frozenset({CallStatus.OK, CallStatus.REFUSED, CallStatus.FAILED})


@dataclass(frozen=True, kw_only=True, slots=True)
class CallRecord:
    """One tool call of the run, as a task's result keeps it."""

    tool: str
    args: Mapping[str, JSON]
    status: CallStatus
    by: CallBy = CallBy.RULES
    note: str | None = None
    """Why it was not made (``skipped``, ``duplicate``)."""
    error: str | None = None
    """``Type: message`` of what it raised (``failed``)."""
    result: Mapping[str, Any] | None = None
    """What the tool answered (``ok``, ``refused``)."""
    reused: Mapping[str, JSON] | None = None
    """For a follow-up's call answered from an earlier run: ``from_run``, ``age_s``,
    ``collected_at``."""

    @property
    def content(self) -> str:
        """The text the call collected (``""`` unless ``ok``)."""
        if self.status is not CallStatus.OK or self.result is None:
            return ""
        return str(self.result["content"])

    def to_json(self) -> dict[str, Any]:
        """The record's JSON, keys in the order the journal has them."""
        out: dict[str, Any] = {"tool": self.tool, "args": self.args}
        if self.by is CallBy.MODEL:
            out["by"] = self.by.value
        out["status"] = self.status.value
        if self.note is not None:
            out["note"] = self.note
        if self.error is not None:
            out["error"] = self.error
        if self.result is not None:
            out["result"] = self.result
        if self.reused is not None:
            out["reused"] = self.reused
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CallRecord:
        return cls(
            tool=str(data["tool"]),
            args=data["args"],
            status=CallStatus(data["status"]),
            by=CallBy(data.get("by", CallBy.RULES)),
            note=data.get("note"),
            error=data.get("error"),
            result=data.get("result"),
            reused=data.get("reused"),
        )
