"""The tool layer: schema-validated, journaled tool calls over MCP (stdio).

Client side: ``ToolLayer`` is what a ``Kernel`` is given (``tools=``); each ``ToolSource``
is a stdio MCP server named by its command line, ours or anyone's. Server side:
``ToolHost`` serves a frozen ``tool-defs.json`` with a handler per tool. ``docs/tools.md``
has the whole contract.

Importing this package does not import ``mcp``: the SDK loads when a session opens or a
server starts.
"""

from loopkernel._jsonl import append_line, dump_line
from loopkernel.tools._defs import (
    DEFAULT_RETRY,
    EFFECTS,
    Effect,
    RetryPolicy,
    ToolDef,
    ToolDefs,
    load_tool_defs,
    parse_tool_defs,
)
from loopkernel.tools._host import (
    IDEMPOTENCY_META_KEY,
    CallInfo,
    Handler,
    KeyLedger,
    ToolHost,
    read_ledger,
)
from loopkernel.tools._layer import (
    CallRules,
    PolicyHook,
    RestartHook,
    ServerRestart,
    ToolCallRequest,
    ToolLayer,
    allow_all,
    idempotency_key,
    is_transient,
    require_approval,
)
from loopkernel.tools._policy_hook import policy_hook
from loopkernel.tools._source import SourceSession, ToolSource
from loopkernel.tools._started import StartedServers

__all__ = [
    "DEFAULT_RETRY",
    "EFFECTS",
    "IDEMPOTENCY_META_KEY",
    "CallInfo",
    "CallRules",
    "Effect",
    "Handler",
    "KeyLedger",
    "PolicyHook",
    "RestartHook",
    "RetryPolicy",
    "ServerRestart",
    "SourceSession",
    "StartedServers",
    "ToolCallRequest",
    "ToolDef",
    "ToolDefs",
    "ToolHost",
    "ToolLayer",
    "ToolSource",
    "allow_all",
    "append_line",
    "dump_line",
    "idempotency_key",
    "is_transient",
    "load_tool_defs",
    "parse_tool_defs",
    "policy_hook",
    "read_ledger",
    "require_approval",
]
