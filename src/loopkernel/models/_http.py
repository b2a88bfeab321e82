"""A small HTTP/1.1 over asyncio streams: enough for JSON requests on loopback or a Unix
socket, with nothing but the standard library.

The model client, the gateway and the test kit's scripted provider all speak through it:
``request(...)`` sends one request on a fresh connection; ``HttpServer`` serves a handler on
``HOST:PORT`` or ``unix:PATH`` (keep-alive, ``Content-Length`` bodies only, a cap on sizes).
It is not a general HTTP stack: no TLS, no chunked bodies, no proxies. Providers on the
internet are reached by their official SDKs inside the gateway, never through this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from loopkernel.errors import UsageError

__all__ = [
    "Address",
    "HttpRequest",
    "HttpResponse",
    "HttpServer",
    "json_response",
    "parse_address",
    "request",
]

MAX_HEAD = 64 * 1024
"""Bytes a request or response head (request line and headers) may take."""
MAX_BODY = 16 * 1024 * 1024
"""Bytes a body may take."""

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    402: "Payment Required",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Address:
    """Where an HTTP server listens: TCP ``host:port`` or a Unix socket path."""

    host: str | None = None
    port: int | None = None
    path: str | None = None
    """The Unix socket's path (then ``host`` and ``port`` are None)."""

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"http://{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """``http://HOST:PORT``, ``HOST:PORT`` or ``unix:PATH`` (``UsageError`` otherwise)."""
    text = text.strip()
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not path:
            raise UsageError("a Unix socket address needs a path: unix:/path/to/socket")
        return Address(path=path)
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme != "http":
        raise UsageError(f"address {text!r}: only http:// (loopback) or unix:PATH is supported")
    if parts.path not in ("", "/") or parts.query:
        raise UsageError(f"address {text!r} must not have a path or a query")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise UsageError(f"address {text!r} needs a host and a port, e.g. 127.0.0.1:8765")
    return Address(host=parts.hostname, port=port)


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpResponse:
    """A response as read off the wire, or as a handler returns it."""

    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Lower-case names."""

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpRequest:
    """A request as a handler sees it."""

    method: str
    path: str
    """The target without the query string."""
    headers: Mapping[str, str]
    """Lower-case names."""
    body: bytes


def json_response(
    status: int, payload: Any, headers: Mapping[str, str] | None = None
) -> HttpResponse:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return HttpResponse(
        status=status,
        body=body,
        headers={"content-type": "application/json", **(headers or {})},
    )


# -- the client side ------------------------------------------------------------------------


async def _connect(address: Address) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if address.path is not None:
        return await asyncio.open_unix_connection(address.path, limit=MAX_HEAD)
    assert address.host is not None and address.port is not None
    return await asyncio.open_connection(address.host, address.port, limit=MAX_HEAD)


async def request(
    address: Address,
    method: str,
    path: str,
    *,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> HttpResponse:
    """Send one request on a new connection and read the whole response.

    Raises ``OSError`` when the connection fails and ``ConnectionError`` when the peer
    closes early or speaks something else; the caller applies its own deadline
    (``asyncio.timeout``) and maps both to its own errors.
    """
    reader, writer = await _connect(address)
    try:
        host = address.host or "localhost"
        head = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        head.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status_line, resp_headers = await _read_head(reader)
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ConnectionError(f"not an HTTP response: {status_line[:80]!r}")
        length = resp_headers.get("content-length")
        if length is not None:
            data = await _read_body(reader, length)
        else:  # HTTP/1.0 style: the body runs until the peer closes
            data = await reader.read(MAX_BODY + 1)
            if len(data) > MAX_BODY:
                raise ConnectionError("response body too large")
        return HttpResponse(status=int(parts[1]), body=data, headers=resp_headers)
    finally:
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, dict[str, str]]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as err:
        raise ConnectionError("the peer closed the connection before a full head") from err
    except asyncio.LimitOverrunError as err:
        raise ConnectionError("HTTP head too large") from err
    lines = raw.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ConnectionError(f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers


async def _read_body(reader: asyncio.StreamReader, length: str) -> bytes:
    if not length.isdigit():
        raise ConnectionError(f"bad Content-Length {length!r}")
    n = int(length)
    if n > MAX_BODY:
        raise ConnectionError(f"body of {n} bytes is over the {MAX_BODY} byte cap")
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as err:
        raise ConnectionError("the peer closed the connection inside a body") from err


# -- the server side ------------------------------------------------------------------------

Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class HttpServer:
    """Serve ``handler`` on an address; ``await start()``, then ``address`` is where it is.

    A TCP port of 0 picks a free one. A Unix socket is created with mode ``0600`` (the
    umask is tightened while it is bound), and an existing socket file at the path is
    replaced, any other file is refused.
    """

    def __init__(self, handler: Handler, address: Address) -> None:
        self.handler = handler
        self.requested = address
        self.address = address
        self._server: asyncio.Server | None = None
        self._conns: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self) -> Address:
        if self.requested.path is not None:
            path = self.requested.path
            _clear_socket_path(path)
            old = os.umask(0o177)
            try:
                self._server = await asyncio.start_unix_server(self._serve, path, limit=MAX_HEAD)
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            self.address = Address(path=path)
        else:
            self._server = await asyncio.start_server(
                self._serve, self.requested.host, self.requested.port, limit=MAX_HEAD
            )
            sock = self._server.sockets[0].getsockname()
            self.address = Address(host=self.requested.host, port=int(sock[1]))
        return self.address

    async def serve_forever(self) -> None:
        assert self._server is not None, "start() first"
        await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._conns.values()):
                writer.close()  # an idle connection's reader sees EOF and its task ends
            _, pending = (
                await asyncio.wait(list(self._conns), timeout=5) if self._conns else ((), ())
            )
            for conn in pending:  # a handler still busy: cancel it
                conn.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
        if self.address.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address.path)

    async def __aenter__(self) -> HttpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns[task] = writer
        try:
            while True:
                try:
                    line, headers = await _read_head(reader)
                except ConnectionError:
                    return
                parts = line.split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    await _write(writer, json_response(400, {"error": "bad request line"}), True)
                    return
                if "transfer-encoding" in headers:
                    await _write(writer, json_response(411, {"error": "send Content-Length"}), True)
                    return
                try:
                    body = await _read_body(reader, headers.get("content-length", "0"))
                except ConnectionError as err:
                    await _write(writer, json_response(413, {"error": str(err)}), True)
                    return
                req = HttpRequest(
                    method=parts[0].upper(),
                    path=parts[1].split("?", 1)[0],
                    headers=headers,
                    body=body,
                )
                try:
                    response = await self.handler(req)
                except Exception as err:  # a bug or a broken disk: answer, don't hang up
                    message = f"internal error: {type(err).__name__}: {err}"
                    print(f"http: {req.method} {req.path}: {message}", file=sys.stderr)
                    response = json_response(
                        500, {"error": {"type": "ModelUnavailable", "message": message}}
                    )
                close = headers.get("connection", "").lower() == "close" or parts[2] == "HTTP/1.0"
                await _write(writer, response, close)
                if close:
                    return
        except (ConnectionError, OSError):
            return
        except asyncio.CancelledError:
            return  # closing the server cancelled a busy handler: the connection just ends
        finally:
            self._conns.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _clear_socket_path(path: str) -> None:
    """Remove a stale socket file at ``path``; refuse to replace anything else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise UsageError(f"{path} exists and is not a socket; refusing to replace it")
    os.unlink(path)


async def _write(writer: asyncio.StreamWriter, response: HttpResponse, close: bool) -> None:
    reason = _REASONS.get(response.status, "Status")
    head = [f"HTTP/1.1 {response.status} {reason}"]
    head += [f"{k}: {v}" for k, v in response.headers.items() if k.lower() != "content-length"]
    head.append(f"Content-Length: {len(response.body)}")
    head.append("Connection: close" if close else "Connection: keep-alive")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
    await writer.drain()
