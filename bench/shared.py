"""The layer the three looplab implementations share, and that the scoreboard does not count
as loop code: one MCP session with the looplab tool server (the same ``SourceSession``,
validation and errors the LoopKernel tool layer uses), the one policy module, the run
options, and how a loop's outcome is reported.

The hand-rolled and LangGraph loops call tools through ``SharedTools``. It validates the
arguments, consults the policy before every call, sends the idempotency key the loop gives
it (a loop derives it from its own state: LangGraph and a hand-rolled loop have no call
identity of their own) and dies on request right after a call returned
(``LOOPLAB_CRASH_AFTER_CALL=n``), the moment LoopKernel's ``tool_returned`` crash point marks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from loopkernel.errors import LoopKernelError
from loopkernel.policy import Policy, ToolCall, Usage
from loopkernel.tools import SourceSession
from loopkernel.tools._schema import SchemaCache
from loopkernel.tools._source import check_arguments
from loopkernel_apps.looplab.scenarios import POLICY, SCENARIOS
from loopkernel_apps.looplab.tools import applied, record_entries, tool_source

__all__ = [
    "DEFAULTS",
    "EXIT",
    "SharedTools",
    "add_options",
    "finish",
    "lab_dir",
    "observed",
    "options",
    "policy",
]

EXIT = {"succeeded": 0, "failed": 1, "waiting": 3, "escalated": 4}
"""The same exit codes as ``loopkernel run``."""

DEFAULTS: dict[str, Any] = {
    "act_delay": 0.0,
    "slow_step": 1,
    "fault": "",
    "tool_timeout": 30.0,
    "inject": "",
    "keys": True,
    "max_steps": 1000,
    "durability": "sync",
}
"""Run options; ``keys=false`` sends no idempotency keys (how most loops are written);
``durability`` is LangGraph's (its default is ``"async"``)."""


def policy() -> Policy:
    return Policy.from_json(POLICY)


def lab_dir() -> Path:
    return Path(os.environ.get("LOOPLAB_DIR") or ".looplab").resolve()


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="the run's name (thread id)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), help="start a new run")
    parser.add_argument("--approve", action="store_true", help="approve the waiting step")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a run option (JSON)"
    )


def options(pairs: list[str]) -> dict[str, Any]:
    opts = dict(DEFAULTS)
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in DEFAULTS:
            raise SystemExit(f"unknown option {key!r} (known: {', '.join(DEFAULTS)})")
        try:
            opts[key] = json.loads(value)
        except json.JSONDecodeError:
            opts[key] = value
    return opts


class SharedTools:
    """One MCP session with the looplab tool server for one run."""

    def __init__(self, run: str, opts: dict[str, Any]) -> None:
        self.source = tool_source(lab_dir(), run=run, timeout=float(opts["tool_timeout"]))
        self.session = SourceSession(self.source)
        self.schemas = SchemaCache()
        self.policy = policy()
        self.calls = 0
        self._crash_after = int(os.environ.get("LOOPLAB_CRASH_AFTER_CALL") or 0)

    async def __aenter__(self) -> SharedTools:
        await self.session.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        key: str | None,
        usage: Usage,
        approved: bool = False,
    ) -> Any:
        """Validate, police, send (with ``key`` in ``_meta``), return the checked result."""
        tool = self.session.tools[name]
        check_arguments(self.schemas, tool, arguments)
        call = ToolCall(tool=name, effect=tool.effect, arguments=arguments, approved=approved)
        if self.policy.check_call(call, usage) is not None:
            raise RuntimeError(f"policy: {name} needs an approval the loop did not get")
        limit = self.source.timeouts.get(name, 30.0)
        result = await self.session.call(name, arguments, key=key, time_limit=limit)
        self.calls += 1
        if self.calls == self._crash_after:
            os.kill(os.getpid(), signal.SIGKILL)  # the tool returned; nothing is persisted yet
        return result


def error_verdict(exc: BaseException) -> dict[str, Any]:
    """What a loop persists when a step raised: LoopKernel's verdict shape."""
    if isinstance(exc, LoopKernelError):
        return exc.verdict()
    return {"kind": "error", "type": type(exc).__name__, "message": str(exc)}


def observed(run: str, status: str, verdict: Any, spent: float, steps_done: int) -> dict[str, Any]:
    """The state the scoreboard compares across implementations."""
    return {
        "status": status,
        "verdict": (verdict or {}).get("kind") if isinstance(verdict, dict) else None,
        "spent_usd": round(spent, 6),
        "steps_done": steps_done,
        "record": record_entries(lab_dir(), run),
        "applied": applied(lab_dir(), run),
    }


def finish(status: str, verdict: Any) -> int:
    print(json.dumps({"status": status, "verdict": verdict}), flush=True)
    return EXIT.get(status, 1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("bench.shared is a library")
