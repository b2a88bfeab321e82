"""The inspector's pages and actions, as a Starlette app over one ``Client``.

Every page is rendered on the server by Jinja2 with autoescaping on, so a value from a run
(a task result, a human's payload) is text, never markup; a strict Content-Security-Policy
(scripts and styles from this server only, no inline script) is the second wall.

The endpoints are module-level functions (``_pages``: reads, ``_stream``: the live
stream, ``_actions``: writes) over the one ``Inspector`` held on ``app.state``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from loopkernel.client import Client
from loopkernel.errors import RunNotFound, UsageError
from loopkernel.web import _actions as actions
from loopkernel.web import _pages as pages
from loopkernel.web._auth import Auth
from loopkernel.web._live import KEEPALIVE_SECONDS, Watcher
from loopkernel.web._state import (
    HERE,
    Background,
    Inspector,
    PastCache,
    Refused,
    inspector_of,
    templates,
)
from loopkernel.web._stream import events_stream, shared_stream

__all__ = ["create_app"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


async def _favicon(request: Request) -> Response:
    """What a browser asks for on its own, whatever the page says: the logo, not a 404."""
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


ROUTES = [
    Route("/", pages.runs_page),
    Route("/runs", pages.runs_fragment),
    Route("/login", actions.login_page, methods=["GET"]),
    Route("/login", actions.login, methods=["POST"]),
    Route("/logout", actions.logout, methods=["POST"]),
    Route("/sessions", actions.sessions_page, methods=["GET"]),
    Route("/sessions/revoke", actions.revoke, methods=["POST"]),
    Route("/runs/{run_id}", pages.run_page),
    Route("/live", shared_stream),
    Route("/runs/{run_id}/events", events_stream),
    Route("/runs/{run_id}/events/{seq}", pages.event_value),
    Route("/runs/{run_id}/at/{seq}", pages.at_page),
    Route("/runs/{run_id}/history.json", pages.history),
    Route("/runs/{run_id}/cancel", actions.cancel, methods=["POST"]),
    Route("/runs/{run_id}/resume", actions.resume, methods=["POST"]),
    Route("/runs/{run_id}/fork", actions.fork, methods=["POST"]),
    Route("/runs/{run_id}/tasks/{task_id:path}/decide", actions.decide, methods=["POST"]),
    Route("/runs/{run_id}/tasks/{task_id:path}/value/{part}", pages.task_value),
    Route("/runs/{run_id}/tasks/{task_id:path}", pages.task_page),
    Route("/favicon.ico", _favicon),
    Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
]


def create_app(
    client: Client,
    *,
    auth: Auth,
    max_streams: int = 64,
    poll_seconds: float = 1.0,
    keepalive_seconds: float = KEEPALIVE_SECONDS,
    trusted_hosts: Collection[str] = (),
) -> Starlette:
    """The inspector over an open ``client``. ``auth``: the operator tokens (the server's
    and the named operators'), whether reads need one, how long a sign-in lasts. At most
    ``max_streams`` live streams are served at once, each sending a keepalive after
    ``keepalive_seconds`` of silence. Requests are answered only when their ``Host`` is
    loopback or one of ``trusted_hosts`` (DNS rebinding). The
    installed apps' pages are served too (``_apps``: entry point group ``loopkernel.pages``)."""
    inspector = Inspector(
        client=client,
        auth=auth,
        watcher=Watcher(client=client, poll_seconds=poll_seconds, max_streams=max_streams),
        env=templates(),
        keepalive_seconds=keepalive_seconds,
        past=PastCache(client=client),
        background=Background(client=client),
    )
    from loopkernel.web._apps import app_pages

    app = Starlette(
        routes=[*app_pages(inspector), *ROUTES],
        exception_handlers={
            RunNotFound: _not_found,
            UsageError: _bad_request,
            Refused: _bad_request,
        },
        lifespan=_lifespan,
    )
    hosts = {h.strip("[]").lower() for h in (*LOOPBACK_HOSTS, *trusted_hosts)}
    app.add_middleware(_Headers, hosts=frozenset(hosts))
    app.state.inspector = inspector
    app.state.watcher = inspector.watcher
    app.state.auth = inspector.auth
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    lk: Inspector = app.state.inspector
    async with contextlib.AsyncExitStack() as stack:
        reader = lk.client.reader()
        if reader is not None:  # every read on a connection of its own, off the writer's
            lk.use_reader(await stack.enter_async_context(reader))
        async with asyncio.TaskGroup() as group:  # the owner of every background run
            lk.background.group = group
            try:
                yield
            finally:
                lk.background.stop()
                await lk.watcher.stop()


async def _not_found(request: Request, exc: Exception) -> Response:
    run_id = getattr(exc, "attrs", {}).get("run_id")
    message = "no such run" if run_id is None else f"no run {run_id}"  # never the db path
    return inspector_of(request).render(request, "error.html", 404, message=message)


async def _bad_request(request: Request, exc: Exception) -> Response:
    lk = inspector_of(request)
    if isinstance(exc, Refused):
        return lk.render(request, "error.html", exc.status, message=exc.message)
    return lk.render(request, "error.html", 400, message=str(exc))


def _host_of(scope: Any) -> str:
    """The request's ``Host`` without its port, lower case, IPv6 brackets dropped."""
    for name, value in scope.get("headers", ()):
        if name == b"host":
            host = str(value.decode("latin-1")).strip().lower()
            if host.startswith("["):
                return host[1:].partition("]")[0]
            return host.rpartition(":")[0] if host.count(":") == 1 else host
    return ""


class _Headers:
    """Security headers on every response; a request for a host this server does not
    answer to (DNS rebinding: a page of another site that resolved its own name to this
    machine) is refused before it reaches a page; run data is never cached."""

    def __init__(self, app: Any, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _host_of(scope) not in self.hosts:
            refused = Response(
                "this server does not answer to that host name (see serve --host)\n",
                status_code=421,
                media_type="text/plain",
            )
            await refused(scope, receive, send)
            return
        static = scope.get("path", "").startswith("/static/")

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"x-frame-options", b"DENY"),
                ]
                if scope.get("scheme") == "https":  # only a browser that came over TLS
                    message["headers"].append((b"strict-transport-security", b"max-age=31536000"))
                if not static:
                    message["headers"] = [
                        (k, v) for k, v in message["headers"] if k.lower() != b"cache-control"
                    ] + [(b"cache-control", b"no-store")]
            await send(message)

        await self.app(scope, receive, with_headers)
