"""The looplab loop on LangGraph: a ``StateGraph`` with an ``AsyncSqliteSaver`` checkpointer.

Used as its documentation recommends, where the default would bite: ``durability="sync"``
(the default ``"async"`` lets the next step start before the last checkpoint is written),
an explicit ``recursion_limit`` (the default is 10,007 supersteps), ``interrupt()`` to
pause for a human and ``Command(resume=...)`` from any process to answer, and every tool
call carrying an idempotency key derived from the state (``--set keys=false`` sends none),
since ``interrupt()`` and crash recovery re-run a node from its top.

    python -m bench.langgraph_loop --db DIR/checkpoints.db --run R --scenario baseline
    python -m bench.langgraph_loop --db DIR/checkpoints.db --run R --approve
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

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


class State(TypedDict, total=False):
    run: str
    scenario: str
    opts: dict[str, Any]
    status: str
    verdict: Any
    steps: list[dict[str, Any]]
    index: int
    attempt: int
    plan: dict[str, Any]
    approval: str | None
    spent_usd: float
    tool_calls: int
    steps_done: int


def build(tools: SharedTools) -> StateGraph[State]:
    pol = policy()

    class Node:
        """One node execution: numbers its tool calls for their idempotency keys."""

        def __init__(self, s: State, name: str) -> None:
            self.s, self.name, self.n, self.calls = s, name, 0, s["tool_calls"]

        async def call(self, tool: str, args: dict[str, Any], approved: bool = False) -> Any:
            s = self.s
            key = f"{s['run']}/{self.name}:{s['index']}.{s['attempt']}/{self.n}"
            self.n += 1
            usage = Usage(tool_calls=self.calls, spent_usd=s["spent_usd"])
            key_or_none = key if s["opts"]["keys"] else None
            result = await tools.call(tool, args, key=key_or_none, usage=usage, approved=approved)
            self.calls += 1
            return result

        def inject(self) -> None:
            if self.s["opts"]["inject"] == self.name and self.s["index"] == 2:
                raise RuntimeError(f"injected: {self.name} of step 2 raised")

        async def escalate(self, exc: BudgetExceeded | TripwireFired) -> State:
            where = f"step {self.s['index']} ({self.s['plan']['step']})"
            await self.call("record", {"entry": f"escalated at {where}: {exc.message}"})
            return {"status": "escalated", "verdict": exc.verdict(), "tool_calls": self.calls}

    async def load(s: State) -> State:
        node = Node(s, "load")
        result = await node.call("load", {"scenario": s["scenario"]})
        return {"steps": result["steps"], "index": 1, "tool_calls": node.calls}

    async def plan(s: State) -> State:
        Node(s, "plan").inject()
        step = s["steps"][s["index"] - 1]
        tool = "publish" if step["irreversible"] else "act"
        return {"plan": {"step": step["name"], "tool": tool, "price_usd": step["price_usd"]}}

    async def guard(s: State) -> State:
        node = Node(s, "guard")
        node.inject()
        p = s["plan"]
        try:
            pol.budget.check_spend(s["spent_usd"], p["price_usd"])
            approval = pol.approval_reason(ToolCall(tool=p["tool"], effect=TOOL_EFFECT[p["tool"]]))
        except (BudgetExceeded, TripwireFired) as exc:
            return await node.escalate(exc)
        return {"approval": approval, "attempt": 1}

    async def act(s: State) -> State:
        node = Node(s, "act")
        node.inject()
        p, approved = s["plan"], False
        if s["approval"]:
            where = f"step {s['index']} ({p['step']})"
            await node.call("record", {"entry": f"approval requested at {where}: {s['approval']}"})
            interrupt({"reason": s["approval"]})  # on resume, this node runs again from its top
            approved = True
        args: dict[str, Any] = {
            "step": p["step"],
            "attempt": s["attempt"],
            "cost_usd": p["price_usd"],
        }
        opts = s["opts"]
        if opts["act_delay"] and s["index"] == opts["slow_step"]:
            args["delay_s"] = opts["act_delay"]
        if opts["fault"] and s["index"] == opts["slow_step"]:
            args["fault"] = opts["fault"]
        result = await node.call(p["tool"], args, approved=approved)
        spent = round(s["spent_usd"] + result["cost_usd"], 6)
        return {"spent_usd": spent, "tool_calls": node.calls}

    async def verify(s: State) -> State:
        node = Node(s, "verify")
        node.inject()
        args = {"scenario": s["scenario"], "step": s["plan"]["step"], "attempt": s["attempt"]}
        result = await node.call("verify", args)
        if result["passed"]:
            return {"tool_calls": node.calls, "status": "verified"}
        try:
            pol.tripwires.check_verify(s["attempt"])
        except TripwireFired as exc:
            return await node.escalate(exc)
        return {"attempt": s["attempt"] + 1, "tool_calls": node.calls}

    async def record(s: State) -> State:
        node = Node(s, "record")
        node.inject()
        entry = f"step {s['index']} ({s['plan']['step']}) done after {s['attempt']} attempt(s)"
        await node.call("record", {"entry": entry})
        done, index = s["steps_done"] + 1, s["index"] + 1
        update: State = {"steps_done": done, "index": index, "tool_calls": node.calls}
        if index > len(s["steps"]):
            verdict = {"steps_done": done, "spent_usd": s["spent_usd"]}
            update.update(status="succeeded", verdict=verdict)
        else:
            update["status"] = "running"
        return update

    def after_verify(s: State) -> str:
        if s["status"] == "verified":
            return "record"
        return "act" if s["status"] == "running" else END

    def go_on(target: str) -> Any:
        return lambda s: target if s["status"] == "running" else END

    g = StateGraph(State)
    for fn in (load, plan, guard, act, verify, record):
        g.add_node(fn.__name__, fn)  # type: ignore[call-overload]
    g.add_edge(START, "load")
    g.add_edge("load", "plan")
    g.add_edge("plan", "guard")
    g.add_conditional_edges("guard", go_on("act"), ["act", END])
    g.add_edge("act", "verify")
    g.add_conditional_edges("verify", after_verify, ["act", "record", END])
    g.add_conditional_edges("record", go_on("plan"), ["plan", END])
    return g


def status_of(snapshot: Any) -> str:
    """What the checkpoint says about the run: LangGraph keeps no run status of its own."""
    values = snapshot.values or {}
    if values.get("status") in ("succeeded", "escalated", "failed"):
        return str(values["status"])
    if snapshot.interrupts:
        return "waiting"
    if any(t.error for t in snapshot.tasks):
        return "failed"
    return "running" if snapshot.next or not values else str(values.get("status"))


def mark_paused(db: Path) -> None:
    Path(f"{db}.paused").write_text("paused\n")


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.langgraph_loop")
    parser.add_argument("--db", required=True, type=Path, help="the checkpoint database")
    parser.add_argument("--show", action="store_true", help="print the state as compared")
    parser.add_argument("--hold", type=float, default=0.0, help="stay open this long at a pause")
    add_options(parser)
    args = parser.parse_args(argv)
    args.db.parent.mkdir(parents=True, exist_ok=True)
    async with AsyncSqliteSaver.from_conn_string(str(args.db)) as saver:
        config: Any = {"configurable": {"thread_id": args.run}}
        if args.show:
            snap = await build(None).compile(checkpointer=saver).aget_state(config)  # type: ignore[arg-type]
            v = snap.values
            seen = observed(
                args.run,
                status_of(snap),
                v.get("verdict"),
                v.get("spent_usd", 0.0),
                v.get("steps_done", 0),
            )
            seen["errors"] = [str(t.error) for t in snap.tasks if t.error]
            seen["checkpoint"] = bool(v)
            print(json.dumps(seen))
            return 0
        existing = await saver.aget_tuple(config)
        if existing is None:
            if not args.scenario:
                raise SystemExit(f"no run {args.run!r} in {args.db}: start one with --scenario")
            opts = options(args.set)
            inp: Any = {
                "run": args.run,
                "scenario": args.scenario,
                "opts": opts,
                "status": "running",
                "verdict": None,
                "steps": [],
                "index": 0,
                "attempt": 0,
                "plan": {},
                "approval": None,
                "spent_usd": 0.0,
                "tool_calls": 0,
                "steps_done": 0,
            }
        else:
            opts = existing.checkpoint["channel_values"]["opts"]
            inp = Command(resume={"by": "ops"}) if args.approve else None
        config["recursion_limit"] = int(opts["max_steps"])
        async with SharedTools(args.run, opts) as tools:
            graph = build(tools).compile(checkpointer=saver)
            try:
                await graph.ainvoke(inp, config, durability=opts.get("durability", "sync"))
            except GraphRecursionError as exc:
                return finish("failed", {**error_verdict(exc), "kind": "runaway"})
            except Exception as exc:
                return finish("failed", error_verdict(exc))
            snap = await graph.aget_state(config)
        status = status_of(snap)
        if status == "waiting" and args.hold:
            mark_paused(args.db)
            await asyncio.sleep(args.hold)
        return finish(status, snap.values.get("verdict"))
