"""Evidence: what a run learns, typed and bounded with its source (docs/evidence.md), and
what it must not keep (``redact``)."""

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
from loopkernel.evidence._redact import (
    KEEP_SECRETS,
    MARKER,
    is_secret_key,
    keep_secrets,
    marker,
    redact,
    redact_text,
)

__all__ = [
    "DEFAULT_MAX_ITEM_CHARS",
    "DEFAULT_MAX_RUN_CHARS",
    "KEEP_SECRETS",
    "MARKER",
    "Evidence",
    "EvidenceKind",
    "NewEvidence",
    "SourceKind",
    "SourceRef",
    "bound",
    "is_secret_key",
    "keep_secrets",
    "marker",
    "redact",
    "redact_text",
    "render_evidence",
    "sha256_text",
]
