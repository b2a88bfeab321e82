"""A scripted model provider: a real local HTTP server that speaks the OpenAI chat
completions protocol (``POST /v1/chat/completions``), the Anthropic messages protocol
(``POST /v1/messages``), Azure OpenAI (``/openai/deployments/D/chat/completions``, header
``api-key``), Gemini (``/v1beta/models/M:generateContent``, header ``x-goog-api-key``)
and Ollama (``/api/chat``), and answers each request with the next reply of a script.

It stands in for a paid model API in tests: the gateway talks to it through the official
SDKs exactly as it would to the real thing. ::

    with ScriptedProvider(["hello", ScriptedReply(status=429), '{"op": "add"}']).running() as p:
        # gateway: --provider openai --base-url {p.base_url}   (anthropic: p.anthropic_url)
        ...
        p.wait_for_calls(2)
        assert p.calls == 2 and p.requests[0].body["max_tokens"] == 64

or ``async with ScriptedProvider(...) as p:`` inside a running event loop. A script that
runs out answers 500 with ``script exhausted`` (so a test that expects fewer calls fails
loudly), unless a ``default`` reply is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from loopkernel.models._http import Address, HttpRequest, HttpResponse, HttpServer, json_response

__all__ = ["ScriptedProvider", "ScriptedReply", "ScriptedRequest"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptedReply:
    """One scripted answer."""

    text: str = ""
    """The reply's text."""
    status: int = 200
    """Anything but 200 answers with an error body of that status (429, 500, 503 ...)."""
    input_tokens: int = 11
    output_tokens: int = 7
    finish_reason: str = "stop"
    """``stop`` or ``length`` (OpenAI names; mapped to ``end_turn`` / ``max_tokens``)."""
    retry_after: float | None = None
    """A ``Retry-After`` header (seconds) on an error reply."""
    hang: bool = False
    """Never answer (until the server closes): a deadline test."""
    model: str = "scripted-model"
    usage: bool = True
    """False: the reply has no ``usage`` block (OpenAI protocol), as some servers send."""
    empty: bool = False
    """True: a 200 with an empty ``choices`` list (OpenAI) or no content blocks (Anthropic)."""
    delay: float = 0.0
    """Seconds to wait before answering: a slow provider."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptedRequest:
    """One request the server received."""

    path: str
    headers: Mapping[str, str]
    body: Any
    protocol: str
    """``openai``, ``anthropic``, ``azure``, ``gemini`` or ``ollama``."""


@dataclass
class _State:
    replies: deque[ScriptedReply] = field(default_factory=deque)
    requests: list[ScriptedRequest] = field(default_factory=list)


class ScriptedProvider:
    """See the module docstring. ``api_key``: require this key (``Authorization: Bearer``;
    for Anthropic also ``x-api-key``), else answer 401."""

    def __init__(
        self,
        replies: Iterable[ScriptedReply | str] = (),
        *,
        default: ScriptedReply | str | None = None,
        api_key: str | None = None,
    ) -> None:
        self._state = _State()
        self._cond = threading.Condition()
        self.push(*replies)
        self.default = _reply(default) if default is not None else None
        self.api_key = api_key
        self._server: HttpServer | None = None
        self._release: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.address: Address | None = None

    # -- the script ------------------------------------------------------------------------

    def push(self, *replies: ScriptedReply | str) -> None:
        """Append replies to the script (a str is a 200 reply with that text)."""
        with self._cond:
            self._state.replies.extend(_reply(r) for r in replies)

    @property
    def requests(self) -> list[ScriptedRequest]:
        """Every model request received so far, in order."""
        with self._cond:
            return list(self._state.requests)

    @property
    def calls(self) -> int:
        """How many model requests arrived (each retry counts)."""
        with self._cond:
            return len(self._state.requests)

    def wait_for_calls(self, n: int, timeout: float = 30.0) -> None:
        """Block until ``n`` requests arrived (``TimeoutError`` after ``timeout``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._state.requests) >= n, timeout):
                raise TimeoutError(f"{len(self._state.requests)} of {n} calls after {timeout} s")

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``)."""
        assert self.address is not None, "start the provider first"
        return f"http://{self.address.host}:{self.address.port}/v1"

    @property
    def root_url(self) -> str:
        """The server's root (``http://HOST:PORT``): Azure's endpoint, Gemini's and
        Ollama's base URL."""
        assert self.address is not None, "start the provider first"
        return f"http://{self.address.host}:{self.address.port}"

    @property
    def anthropic_url(self) -> str:
        """The Anthropic SDK's base URL (it appends ``/v1/messages`` itself)."""
        assert self.address is not None, "start the provider first"
        return f"http://{self.address.host}:{self.address.port}"

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._release = asyncio.Event()
        self._server = HttpServer(self._handle, Address(host="127.0.0.1", port=0))
        self.address = await self._server.start()

    async def close(self) -> None:
        if self._release is not None:
            self._release.set()
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def __aenter__(self) -> ScriptedProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextmanager
    def running(self) -> Iterator[ScriptedProvider]:
        """Serve from a background thread (for tests whose gateway is a subprocess)."""
        started = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as err:  # handed to the caller below
                failure.append(err)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.close())
            loop.close()

        self._thread = threading.Thread(target=serve, name="scripted-provider", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        try:
            yield self
        finally:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    # -- serving ---------------------------------------------------------------------------

    async def _handle(self, req: HttpRequest) -> HttpResponse:
        protocol = _protocol(req.path) if req.method == "POST" else None
        if protocol is None:
            return json_response(404, {"error": {"message": f"no route {req.method} {req.path}"}})
        try:
            body = json.loads(req.body)
        except ValueError:
            return json_response(400, {"error": {"message": "body is not JSON"}})
        with self._cond:
            self._state.requests.append(
                ScriptedRequest(
                    path=req.path, headers=dict(req.headers), body=body, protocol=protocol
                )
            )
            self._cond.notify_all()
            if self.api_key is not None and not _authorized(req, protocol, self.api_key):
                return json_response(
                    401, {"error": {"type": "authentication_error", "message": "bad key"}}
                )
            if self._state.replies:
                reply = self._state.replies.popleft()
            elif self.default is not None:
                reply = self.default
            else:
                return json_response(500, {"error": {"message": "script exhausted"}})
        if reply.hang:
            assert self._release is not None
            await self._release.wait()
            return json_response(503, {"error": {"message": "closing"}})
        if reply.delay:
            assert self._release is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._release.wait(), reply.delay)
        if reply.status != 200:
            headers = {}
            if reply.retry_after is not None:
                headers["retry-after"] = f"{reply.retry_after:g}"
            return json_response(
                reply.status,
                {"error": {"type": "scripted_error", "message": f"scripted {reply.status}"}},
                headers,
            )
        if protocol == "anthropic":
            return json_response(200, _anthropic_body(reply, body))
        if protocol == "gemini":
            return json_response(200, _gemini_body(reply))
        if protocol == "ollama":
            return json_response(200, _ollama_body(reply))
        return json_response(200, _openai_body(reply, body))


def _protocol(path: str) -> str | None:
    """The protocol a request's path speaks (None: no such route)."""
    if path == "/v1/chat/completions":
        return "openai"
    if path == "/v1/messages":
        return "anthropic"
    if path == "/api/chat":
        return "ollama"
    if re.fullmatch(r"/openai/deployments/[^/]+/chat/completions", path):
        return "azure"
    if re.fullmatch(r"/v1beta/models/[^/:]+:generateContent", path):
        return "gemini"
    return None


def _authorized(req: HttpRequest, protocol: str, key: str) -> bool:
    if protocol == "azure":
        return req.headers.get("api-key") == key
    if protocol == "gemini":
        return req.headers.get("x-goog-api-key") == key
    bearer = req.headers.get("authorization") == f"Bearer {key}"
    if protocol == "anthropic":  # x-api-key, or a bearer token (the SDK's 2.x default)
        return bearer or req.headers.get("x-api-key") == key
    return bearer


def _reply(value: ScriptedReply | str) -> ScriptedReply:
    return value if isinstance(value, ScriptedReply) else ScriptedReply(text=value)


def _openai_body(reply: ScriptedReply, body: Any) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-scripted-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": []
        if reply.empty
        else [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "finish_reason": reply.finish_reason,
            }
        ],
        **(
            {
                "usage": {
                    "prompt_tokens": reply.input_tokens,
                    "completion_tokens": reply.output_tokens,
                    "total_tokens": reply.input_tokens + reply.output_tokens,
                }
            }
            if reply.usage
            else {}
        ),
    }


def _gemini_body(reply: ScriptedReply) -> dict[str, Any]:
    candidate = {
        "content": {"role": "model", "parts": [{"text": reply.text}]},
        "finishReason": "MAX_TOKENS" if reply.finish_reason == "length" else "STOP",
    }
    usage = {
        "promptTokenCount": reply.input_tokens,
        "candidatesTokenCount": reply.output_tokens,
        "totalTokenCount": reply.input_tokens + reply.output_tokens,
    }
    return {
        "candidates": [] if reply.empty else [candidate],
        "modelVersion": reply.model,
        **({"usageMetadata": usage} if reply.usage else {}),
    }


def _ollama_body(reply: ScriptedReply) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": reply.model,
        "created_at": "2026-01-01T00:00:00Z",
        "done": True,
        "done_reason": "length" if reply.finish_reason == "length" else "stop",
    }
    if not reply.empty:
        out["message"] = {"role": "assistant", "content": reply.text}
    if reply.usage:
        out["prompt_eval_count"] = reply.input_tokens
        out["eval_count"] = reply.output_tokens
    return out


def _anthropic_body(reply: ScriptedReply, body: Any) -> dict[str, Any]:
    return {
        "id": f"msg_scripted_{time.monotonic_ns()}",
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": [] if reply.empty else [{"type": "text", "text": reply.text}],
        "stop_reason": "max_tokens" if reply.finish_reason == "length" else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }
