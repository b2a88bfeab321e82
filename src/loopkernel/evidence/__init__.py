"""Typed, bounded evidence with source attribution (docs/evidence.md)."""

from loopkernel.evidence._model import (
    DEFAULT_MAX_ITEM_CHARS,
    DEFAULT_MAX_RUN_CHARS,
    Evidence,
    EvidenceKind,
    NewEvidence,
    SourceKind,
    SourceRef,
    bound,
    render_evidence,
    sha256_text,
)

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
