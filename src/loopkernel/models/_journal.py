"""``ModelLayer``: ``ctx.complete`` through the run's effect journal.

One call, in order (the tool layer's shape, ``loopkernel.tools._layer``)::

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
effect ``intended`` and are raised marked ``transient``: the executor stops with
``TransientFault``, the run stays resumable, and ``resume`` re-sends the call with the
same key; the gateway's ledger decides.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import loopkernel.telemetry as telemetry
from loopkernel.errors import (
    BudgetExceeded,
    ModelError,
    ModelTimeout,
    ModelUnavailable,
    ReplayDivergence,
)
from loopkernel.executor._context import TaskContext
from loopkernel.executor._crash import crashpoint
from loopkernel.graph import JSON
from loopkernel.ids import RunId
from loopkernel.models._client import ModelClient
from loopkernel.models._types import Completion, Message, messages_to_json
from loopkernel.store import EffectRecord, Store

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

        kernel = Kernel(store, planner, workers, models=ModelLayer(store, ModelClient.from_env()))
    """

    def __init__(self, store: Store, client: ModelClient) -> None:
        self.store = store
        self.client = client
        self.sent = 0
        """Requests sent to the gateway so far (a journal replay sends none)."""

    async def complete(
        self,
        ctx: TaskContext,
        index: int,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        response_schema: dict[str, Any] | None,
        timeout: float,  # noqa: ASYNC109 - a per-call deadline handed on
        validate: bool = True,
    ) -> Completion:
        tracer = telemetry.tracer()
        if not tracer:
            return await self._complete(
                ctx, index, messages, max_tokens, response_schema, timeout, validate
            )
        key = model_key(ctx.run_id, ctx.task_id, index)
        span = tracer.start("model", {"loopkernel.key": key, "loopkernel.max_tokens": max_tokens})
        with tracer.current(span):  # the client sends this span's traceparent to the gateway
            try:
                reply = await self._complete(
                    ctx, index, messages, max_tokens, response_schema, timeout, validate
                )
            except BaseException as exc:
                tracer.end(span, error=exc)
                raise
        tracer.end(
            span,
            {
                "loopkernel.model": reply.model,
                "loopkernel.replayed": reply.replayed,
                "loopkernel.input_tokens": reply.input_tokens,
                "loopkernel.output_tokens": reply.output_tokens,
                "loopkernel.cost_usd": reply.cost_usd,
            },
        )
        return reply

    async def _complete(
        self,
        ctx: TaskContext,
        index: int,
        messages: Sequence[Message],
        max_tokens: int,
        response_schema: dict[str, Any] | None,
        timeout: float,  # noqa: ASYNC109 - a per-call deadline handed on
        validate: bool = True,
    ) -> Completion:
        run_id = ctx.run_id
        key = model_key(run_id, ctx.task_id, index)
        arguments: dict[str, JSON] = {
            "messages": messages_to_json(messages),
            "max_tokens": max_tokens,
            "response_schema": response_schema,
        }
        if not validate:
            arguments["validate"] = False
        prior = await self.store.get_effect(run_id, key)
        if prior is None:
            prior = await self.store.intend_effect(
                EffectRecord(
                    run_id=run_id,
                    key=key,
                    task_id=ctx.task_id,
                    call_index=index,
                    tool=MODEL_TOOL,
                    effect=MODEL_TOOL,
                    arguments=arguments,
                    status="intended",
                )
            )
        _check_same(prior, arguments)
        if prior.status == "done":
            assert isinstance(prior.result, Mapping)
            return Completion.from_json(prior.result, replayed=True)
        if prior.status == "failed":
            raise _error_from_journal(prior.error)
        crashpoint("model_sent")
        self.sent += 1
        try:
            completion = await self.client.complete(
                messages,
                key=key,
                run_id=run_id,
                task_id=ctx.task_id,
                max_tokens=max_tokens,
                response_schema=response_schema,
                timeout=timeout,
                validate=validate,
            )
        except (ModelError, BudgetExceeded) as err:
            crashpoint("model_returned")
            if isinstance(err, BudgetExceeded) or err.attrs.get("kind") in ANSWERS:
                await self.store.finish_effect(run_id, key, status="failed", error=err.verdict())
            raise
        except (ModelTimeout, ModelUnavailable) as err:  # may pass: the run stays resumable
            attrs = {**err.attrs, "transient": True, "tool": MODEL_TOOL, "effect": MODEL_TOOL}
            raise type(err)(err.message, **{"sent": 1, **attrs}) from None
        crashpoint("model_returned")
        await self.store.finish_effect(
            run_id,
            key,
            status="done",
            result=completion.to_json(),
        )
        return completion

    async def spent(self, run_id: RunId) -> tuple[float, int]:
        """``(usd, tokens)`` the run's journaled model answers cost."""
        usd, tokens = 0.0, 0
        for e in await self.store.effects(run_id):
            if e.tool == MODEL_TOOL and e.status == "done" and isinstance(e.result, Mapping):
                usd += float(e.result.get("cost_usd", 0.0))
                tokens += int(e.result.get("input_tokens", 0))
                tokens += int(e.result.get("output_tokens", 0))
        return usd, tokens


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _check_same(prior: EffectRecord, arguments: Mapping[str, Any]) -> None:
    if prior.tool != MODEL_TOOL:
        raise ReplayDivergence(
            f"call {prior.key} was journaled as tool {prior.tool!r}, now it is a model call",
            key=prior.key,
        )
    if _canonical(prior.arguments) != _canonical(arguments):
        raise ReplayDivergence(
            f"model call {prior.key} was journaled with other messages or options than it "
            "asks for now: the task does not ask the same things in the same order on every "
            "execution (build prompts only from the task's input and what it may see)",
            key=prior.key,
        )


def _error_from_journal(error: JSON) -> ModelError | BudgetExceeded:
    if not isinstance(error, dict):
        return ModelError("the model call failed (journaled)", kind="journaled")
    attrs = {k: v for k, v in error.items() if k not in ("type", "message") and k.isidentifier()}
    cls: type[ModelError | BudgetExceeded] = (
        BudgetExceeded if error.get("type") == "BudgetExceeded" else ModelError
    )
    return cls(str(error.get("message", "")), **attrs)
