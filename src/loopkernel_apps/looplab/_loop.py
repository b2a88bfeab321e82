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

from typing import Any

from loopkernel import (
    JSON,
    BasePlanner,
    Event,
    GraphPatch,
    Snapshot,
    TaskContext,
    TaskSpec,
    TaskState,
)
from loopkernel.policy import BudgetExceeded, Policy, ToolCall, TripwireFired

__all__ = ["WORKERS", "LooplabPlanner", "spent"]

TOOL_EFFECT = {"act": "idempotent", "publish": "irreversible"}


def spent(snapshot: Snapshot) -> float:
    """What the run's actions cost so far (their results' ``cost_usd``), in USD."""
    total = sum(
        float(t.result["cost_usd"])
        for t in snapshot.in_state(TaskState.SUCCEEDED)
        if t.skill == "act" and isinstance(t.result, dict)
    )
    return round(total, 6)


class LooplabPlanner(BasePlanner):
    """Deterministic: the next task follows from the finished one and the snapshot."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="load", skill="load"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        task = snapshot.task(event.task_id)
        result: dict[str, Any] = task.result
        inp: dict[str, Any] = task.input or {}
        if task.skill == "load":
            return self._next_step(snapshot, 1, after=task.task_id)
        i = int(inp.get("index", 0))
        if task.skill == "plan":
            spec = TaskSpec(
                task_id=f"guard:{i}",
                skill="guard",
                input={"index": i, "plan": result, "spent_usd": spent(snapshot)},
            )
            return GraphPatch().add(spec, after=[task.task_id])
        if task.skill == "guard":
            return GraphPatch().add(self._act(i, 1, result), after=[task.task_id])
        if task.skill == "act":
            k = int(inp["attempt"])
            spec = TaskSpec(
                task_id=f"verify:{i}.{k}",
                skill="verify",
                input={"index": i, "step": inp["step"], "attempt": k, "guard": inp["guard"]},
            )
            return GraphPatch().add(spec, after=[task.task_id])
        if task.skill == "verify":
            k = int(inp["attempt"])
            if not result["passed"]:
                guard = snapshot.task(f"guard:{i}").result
                return GraphPatch().add(self._act(i, k + 1, guard), after=[task.task_id])
            spec = TaskSpec(
                task_id=f"record:{i}",
                skill="record",
                input={"index": i, "step": inp["step"], "attempt": k},
            )
            return GraphPatch().add(spec, after=[task.task_id])
        if task.skill == "record":
            return self._next_step(snapshot, i + 1, after=task.task_id)
        return GraphPatch()

    def _next_step(self, snapshot: Snapshot, i: int, *, after: str) -> GraphPatch:
        steps = snapshot.task("load").result["steps"]
        if i > len(steps):
            verdict = {"steps_done": len(steps), "spent_usd": spent(snapshot)}
            return GraphPatch().finish("succeeded", verdict)
        spec = TaskSpec(task_id=f"plan:{i}", skill="plan", input={"index": i, "step": steps[i - 1]})
        return GraphPatch().add(spec, after=[after])

    def _act(self, i: int, k: int, guard: dict[str, Any]) -> TaskSpec:
        return TaskSpec(
            task_id=f"act:{i}.{k}",
            skill="act",
            input={
                "index": i,
                "attempt": k,
                "step": guard["step"],
                "tool": guard["tool"],
                "est_cost_usd": guard["price_usd"],
                "approval": guard["approval"],
                "guard": f"guard:{i}",
            },
        )

    def on_human_input(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        task = snapshot.get(event.task_id)
        if task is None or task.state is not TaskState.WAITING:
            return GraphPatch()
        if event.data["decision"] == "approve":
            return GraphPatch().resume(event.task_id, event.data.get("payload"))
        verdict = {"kind": "rejected", "task_id": event.task_id, "by": event.data.get("payload")}
        return GraphPatch().cancel(event.task_id).finish("cancelled", verdict)


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
    call = ToolCall(
        tool=plan["tool"],
        effect=TOOL_EFFECT[plan["tool"]],
        arguments={"cost_usd": plan["price_usd"]},
        run_id=ctx.run_id,
        task_id=ctx.task_id,
    )
    try:
        policy.budget.check_spend(spent_usd, policy.price(call.arguments))
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
    try:
        return await ctx.call_tool(inp["tool"], args)
    except (BudgetExceeded, TripwireFired) as exc:  # the policy hook stopped the call
        await _escalate(ctx, where, exc)
        raise


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


WORKERS = {
    "load": load,
    "plan": plan,
    "guard": guard,
    "act": act,
    "verify": verify,
    "record": record,
}
