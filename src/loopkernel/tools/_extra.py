"""The tool layer needs the ``tools`` extra (the official ``mcp`` SDK): say so in one line."""

from __future__ import annotations

from loopkernel.errors import UsageError

__all__ = ["TOOLS_EXTRA", "require_mcp"]

TOOLS_EXTRA = "pip install 'loopkernel[tools]'"


def require_mcp() -> None:
    """Raise ``UsageError`` naming the install command if the ``mcp`` SDK cannot be imported.

    Called where the tool layer starts (a session, a layer, a server), so that a missing
    extra is one line at once, not a traceback, nor a child process that dies unheard.
    """
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"the tool layer needs the tools extra: {TOOLS_EXTRA} ({exc})"
        ) from None
