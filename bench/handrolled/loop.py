"""The looplab loop by hand: a ``while`` loop over named nodes that saves ``state.json``.

Written as a careful engineer would: the state file is replaced atomically after every
node, the loop re-enters at ``next_node``, a step that raises leaves ``failed`` and the
error in the file, ``--approve`` answers a pause, ``max_steps`` stops a runaway loop, and
every tool call carries an idempotency key derived from the state (``--set keys=false``
sends none).

    python -m bench.handrolled --state DIR/state.json --run R --scenario baseline
    python -m bench.handrolled --state DIR/state.json --run R --approve
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from bench.shared import (
    SharedTools,
    add_options,
    error_verdict,
    finish,
    observed,
    options,
    policy,
)
from loopkernel.policy import BudgetExceeded, ToolCall, TripwireFired, Usage

TOOL_EFFECT = {"act": "idempotent", "publish": "irreversible"}


class Pause(Exception):
    """A human must approve before the loop goes on."""


def save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Loop:
    def __init__(self, state: dict[str, Any], tools: SharedTools, opts: dict[str, Any]) -> None:
        self.s, self.tools, self.opts, self.policy = state, tools, opts, policy()
        self.n = 0  # tool calls made by the current node

    async def call(self, name: str, args: dict[str, Any]) -> Any:
        s = self.s
        node = f"{s['next_node']}:{s['index']}.{s['attempt']}"
        key = f"{s['run']}/{node}/{self.n}" if self.opts["keys"] else None
        self.n += 1
        usage = Usage(tool_calls=s["tool_calls"], spent_usd=s["spent_usd"])
        result = await self.tools.call(name, args, key=key, usage=usage, approved=s["approved"])
        s["tool_calls"] += 1
        return result

    def inject(self, node: str) -> None:
        if self.opts["inject"] == node and self.s["index"] == 2:
            raise RuntimeError(f"injected: {node} of step 2 raised")

    async def escalate(self, exc: BudgetExceeded | TripwireFired) -> None:
        where = f"step {self.s['index']} ({self.s['plan']['step']})"
        await self.call("record", {"entry": f"escalated at {where}: {exc.message}"})
        self.s.update(status="escalated", verdict=exc.verdict())

    async def load(self) -> None:
        result = await self.call("load", {"scenario": self.s["scenario"]})
        self.s.update(steps=result["steps"], index=1, next_node="plan")

    async def plan(self) -> None:
        self.inject("plan")
        step = self.s["steps"][self.s["index"] - 1]
        tool = "publish" if step["irreversible"] else "act"
        plan = {"step": step["name"], "tool": tool, "price_usd": step["price_usd"]}
        self.s.update(plan=plan, next_node="guard")

    async def guard(self) -> None:
        self.inject("guard")
        plan = self.s["plan"]
        call = ToolCall(tool=plan["tool"], effect=TOOL_EFFECT[plan["tool"]])
        try:
            self.policy.budget.check_spend(self.s["spent_usd"], plan["price_usd"])
            approval = self.policy.approval_reason(call)
        except (BudgetExceeded, TripwireFired) as exc:
            await self.escalate(exc)
            return
        self.s.update(approval=approval, attempt=1, next_node="act")

    async def act(self) -> None:
        self.inject("act")
        s, plan = self.s, self.s["plan"]
        if s["approval"] and not s["approved"]:
            where = f"step {s['index']} ({plan['step']})"
            await self.call("record", {"entry": f"approval requested at {where}: {s['approval']}"})
            raise Pause(s["approval"])
        args: dict[str, Any] = {
            "step": plan["step"],
            "attempt": s["attempt"],
            "cost_usd": plan["price_usd"],
        }
        if self.opts["act_delay"] and s["index"] == self.opts["slow_step"]:
            args["delay_s"] = self.opts["act_delay"]
        if self.opts["fault"] and s["index"] == self.opts["slow_step"]:
            args["fault"] = self.opts["fault"]
        result = await self.call(plan["tool"], args)
        s["spent_usd"] = round(s["spent_usd"] + result["cost_usd"], 6)
        s.update(approved=False, next_node="verify")

    async def verify(self) -> None:
        self.inject("verify")
        s = self.s
        args = {"scenario": s["scenario"], "step": s["plan"]["step"], "attempt": s["attempt"]}
        result = await self.call("verify", args)
        if result["passed"]:
            s["next_node"] = "record"
            return
        try:
            self.policy.tripwires.check_verify(s["attempt"])
        except TripwireFired as exc:
            await self.escalate(exc)
            return
        s.update(attempt=s["attempt"] + 1, next_node="act")

    async def record(self) -> None:
        self.inject("record")
        s = self.s
        entry = f"step {s['index']} ({s['plan']['step']}) done after {s['attempt']} attempt(s)"
        await self.call("record", {"entry": entry})
        s.update(steps_done=s["steps_done"] + 1, index=s["index"] + 1, next_node="plan")
        if s["index"] > len(s["steps"]):
            verdict = {"steps_done": s["steps_done"], "spent_usd": s["spent_usd"]}
            s.update(status="succeeded", verdict=verdict, next_node=None)

    async def run(self, path: Path) -> None:
        s = self.s
        while s["status"] == "running":
            if s["steps_taken"] >= self.opts["max_steps"]:
                msg = f"the loop passed max_steps={self.opts['max_steps']}"
                s.update(status="failed", verdict={"kind": "runaway", "message": msg})
                break
            self.n = 0
            try:
                await getattr(self, s["next_node"])()
            except Pause:
                s["status"] = "waiting"
            except Exception as exc:
                s.update(status="failed", verdict=error_verdict(exc))
            s["steps_taken"] += 1
            save(path, s)
        save(path, s)


def read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def new_state(run: str, scenario: str, opts: dict[str, Any]) -> dict[str, Any]:
    return {
        "run": run,
        "scenario": scenario,
        "opts": opts,
        "status": "running",
        "verdict": None,
        "next_node": "load",
        "steps": [],
        "index": 0,
        "attempt": 0,
        "plan": None,
        "approval": None,
        "approved": False,
        "spent_usd": 0.0,
        "tool_calls": 0,
        "steps_done": 0,
        "steps_taken": 0,
    }


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.handrolled")
    parser.add_argument("--state", required=True, type=Path, help="the state file")
    parser.add_argument("--show", action="store_true", help="print the state as compared")
    add_options(parser)
    args = parser.parse_args(argv)
    path: Path = args.state
    if args.show:
        s = read(path) or {}
        seen = observed(s["run"], s["status"], s["verdict"], s["spent_usd"], s["steps_done"])
        print(json.dumps(seen))
        return 0
    loaded = read(path)
    if loaded is not None:
        state = loaded
    elif args.scenario:
        state = new_state(args.run, args.scenario, options(args.set))
        path.parent.mkdir(parents=True, exist_ok=True)
        save(path, state)
    else:
        raise SystemExit(f"no state at {path}: start a run with --scenario")
    if args.approve and state["status"] == "waiting":
        state.update(status="running", approved=True)
    if state["status"] == "running":
        async with SharedTools(state["run"], state["opts"]) as tools:
            await Loop(state, tools, state["opts"]).run(path)
    return finish(state["status"], state["verdict"])
