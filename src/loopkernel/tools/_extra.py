"""The tool layer needs the ``tools`` extra (the official ``mcp`` SDK): say so in one line."""

from __future__ import annotations

import importlib.util
import sys

from loopkernel.errors import UsageError, install_hint

__all__ = ["TOOLS_EXTRA", "require_mcp"]

TOOLS_EXTRA = install_hint("tools")


def require_mcp() -> None:
    """Raise ``UsageError`` naming the install command if the ``mcp`` SDK cannot be imported.

    Called where the tool layer starts (a session, a layer, a server), so that a missing
    extra is one line at once, not a traceback, nor a child process that dies unheard.
    The SDK is looked up, not imported (about a second): a session imports it while its
    server starts (``docs/tools.md``, "Start-up").
    """
    if "mcp" in sys.modules:
        return
    try:
        found = importlib.util.find_spec("mcp")
    except ImportError as exc:
        found, reason = None, str(exc)
    else:
        reason = "No module named 'mcp'"
    if found is None:
        raise UsageError(f"the tool layer needs the tools extra: {TOOLS_EXTRA} ({reason})")
