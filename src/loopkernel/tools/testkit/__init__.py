"""Tool sets for tests, demos and crash tests, each served with ``python -m``.

``loopkernel.tools.testkit.faults``
    A tool set whose handlers misbehave on purpose: return the wrong type (``wrong_type``),
    sleep past the deadline (``slow``), raise (``fail``), kill the server (``crash``,
    ``crash_once``), write garbage to the MCP wire (``garbage``); and two start-up faults,
    ``--refuse`` (exit 3 before speaking MCP) and ``--garbage-at-start``.
``loopkernel.tools.testkit.record``
    The durable run record: ``record`` and ``commit`` append to an append-only JSON-lines
    file and honour the idempotency key (a repeated key gets the first answer, nothing is
    written twice); ``entries`` reads it back. ``--file PATH`` names the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loopkernel.tools._defs import load_tool_defs
from loopkernel.tools._source import ToolSource

__all__ = ["FAULTS_DEFS", "RECORD_DEFS", "faults_source", "record_source"]

FAULTS_DEFS = Path(__file__).parent / "faults" / "tool-defs.json"
RECORD_DEFS = Path(__file__).parent / "record" / "tool-defs.json"


def faults_source(*flags: str, name: str = "faults", **options: Any) -> ToolSource:
    """The fault tool set as a source (``flags``: ``--refuse``, ``--garbage-at-start``)."""
    options.setdefault("defs", load_tool_defs(FAULTS_DEFS))
    return ToolSource.python_module(name, "loopkernel.tools.testkit.faults", *flags, **options)


def record_source(
    path: str | os.PathLike[str], *, name: str = "record", **options: Any
) -> ToolSource:
    """The durable run record writing to ``path`` as a source."""
    options.setdefault("defs", load_tool_defs(RECORD_DEFS))
    return ToolSource.python_module(
        name, "loopkernel.tools.testkit.record", "--file", os.fspath(path), **options
    )
