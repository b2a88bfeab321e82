"""The Investigations page of ``loopkernel serve`` (entry point ``loopkernel.pages``: sre).

- ``GET /investigations``: the form (question, namespace, source: a dump folder the server
  names, an uploaded archive, or a live cluster) and the latest investigations with their
  question and answer.
- ``POST /investigations``: ask. The asker is a user of the service table (``_people``,
  from ``LOOPKERNEL_SRE_SERVICE``), signed in by their token (typed in the form once, then a
  cookie this server signed). Scope and limits are checked before anything is read; an
  upload is bounded and unpacked safely (``_archive``); the run goes to the workers.
- ``GET /investigations/RUN``: the conversation RUN belongs to; a run not finished is
  followed live through the inspector's own stream (``/runs/RUN/events``), and the page
  shows the report once it ends.
- ``POST /investigations/RUN/follow-up``: a follow-up question (``Investigations.follow_up``).
- the fix pages (``_web_fix``): propose the report's plan, approve it, see the re-check.

Every refusal is one line on the inspector's error page.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any, Protocol

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from loopkernel import LoopKernelError, UsageError
from loopkernel_apps.sre._people import People, User, check_scope, load_people
from loopkernel_apps.sre._service import Investigations, Turn, collect_live

__all__ = ["pages"]

HERE = Path(__file__).parent
COOKIE = "lk_investigator"
SIGN_IN_S = 12 * 3600
ENV = "LOOPKERNEL_SRE_SERVICE"
UNPACKED_FACTOR = 10
"""An upload may unpack to this many times its bound."""


class Host(Protocol):
    """What the inspector lends the page (``loopkernel.web._apps.PageHost``)."""

    refused: type[Any]
    client: Any

    def render(self, request: Request, template: str, code: int = 200, **ctx: Any) -> Response: ...
    def error(self, request: Request, code: int, message: str) -> Response: ...
    def gate(self, request: Request) -> Response | None: ...
    def csrf_ok(self, request: Request, submitted: str | None) -> bool: ...
    def execute(self, run_id: str, by: dict[str, str]) -> None: ...
    def sign(self, text: str) -> str: ...
    def signed(self, text: str, signature: str | None) -> bool: ...


def pages(host: Host) -> dict[str, Any]:
    """The routes, templates, static files and top-bar link of the page."""
    from loopkernel_apps.sre._web_fix import fix_routes

    page = _Page(host)
    return {
        "routes": [
            Route("/investigations", page.index, methods=["GET"]),
            Route("/investigations", page.ask, methods=["POST"]),
            *fix_routes(page),
            Route("/investigations/{run_id}", page.conversation, methods=["GET"]),
            Route("/investigations/{run_id}/follow-up", page.follow_up, methods=["POST"]),
        ],
        "templates": HERE / "templates",
        "static": HERE / "static",
        "nav": [("Investigations", "/investigations")],
    }


class _Page:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.people: People | None = None
        self.problem: str | None = None
        path = os.environ.get(ENV)
        if not path:
            self.problem = f"the investigation service is not configured: set {ENV} (docs/sre.md)"
        else:
            try:
                self.people = load_people(path)
            except UsageError as exc:
                self.problem = str(exc)

    def service(self) -> Investigations:
        return Investigations(self.host.client, self.people)

    # -- who asks ---------------------------------------------------------------------------

    def signed_in(self, request: Request) -> User | None:
        raw = request.cookies.get(COOKIE, "")
        name, _, rest = raw.partition(":")
        until, _, sig = rest.partition(":")
        if self.people is None or not self.host.signed(f"{name}\n{until}", sig):
            return None
        if not until.isdigit() or int(until) < time.time():
            return None
        return self.people.users.get(name)

    def who(self, request: Request, form: FormData) -> tuple[User, bool]:
        """The asker (and whether their token came with this form), once CSRF is checked."""
        if self.people is None:
            raise self.host.refused(503, self.problem or "not configured")
        csrf = form.get("csrf")
        if not self.host.csrf_ok(request, csrf if isinstance(csrf, str) else None):
            raise self.host.refused(403, "this form is stale or came from another site; reload")
        token = form.get("token")
        if isinstance(token, str) and token.strip():
            user = self.people.by_token(token)
            if user is None:
                raise self.host.refused(403, "refused: that token is not a user's of this service")
            return user, True
        found = self.signed_in(request)
        if found is None:
            raise self.host.refused(403, "refused: give your investigator token to ask")
        return found, False

    def remember(self, response: Response, user: User, request: Request) -> Response:
        until = str(int(time.time()) + SIGN_IN_S)
        sig = self.host.sign(f"{user.name}\n{until}")
        response.set_cookie(
            COOKIE,
            f"{user.name}:{until}:{sig}",
            max_age=SIGN_IN_S,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    # -- endpoints --------------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        if (denied := self.host.gate(request)) is not None:
            return denied
        turns = await self.service().recent(50)
        return self.host.render(
            request,
            "investigations.html",
            turns=turns,
            problem=self.problem,
            user=self.signed_in(request),
            people=self.people,
        )

    async def ask(self, request: Request) -> Response:
        try:
            self.check_length(request)
            form = await request.form(max_files=1, max_fields=20)
            user, fresh = self.who(request, form)
            question, namespace = _text(form, "question"), _text(form, "namespace")
            svc = self.service()
            check_scope(user, namespace, question)  # before the source is read or unpacked
            await svc.check_limits(user)
            dump, source = await self.source_of(form, user)
            run_id = await svc.ask(
                user=user.name, question=question, namespace=namespace, dump=dump, source=source
            )
        except self.host.refused as exc:
            return self.host.error(request, exc.status, exc.message)
        except LoopKernelError as exc:
            return self.host.error(request, _status(exc), str(exc))
        answer = RedirectResponse(f"/investigations/{run_id}", status_code=303)
        return self.remember(answer, user, request) if fresh else answer

    async def follow_up(self, request: Request) -> Response:
        parent = request.path_params["run_id"]
        try:
            form = await request.form(max_files=0, max_fields=20)
            user, fresh = self.who(request, form)
            run_id = await self.service().follow_up(
                user=user.name, parent=parent, question=_text(form, "question")
            )
        except self.host.refused as exc:
            return self.host.error(request, exc.status, exc.message)
        except LoopKernelError as exc:
            return self.host.error(request, _status(exc), str(exc))
        answer = RedirectResponse(f"/investigations/{run_id}", status_code=303)
        return self.remember(answer, user, request) if fresh else answer

    async def conversation(self, request: Request) -> Response:
        if (denied := self.host.gate(request)) is not None:
            return denied
        run_id = request.path_params["run_id"]
        try:
            svc = self.service()
            turns = await svc.thread(run_id)
            shown = next(t for t in turns if t.run_id == run_id)
            result = await _report_result(self.host.client, shown)
            plans = await _plans(self.host.client, shown) if result else []
        except StopIteration:
            return self.host.error(request, 404, f"no investigation {run_id}")
        except UsageError as exc:  # RunNotFound among them: never a path or a traceback
            code = 404 if exc.code == "run_not_found" else 400
            return self.host.error(
                request, code, f"no investigation {run_id}" if code == 404 else str(exc)
            )
        return self.host.render(
            request,
            "conversation.html",
            turns=turns,
            shown=shown,
            result=result,
            report=(result or {}).get("report"),
            run_id=run_id,
            finished=shown.status not in ("running",),
            last=turns[-1],
            plans=plans,
            clusters=_fix_clusters(self.people),
            user=self.signed_in(request),
            problem=self.problem,
        )

    # -- the source -------------------------------------------------------------------------

    def check_length(self, request: Request) -> None:
        bound = self.people.max_upload_bytes if self.people else 0
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > bound + 64 * 1024:
            raise self.host.refused(413, f"refused: the upload is over {bound} bytes")

    async def source_of(self, form: FormData, user: User) -> tuple[str, str]:
        """``(dump folder, source kind)`` of the form's source."""
        assert self.people is not None
        choice = _text(form, "source")
        if choice.startswith("dump:"):
            name = choice.removeprefix("dump:")
            if name not in self.people.dumps:
                raise UsageError(f"this server has no dump named {name!r}")
            return self.people.dumps[name], "dump"
        if choice == "upload":
            upload = form.get("archive")
            if not isinstance(upload, UploadFile) or not upload.filename:
                raise UsageError("choose an archive to upload (.tar.gz, .tgz, .tar or .zip)")
            return await self.unpack(upload), "upload"
        if choice.startswith("live:"):
            return await self.collect(user, choice.removeprefix("live:"), _text(form, "namespace"))
        raise UsageError("choose a source: a dump on the server, an upload or a live cluster")

    async def unpack(self, upload: UploadFile) -> str:
        import asyncio

        from loopkernel_apps.sre._archive import unpack

        assert self.people is not None
        bound = self.people.max_upload_bytes
        if upload.size is not None and upload.size > bound:
            raise UsageError(f"refused: the upload is over {bound} bytes")
        root = Path(self.people.uploads or "uploads")
        await asyncio.to_thread(root.mkdir, mode=0o700, parents=True, exist_ok=True)
        name = f"upload-{int(time.time())}-{secrets.token_hex(4)}"
        archive = root / f"{name}.archive"
        with archive.open("wb") as out:
            written = 0
            while chunk := await upload.read(1 << 16):
                written += len(chunk)
                if written > bound:
                    out.close()
                    archive.unlink()
                    raise UsageError(f"refused: the upload is over {bound} bytes")
                out.write(chunk)
        try:
            folder = await asyncio.to_thread(
                unpack, archive, root / name, max_unpacked_bytes=bound * UNPACKED_FACTOR
            )
        finally:
            archive.unlink(missing_ok=True)
        return str(folder)

    async def collect(self, user: User, cluster: str, namespace: str) -> tuple[str, str]:
        """A fresh dump of ``namespace`` from a live cluster (``_service.collect_live``)."""
        import asyncio

        assert self.people is not None
        out = await asyncio.to_thread(collect_live, self.people, user, cluster, namespace)
        return out, "live"


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else ""


def _status(exc: LoopKernelError) -> int:
    return 403 if getattr(exc, "code", "") == "scope_refused" else 400


def _fix_clusters(people: People | None) -> list[str]:
    """The table's clusters a fix can write to (those with an ``api`` URL)."""
    return [n for n, c in (people.clusters if people else {}).items() if c.get("api")]


async def _plans(client: Any, turn: Turn) -> list[Any]:
    """The write-call plans of a finished turn's report (none when its dump is gone)."""
    from loopkernel_apps.sre._plans import plans_of_run

    try:
        return await plans_of_run(client, turn.run_id)
    except (UsageError, OSError):
        return []


async def _report_result(client: Any, turn: Turn) -> dict[str, Any] | None:
    if turn.status != "succeeded":
        return None
    inspection = await client.inspect(turn.run_id)
    for task in inspection.tasks:
        if task["task_id"] == "report" and task["state"] == "succeeded":
            result: dict[str, Any] = task["result"]
            return result
    return None
