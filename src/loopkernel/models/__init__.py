"""Model access: the runtime's side of the credential boundary.

The runtime never holds a provider key. It reaches models only through the gateway
(``loopkernel gateway``, a separate process) with the gateway's address and token::

    client = ModelClient.from_env()          # LOOPKERNEL_GATEWAY, LOOPKERNEL_GATEWAY_TOKEN
    kernel = Kernel(store, planner, workers, parts=KernelParts(models=ModelLayer(store, client)))

    async def summarise(ctx):                # a worker
        reply = await ctx.complete([Message(role="user", content="...")], max_tokens=64)
        return {"summary": reply.text, "cost_usd": reply.cost_usd}

``ctx.complete`` is journaled in the effect journal like a tool call (``ModelLayer``): a
journaled answer is replayed on resume, and a call in flight at a crash is re-sent with
the same key, which the gateway's ledger answers without a second provider call.

Errors a caller can tell apart: ``ModelError`` (a bad request or an unusable reply),
``ModelTimeout`` and ``ModelUnavailable`` (retryable), ``BudgetExceeded`` (the gateway's
budget refused the call; raised in a worker it escalates the run). Standard library only.
"""

from loopkernel.errors import BudgetExceeded, ModelError, ModelTimeout, ModelUnavailable
from loopkernel.models._client import ModelClient, check_reply
from loopkernel.models._journal import MODEL_TOOL, ModelLayer, model_key
from loopkernel.models._types import Ask, Completion, Message, Role

__all__ = [
    "MODEL_TOOL",
    "Ask",
    "BudgetExceeded",
    "Completion",
    "Message",
    "ModelClient",
    "ModelError",
    "ModelLayer",
    "ModelTimeout",
    "ModelUnavailable",
    "Role",
    "check_reply",
    "model_key",
]
