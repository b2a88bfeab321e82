"""The looplab loop on LoopKernel: a planner and six skills over one MCP tool layer.

::

    load -> plan:1 -> guard:1 -> act:1.1 -> verify:1.1 -> record:1 -> plan:2 -> ... -> finish
                                    ^            |
                                    '- act:1.2 <-'  (a failed verification retries the action)

Every decision the policy makes is a tool call into the durable run record made *before*
the run stops or parks, in the same task: the effect journal replays it when the task runs
again (after a crash or an approval), so the record holds it once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loopkernel import JSON, At, Flow, Step, TaskContext, TaskState, Worker
from loopkernel.planner import for_each, retry
from loopkernel.policy import BudgetExceeded, Policy, ToolCall, TripwireFired
from loopkernel.testing import trace

__all__ = ["WORKERS", "planner"]

TOOL_EFFECT = {"act": "idempotent", "publish": "irreversible"}


def planner(policy: Policy) -> Flow:
    """Deterministic: load, then per step plan -> guard -> act -> verify (retried) -> record."""

    def spent(at: At) -> float:
        acts = [t for t in at.snapshot.in_state(TaskState.SUCCEEDED) if t.skill == "act"]
        return round(sum(float(t.result["cost_usd"]) for t in acts), 6)

    def guard(at: At) -> JSON:
        return {"index": at.index, "plan": at.prev.result, "spent_usd": spent(at)}

    def act(at: At) -> JSON:
        guard = at.result("guard")
        return {
            "index": at.index,
            "attempt": at.attempt,
            "step": guard["step"],
            "tool": guard["tool"],
            "est_cost_usd": guard["price_usd"],
            "approval": guard["approval"],
            "guard": at.id("guard"),
        }

    def carry(*keys: str) -> Callable[[At], JSON]:
        """These fields of the previous task's input."""
        return lambda at: {key: at.prev.input[key] for key in keys}

    return Flow(
        Step("load"),
        for_each(
            lambda at: at.result("load")["steps"],
            Step("plan", input=lambda at: {"index": at.index, "step": at.item}),
            Step("guard", input=guard),
            retry(
                Step("act", input=act),
                Step("verify", input=carry("index", "step", "attempt", "guard")),
                until=lambda at: at.prev.result["passed"],
                # the policy's verify_stuck tripwire (in the verify skill) stops it first
                max=policy.tripwires.verify_stuck_after or 100,
            ),
            Step("record", input=carry("index", "step", "attempt")),
        ),
        verdict=lambda at: {"steps_done": len(at.result("load")["steps"]), "spent_usd": spent(at)},
    )


# -- the six skills ------------------------------------------------------------------------


def _policy(ctx: TaskContext) -> Policy:
    return Policy.from_json(ctx.params["policy"])


def _inject(ctx: TaskContext, skill: str) -> None:
    """``--set inject=SKILL``: that skill raises at step 2 (a bug in loop code)."""
    if ctx.params["inject"] == skill and ctx.input["index"] == 2:
        raise RuntimeError(f"injected: {skill} of step 2 raised")


async def _escalate(ctx: TaskContext, where: str, exc: BudgetExceeded | TripwireFired) -> None:
    """Write the escalation to the durable run record before the run stops."""
    await ctx.call_tool("record", {"entry": f"escalated at {where}: {exc.message}"})


async def load(ctx: TaskContext) -> JSON:
    return await ctx.call_tool("load", {"scenario": ctx.params["scenario"]})


async def plan(ctx: TaskContext) -> JSON:
    _inject(ctx, "plan")
    step = ctx.input["step"]
    return {
        "index": ctx.input["index"],
        "step": step["name"],
        "tool": "publish" if step["irreversible"] else "act",
        "price_usd": step["price_usd"],
    }


async def guard(ctx: TaskContext) -> JSON:
    """The policy before the action: can the run afford it, does a human have to approve it."""
    _inject(ctx, "guard")
    plan, spent_usd = ctx.input["plan"], float(ctx.input["spent_usd"])
    policy = _policy(ctx)
    call = ToolCall(tool=plan["tool"], effect=TOOL_EFFECT[plan["tool"]])
    try:
        policy.budget.check_spend(spent_usd, float(plan["price_usd"]))
        approval = policy.approval_reason(call)
    except (BudgetExceeded, TripwireFired) as exc:
        await _escalate(ctx, f"step {plan['index']} ({plan['step']})", exc)
        raise
    return {**plan, "approval": approval}


async def act(ctx: TaskContext) -> JSON:
    """Carry out the step; an irreversible one parks here (the policy hook) until approved."""
    _inject(ctx, "act")
    inp, params = ctx.input, ctx.params
    where = f"step {inp['index']} ({inp['step']})"
    if inp["approval"]:
        # Above the pause on purpose: on the run after the approval, this call is replayed
        # from the effect journal, so the record holds the request once.
        entry = f"approval requested at {where}: {inp['approval']}"
        await ctx.call_tool("record", {"entry": entry})
    args: dict[str, JSON] = {
        "step": inp["step"],
        "attempt": inp["attempt"],
        "cost_usd": inp["est_cost_usd"],
    }
    if params["act_delay"] and inp["index"] == params["slow_step"]:
        args["delay_s"] = params["act_delay"]
    if params["fault"] and inp["index"] == params["slow_step"]:
        args["fault"] = params["fault"]
    await _backoff(ctx)
    try:
        return await ctx.call_tool(inp["tool"], args)
    except (BudgetExceeded, TripwireFired) as exc:  # the policy hook stopped the call
        await _escalate(ctx, where, exc)
        raise


async def _backoff(ctx: TaskContext) -> None:
    """A retry the model chose to make differently (``backoff_s``, ``_llm.ALLOW.vary``):
    noted in the run record (replayed by the effect journal), then the wait."""
    wait = float(ctx.input.get("backoff_s") or 0)
    if wait <= 0 or int(ctx.input["attempt"]) < 2:
        return
    entry = f"attempt {ctx.input['attempt']} of step {ctx.input['index']} waits {wait:g} s first"
    await ctx.call_tool("record", {"entry": entry})
    await asyncio.sleep(wait)


async def verify(ctx: TaskContext) -> JSON:
    _inject(ctx, "verify")
    inp = ctx.input
    k = int(inp["attempt"])
    result = await ctx.call_tool(
        "verify", {"scenario": ctx.params["scenario"], "step": inp["step"], "attempt": k}
    )
    if not result["passed"]:
        try:
            _policy(ctx).tripwires.check_verify(k)  # k attempts of this step, all failed
        except TripwireFired as exc:
            await _escalate(ctx, f"step {inp['index']} ({inp['step']})", exc)
            raise
    return result


async def record(ctx: TaskContext) -> JSON:
    _inject(ctx, "record")
    inp = ctx.input
    entry = f"step {inp['index']} ({inp['step']}) done after {inp['attempt']} attempt(s)"
    return await ctx.call_tool("record", {"entry": entry})


def _traced(worker: Worker) -> Worker:
    """Note each start in the execution trace (``LOOPKERNEL_TRACE``; crash tests count them)."""

    async def traced(ctx: TaskContext) -> JSON:
        trace("start", ctx.task_id)
        return await worker(ctx)

    return traced


WORKERS: dict[str, Worker] = {
    name: _traced(worker)
    for name, worker in {
        "load": load,
        "plan": plan,
        "guard": guard,
        "act": act,
        "verify": verify,
        "record": record,
    }.items()
}
