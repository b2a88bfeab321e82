"""The policy module as the tool layer's hook: one line for an app.

    ToolLayer(store, sources, policy_hook=policy_hook(policy, store))

Usage (tool calls, money spent) is read from the run's effect journal, so it is the same
after a crash as before it; a call that needs a human parks its task (``NeedsApproval``);
a budget or tripwire raises and escalates the run.
"""

from __future__ import annotations

from collections.abc import Mapping

from loopkernel._hooks import NeedsApproval
from loopkernel.policy import Policy, ToolCall, Usage
from loopkernel.store import Store
from loopkernel.tools._layer import PolicyHook, ToolCallRequest

__all__ = ["policy_hook"]


def policy_hook(policy: Policy, store: Store) -> PolicyHook:
    """``policy.check_call`` before every tool call of a run whose effects ``store`` keeps."""

    async def hook(request: ToolCallRequest) -> None:
        effects = await store.effects(request.run_id)
        usage = Usage(
            # model calls share the effect journal (tool "model"): their cost_usd counts
            # as money spent, but they are not tool calls
            tool_calls=sum(1 for e in effects if e.tool != "model"),
            spent_usd=sum(
                policy.price(e.result)
                for e in effects
                if e.status == "done" and isinstance(e.result, Mapping)
            ),
        )
        call = ToolCall(
            tool=request.tool,
            effect=request.effect,
            arguments=request.arguments,
            # the n-th irreversible call of a task execution is approved by the n-th answer
            approved=request.wait_epoch >= request.irreversible_seq > 0,
            run_id=request.run_id,
            task_id=request.task_id,
        )
        reason = policy.check_call(call, usage)
        if reason is not None:
            raise NeedsApproval(
                reason, tool=request.tool, cost_usd=policy.price(request.arguments) or None
            )

    return hook
