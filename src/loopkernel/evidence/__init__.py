"""Evidence: what a run learns, and what it must not keep (``redact``)."""

from loopkernel.evidence._redact import MARKER, is_secret_key, marker, redact, redact_text

__all__ = ["MARKER", "is_secret_key", "marker", "redact", "redact_text"]
