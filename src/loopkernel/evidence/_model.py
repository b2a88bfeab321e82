"""Typed, bounded evidence: ``Evidence(ref, kind, content, source: SourceRef)``.

A piece of evidence is a text a run learned, with where it came from:

- ``user``: what the run's user said (the run's question, a human's answer to a waiting task);
- ``tool``: a tool's result, as the tool layer returned it (after redaction);
- ``model``: a model's reply;
- ``external``: any other outside text (a web page, a file).

Only ``user`` evidence may ever be presented as the user's statement: ``render`` labels every
item by its source, and a prompt builder puts everything but ``user`` text inside an
untrusted-data block. Text *inside* a tool result that claims "the user said ..." stays tool
evidence.

Bounds: each item is capped (``max_item_chars``) and so is the run (``max_run_chars``). Past
a cap the content is cut, ``truncated`` is set, ``note`` says what was cut, and ``sha256`` and
``chars`` still describe the full text, so a reader can tell the stored text from the
original. Refs are ``E1, E2, ...`` in the order the run's journal recorded the items: a ref
never changes once given, across any number of resumes, so a report can cite it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, TypeAlias

from loopkernel.errors import UsageError
from loopkernel.ids import TaskId

__all__ = [
    "DEFAULT_MAX_ITEM_CHARS",
    "DEFAULT_MAX_RUN_CHARS",
    "Evidence",
    "EvidenceKind",
    "NewEvidence",
    "SourceKind",
    "SourceRef",
    "bound",
    "render_evidence",
    "sha256_text",
]

SourceKind: TypeAlias = Literal["user", "tool", "model", "external"]
EvidenceKind: TypeAlias = Literal["text", "json"]

_SOURCE_KINDS = frozenset({"user", "tool", "model", "external"})
_EVIDENCE_KINDS = frozenset({"text", "json"})

DEFAULT_MAX_ITEM_CHARS = 8_000
"""The per-item cap: a tool result longer than this is cut (with a note and the full hash)."""
DEFAULT_MAX_RUN_CHARS = 400_000
"""The per-run cap on the evidence text a run stores, summed over its items."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceRef:
    """Where a piece of evidence came from."""

    kind: SourceKind
    """``user``, ``tool``, ``model`` or ``external``."""
    uri: str
    """What produced it: ``tool:NAME``, ``model:NAME``, ``run:params/question``, a URL."""
    task_id: TaskId | None = None
    """The task that obtained it (``None`` for what the user gave the run)."""
    event_seq: int | None = None
    """The journal event it came with (a ``human_input``, ``run_started``), if any."""

    def __post_init__(self) -> None:
        if self.kind not in _SOURCE_KINDS:
            raise UsageError(
                f"SourceRef.kind must be one of {sorted(_SOURCE_KINDS)}, not {self.kind!r}"
            )

    def label(self) -> str:
        """``tool:search task=r1`` -- how a prompt or a report names the source."""
        parts = [f"{self.kind} {self.uri}"]
        if self.task_id is not None:
            parts.append(f"task={self.task_id}")
        if self.event_seq is not None:
            parts.append(f"event={self.event_seq}")
        return " ".join(parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class NewEvidence:
    """Evidence to record; the store gives it its ref."""

    key: str
    """Unique per run: recording the same key twice (a replayed tool call) returns the first."""
    kind: EvidenceKind
    """``text`` or ``json`` (the content is canonical JSON text)."""
    content: str
    """The full text, already redacted; the store applies the caps."""
    source: SourceRef
    """Where it came from."""

    def __post_init__(self) -> None:
        if self.kind not in _EVIDENCE_KINDS:
            raise UsageError(f"evidence kind must be text or json, not {self.kind!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """One stored piece of evidence."""

    ref: str
    """``E1``, ``E2``, ... in journal order; stable across resume."""
    kind: EvidenceKind
    """``text`` or ``json``."""
    content: str
    """The stored text: the full text, or its first part when ``truncated``."""
    source: SourceRef
    """Where it came from."""
    truncated: bool = False
    """True when a cap cut ``content``."""
    note: str | None = None
    """What was cut and why, when ``truncated``."""
    sha256: str = ""
    """Hash of the full text, before any cut."""
    chars: int = 0
    """Length of the full text, before any cut."""

    def render(self) -> str:
        """``[E3 tool tool:search task=r1] ...``: the source is always named."""
        head = f"[{self.ref} {self.source.label()}]"
        tail = f"\n({self.note})" if self.note else ""
        return f"{head} {self.content}{tail}"


def bound(text: str, limit: int, why: str) -> tuple[str, bool, str | None]:
    """``text`` cut to ``limit`` characters, whether it was cut, and the note saying so."""
    if limit < 0:
        limit = 0
    if len(text) <= limit:
        return text, False, None
    note = f"truncated: {why}; kept {limit} of {len(text)} chars, sha256 of the full text kept"
    return text[:limit], True, note


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def render_evidence(items: list[Evidence] | tuple[Evidence, ...]) -> str:
    """Each item on its own lines, source first."""
    return "\n".join(item.render() for item in items)
