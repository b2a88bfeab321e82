"""The web inspector (``loopkernel serve``; docs/web.md): runs, a run's live graph and
journal, a task's detail, and approve / reject / cancel behind a token.

Needs the ``web`` extra (Starlette, uvicorn, Jinja2); ``import loopkernel`` never imports
it. It reads and writes through ``loopkernel.client.Client`` only, like the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopkernel.errors import UsageError, install_hint

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from loopkernel.client import Client

__all__ = ["create_app", "require_extra"]


def require_extra() -> None:
    """Fail with one line naming the install command when the ``web`` extra is missing."""
    try:
        import jinja2  # noqa: F401
        import multipart  # type: ignore[import-untyped]  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"the web inspector needs {exc.name}: {install_hint('web')}") from None


def create_app(client: Client, **options: Any) -> Starlette:
    """The inspector as an ASGI app over an open ``client``; see ``_app.create_app``."""
    require_extra()
    from loopkernel.web._app import create_app as build

    return build(client, **options)
