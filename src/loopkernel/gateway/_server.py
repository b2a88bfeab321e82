"""The gateway's HTTP face: ``POST /v1/complete`` and ``GET /v1/health``, behind a token.

A call, in order::

    auth          Authorization: Bearer <LOOPKERNEL_GATEWAY_TOKEN>, else 401
    parse         strict: unknown fields, bad messages, a bad schema -> 400 UsageError
    ledger        key done   -> the same answer, replayed (no provider call, no charge)
                  key failed -> the same error again
                  key in flight here -> wait for that call's answer
                  same key, other request -> 409 ModelError (key_reused)
    run guard     the run's model time budget spent -> 402 BudgetExceeded
                  (gateway.run_model_seconds); its breaker open (``breaker_after``
                  timeouts or outages in a row) -> 503 ModelUnavailable (breaker_open)
    reserve       input bytes x price_in + max_tokens x price_out against run_usd and
                  day_usd, estimated tokens against run_tokens -> 402 BudgetExceeded
                  (nothing spent)
    provider      retries on 429 / 5xx / connection errors with backoff, inside the deadline
                  -> 504 ModelTimeout, 503 ModelUnavailable (reservation released: the
                  same key may try again), 502 ModelError (recorded: it is an answer)
    inspect       a reply far over max_tokens or over 2 MiB, usage past max_tokens or past
                  what the prompt can make, no choices -> a provider fault: its request
                  charged the reservation, retried, then 503 ModelUnavailable
                  (provider_fault); never stored as an answer (``_guard.py``)
    validate      a response_schema reply must parse and match -> 502 ModelError
                  (kind invalid_output), recorded with its cost
    settle        the real cost (price table x the larger of the provider's usage and the
                  gateway's measure, output capped at max_tokens; the whole reservation
                  when it reported none) replaces the reservation, checked against the
                  limits in the same transaction -> 402 BudgetExceeded, answer withheld
    requests      every provider request is a ledger row (each retry, each re-send of a
                  key after a timeout or a crash), a lost one charged its reservation

Responses are JSON; errors are ``{"error": {"type", "message", "attrs"}}``, which
``loopkernel.models.ModelClient`` turns back into the same exception classes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from loopkernel.errors import (
    BudgetExceeded,
    LoopKernelError,
    ModelError,
    ModelTimeout,
    ModelUnavailable,
    UsageError,
)
from loopkernel.gateway._config import GatewayConfig, ProviderConfig
from loopkernel.gateway._factory import make_provider
from loopkernel.gateway._guard import Measured, RunGuard, inspect_reply, measure
from loopkernel.gateway._harden import dumpable
from loopkernel.gateway._ledger import Ledger, utc_day
from loopkernel.gateway._local import LocalModel
from loopkernel.gateway._providers import (
    Provider,
    ProviderFault,
    ProviderReply,
    Retryable,
    call_with_retries,
)
from loopkernel.models import Completion, Message, check_reply
from loopkernel.models._client import schema_problem
from loopkernel.models._http import (
    Address,
    HttpRequest,
    HttpResponse,
    HttpServer,
    json_response,
)
from loopkernel.models._types import messages_from_json

__all__ = ["Gateway"]

MAX_TOKENS_CAP = 65_536
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
_FIELDS = frozenset(
    {
        "messages",
        "key",
        "run_id",
        "task_id",
        "max_tokens",
        "response_schema",
        "timeout",
        "model",
        "validate",
    }
)
BYTES_PER_TOKEN = 3
"""For ``run_tokens``: a prompt's tokens are estimated as its UTF-8 bytes / 3 (today's BPE
tokenizers average 3-4 bytes a token on English and JSON). The USD reservation keeps the
upper bound (a byte a token); the estimate is corrected when the call settles, against
the limit, in one transaction."""
_STATUS: dict[type[LoopKernelError], int] = {
    UsageError: 400,
    BudgetExceeded: 402,
    ModelError: 502,
    ModelUnavailable: 503,
    ModelTimeout: 504,
}


def _error(err: LoopKernelError, status: int | None = None) -> HttpResponse:
    code = status or next((s for cls, s in _STATUS.items() if isinstance(err, cls)), 500)
    attrs = {k: v for k, v in err.attrs.items() if isinstance(v, str | int | float | bool)}
    return json_response(
        code, {"error": {"type": type(err).__name__, "message": err.message, "attrs": attrs}}
    )


def _err_from_record(record: Mapping[str, Any]) -> LoopKernelError:
    cls = {"ModelError": ModelError, "BudgetExceeded": BudgetExceeded}.get(
        str(record.get("type")), ModelError
    )
    return cls(str(record.get("message", "")), **dict(record.get("attrs") or {}))


class _Call:
    """A parsed ``/v1/complete`` request."""

    def __init__(self, body: Any, config: GatewayConfig, traceparent: str = "") -> None:
        found = _TRACEPARENT.fullmatch(traceparent)
        self.trace_id = found.group(1) if found else None
        """The caller's trace (W3C ``traceparent``), for the log line; not part of the call."""
        if not isinstance(body, dict):
            raise UsageError("the request body must be a JSON object")
        unknown = set(body) - _FIELDS
        if unknown:
            raise UsageError(f"unknown field(s) {', '.join(sorted(unknown))}")
        self.messages: list[Message] = messages_from_json(body.get("messages"))
        key, run_id = body.get("key"), body.get("run_id")
        if not isinstance(key, str) or not key or len(key) > 512:
            raise UsageError("key must be a non-empty string of at most 512 characters")
        if not isinstance(run_id, str) or not run_id:
            raise UsageError("run_id must be a non-empty string")
        self.key: str = key
        self.run_id: str = run_id
        self.task_id = body.get("task_id")
        if self.task_id is not None and not isinstance(self.task_id, str):
            raise UsageError("task_id must be a string or null")
        mt = body.get("max_tokens", 256)
        if isinstance(mt, bool) or not isinstance(mt, int) or not 1 <= mt <= MAX_TOKENS_CAP:
            raise UsageError(f"max_tokens must be a whole number in 1..{MAX_TOKENS_CAP}")
        self.max_tokens: int = mt
        schema = body.get("response_schema")
        if schema is not None:
            if not isinstance(schema, dict):
                raise UsageError("response_schema must be a JSON Schema object or null")
            schema_problem(None, schema)  # raises UsageError when the schema itself is bad
        self.response_schema: dict[str, Any] | None = schema
        timeout = body.get("timeout", 30.0)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= config.max_timeout
        ):
            raise UsageError(f"timeout must be a number in (0, {config.max_timeout:g}] seconds")
        self.timeout = float(timeout)
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise UsageError("model must be a string or null")
        self.provider: ProviderConfig = config.provider(model)
        validate = body.get("validate", True)
        if not isinstance(validate, bool):
            raise UsageError("validate must be true or false")
        self.validate = validate
        """False: the schema goes to the provider, the caller judges the reply."""
        hashed: dict[str, Any] = {
            "messages": body["messages"],
            "max_tokens": self.max_tokens,
            "response_schema": schema,
            "provider": self.provider.name,
            "run_id": self.run_id,
            "task_id": self.task_id,
        }
        if not validate:
            hashed["validate"] = False
        canonical = json.dumps(
            hashed,
            sort_keys=True,
            separators=(",", ":"),
        )
        self.request_hash = hashlib.sha256(canonical.encode()).hexdigest()

    def reservation(self) -> tuple[float, int]:
        """What the call holds against the budgets until it settles: in USD an upper bound
        (every prompt byte a token -- a byte-level tokenizer never needs more -- 8 tokens of
        chat template per message, the whole ``max_tokens`` of reply); in tokens an
        estimate (bytes / ``BYTES_PER_TOKEN``, rounded up, + 8 per message + ``max_tokens``),
        since ``run_tokens`` counts tokens, not bytes."""
        sizes = [len(m.content.encode()) for m in self.messages]
        upper = sum(n + 8 for n in sizes)
        estimate = sum(-(-n // BYTES_PER_TOKEN) + 8 for n in sizes)
        return self.provider.cost(upper, self.max_tokens), estimate + self.max_tokens


class Gateway:
    """One gateway: providers, a ledger, an HTTP server. ``await start()``, then serve."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        token: str,
        env: Mapping[str, str],
        log: TextIO | None = None,
    ) -> None:
        if not token or len(token) < 16:
            raise UsageError(
                "LOOPKERNEL_GATEWAY_TOKEN must be set in the gateway's environment "
                "(at least 16 characters; e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        self.config = config
        self._expected = f"Bearer {token}".encode()
        self._keys = {p.name: p.api_key(env) for p in config.providers}  # fail fast, exit 2
        self.log = log or sys.stderr
        self.providers: dict[str, Provider] = {}
        self.locals: dict[str, LocalModel] = {}
        self.ledger: Ledger | None = None
        self.server: HttpServer | None = None
        self.provider_calls = 0
        """Requests sent to providers (retries included)."""
        self.answered = 0
        """Calls answered by a provider since start."""
        self.replayed = 0
        """Calls answered from the ledger since start."""
        self._inflight: dict[str, asyncio.Task[HttpResponse]] = {}
        self.guard = RunGuard(
            model_seconds=config.limits.run_model_seconds,
            breaker_after=config.breaker_after,
            breaker_seconds=config.breaker_seconds,
        )
        """Per run: the model time budget and the breaker."""

    async def start(self) -> Address:
        for p in self.config.providers:
            base_url = None
            key = self._keys[p.name]
            if p.kind == "local":
                local = LocalModel(p.model)
                base_url = await asyncio.to_thread(local.start)
                self.locals[p.name] = local
                key = local.api_key
            self.providers[p.name] = make_provider(p, key, base_url)
        self._keys.clear()
        self.ledger = Ledger(self.config.ledger)
        self.server = HttpServer(self.handle, self.config.listen)
        return await self.server.start()

    async def serve_forever(self) -> None:
        assert self.server is not None
        await self.server.serve_forever()

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
        inflight = list(self._inflight.values())
        for task in inflight:
            task.cancel()
        await asyncio.gather(*inflight, return_exceptions=True)
        for provider in self.providers.values():
            await provider.aclose()
        for local in self.locals.values():
            local.stop()
        if self.ledger is not None:
            self.ledger.close()

    # -- requests --------------------------------------------------------------------------

    async def handle(self, req: HttpRequest) -> HttpResponse:
        given = req.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, self._expected):
            return _error(
                ModelError(
                    "missing or wrong gateway token: send Authorization: Bearer "
                    "$LOOPKERNEL_GATEWAY_TOKEN",
                    kind="unauthorized",
                ),
                401,
            )
        if req.path == "/v1/health":
            if req.method != "GET":
                return json_response(405, {"error": {"type": "UsageError", "message": "GET"}})
            return json_response(200, self.health())
        if req.path != "/v1/complete":
            return _error(UsageError(f"no such endpoint {req.path}"), 404)
        if req.method != "POST":
            return _error(UsageError("POST a JSON call to /v1/complete"), 405)
        try:
            body = json.loads(req.body or b"null")
        except ValueError as err:
            return _error(UsageError(f"the request body is not JSON: {err}"))
        try:
            call = _Call(body, self.config, req.headers.get("traceparent", ""))
        except UsageError as err:
            return _error(err)
        running = self._inflight.get(call.key)
        if running is None:
            # Owned by the gateway, not by this request: a caller that hangs up must not
            # cancel the answer another caller of the same key waits for (``close``
            # cancels and awaits what is still in flight).
            running = asyncio.create_task(self._complete(call), name=f"complete {call.key}")
            self._inflight[call.key] = running
            running.add_done_callback(self._forget(call.key))
        return await asyncio.shield(running)

    def _forget(self, key: str) -> Callable[[asyncio.Task[HttpResponse]], None]:
        def forget(_task: asyncio.Task[HttpResponse]) -> None:
            self._inflight.pop(key, None)

        return forget

    def health(self) -> dict[str, Any]:
        assert self.ledger is not None
        return {
            "status": "ok",
            "providers": [
                {"name": p.name, "kind": p.kind, "model": p.model} for p in self.config.providers
            ],
            "limits": {
                "run_usd": self.config.limits.run_usd,
                "day_usd": self.config.limits.day_usd,
                "run_tokens": self.config.limits.run_tokens,
                "run_model_seconds": self.config.limits.run_model_seconds,
            },
            "today": self.ledger.spent(day=utc_day()),
            "since_start": {
                "provider_requests": self.provider_calls,
                "answered": self.answered,
                "replayed": self.replayed,
            },
            "local": {
                name: {"load_seconds": m.stats.load_seconds if m.stats else None}
                for name, m in self.locals.items()
            },
            "process": {"dumpable": dumpable()},
        }

    async def _complete(self, call: _Call) -> HttpResponse:
        assert self.ledger is not None
        ledger = self.ledger
        prior = ledger.get(call.key)
        if prior is not None:
            if prior.request_hash != call.request_hash:
                return _error(
                    ModelError(
                        f"key {call.key} was used before for a different request; "
                        "each distinct call needs its own key",
                        kind="key_reused",
                    ),
                    409,
                )
            if prior.status == "done" and prior.answer is not None:
                self.replayed += 1
                self._log(call, prior.answer, replayed=True)
                return json_response(200, {"completion": prior.answer, "replayed": True})
            if prior.status == "failed" and prior.answer is not None:
                self.replayed += 1
                return _error(_err_from_record(prior.answer))
            return _error(
                ModelUnavailable(
                    f"call {call.key} is in flight in another gateway process",
                    kind="in_flight",
                ),
                409,
            )
        try:
            left = self.guard.admit(call.run_id)
        except (BudgetExceeded, ModelUnavailable) as err:
            self._log_line(f"refused {_who(call)} {err.code}: {err.message}")
            return _error(err)
        usd, tokens = call.reservation()
        try:
            ledger.reserve(
                key=call.key,
                request_hash=call.request_hash,
                run_id=call.run_id,
                task_id=call.task_id,
                provider=call.provider.name,
                usd=usd,
                tokens=tokens,
                limits=self.config.limits,
            )
        except (BudgetExceeded, ModelError) as err:
            self._log_line(f"refused {_who(call)} {err.code}: {err.message}")
            return _error(err)
        deadline = call.timeout if left is None else min(call.timeout, left)
        started = time.perf_counter()
        try:
            reply = await self._ask(call, deadline, (usd, tokens))
        except (ModelTimeout, ModelUnavailable) as err:
            self.guard.record(call.run_id, time.perf_counter() - started, failed=True)
            ledger.release(call.key)
            self._log_line(f"failed {_who(call)} {err.code}: {err.message}")
            return _error(err)
        except BudgetExceeded as err:  # the call's faulted replies spent the budget
            ledger.release(call.key)
            self._log_line(f"refused {_who(call)} {err.code}: {err.message}")
            return _error(err)
        except ModelError as err:
            self.guard.record(call.run_id, time.perf_counter() - started, failed=False)
            ledger.fail(call.key, _record(err), cost_usd=0.0, tokens=0)
            self._log_line(f"failed {_who(call)} {err.code}: {err.message}")
            return _error(err)
        except BaseException:
            ledger.release(call.key)
            raise
        latency_ms = (time.perf_counter() - started) * 1000
        self.guard.record(call.run_id, latency_ms / 1000, failed=False)
        cost, used, counted = _charge(call, reply, (usd, tokens))
        if not reply.usage:
            self._log_line(f"no usage from the provider for key={call.key}: charged {usd:g} USD")
        try:
            if call.validate:
                check_reply(reply.text, call.response_schema)
        except ModelError as err:
            if reply.finish_reason == "length":
                err = ModelError(
                    f"{err.message} (the reply was cut off at max_tokens={call.max_tokens})",
                    **err.attrs,
                )
            ledger.fail(call.key, _record(err), cost_usd=cost, tokens=used)
            self._log_line(f"invalid {_who(call)}: {err.message}")
            return _error(err)
        completion = Completion(
            text=reply.text,
            model=reply.model,
            input_tokens=counted.input_tokens,
            output_tokens=counted.output_tokens,
            cost_usd=round(cost, 10),
            latency_ms=round(latency_ms, 3),
            replayed=False,
            finish_reason=reply.finish_reason,
        )
        answer = completion.to_json()
        refused = ledger.settle(
            call.key,
            cost_usd=completion.cost_usd,
            tokens=used,
            answer=answer,
            limits=self.config.limits,
        )
        if refused is not None:
            self._log_line(f"refused {_who(call)} at settle {refused.code}: {refused.message}")
            return _error(refused)
        self.answered += 1
        self._log(call, answer, replayed=False)
        return json_response(200, {"completion": answer, "replayed": False})

    async def _ask(
        self, call: _Call, deadline: float, reservation: tuple[float, int]
    ) -> ProviderReply:
        """The provider's reply, retried inside ``deadline``; each request a ledger row. A
        reply that is no answer (``inspect_reply``) is a ``ProviderFault``: its request is
        recorded ``lost`` (charged the reservation) and retried like a 5xx."""
        assert self.ledger is not None
        ledger = self.ledger
        provider = self.providers[call.provider.name]

        async def attempt() -> ProviderReply:
            request_id = ledger.request_sent(call.key, limits=self.config.limits)
            self.provider_calls += 1
            try:
                answer = await provider.complete(
                    call.messages, max_tokens=call.max_tokens, response_schema=call.response_schema
                )
                inspect_reply(
                    answer,
                    messages=call.messages,
                    max_tokens=call.max_tokens,
                    schema=call.response_schema,
                )
            except ProviderFault as err:  # the provider may bill it: charged the reservation
                ledger.request_done(request_id, "lost")
                self._log_line(f"provider fault key={call.key} {err.fault.value}: {err}")
                raise
            except (Retryable, ModelError):
                ledger.request_done(request_id, "failed")
                raise
            except BaseException:  # the deadline cancelled it: the provider may have billed it
                ledger.request_done(request_id, "lost")
                raise
            cost_usd, used_tokens, _ = _charge(call, answer, reservation)
            ledger.request_done(request_id, "answered", cost_usd=cost_usd, tokens=used_tokens)
            return answer

        def on_retry(err: Retryable, wait: float) -> None:
            self._log_line(f"retry key={call.key} after {err} in {wait:.2f}s")

        reply, _retries = await call_with_retries(
            attempt,
            deadline=deadline,
            retries=self.config.retries,
            backoff=self.config.backoff,
            on_retry=on_retry,
        )
        return reply

    def _log(self, call: _Call, answer: Mapping[str, Any], *, replayed: bool) -> None:
        self._log_line(
            f"{'replayed' if replayed else 'answered'} {_who(call)} in={answer['input_tokens']} "
            f"out={answer['output_tokens']} usd={answer['cost_usd']:.6f} "
            f"ms={answer['latency_ms']:.1f}" + (f" trace={call.trace_id}" if call.trace_id else "")
        )

    def _log_line(self, text: str) -> None:
        print(f"gateway: {text}", file=self.log, flush=True)


def _who(call: _Call) -> str:
    """A log line's call: its key, run, task and the provider it went to (or would have),
    alike on every outcome, so that a failed call names its provider as an answer does."""
    return f"key={call.key} run={call.run_id} task={call.task_id} provider={call.provider.name}"


def _charge(
    call: _Call, reply: ProviderReply, reservation: tuple[float, int]
) -> tuple[float, int, Measured]:
    """USD and tokens a checked reply costs, and the token counts charged: the larger of
    reported and measured (``measure``); without ``usage``, the whole reservation."""
    counted = measure(reply, messages=call.messages, max_tokens=call.max_tokens)
    if not reply.usage:
        usd, tokens = reservation
        return usd, tokens, counted
    cost = call.provider.cost(counted.input_tokens, counted.output_tokens)
    return cost, counted.input_tokens + counted.output_tokens, counted


def _record(err: LoopKernelError) -> dict[str, Any]:
    attrs = {k: v for k, v in err.attrs.items() if isinstance(v, str | int | float | bool)}
    return {"type": type(err).__name__, "message": err.message, "attrs": attrs}
