"""The values a model call takes and gives: ``Message`` and ``Completion``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from loopkernel.errors import UsageError

__all__ = ["Ask", "Completion", "Message", "Role", "messages_from_json", "messages_to_json"]

Role: TypeAlias = Literal["system", "user", "assistant"]
"""Who says a message. Tool output is never a role of its own: it reaches a model inside a
user message, fenced as untrusted data by whoever builds the prompt."""

_ROLES: frozenset[str] = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """One chat message."""

    role: Role
    """``system``, ``user`` or ``assistant``."""
    content: str
    """Its text."""

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise UsageError(
                f"Message.role must be one of system, user, assistant, not {self.role!r}"
            )
        if not isinstance(self.content, str):
            raise UsageError(f"Message.content must be a str, not {type(self.content).__name__}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Ask:
    """What a model call asks for beside its messages (checked when the call is made)."""

    max_tokens: int = 256
    """The reply's cap, in tokens."""
    response_schema: dict[str, Any] | None = None
    """A JSON Schema the reply must meet (the provider decodes to it where it can)."""
    timeout_s: float = 30.0
    """The call's deadline, every retry and wait included (the gateway enforces it)."""
    model: str | None = None
    """One of the gateway's providers by name (``None``: its first)."""
    validate: bool = True
    """Whether a reply that breaks ``response_schema`` raises ``ModelError``; ``False``
    leaves judging it to the caller (the LLM planner's judge names its fault)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Completion:
    """A model's answer, with what it cost."""

    text: str
    """The reply's text (a JSON document when a ``response_schema`` was given)."""
    model: str
    """The model that answered, as the provider names it."""
    input_tokens: int
    """Prompt tokens the provider counted."""
    output_tokens: int
    """Reply tokens the provider counted."""
    cost_usd: float
    """What the answer cost when it was made, from the gateway's price table (0 for a free
    model). A replayed answer carries the same figure, so a resumed task computes what an
    uninterrupted one did; it was not charged again."""
    latency_ms: float
    """How long the provider took, as the gateway measured it when the answer was made."""
    replayed: bool
    """True when this answer came from a journal (the run's effect journal, or the
    gateway's ledger) instead of a new provider call; nothing was charged for it."""
    finish_reason: str | None = None
    """Why the provider stopped: ``stop``, ``length`` (cut off at ``max_tokens``) ... as the
    OpenAI protocol names it; ``None`` when the provider did not say."""

    def to_json(self) -> dict[str, Any]:
        """The journaled form (``replayed`` is a property of a read, so it is left out)."""
        out: dict[str, Any] = {
            "text": self.text,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "latency_ms": self.latency_ms,
        }
        if self.finish_reason is not None:
            out["finish_reason"] = self.finish_reason
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, replayed: bool) -> Completion:
        """Rebuild a completion from its journaled (or wire) form."""
        return cls(
            text=str(data["text"]),
            model=str(data["model"]),
            input_tokens=int(data["input_tokens"]),
            output_tokens=int(data["output_tokens"]),
            cost_usd=float(data["cost_usd"]),
            latency_ms=float(data["latency_ms"]),
            replayed=replayed,
            finish_reason=None if data.get("finish_reason") is None else str(data["finish_reason"]),
        )


def messages_to_json(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The wire form: ``[{"role": ..., "content": ...}, ...]``."""
    out: list[dict[str, str]] = []
    for m in messages:
        if not isinstance(m, Message):
            raise UsageError(f"messages must be Message values, not {type(m).__name__}")
        out.append({"role": m.role, "content": m.content})
    if not out:
        raise UsageError("a model call needs at least one message")
    return out


def messages_from_json(data: Any) -> list[Message]:
    """Parse the wire form strictly (``UsageError`` naming what is wrong)."""
    if not isinstance(data, list) or not data:
        raise UsageError("messages must be a non-empty list")
    out: list[Message] = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or set(item) != {"role", "content"}:
            raise UsageError(f"messages[{i}] must be an object with exactly role and content")
        out.append(Message(role=item["role"], content=item["content"]))
    return out
