"""``ModelLayer``: ``ctx.complete`` through the run's effect journal
(``loopkernel._effects``, the one the tool layer uses too), with a plan that sends it to
the gateway.

One call, in order::

    key = run_id/task_id/model/call_index
    journaled already?   done -> the journaled Completion, replayed=True (no call, no charge)
                         failed -> raise its error again
                         intended -> re-send below with the same key (in flight at a crash)
    journal intended     store.intend_effect(tool="model", effect="model")
    crashpoint("model_sent")
    send                 ModelClient.complete(key=...) -> the gateway (its ledger answers a
                         key it has seen without calling the provider)
    crashpoint("model_returned")
    journal the outcome  done + the Completion (with cost_usd: the run's spend), or failed
                         + the error for BudgetExceeded and a ModelError that answers the
                         call (an invalid reply, a provider's 4xx: ``ANSWERS``)

``ModelTimeout`` and ``ModelUnavailable`` (the client's bounded re-sends spent) leave the
effect ``intended`` and are raised marked ``spent`` (``retries_spent``): the executor stops with
``TransientFault``, the run stays resumable, and ``resume`` re-sends the call with the
same key; the gateway's ledger decides (a model call is ``resendable``: the ledger answers
a key once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from loopkernel._effects import Call, EffectJournal, Plan
from loopkernel._hooks import CallContext
from loopkernel.errors import (
    BudgetExceeded,
    LoopKernelError,
    ModelError,
    RunError,
    is_retryable,
    revive,
)
from loopkernel.evidence import redact_text
from loopkernel.graph import JSON
from loopkernel.ids import RunId
from loopkernel.models._client import ModelClient
from loopkernel.models._types import Ask, Completion, Message, messages_to_json
from loopkernel.store import Store

__all__ = ["MODEL_TOOL", "ModelLayer", "model_key"]

MODEL_TOOL = "model"
"""The ``tool`` (and ``effect``) name model calls have in the effect journal."""


ANSWERS = frozenset({"invalid_output", "provider_rejected"})
"""``ModelError`` kinds that answer the call itself (journaled, raised again on replay).
Any other (a wrong gateway token, a garbled gateway answer) says nothing about the call:
it stays ``intended`` and is sent again when the task runs again."""


def model_key(run_id: str, task_id: str, index: int) -> str:
    """The key of the ``index``-th model call of a task: the same in every execution."""
    return f"{run_id}/{task_id}/model/{index}"


class ModelLayer:
    """The ``ModelCaller`` a ``Kernel`` is given: journaled model calls through a gateway.

    ::

        kernel = Kernel(
            store,
            planner,
            workers,
            parts=KernelParts(models=ModelLayer(store, ModelClient.from_env())),
        )
    """

    def __init__(self, store: Store, client: ModelClient) -> None:
        self.store = store
        self.client = client
        self.sent = 0
        """Requests sent to the gateway so far (a journal replay sends none)."""
        self._journal = EffectJournal(store, points=("model_sent", "model_returned"), span="model")

    async def complete(
        self,
        ctx: CallContext,
        index: int,
        messages: Sequence[Message],
        ask: Ask,
    ) -> Completion:
        run_id = ctx.run_id
        key = model_key(run_id, ctx.task_id, index)
        arguments: dict[str, JSON] = {
            "messages": messages_to_json(messages),
            "max_tokens": ask.max_tokens,
            "response_schema": ask.response_schema,
        }
        if not ask.validate:
            arguments["validate"] = False
        call = Call(
            run_id=run_id,
            task_id=ctx.task_id,
            call_index=index,
            key=key,
            tool=MODEL_TOOL,
            arguments=arguments,
        )

        async def send(key: str) -> Completion:
            self.sent += 1
            try:
                return await self.client.complete(
                    messages, key=key, run_id=run_id, task_id=ctx.task_id, ask=ask
                )
            except RunError as err:
                if not is_retryable(err):
                    raise
                # a fault that may pass (ModelTimeout, ModelUnavailable): resumable
                attrs = {"sent": 1, **err.attrs, "tool": MODEL_TOOL, "effect": MODEL_TOOL}
                raise err.retries_spent(**attrs) from None

        plan = Plan(effect=MODEL_TOOL, send=send, settle=_settle, answer=_answer)

        async def prepare(prior: Any) -> Plan[Completion]:
            return plan

        return await self._journal.call(
            ctx,
            call,
            prepare=prepare,
            revive=_replayed,
            revive_error=_error_from_journal,
            span_name="model",
            span_attributes={"loopkernel.max_tokens": ask.max_tokens},
            describe=_facts,
        )

    async def spent(self, run_id: RunId) -> tuple[float, int]:
        """``(usd, tokens)`` the run's journaled model answers cost."""
        usd, tokens = 0.0, 0
        for e in await self.store.effects(run_id):
            if e.tool == MODEL_TOOL and e.status == "done" and isinstance(e.result, Mapping):
                usd += float(e.result.get("cost_usd", 0.0))
                tokens += int(e.result.get("input_tokens", 0))
                tokens += int(e.result.get("output_tokens", 0))
        return usd, tokens


def _settle(completion: Completion) -> tuple[JSON, Completion]:
    """The reply as the journal keeps it and the task sees it: its text redacted, as a
    tool's result is (a replay returns the journaled text, so both see the same)."""
    text = redact_text(completion.text)
    if text == completion.text:
        return completion.to_json(), completion
    kept = dataclasses.replace(completion, text=text)
    return kept.to_json(), kept


def _replayed(data: JSON) -> Completion:
    assert isinstance(data, Mapping)
    return Completion.from_json(data, replayed=True)


def _answer(err: BaseException) -> LoopKernelError | None:
    """A model error that answers the call is journaled; any other leaves it intended."""
    if isinstance(err, BudgetExceeded):
        return err
    if isinstance(err, ModelError) and err.attrs.get("kind") in ANSWERS:
        return err
    return None


def _facts(reply: Completion) -> dict[str, JSON]:
    return {
        "loopkernel.model": reply.model,
        "loopkernel.replayed": reply.replayed,
        "loopkernel.input_tokens": reply.input_tokens,
        "loopkernel.output_tokens": reply.output_tokens,
        "loopkernel.cost_usd": reply.cost_usd,
    }


def _error_from_journal(error: JSON) -> ModelError | BudgetExceeded:
    if not isinstance(error, dict):
        return ModelError("the model call failed (journaled)", kind="journaled")
    if error.get("type") == "BudgetExceeded":
        return revive(BudgetExceeded, error)
    return revive(ModelError, {**error, "type": "ModelError"})
