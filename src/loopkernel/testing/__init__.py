"""A test kit for LoopKernel users: execution traces, a crash helper, a scripted model
provider and a gateway process.

* ``trace(what, task_id)`` / ``read_trace(path)``: count executions across processes.
* ``run_cli(args, db=..., crash_at="point:n")`` / ``was_killed(proc)``: run ``loopkernel``
  in a subprocess that SIGKILLs itself at a named crash point (see ``docs/durability.md``).
* ``ScriptedProvider([...replies])``: a real local HTTP server speaking the OpenAI chat
  completions and Anthropic messages protocols, answering from a script (``ScriptedReply``
  for statuses such as 429 / 5xx), recording every request.
* ``GatewayProcess(args, ledger=...)``: a real ``loopkernel gateway`` subprocess on a free
  port with a fresh token; ``runtime_env()`` is what a runtime needs to reach it.
"""

import importlib
from typing import TYPE_CHECKING, Any

from loopkernel.testing._crash import run_cli, was_killed
from loopkernel.testing._trace import read_trace, trace

if TYPE_CHECKING:
    from loopkernel.testing._gateway import GatewayProcess
    from loopkernel.testing._scripted import ScriptedProvider, ScriptedReply, ScriptedRequest

# Loaded on first use: an app that only calls ``trace`` (looplab, speculation) must not
# import an HTTP server and the model client on every ``loopkernel run``.
_LAZY = {
    "GatewayProcess": "_gateway",
    "ScriptedProvider": "_scripted",
    "ScriptedReply": "_scripted",
    "ScriptedRequest": "_scripted",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "GatewayProcess",
    "ScriptedProvider",
    "ScriptedReply",
    "ScriptedRequest",
    "read_trace",
    "run_cli",
    "trace",
    "was_killed",
]
