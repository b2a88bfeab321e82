"""The inspector's pages and actions, as a Starlette app over one ``Client``.

Every page is rendered on the server by Jinja2 with autoescaping on, so a value from a run
(a task result, a human's payload) is text, never markup; a strict Content-Security-Policy
(scripts and styles from this server only, no inline script) is the second wall.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from loopkernel.client import Client
from loopkernel.errors import ApprovalRefused, LoopKernelError, RunNotFound
from loopkernel.graph import TERMINAL_RUN, Event, RunStatus, TaskState
from loopkernel.store import PatchRecord, RunInfo
from loopkernel.web import _views as views
from loopkernel.web._auth import CSRF_COOKIE, SESSION_COOKIE, Auth
from loopkernel.web._live import Renderers, Watcher, stream

__all__ = ["create_app"]

HERE = Path(__file__).parent
PAGE_SIZE = 50
JOURNAL_TAIL = 500
"""The run page shows the journal's last entries; ``?journal=all`` shows every one."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
STATUSES = [s.value for s in RunStatus]


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def create_app(
    client: Client,
    *,
    operator_token: str,
    require_token_for_reads: bool = False,
    max_streams: int = 64,
    poll_s: float = 1.0,
) -> Starlette:
    """The inspector over an open ``client``. ``operator_token`` authorizes every write
    (and every read with ``require_token_for_reads``); at most ``max_streams`` live
    streams are served at once."""
    auth = Auth(operator_token=operator_token, require_for_reads=require_token_for_reads)
    watcher = Watcher(client=client, poll_s=poll_s)
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = views.age
    env.filters["ts"] = views.timestamp
    env.filters["pretty"] = views.pretty
    env.filters["preview"] = views.preview
    env.filters["q"] = lambda s: quote(str(s), safe="")

    def render(request: Request, name: str, code: int = 200, **ctx: Any) -> HTMLResponse:
        csrf = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)
        ctx.update(
            csrf=csrf,
            operator=auth.is_operator(request),
            locked=auth.require_for_reads,
            path=request.url.path,
        )
        response = HTMLResponse(env.get_template(name).render(**ctx), status_code=code)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict")
        return response

    def fragment(name: str, **ctx: Any) -> str:
        return env.get_template(name).render(**ctx)

    def gate(request: Request) -> Response | None:
        if auth.may_read(request):
            return None
        if request.headers.get("accept", "").startswith("text/event-stream"):
            return Response("sign in first\n", status_code=401)
        return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)

    # -- pages --------------------------------------------------------------------------

    async def runs_page(request: Request) -> Response:
        if (denied := gate(request)) is not None:
            return denied
        q = request.query_params
        status = q.get("status") or None
        app = q.get("app") or None
        before = None
        if status is not None and status not in STATUSES:
            return render(request, "error.html", 400, message=f"unknown status {status!r}")
        if q.get("before"):
            at, _, rid = q["before"].partition(":")
            try:
                before = (float(at), rid)
            except ValueError:
                return render(request, "error.html", 400, message="bad page cursor")
        runs = await client.list_runs(
            PAGE_SIZE + 1,
            status=None if status is None else RunStatus(status),
            app=app,
            before=before,
        )
        more = len(runs) > PAGE_SIZE
        runs = runs[:PAGE_SIZE]
        cursor = f"{runs[-1].created_at!r}:{runs[-1].run_id}" if more and runs else None
        return render(
            request,
            "runs.html",
            runs=runs,
            status=status,
            app=app,
            statuses=STATUSES,
            cursor=cursor,
            first_page=before is None,
        )

    async def run_context(run_id: str, info: RunInfo) -> dict[str, Any]:
        state = await client.graph(run_id)
        events = await client.events(run_id)
        late = views.late_tasks(events)
        return {
            "info": info,
            "state": state,
            "tasks": list(state.tasks.values()),
            "waiting": state.in_state(TaskState.WAITING),
            "answered": views.answered(events, state),
            "graph": views.graph_of(state, late),
            "late": late,
            "live": views.is_live(info),
            "events": events,
            "origin": await client.origin(run_id),
        }

    async def run_page(request: Request) -> Response:
        if (denied := gate(request)) is not None:
            return denied
        run_id = request.path_params["run_id"]
        info = await client.info(run_id)
        ctx = await run_context(run_id, info)
        whole = request.query_params.get("journal") == "all"
        start = 0 if whole else max(0, info.last_seq - JOURNAL_TAIL)
        shown = [e for e in ctx["events"] if e.seq > start]
        patches = {p.event_seq: p for p in await client.patches(run_id, after=start)}
        rows = views.journal_rows(shown, patches)
        notice = request.query_params.get("notice")
        return render(
            request,
            "run.html",
            rows=rows,
            hidden=start,
            last=ctx["events"][-1].seq if ctx["events"] else 0,
            notice=notice,
            run_id=run_id,
            **ctx,
        )

    async def task_page(request: Request) -> Response:
        if (denied := gate(request)) is not None:
            return denied
        run_id = request.path_params["run_id"]
        task_id = request.path_params["task_id"]
        info = await client.info(run_id)
        state = await client.graph(run_id)
        task = state.get(task_id)
        if task is None:
            return render(
                request, "error.html", 404, message=f"run {run_id} has no task {task_id!r}"
            )
        events = [e for e in await client.events(run_id) if e.task_id == task_id]
        patches = {p.event_seq: p for p in await client.patches(run_id)}
        return render(
            request,
            "task.html",
            run_id=run_id,
            info=info,
            task=task,
            preds=state.predecessors(task_id),
            succs=state.successors(task_id),
            rows=views.journal_rows(events, patches),
            effects=await client.effects(run_id, task_id),
            late=task_id in views.late_tasks(events),
        )

    async def events_stream(request: Request) -> Response:
        if (denied := gate(request)) is not None:
            return denied
        run_id = request.path_params["run_id"]
        await client.info(run_id)  # 404 before the stream starts
        if watcher.active >= max_streams:
            return Response(
                "too many live streams; try again shortly\n",
                status_code=503,
                headers={"Retry-After": "5"},
            )
        raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        try:
            after = max(0, int(raw))
        except ValueError:
            return Response("Last-Event-ID must be an event seq\n", status_code=400)
        watcher.start()

        def row(ev: Event, p: PatchRecord | None) -> str:
            return fragment(
                "_row.html",
                row=views.journal_rows([ev], {} if p is None else {ev.seq: p})[0],
                run_id=run_id,
            )

        def patch(seq: int, p: PatchRecord) -> str:
            return fragment("_patch.html", patch=views.patch_view(p), planned=True)

        async def state(rid: str, info: RunInfo) -> dict[str, str]:
            ctx = await run_context(rid, info)
            return {
                "status": info.status.value,
                "head": fragment("_head.html", **ctx),
                "graph": fragment("_graph.html", run_id=rid, **ctx),
                "tasks": fragment("_tasks.html", run_id=rid, **ctx),
                "actions_key": "".join(
                    f"{t.task_id}@{t.wait_epoch}{ctx['answered'].get(t.task_id, '')},"
                    for t in ctx["waiting"]
                )
                + f"|{info.status.value}",
                "actions": fragment(
                    "_actions.html",
                    csrf=request.cookies.get(CSRF_COOKIE, ""),
                    operator=auth.is_operator(request),
                    **ctx,
                ),
            }

        body = stream(
            client,
            watcher,
            run_id,
            after,
            Renderers(row=row, patch=patch, state=state),
            request.is_disconnected,
        )
        return StreamingResponse(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    # -- actions ------------------------------------------------------------------------

    async def authorized_form(request: Request, run_id: str) -> tuple[FormData, str | None]:
        """The posted form, once CSRF and authority are checked; with the run's approval
        token when that is what authorized it (``None``: the operator did)."""
        form = await request.form()
        csrf = form.get("csrf")
        if not auth.csrf_ok(request, csrf if isinstance(csrf, str) else None):
            raise _Refused(403, "this form is stale or came from another site; reload the page")
        if auth.is_operator(request):
            return form, None
        raw = form.get("token")
        token = raw.strip() if isinstance(raw, str) else ""
        if auth.is_operator_token(token):
            return form, None
        if token and await client.check_token(run_id, token):
            return form, token
        raise _Refused(403, "refused: that is neither the operator token nor this run's token")

    async def decide(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        task_id = request.path_params["task_id"]
        try:
            form, token = await authorized_form(request, run_id)
            decision = form.get("decision")
            if decision not in ("approve", "reject"):
                raise _Refused(400, "decision must be approve or reject")
            raw = form.get("payload")
            text = raw.strip() if isinstance(raw, str) else ""
            try:
                payload = json.loads(text) if text else None
            except json.JSONDecodeError as exc:
                raise _Refused(400, f"the payload is not JSON: {exc}") from None
            event = await client.decide(
                run_id,
                task_id,
                "approve" if decision == "approve" else "reject",
                payload=payload,
                token=token,
                local=token is None,
            )
        except _Refused as exc:
            return render(request, "error.html", exc.status, message=exc.message, back=run_id)
        except ApprovalRefused as exc:
            return render(request, "error.html", 409, message=str(exc), back=run_id)
        notice = f"{decision} journaled for {task_id} (event #{event.seq})"
        return RedirectResponse(f"/runs/{quote(run_id)}?notice={quote(notice)}", status_code=303)

    async def cancel(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            form, token = await authorized_form(request, run_id)
            raw = form.get("reason")
            reason = (raw.strip() if isinstance(raw, str) else "") or "cancelled from the inspector"
            info = await client.info(run_id)
            if info.status in TERMINAL_RUN:
                raise _Refused(409, f"run {run_id} is already {info.status.value}")
            await client.cancel(
                run_id, reason, token=token, local=token is None, finish_waiting=False
            )
        except _Refused as exc:
            return render(request, "error.html", exc.status, message=exc.message, back=run_id)
        except LoopKernelError as exc:
            return render(request, "error.html", 409, message=str(exc), back=run_id)
        notice = "cancel journaled; the run's executor (or the next resume) stops it"
        return RedirectResponse(f"/runs/{quote(run_id)}?notice={quote(notice)}", status_code=303)

    async def login_page(request: Request) -> Response:
        return render(request, "login.html", next=request.query_params.get("next", "/"))

    async def login(request: Request) -> Response:
        form = await request.form()
        csrf = form.get("csrf")
        if not auth.csrf_ok(request, csrf if isinstance(csrf, str) else None):
            return render(request, "error.html", 403, message="this form is stale; reload the page")
        token = form.get("token")
        if not auth.is_operator_token(token if isinstance(token, str) else None):
            return render(request, "login.html", 403, next="/", error="wrong token")
        target = form.get("next")
        # Only a path on this server: never "//host" or "/\\host", which browsers treat as
        # another site.
        ok = isinstance(target, str) and target.startswith("/") and target[1:2] not in "/\\"
        target = target if ok and isinstance(target, str) else "/"
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(SESSION_COOKIE, auth.session_value, httponly=True, samesite="strict")
        return response

    async def logout(request: Request) -> Response:
        form = await request.form()
        csrf = form.get("csrf")
        if not auth.csrf_ok(request, csrf if isinstance(csrf, str) else None):
            return render(request, "error.html", 403, message="this form is stale; reload the page")
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    # -- the app ------------------------------------------------------------------------

    async def not_found(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 404, message=str(exc))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await watcher.stop()

    app = Starlette(
        routes=[
            Route("/", runs_page),
            Route("/login", login_page, methods=["GET"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/runs/{run_id}", run_page),
            Route("/runs/{run_id}/events", events_stream),
            Route("/runs/{run_id}/cancel", cancel, methods=["POST"]),
            Route("/runs/{run_id}/tasks/{task_id:path}/decide", decide, methods=["POST"]),
            Route("/runs/{run_id}/tasks/{task_id:path}", task_page),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers={RunNotFound: not_found},
        lifespan=lifespan,
    )
    app.add_middleware(_Headers)
    app.state.watcher = watcher
    return app


class _Headers:
    """Security headers on every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"x-frame-options", b"DENY"),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)
