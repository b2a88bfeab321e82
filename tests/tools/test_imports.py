"""``import loopkernel`` (and the tool layer's own modules) do not import ``mcp``: the SDK
loads when a tool source is opened or a server starts."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
def loaded(*prefixes):
    return sorted(m for m in sys.modules if m.split(".")[0] in prefixes)
import loopkernel
stages = {"loopkernel": loaded("mcp", "mcp_types", "jsonschema", "anyio")}
import loopkernel.tools, loopkernel.tools.testkit, loopkernel.cli._tools
loopkernel.tools.testkit.faults_source()  # loads and checks a defs file
stages["tools"] = loaded("mcp", "mcp_types")
print(json.dumps(stages))
"""


def test_importing_loopkernel_and_its_tool_layer_does_not_import_mcp() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == {"loopkernel": [], "tools": []}
