"""``ModelClient``: the runtime's one way to a model, over HTTP to the gateway.

The runtime holds only the gateway's address and a gateway token; provider keys live in the
gateway process (``loopkernel gateway``). The wire, on ``POST /v1/complete``::

    Authorization: Bearer $LOOPKERNEL_GATEWAY_TOKEN
    {"messages": [{"role", "content"}...], "key", "run_id", "task_id", "max_tokens",
     "response_schema", "timeout"}
    200 -> {"completion": {text, model, input_tokens, output_tokens, cost_usd, latency_ms},
            "replayed": bool}
    4xx/5xx -> {"error": {"type": "ModelError" | "ModelTimeout" | "ModelUnavailable"
                          | "BudgetExceeded" | "UsageError", "message", "attrs": {...}}}

A repeated ``key`` is answered from the gateway's ledger without a second provider call
(``replayed: true``), so re-sending a call after a crash is always safe.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import loopkernel.telemetry as telemetry
from loopkernel.errors import (
    BudgetExceeded,
    LoopKernelError,
    ModelError,
    ModelTimeout,
    ModelUnauthorized,
    ModelUnavailable,
    UsageError,
    revive,
)
from loopkernel.models._http import Address, parse_address, request
from loopkernel.models._types import Ask, Completion, Message, messages_to_json

__all__ = ["ModelClient", "check_reply", "error_from_wire", "schema_problem"]

_ASKED = Ask()
"""What a call asks for that says nothing: 256 tokens, no schema, 30 s, the first model."""

ENV_ADDRESS = "LOOPKERNEL_GATEWAY"
ENV_TOKEN = "LOOPKERNEL_GATEWAY_TOKEN"

_GRACE = 5.0
"""Seconds the client waits past a call's ``timeout``: the gateway enforces the deadline
itself and answers ``ModelTimeout``; the client's own deadline only catches a gateway that
stopped answering."""

_ERRORS: dict[str, type[LoopKernelError]] = {
    "ModelError": ModelError,
    "ModelTimeout": ModelTimeout,
    "ModelUnavailable": ModelUnavailable,
    "BudgetExceeded": BudgetExceeded,
    "UsageError": UsageError,
}


def error_from_wire(status: int, body: bytes) -> LoopKernelError:
    """The error a gateway's error response stands for."""
    try:
        err = json.loads(body)["error"]
        cls = _ERRORS.get(str(err["type"]), ModelError)
        attrs = err.get("attrs") or {}
        if not isinstance(attrs, dict):
            attrs = {}
        attrs = {k: v for k, v in attrs.items() if k.isidentifier() and k != "message"}
        return revive(cls, {**attrs, "type": cls.family, "message": str(err["message"])})
    except (ValueError, KeyError, TypeError):
        pass
    if status == 401:
        return ModelUnauthorized(
            f"the gateway refused the token (401); set {ENV_TOKEN} to the gateway's token",
            status=status,
        )
    if status >= 500:
        return ModelUnavailable(
            f"the gateway answered {status}", kind="gateway_error", status=status
        )
    return ModelError(f"the gateway answered {status}", kind="gateway_error", status=status)


def check_reply(text: str, schema: Mapping[str, Any] | None) -> None:
    """Raise ``ModelError`` (kind ``invalid_output``) unless ``text`` is a JSON document
    valid against ``schema``. Constrained decoding can still be cut off by ``max_tokens``,
    so a reply is checked on receipt even when the provider enforced the schema.
    ``jsonschema`` (extras ``models`` and ``tools`` bring it) checks the schema; without it
    only the JSON syntax and an ``object`` top-level type are checked."""
    if schema is None:
        return
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ModelError(
            f"the model's reply is not JSON ({err.msg} at char {err.pos}); "
            "raise max_tokens if it was cut off",
            kind="invalid_output",
        ) from None
    problem = schema_problem(value, schema)
    if problem is not None:
        raise ModelError(
            f"the model's reply breaks the response schema: {problem}", kind="invalid_output"
        )


def schema_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``value`` breaks ``schema`` (one line with its path), or None."""
    try:
        import jsonschema  # type: ignore[import-untyped]
        from referencing import Registry
    except ImportError:
        if schema.get("type") == "object" and not isinstance(value, dict):
            return "(root): not a JSON object"
        return None
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as err:
        raise UsageError(f"response_schema is not a valid JSON Schema: {err.message}") from None
    found = jsonschema.exceptions.best_match(cls(schema, registry=Registry()).iter_errors(value))
    if found is None:
        return None
    where = "/".join(str(p) for p in found.absolute_path) or "(root)"
    return f"{where}: {found.message}"


class ModelClient:
    """Talks to a running gateway. Cheap to make; one connection per call.

    ::

        client = ModelClient.from_env()        # None when no gateway is configured
        reply = await client.complete([Message(role="user", content="hi")],
                                      key="run-1/t1/model/0", run_id="run-1")
    """

    def __init__(
        self, address: str | Address, token: str, *, retries: int = 2, backoff: float = 0.25
    ) -> None:
        self.address = address if isinstance(address, Address) else parse_address(address)
        if not token:
            raise UsageError(f"the gateway token is empty; set {ENV_TOKEN}")
        if retries < 0 or not backoff >= 0:
            raise UsageError("ModelClient: retries and backoff must be >= 0")
        self._token = token
        self.retries = retries
        """Re-sends of a call whose gateway could not be reached or dropped the connection
        (a restart, a crash), with the same key, inside the call's deadline. A gateway that
        answered (429 / 5xx after its own retries, a timeout) is not asked again here."""
        self.backoff = backoff
        """Seconds before the first re-send, doubled each time."""

    def __repr__(self) -> str:  # never the token: reprs end up in logs
        return f"ModelClient({str(self.address)!r})"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ModelClient | None:
        """The client ``LOOPKERNEL_GATEWAY`` and ``LOOPKERNEL_GATEWAY_TOKEN`` describe, or
        None when ``LOOPKERNEL_GATEWAY`` is unset (no model configured)."""
        env = os.environ if env is None else env
        address = env.get(ENV_ADDRESS, "").strip()
        if not address:
            return None
        token = env.get(ENV_TOKEN, "")
        if not token:
            raise UsageError(f"{ENV_ADDRESS} is set but {ENV_TOKEN} is not; set both or neither")
        return cls(address, token)

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        key: str,
        run_id: str,
        task_id: str | None = None,
        ask: Ask = _ASKED,
    ) -> Completion:
        """One model call. ``key`` identifies it across retries and crashes: the gateway
        answers a key it has seen from its ledger, without calling the provider again.
        ``ask``: the reply's cap and schema, the deadline, the provider (default: the
        gateway's first). ``Ask(validate=False)`` hands ``response_schema`` to the provider
        (constrained decoding) but leaves judging the reply to the caller: a reply that
        breaks the schema comes back as text instead of ``ModelError``.

        Raises ``ModelError`` (bad request, unusable reply), ``ModelTimeout``,
        ``ModelUnavailable`` (retryable; ``sent`` says how often the client tried) or
        ``BudgetExceeded``.
        """
        payload = _request_payload(messages, key=key, run_id=run_id, task_id=task_id, ask=ask)
        if ask.model is not None:
            payload["model"] = ask.model
        if not ask.validate:
            payload["validate"] = False
        data = await self._post_retrying(payload, ask.timeout_s + _GRACE)
        try:
            completion = Completion.from_json(data["completion"], replayed=bool(data["replayed"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ModelError(
                f"the gateway's answer is malformed ({err!r})", kind="bad_gateway_answer"
            ) from None
        if ask.validate:
            check_reply(completion.text, ask.response_schema)
        return completion

    async def _post_retrying(self, payload: Mapping[str, Any], deadline: float) -> Any:
        """``_post``, re-sent (same key) while the gateway cannot be reached, at most
        ``retries`` times and never past ``deadline`` seconds from now."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        sent = 0
        while True:
            sent += 1
            try:
                return await self._post(
                    "/v1/complete", payload, deadline=max(0.001, end - loop.time())
                )
            except ModelUnavailable as err:
                wait = self.backoff * 2 ** (sent - 1)
                unreachable = err.attrs.get("kind") == "gateway_unreachable"
                if not unreachable or sent > self.retries or loop.time() + wait >= end:
                    raise ModelUnavailable(err.message, **{**err.attrs, "sent": sent}) from None
            await asyncio.sleep(wait)

    async def health(self, *, timeout: float = 5.0) -> dict[str, Any]:  # noqa: ASYNC109
        """The gateway's ``/v1/health`` answer (provider, model, spend today)."""
        data = await self._get("/v1/health", deadline=timeout)
        if not isinstance(data, dict):
            raise ModelError(
                "the gateway's health answer is not an object", kind="bad_gateway_answer"
            )
        return data

    async def _get(self, path: str, *, deadline: float) -> Any:
        return await self._send("GET", path, b"", deadline)

    async def _post(self, path: str, payload: Mapping[str, Any], *, deadline: float) -> Any:
        return await self._send("POST", path, json.dumps(payload).encode(), deadline)

    async def _send(self, method: str, path: str, body: bytes, deadline: float) -> Any:
        headers = {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}
        tracer = telemetry.tracer()
        if tracer and (traceparent := tracer.traceparent()):
            headers["traceparent"] = traceparent  # the gateway's log line names the trace
        try:
            async with asyncio.timeout(deadline):
                response = await request(self.address, method, path, body=body, headers=headers)
        except TimeoutError:
            raise ModelTimeout(
                f"the gateway at {self.address} did not answer within {deadline:g} s",
                kind="client_deadline",
            ) from None
        except (OSError, ConnectionError) as err:
            raise ModelUnavailable(
                f"cannot reach the model gateway at {self.address}: {err}; "
                "is `loopkernel gateway` running?",
                kind="gateway_unreachable",
            ) from None
        if response.status != 200:
            raise error_from_wire(response.status, response.body)
        try:
            return response.json()
        except ValueError:
            raise ModelError(
                "the gateway's answer is not JSON", kind="bad_gateway_answer"
            ) from None


def _request_payload(
    messages: Sequence[Message],
    *,
    key: str,
    run_id: str,
    task_id: str | None,
    ask: Ask,
) -> dict[str, Any]:
    max_tokens, response_schema, timeout = ask.max_tokens, ask.response_schema, ask.timeout_s
    if not key:
        raise UsageError("a model call needs an idempotency key")
    if not run_id:
        raise UsageError("a model call needs a run_id")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise UsageError(f"max_tokens must be a whole number >= 1, not {max_tokens!r}")
    if not timeout > 0:
        raise UsageError(f"timeout must be > 0, not {timeout!r}")
    if response_schema is not None and not isinstance(response_schema, dict):
        raise UsageError("response_schema must be a JSON Schema object (a dict) or None")
    return {
        "messages": messages_to_json(messages),
        "key": key,
        "run_id": run_id,
        "task_id": task_id,
        "max_tokens": max_tokens,
        "response_schema": response_schema,
        "timeout": timeout,
    }
