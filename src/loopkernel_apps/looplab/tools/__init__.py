"""The looplab tool set, served over stdio: ``python -m loopkernel_apps.looplab.tools``.

::

    load      read_only     the scenario's steps
    act       idempotent    carry out a step's action; reports cost_usd
    publish   irreversible  the same, for an action that cannot be undone
    verify    read_only     check a step; passes from the scenario's passes_at attempt on
    record    idempotent    append to the run's durable record

State lives in files under ``--dir``, per run: ``RUN.record.jsonl`` (the durable run
record), ``RUN.world.jsonl`` (every action applied to the world) and ``RUN.calls.jsonl``
(every action request as it arrives, applied or not), where RUN is ``file_stem(run_id)``,
never the raw id. Each is created 0600. The first two honour the
idempotency key in the request's ``_meta``: a repeated key gets the first answer back and
writes nothing. The run is named by ``--run``, else by the key's first part
(``run/task/index``). A call without a key is applied every time it arrives, as any tool
without such a check would.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from loopkernel import JSON
from loopkernel.tools import (
    CallInfo,
    KeyLedger,
    ToolDefs,
    ToolHost,
    ToolSource,
    append_line,
    dump_line,
    load_tool_defs,
    read_ledger,
)
from loopkernel_apps.looplab.scenarios import SCENARIOS

__all__ = [
    "DEFS",
    "applied",
    "build_host",
    "calls_path",
    "data_dir",
    "main",
    "record_entries",
    "record_path",
    "tool_source",
    "world_path",
]

DEFS = Path(__file__).with_name("tool-defs.json")


def file_stem(run: str) -> str:
    """The name a run's files get: never the raw id (which came from a caller), but a safe
    readable prefix and a hash of the whole id, so distinct runs never share a file and no
    id can name a path outside the data directory."""
    readable = re.sub(r"[^A-Za-z0-9_-]", "_", run)[:40]
    return f"{readable}-{hashlib.sha256(run.encode()).hexdigest()[:16]}"


def record_path(directory: str | os.PathLike[str], run: str) -> Path:
    return Path(directory) / f"{file_stem(run)}.record.jsonl"


def world_path(directory: str | os.PathLike[str], run: str) -> Path:
    return Path(directory) / f"{file_stem(run)}.world.jsonl"


def calls_path(directory: str | os.PathLike[str], run: str) -> Path:
    return Path(directory) / f"{file_stem(run)}.calls.jsonl"


def record_entries(directory: str | os.PathLike[str], run: str) -> list[str]:
    """The entries of a run's durable record, oldest first."""
    return [str(e["result"]["entry"]) for e in read_ledger(record_path(directory, run))]


def applied(directory: str | os.PathLike[str], run: str) -> list[str]:
    """The actions applied to the world for a run, as ``step#attempt``, oldest first."""
    return [
        f"{e['result']['step']}#{e['result']['attempt']}"
        for e in read_ledger(world_path(directory, run))
    ]


@functools.cache
def _defs() -> ToolDefs:
    return load_tool_defs(DEFS)


def data_dir() -> Path:
    """Where the tool server keeps the durable run records: ``$LOOPLAB_DIR`` or ``.looplab``."""
    return Path(os.environ.get("LOOPLAB_DIR") or ".looplab").resolve()


def tool_source(
    directory: str | os.PathLike[str] | None = None,
    *,
    run: str | None = None,
    timeout: float = 30.0,
) -> ToolSource:
    """The looplab tool server as a stdio source (``run`` pins the record file's name)."""
    args = ["--dir", os.fspath(directory or data_dir())]
    if run is not None:
        args += ["--run", run]
    return ToolSource.python_module(
        "looplab",
        "loopkernel_apps.looplab.tools",
        *args,
        defs=_defs(),
        timeouts={"act": timeout, "publish": timeout},
    )


def build_host(directory: str | os.PathLike[str], run: str | None = None) -> ToolHost:
    """The looplab tool set keeping its files under ``directory``."""
    host = ToolHost.from_file(DEFS)
    base = Path(directory)
    existed = base.is_dir()
    base.mkdir(mode=0o700, parents=True, exist_ok=True)  # mode is masked by the umask:
    if not existed:
        base.chmod(0o700)  # a folder of run data is the owner's only, whatever the umask
    ledgers: dict[tuple[str, str], KeyLedger] = {}

    def run_of(call: CallInfo) -> str:
        return run or (call.key.split("/", 1)[0] if call.key else "default")

    def ledger(kind: str, call: CallInfo) -> KeyLedger:
        name = run_of(call)
        if (kind, name) not in ledgers:
            path = record_path(base, name) if kind == "record" else world_path(base, name)
            ledgers[(kind, name)] = KeyLedger(path)
        return ledgers[(kind, name)]

    @host.tool("load")
    async def load(args: dict[str, JSON], call: CallInfo) -> JSON:
        scenario = str(args["scenario"])
        if scenario not in SCENARIOS:
            raise ValueError(f"no scenario {scenario!r} (known: {', '.join(sorted(SCENARIOS))})")
        return {"steps": SCENARIOS[scenario]}

    async def action(args: dict[str, JSON], call: CallInfo) -> JSON:
        import anyio

        arrived = {"tool": call.tool, "key": call.key, "step": args["step"], "at": args["attempt"]}
        append_line(calls_path(base, run_of(call)), dump_line(arrived))
        await anyio.sleep(float(args.get("delay_s", 0)))
        fault = args.get("fault")
        if fault == "timeout":
            await anyio.sleep(3600)
        if fault == "raise":
            raise RuntimeError(f"the {call.tool} handler failed on step {args['step']}")
        digest = hashlib.sha256(f"{args['step']}#{args['attempt']}".encode()).hexdigest()[:12]
        result: dict[str, JSON] = {
            "step": args["step"],
            "attempt": args["attempt"],
            "cost_usd": args["cost_usd"],
            "output": f"{args['step']} done ({digest})",
        }
        if fault == "wrong_type":
            result["cost_usd"] = str(args["cost_usd"])  # refused by the host's output check
            return result
        world = ledger("world", call)

        async def produce() -> JSON:
            return result

        return await world.once(call.key, call.tool, produce)

    host.add("act", action)
    host.add("publish", action)

    @host.tool("verify")
    async def verify(args: dict[str, JSON], call: CallInfo) -> JSON:
        steps = {s["name"]: s for s in SCENARIOS.get(str(args["scenario"]), [])}
        spec = steps.get(str(args["step"]))
        if spec is None:
            raise ValueError(f"scenario {args['scenario']!r} has no step {args['step']!r}")
        passes_at = spec["passes_at"]
        attempt = int(args["attempt"])
        passed = passes_at is not None and attempt >= passes_at
        return {"step": args["step"], "attempt": attempt, "passed": passed}

    @host.tool("record")
    async def record(args: dict[str, JSON], call: CallInfo) -> JSON:
        book = ledger("record", call)

        async def produce() -> JSON:
            return {"seq": len(book) + 1, "entry": args["entry"]}

        return await book.once(call.key, "record", produce)

    return host


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loopkernel_apps.looplab.tools")
    parser.add_argument(
        "--dir",
        default=os.environ.get("LOOPLAB_DIR", ".looplab"),
        help="where the run records and world files live (default $LOOPLAB_DIR or .looplab)",
    )
    parser.add_argument("--run", help="the run these calls belong to (default: from the key)")
    args = parser.parse_args(argv)
    build_host(args.dir, args.run).run()
    return 0
