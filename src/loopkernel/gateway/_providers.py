"""Providers: one async call to an upstream model through its official SDK.

``OpenAIProvider`` (the ``openai`` SDK) covers OpenAI and every OpenAI-compatible server
(llama.cpp, vLLM, Ollama, the bundled local model); ``AnthropicProvider`` (the ``anthropic``
SDK) covers Anthropic. Both are built with the SDK's own retries off: the gateway retries
429 / 5xx / connection errors itself (``call_with_retries``), with backoff, inside the call's
deadline, so the ledger sees one outcome per call.

An SDK error becomes one of ours: 429, 5xx, a dropped connection -> retry, then
``ModelUnavailable``; the deadline -> ``ModelTimeout``; any other 4xx -> ``ModelError``
(kind ``provider_rejected``, with the status). A provider's error body is never echoed:
it may quote the request.
"""

from __future__ import annotations

import asyncio
import enum
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from loopkernel.errors import ModelError, ModelTimeout, ModelUnavailable, UsageError, install_hint
from loopkernel.gateway._config import ProviderConfig
from loopkernel.models import Message

__all__ = [
    "AnthropicProvider",
    "FaultKind",
    "OpenAIProvider",
    "Provider",
    "ProviderFault",
    "ProviderReply",
    "Retryable",
    "call_with_retries",
]

_BACKOFF_CAP = 8.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderReply:
    text: str
    model: str
    input_tokens: int
    output_tokens: int
    finish_reason: str | None = None
    usage: bool = True
    """Whether the provider reported its token counts (else the call is charged its whole
    reservation: a reply without ``usage`` must not be free)."""


class Retryable(Exception):
    """A failure worth another try: 429, 5xx, a dropped connection."""

    def __init__(self, message: str, *, status: int | None, retry_after: float | None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class FaultKind(enum.StrEnum):
    """Why a reply is not an answer."""

    TOO_LARGE = "too_large"
    """The text is far over what ``max_tokens`` admits, or over ``MAX_REPLY_BYTES``."""
    OVER_MAX_TOKENS = "over_max_tokens"
    """``usage.output_tokens`` is more than the request's ``max_tokens``."""
    IMPLAUSIBLE_USAGE = "implausible_usage"
    """``usage.input_tokens`` is more than the prompt could make, or a count is negative."""
    EMPTY = "empty"
    """No ``choices`` (OpenAI) or no content blocks (Anthropic)."""


class ProviderFault(Retryable):
    """A reply the gateway refuses to treat as an answer (see ``FaultKind``)."""

    def __init__(self, fault: FaultKind, message: str) -> None:
        super().__init__(message, status=None, retry_after=None)
        self.fault = fault


class Provider(Protocol):
    config: ProviderConfig

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        response_schema: dict[str, Any] | None,
    ) -> ProviderReply:
        """One attempt. Raises ``Retryable`` or ``ModelError``."""

    async def aclose(self) -> None: ...


def _extra() -> str:
    return install_hint("models")


def _retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("retry-after")
        return None if value is None else max(0.0, float(value))
    except (TypeError, ValueError, AttributeError):
        return None


class OpenAIProvider:
    """Chat completions through the official ``openai`` SDK."""

    def __init__(self, config: ProviderConfig, api_key: str | None) -> None:
        try:
            import openai
        except ImportError:
            raise UsageError(f"the openai provider needs the openai SDK: {_extra()}") from None
        self.config = config
        self._openai = openai
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "no-key",  # a loopback server that asks for none
            base_url=config.base_url,
            max_retries=0,
            timeout=None,
        )

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        response_schema: dict[str, Any] | None,
    ) -> ProviderReply:
        openai = self._openai
        kwargs: dict[str, Any] = {}
        if response_schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": response_schema},
            }
        try:
            resp = await self._client.chat.completions.create(
                model=self.config.model,
                messages=[{"role": m.role, "content": m.content} for m in messages],  # type: ignore[misc]
                max_tokens=max_tokens,
                **kwargs,
            )
        except openai.APIStatusError as err:
            raise _status_error(err.status_code, err.response.headers) from None
        except openai.APIConnectionError as err:  # includes APITimeoutError
            raise Retryable(
                f"connection error: {type(err).__name__}", status=None, retry_after=None
            ) from None
        if not resp.choices:
            raise ProviderFault(FaultKind.EMPTY, "the provider's reply has no choices")
        choice = resp.choices[0]
        usage = resp.usage
        return ProviderReply(
            text=choice.message.content or "",
            model=resp.model or self.config.model,
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            finish_reason=choice.finish_reason,
            usage=usage is not None,
        )

    async def aclose(self) -> None:
        await self._client.close()


class AnthropicProvider:
    """Messages through the official ``anthropic`` SDK."""

    def __init__(self, config: ProviderConfig, api_key: str | None) -> None:
        try:
            import anthropic
        except ImportError:
            raise UsageError(
                f"the anthropic provider needs the anthropic SDK: {_extra()}"
            ) from None
        self.config = config
        self._anthropic = anthropic
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or "no-key",
            base_url=config.base_url,
            max_retries=0,
            timeout=None,
        )

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        response_schema: dict[str, Any] | None,
    ) -> ProviderReply:
        anthropic = self._anthropic
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        turns = [{"role": m.role, "content": m.content} for m in messages if m.role != "system"]
        if not turns:
            raise ModelError("an Anthropic call needs a user message", kind="bad_request")
        kwargs: dict[str, Any] = {}
        if system:
            kwargs["system"] = system
        if response_schema is not None:
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": response_schema}}
        try:
            resp = await self._client.messages.create(
                model=self.config.model,
                max_tokens=max_tokens,
                messages=turns,  # type: ignore[arg-type]
                **kwargs,
            )
        except anthropic.APIStatusError as err:
            raise _status_error(err.status_code, err.response.headers) from None
        except anthropic.APIConnectionError as err:
            raise Retryable(
                f"connection error: {type(err).__name__}", status=None, retry_after=None
            ) from None
        if not resp.content:
            raise ProviderFault(FaultKind.EMPTY, "the provider's reply has no content")
        text = "".join(getattr(block, "text", "") for block in resp.content)
        return ProviderReply(
            text=text,
            model=resp.model or self.config.model,
            input_tokens=resp.usage.input_tokens,
            output_tokens=resp.usage.output_tokens,
            finish_reason=_ANTHROPIC_STOP.get(str(resp.stop_reason), resp.stop_reason),
            usage=resp.usage is not None,
        )

    async def aclose(self) -> None:
        await self._client.close()


_ANTHROPIC_STOP = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop"}
"""Anthropic's stop reasons in the OpenAI names ``Completion.finish_reason`` uses."""


def _status_error(status: int, headers: Any) -> Exception:
    if status in (408, 409, 429) or status >= 500:
        return Retryable(
            f"the provider answered {status}", status=status, retry_after=_retry_after(headers)
        )
    hint = {
        401: "the provider refused the gateway's API key",
        403: "the provider refused the gateway's API key for this model",
        404: "the provider does not know this model or endpoint",
    }.get(status, "the provider refused the request")
    return ModelError(f"{hint} ({status})", kind="provider_rejected", status=status)


async def call_with_retries(
    attempt: Callable[[], Awaitable[ProviderReply]],
    *,
    deadline: float,
    retries: int,
    backoff: float,
    clock: Callable[[], float] = time.monotonic,
    on_retry: Callable[[Retryable, float], None] | None = None,
) -> tuple[ProviderReply, int]:
    """Run ``attempt`` until it answers, retrying ``Retryable`` failures with exponential
    backoff and jitter; ``(reply, retries used)``. The whole thing, waits included, must
    end within ``deadline`` seconds, else ``ModelTimeout``; out of retries ->
    ``ModelUnavailable``."""
    end = clock() + deadline
    tries = 0
    while True:
        left = end - clock()
        if left <= 0:
            raise ModelTimeout(
                f"the model call passed its {deadline:g} s deadline", kind="deadline"
            )
        try:
            async with asyncio.timeout(left):
                return await attempt(), tries
        except TimeoutError:
            raise ModelTimeout(
                f"the model call passed its {deadline:g} s deadline"
                + (f" after {tries} retries" if tries else ""),
                kind="deadline",
            ) from None
        except Retryable as err:
            if tries >= retries:
                fault = err.fault.value if isinstance(err, ProviderFault) else None
                extra: dict[str, Any] = {} if fault is None else {"fault": fault}
                raise ModelUnavailable(
                    f"{err} (gave up after {tries} retries)",
                    kind="provider_unavailable" if fault is None else "provider_fault",
                    status=err.status if err.status is not None else 0,
                    **extra,
                ) from None
            wait = min(_BACKOFF_CAP, backoff * 2**tries) * (0.5 + random.random() / 2)
            if err.retry_after is not None:
                wait = max(wait, min(err.retry_after, _BACKOFF_CAP))
            if clock() + wait >= end:
                raise ModelTimeout(
                    f"the model call would pass its {deadline:g} s deadline waiting to retry "
                    f"({err})",
                    kind="deadline",
                ) from None
            tries += 1
            if on_retry is not None:
                on_retry(err, wait)
            await asyncio.sleep(wait)
