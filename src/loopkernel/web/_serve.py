"""``loopkernel serve``: open the store, print where to look and the operator token, serve."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import socket
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import uvicorn

from loopkernel.client import Client
from loopkernel.errors import UsageError
from loopkernel.web._app import create_app
from loopkernel.web._auth import Auth, read_operators

__all__ = ["Listen", "operator_token", "serve", "trusted_hosts"]


def operator_token(token_file: str | None) -> tuple[str, bool]:
    """The token read from ``token_file``, or a new random one; and whether it was new."""
    if token_file is None:
        return secrets.token_urlsafe(24), True
    path = Path(token_file)
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise UsageError(f"cannot read the token file {path}: {exc.strerror}") from None
    if len(token) < 16:
        raise UsageError(f"the token in {path} is too short: use at least 16 characters")
    return token, False


def operators_of(path: str | None) -> dict[str, str]:
    """The named operators of an operators file (``NAME SHA256-OF-TOKEN`` lines), or
    none without one."""
    if path is None:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the operators file {path}: {exc.strerror}") from None
    try:
        return read_operators(text, path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _bind(host: str, port: int) -> socket.socket:
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UsageError(f"cannot resolve --host {host}: {exc.strerror}") from None
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def trusted_hosts(host: str, allow_hosts: tuple[str, ...]) -> tuple[str, ...]:
    """The ``Host`` names requests may carry besides loopback: ``--host`` unless it is a
    wildcard address, and every ``--allow-host``."""
    own = () if _is_wildcard(host) else (host,)
    return (*own, *allow_hosts)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True, kw_only=True, slots=True)
class Listen:
    """Where ``serve`` listens, and which host names it answers to."""

    host: str = "127.0.0.1"
    port: int = 8765
    """0: any free port."""
    allow_hosts: tuple[str, ...] = ()
    """Host names answered besides loopback and ``host`` (``--allow-host``)."""


async def serve(
    db: str | None,
    *,
    listen: Listen = Listen(),
    token_file: str | None = None,
    require_token_for_reads: bool = False,
    max_streams: int = 64,
    keepalive_seconds: float | None = None,
    operators_file: str | None = None,
    out: TextIO = sys.stdout,
    beside: Callable[[Client], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Serve the inspector until interrupted. Requests are answered for loopback names,
    ``listen.host`` itself (unless it is a wildcard address) and ``listen.allow_hosts``;
    ``operators_file`` names the operators (``read_operators``).

    ``beside(client)``: a task run on the same client while the server runs (``loopkernel
    serve``'s timer waker), cancelled and awaited when it stops. The same client, not a
    second one: two SQLite stores on one file in one process are not safe (opening the
    second reads the file's header with a plain ``open``/``close``, and POSIX drops every
    lock the process holds on a file when any descriptor of it closes)."""
    token, new = operator_token(token_file)
    operators = operators_of(operators_file)
    host, allow_hosts = listen.host, listen.allow_hosts
    sock = _bind(host, listen.port)
    async with Client(db) as client:
        auth = Auth(
            operator_token=token, operators=operators, require_for_reads=require_token_for_reads
        )
        app = create_app(
            client,
            auth=auth,
            max_streams=max_streams,
            trusted_hosts=trusted_hosts(host, allow_hosts),
            **({} if keepalive_seconds is None else {"keepalive_seconds": keepalive_seconds}),
        )
        bound = sock.getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        print(f"LoopKernel inspector on http://{shown}:{bound[1]}/ ({client.store.url})", file=out)
        if new:
            print(f"operator token: {token}", file=out)
        else:
            print(f"operator token: read from {token_file}", file=out)
        if operators:
            print(f"named operators: {', '.join(sorted(operators))}", file=out)
        print("sign in at /login to approve, reject and cancel", file=out)
        if not _is_loopback(host):
            print(f"warning: listening on {host}, not only this machine", file=out)
            if _is_wildcard(host) and not allow_hosts:
                print(
                    "note: only loopback host names are answered; add the names browsers "
                    "use with --allow-host NAME",
                    file=out,
                )
        out.flush()
        config = uvicorn.Config(
            app,
            log_level=os.environ.get("LOOPKERNEL_WEB_LOG", "warning"),
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        task: asyncio.Task[None] | None = None
        if beside is not None:
            task = asyncio.create_task(beside(client))
        try:
            await server.serve(sockets=[sock])
        except asyncio.CancelledError:
            pass
        finally:
            sock.close()
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
