"""Azure OpenAI, Gemini and Ollama behind the gateway.

- ``AzureOpenAIProvider``: the official ``openai`` SDK's ``AsyncAzureOpenAI`` (deployment
  paths ``/openai/deployments/DEPLOYMENT/chat/completions?api-version=...``, the
  ``api-key`` header); replies and errors as OpenAI's.
- ``GeminiProvider``: Google's REST API over ``httpx`` (which the ``openai`` and
  ``anthropic`` SDKs of the ``models`` extra bring): ``POST
  /v1beta/models/MODEL:generateContent``, the ``x-goog-api-key`` header, usage from
  ``usageMetadata`` (``promptTokenCount``, ``candidatesTokenCount`` + ``thoughtsTokenCount``),
  ``finishReason`` ``MAX_TOKENS`` as ``length``; a schema as ``responseJsonSchema``.
- ``OllamaProvider``: Ollama's native API over ``httpx``: ``POST /api/chat`` with
  ``stream: false``, ``options.num_predict`` for ``max_tokens``, a schema as ``format``;
  usage from ``prompt_eval_count`` / ``eval_count``; ``done_reason`` ``length``.

Errors map as the SDK providers' do: 408 / 409 / 429 / 5xx and transport errors are
``Retryable``; other 4xx ``ModelError`` (``provider_rejected``); an answer with no
candidates (no message) is a ``ProviderFault`` (``empty``). A provider's error body is
never echoed: it may quote the request.

Bedrock is not here: its API needs AWS SigV4 request signing (boto3), a different
credential model (role chains, session tokens) and per-model body formats; see
docs/models.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loopkernel.errors import UsageError, install_hint
from loopkernel.gateway._config import ProviderConfig
from loopkernel.gateway._providers import (
    FaultKind,
    OpenAIProvider,
    ProviderFault,
    ProviderReply,
    Retryable,
    _status_error,
)
from loopkernel.models import Message

__all__ = ["AzureOpenAIProvider", "GeminiProvider", "OllamaProvider"]

AZURE_API_VERSION = "2024-10-21"
GEMINI_URL = "https://generativelanguage.googleapis.com"
OLLAMA_URL = "http://127.0.0.1:11434"


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise UsageError(f"this provider needs httpx: {install_hint('models')}") from None
    return httpx


class AzureOpenAIProvider(OpenAIProvider):
    """Azure OpenAI: ``base_url`` is the resource's endpoint, ``model`` the deployment."""

    def __init__(self, config: ProviderConfig, api_key: str | None) -> None:
        super().__init__(config, api_key)
        openai = self._openai
        self._client = openai.AsyncAzureOpenAI(
            api_key=api_key or "no-key",
            azure_endpoint=config.base_url,
            api_version=config.api_version or AZURE_API_VERSION,
            max_retries=0,
            timeout=None,
        )


class _HttpProvider:
    """One JSON POST per attempt over an ``httpx.AsyncClient``."""

    def __init__(self, config: ProviderConfig, api_key: str | None, default_url: str) -> None:
        self._h = _httpx()
        self.config = config
        self._key = api_key
        self._client = self._h.AsyncClient(base_url=config.base_url or default_url, timeout=None)

    async def _post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        try:
            resp = await self._client.post(path, json=body, headers=headers)
        except self._h.TransportError as err:
            raise Retryable(
                f"connection error: {type(err).__name__}", status=None, retry_after=None
            ) from None
        if resp.status_code != 200:
            raise _status_error(resp.status_code, resp.headers)
        try:
            return resp.json()
        except ValueError:
            raise ProviderFault(FaultKind.EMPTY, "the provider's reply is not JSON") from None

    async def aclose(self) -> None:
        await self._client.aclose()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class GeminiProvider(_HttpProvider):
    """Gemini's ``generateContent``."""

    def __init__(self, config: ProviderConfig, api_key: str | None) -> None:
        super().__init__(config, api_key, GEMINI_URL)

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        response_schema: dict[str, Any] | None,
    ) -> ProviderReply:
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        contents = [
            {"role": "model" if m.role == "assistant" else "user", "parts": [{"text": m.content}]}
            for m in messages
            if m.role != "system"
        ]
        generation: dict[str, Any] = {"maxOutputTokens": max_tokens}
        if response_schema is not None:
            generation["responseMimeType"] = "application/json"
            generation["responseJsonSchema"] = response_schema
        body: dict[str, Any] = {"contents": contents, "generationConfig": generation}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        headers = {"x-goog-api-key": self._key or ""}
        data = await self._post(
            f"/v1beta/models/{self.config.model}:generateContent", body, headers
        )
        candidates = data.get("candidates") if isinstance(data, dict) else None
        if not isinstance(candidates, list) or not candidates:
            raise ProviderFault(FaultKind.EMPTY, "the provider's reply has no candidates")
        first = candidates[0] if isinstance(candidates[0], dict) else {}
        parts = (first.get("content") or {}).get("parts") or []
        text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
        usage = data.get("usageMetadata")
        prompt = _int(usage.get("promptTokenCount")) if isinstance(usage, dict) else None
        out = _int(usage.get("candidatesTokenCount")) if isinstance(usage, dict) else None
        thoughts = _int(usage.get("thoughtsTokenCount")) if isinstance(usage, dict) else None
        reason = first.get("finishReason")
        return ProviderReply(
            text=text,
            model=str(data.get("modelVersion") or self.config.model),
            input_tokens=prompt or 0,
            output_tokens=(out or 0) + (thoughts or 0),
            finish_reason={"MAX_TOKENS": "length", "STOP": "stop"}.get(str(reason), reason),
            usage=prompt is not None and out is not None,
        )


class OllamaProvider(_HttpProvider):
    """Ollama's native ``/api/chat``."""

    def __init__(self, config: ProviderConfig, api_key: str | None) -> None:
        super().__init__(config, api_key, OLLAMA_URL)

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        response_schema: dict[str, Any] | None,
    ) -> ProviderReply:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "stream": False,
            "options": {"num_predict": max_tokens},
        }
        if response_schema is not None:
            body["format"] = response_schema
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        data = await self._post("/api/chat", body, headers)
        message = data.get("message") if isinstance(data, dict) else None
        if not isinstance(message, dict) or "content" not in message:
            raise ProviderFault(FaultKind.EMPTY, "the provider's reply has no message")
        prompt, out = _int(data.get("prompt_eval_count")), _int(data.get("eval_count"))
        reason = data.get("done_reason")
        return ProviderReply(
            text=str(message.get("content") or ""),
            model=str(data.get("model") or self.config.model),
            input_tokens=prompt or 0,
            output_tokens=out or 0,
            finish_reason="length" if reason == "length" else ("stop" if reason else None),
            usage=prompt is not None and out is not None,
        )
