"""Pages an installed app adds to the inspector: the entry point group ``loopkernel.pages``.

An entry point names a function ``pages(host) -> dict`` called once per app built by
``create_app``; ``host`` is a :class:`PageHost`, what the inspector lends the app's
endpoints (the client, rendering with the inspector's own templates, the read gate, CSRF
and signing). The dict holds ``routes`` (Starlette routes), and optionally ``templates``
(a folder holding ``NAME/file.html`` for the entry point ``NAME``, free to extend
``base.html`` and include the inspector's fragments), ``static`` (a folder served at
``/apps/NAME/static``) and ``nav`` (``[(label, href)]`` links in the top bar).

Apps import nothing of ``loopkernel.web`` (the layering test): the host is handed to them.
A page that fails to load is left out with one warning line; the inspector still serves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import BaseLoader, ChoiceLoader, FileSystemLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from loopkernel.client import Client
from loopkernel.web._state import Inspector, Refused

__all__ = ["PageHost", "app_pages"]

log = logging.getLogger("loopkernel.web")
GROUP = "loopkernel.pages"


@dataclass(kw_only=True)
class PageHost:
    """What an app's pages may use of the inspector."""

    inspector: Inspector
    name: str
    """The entry point's name: its templates are ``NAME/…``, its static files
    ``/apps/NAME/static/…``."""
    refused: type[Exception] = field(default=Refused)
    """Raise ``host.refused(status, message)`` to answer with a one-line error page."""

    @property
    def client(self) -> Client:
        return self.inspector.client

    def render(self, request: Request, template: str, code: int = 200, **ctx: Any) -> HTMLResponse:
        """A page from the app's templates (``NAME/template``), like the inspector's own."""
        return self.inspector.render(request, f"{self.name}/{template}", code, **ctx)

    def error(self, request: Request, code: int, message: str) -> HTMLResponse:
        """The inspector's one-line error page."""
        return self.inspector.render(request, "error.html", code, message=message)

    def gate(self, request: Request) -> Response | None:
        """``None`` when the request may read (``serve --require-token-for-reads``)."""
        return self.inspector.gate(request)

    def csrf_ok(self, request: Request, submitted: str | None) -> bool:
        return self.inspector.auth.csrf_ok(request, submitted)

    def execute(self, run_id: str, by: dict[str, str]) -> None:
        """Execute ``run_id`` in the inspector's background executor (the one the resume
        button uses), after the request is answered; when it runs here already, again once
        that execution ends. ``by``: who asked (``name``, ``via``), for the log."""
        self.inspector.background.start(run_id, by=by, after_running=True)

    def sign(self, text: str) -> str:
        """A signature under this server's key (for a cookie the app sets)."""
        return self.inspector.auth.sign(f"{self.name}\n{text}")

    def signed(self, text: str, signature: str | None) -> bool:
        return self.inspector.auth.signed(f"{self.name}\n{text}", signature)


def _entry_points() -> list[tuple[str, Callable[[PageHost], dict[str, Any]]]]:
    from importlib.metadata import entry_points

    found = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            found.append((ep.name, ep.load()))
        except Exception as exc:  # an app's import error never stops the inspector
            log.warning("pages %s not loaded: %s: %s", ep.name, type(exc).__name__, exc)
    return found


def app_pages(inspector: Inspector) -> list[BaseRoute]:
    """The routes of every installed app's pages; their templates join the inspector's
    loader and their links its top bar."""
    routes: list[BaseRoute] = []
    folders: list[BaseLoader] = []
    nav: list[tuple[str, str]] = []
    for name, make in _entry_points():
        try:
            given = make(PageHost(inspector=inspector, name=name))
        except Exception as exc:
            log.warning("pages %s not loaded: %s: %s", name, type(exc).__name__, exc)
            continue
        routes += given.get("routes", [])
        if given.get("templates"):
            folders.append(FileSystemLoader(Path(given["templates"])))
        if given.get("static"):
            routes.append(Mount(f"/apps/{name}/static", StaticFiles(directory=given["static"])))
        nav += [(str(label), str(href)) for label, href in given.get("nav", [])]
    env = inspector.env
    if folders:
        # the inspector's own first: an app adds templates, never replaces base.html
        env.loader = ChoiceLoader([*([env.loader] if env.loader else []), *folders])
    env.globals["app_nav"] = nav
    return routes
