"""The inspector's pages and actions, as a Starlette app over one ``Client``.

Every page is rendered on the server by Jinja2 with autoescaping on, so a value from a run
(a task result, a human's payload) is text, never markup; a strict Content-Security-Policy
(scripts and styles from this server only, no inline script) is the second wall.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from loopkernel.client import Client, parse_payload
from loopkernel.errors import ApprovalRefused, LoopKernelError, RunHeld, RunNotFound, UsageError
from loopkernel.graph import TERMINAL_RUN, Event, RunStatus, TaskState
from loopkernel.ids import TaskId, valid_id
from loopkernel.store import PatchRecord
from loopkernel.web import _views as views
from loopkernel.web._auth import CSRF_COOKIE, SESSION_COOKIE, Auth
from loopkernel.web._live import (
    KEEPALIVE_SECONDS,
    Hub,
    Renderers,
    Snapshot,
    Watcher,
    digest,
    stream,
)

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
TASKS_SHOWN = 200
"""The run page's task table shows this many; ``?tasks=all`` shows every one."""
MAX_SEQ = 2**63 - 1
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


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
    poll_seconds: float = 1.0,
    keepalive_seconds: float = KEEPALIVE_SECONDS,
    trusted_hosts: Collection[str] = (),
    session_seconds: float = 12 * 3600.0,
) -> Starlette:
    """The inspector over an open ``client``. ``operator_token`` authorizes every write
    (and every read with ``require_token_for_reads``); at most ``max_streams`` live
    streams are served at once, each sending a keepalive after ``keepalive_seconds`` of
    silence. Requests are answered only when their ``Host`` is loopback or one of
    ``trusted_hosts`` (DNS rebinding); a sign-in lasts ``session_seconds``."""
    auth = Auth(
        operator_token=operator_token,
        require_for_reads=require_token_for_reads,
        session_seconds=session_seconds,
    )
    watcher = Watcher(client=client, poll_seconds=poll_seconds, max_streams=max_streams)
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
    env.filters["duration"] = views.duration
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.globals["approval_of"] = views.approval_of
    env.globals["task_time"] = views.task_time

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

    def run_id_of(request: Request) -> str:
        run_id = request.path_params["run_id"]
        if not valid_id(run_id):
            raise _Refused(400, "that is not a run id")
        return str(run_id)

    def back_to(run_id: str, notice: str) -> RedirectResponse:
        """Back to the run page with a notice this server signed (never one from a link)."""
        query = urlencode({"notice": notice, "sig": auth.sign(f"{run_id}\n{notice}")})
        return RedirectResponse(f"/runs/{quote(run_id)}?{query}", status_code=303)

    drawings: dict[str, _Drawing] = {}

    def drawing_of(snap: Snapshot) -> _Drawing:
        """The graph's layout and the tasks' order of one snapshot: computed once for
        every stream of the run, not once per stream."""
        found = drawings.get(snap.info.run_id)
        if found is None or found.snapshot is not snap:
            lay = views.graph_of(snap.state, snap.late)
            order = sorted(snap.state.tasks, key=views.natural_key)
            found = _Drawing(snapshot=snap, layout=lay, shape=views.graph_shape(lay), order=order)
            drawings[snap.info.run_id] = found
            for rid in [r for r in drawings if r not in watcher.hubs]:
                del drawings[rid]  # nobody watches that run any more
        return found

    async def snapshot_of(run_id: str) -> Snapshot:
        """The run now: the live hub's snapshot when a stream watches it, else read."""
        hub = watcher.hubs.get(run_id)
        if hub is None:
            hub = Hub(client=client, run_id=run_id)
        await hub.refresh()
        assert hub.snapshot is not None
        return hub.snapshot

    async def run_context(run_id: str, snap: Snapshot, all_tasks: bool = False) -> dict[str, Any]:
        state = snap.state
        tasks = sorted(state.tasks.values(), key=lambda t: views.natural_key(t.task_id))
        return {
            "info": snap.info,
            "state": state,
            "tasks": tasks if all_tasks else tasks[:TASKS_SHOWN],
            "tasks_total": len(tasks),
            "tasks_open": all_tasks or len(tasks) <= TASKS_SHOWN,
            "waiting": [] if snap.cancel_requested else state.in_state(TaskState.WAITING),
            "cancel_requested": snap.cancel_requested,
            "answered": snap.answered,
            "answered_by": snap.answered_by,
            "pending": snap.pending,
            "graph": views.graph_of(state, snap.late),
            "late": snap.late,
            "task_times": snap.times,
            "live": views.is_live(snap.info),
            "run_id": run_id,
        }

    # -- pages --------------------------------------------------------------------------

    async def runs_page(request: Request) -> Response:
        if (denied := gate(request)) is not None:
            return denied
        q = request.query_params
        status = q.get("status") or None
        app = q.get("app") or None
        search = (q.get("q") or "").strip()
        before = None
        if status is not None and status not in STATUSES:
            return render(request, "error.html", 400, message=f"unknown status {status!r}")
        if q.get("before"):
            at, _, rid = q["before"].partition(":")
            try:
                before = (float(at), rid)
            except ValueError:
                return render(request, "error.html", 400, message="bad page cursor")
        if search:
            runs = await client.search_runs(search, PAGE_SIZE + 1, status=status, app=app)
            before = None
        else:
            runs = await client.list_runs(
                PAGE_SIZE + 1,
                status=None if status is None else RunStatus(status),
                app=app,
                before=before,
            )
        more = len(runs) > PAGE_SIZE and not search
        runs = runs[:PAGE_SIZE]
        cursor = f"{runs[-1].created_at!r}:{runs[-1].run_id}" if more and runs else None
        live = not search and before is None
        return render(
            request,
            "runs.html",
            runs=runs,
            status=status,
            app=app,
            search=search,
            statuses=STATUSES,
            cursor=cursor,
            first_page=before is None,
            live=live,
        )

    async def runs_fragment(request: Request) -> Response:
        """The first page of runs as table rows: the runs page polls it to stay current."""
        if (denied := gate(request)) is not None:
            return denied
        q = request.query_params
        status = q.get("status") or None
        if status is not None and status not in STATUSES:
            return Response("unknown status\n", status_code=400)
        runs = await client.list_runs(
            PAGE_SIZE,
            status=None if status is None else RunStatus(status),
            app=q.get("app") or None,
        )
        return HTMLResponse(fragment("_runs_rows.html", runs=runs))

    async def run_page(request: Request) -> Response:
        if (denied := gate(request)) is not None:
            return denied
        run_id = run_id_of(request)
        snap = await snapshot_of(run_id)
        info = snap.info
        ctx = await run_context(run_id, snap, request.query_params.get("tasks") == "all")
        whole = request.query_params.get("journal") == "all"
        start = 0 if whole else max(0, info.last_seq - JOURNAL_TAIL)
        shown = await client.events(run_id, after=start)
        patches = {p.event_seq: p for p in await client.patches(run_id, after=start)}
        times = await client.event_times(run_id)
        rows = views.journal_rows(shown, patches, times, info.created_at)
        line = views.timeline(
            snap.state,
            times,
            views.added_by(patches.values()),
            info.created_at,
            max(times.values(), default=info.updated_at),
        )
        notice = request.query_params.get("notice")
        if notice is not None and not auth.signed(
            f"{run_id}\n{notice}", request.query_params.get("sig")
        ):
            notice = None  # not written by this server: never shown as if it were
        return render(
            request,
            "run.html",
            rows=rows,
            hidden=start,
            last=shown[-1].seq if shown else start,
            notice=notice,
            origin=await client.origin(run_id),
            forks=await client.forks(run_id),
            usage=await client.usage(run_id),
            report=views.report_of(snap.state),
            keepalive=keepalive_seconds,
            state_key=snap.key,
            times=times,
            timeline=line,
            planned=views.planned_through(shown, patches, start),
            all_tasks=request.query_params.get("tasks") == "all",
            **ctx,
        )

    async def task_page(request: Request) -> Response:
        if (denied := gate(request)) is not None:
            return denied
        run_id = run_id_of(request)
        task_id = request.path_params["task_id"]
        info = await client.info(run_id)
        state = await client.graph(run_id)
        task = state.get(task_id)
        if task is None:
            return render(request, "error.html", 404, message="this run has no such task")
        events = await client.task_events(run_id, task_id)
        first = events[0].seq - 1 if events else info.last_seq
        patches = {p.event_seq: p for p in await client.patches(run_id, after=first)}
        times = await client.event_times(run_id, first)
        return render(
            request,
            "task.html",
            run_id=run_id,
            info=info,
            task=task,
            preds=sorted(state.predecessors(task_id), key=views.natural_key),
            succs=sorted(state.successors(task_id), key=views.natural_key),
            rows=views.journal_rows(events, patches, times, info.created_at),
            effects=await client.effects(run_id, task_id),
            late=any(e.kind.value == "late_result_discarded" for e in events),
            values=views.task_values(task),
            times=times,
            took=views.task_time(await client.task_times(run_id, task_id), task_id),
            decisions=views.decisions(events, times),
            traceback=views.traceback_of(task.error),
        )

    async def task_value(request: Request) -> Response:
        """One value of a task in full, as JSON (the pages show long values cut)."""
        if (denied := gate(request)) is not None:
            return denied
        run_id = run_id_of(request)
        task = (await client.graph(run_id)).get(request.path_params["task_id"])
        part = request.path_params["part"]
        if task is None or part not in ("input", "result", "error", "human_input"):
            return Response("no such value\n", status_code=404)
        return Response(
            views.pretty(getattr(task, part)),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def event_value(request: Request) -> Response:
        """One event's data in full, as JSON."""
        if (denied := gate(request)) is not None:
            return denied
        run_id = run_id_of(request)
        try:
            seq = int(request.path_params["seq"])
        except ValueError:
            return Response("not an event seq\n", status_code=400)
        found = await client.event(run_id, seq) if 0 < seq <= MAX_SEQ else None
        if found is None:
            return Response("no such event\n", status_code=404)
        return Response(
            views.pretty(found.data),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def at_page(request: Request) -> Response:
        """The run as of one event (``inspect --at``)."""
        if (denied := gate(request)) is not None:
            return denied
        run_id = run_id_of(request)
        info = await client.info(run_id)
        try:
            seq = int(request.path_params["seq"])
        except ValueError:
            return render(request, "error.html", 400, message="not an event seq")
        if not 0 < seq <= info.last_seq:
            return render(request, "error.html", 404, message=f"the run has no event #{seq}")
        past = await client.inspect(run_id, at=seq)
        return render(request, "at.html", run_id=run_id, info=info, past=past, seq=seq)

    async def events_stream(request: Request) -> Response:
        if (denied := gate(request)) is not None:
            return denied
        run_id = run_id_of(request)
        info = await client.info(run_id)  # 404 before the stream starts
        started = info.created_at
        raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        try:
            after = max(0, int(raw))
        except ValueError:
            return Response("Last-Event-ID must be an event seq\n", status_code=400)
        if after > min(MAX_SEQ, info.last_seq):
            return Response(
                f"Last-Event-ID {after} is past the run's last event ({info.last_seq})\n",
                status_code=400,
            )
        if not watcher.reserve():
            return Response(
                "too many live streams; try again shortly\n",
                status_code=503,
                headers={"Retry-After": "5"},
            )
        operator = auth.is_operator(request)
        csrf = request.cookies.get(CSRF_COOKIE, "")

        def row(ev: Event, p: PatchRecord | None, times: dict[int, float]) -> str:
            found = views.journal_rows([ev], {} if p is None else {ev.seq: p}, times, started)
            return fragment("_row.html", row=found[0], run_id=run_id)

        def patch(seq: int, p: PatchRecord) -> str:
            return fragment("_patch.html", patch=views.patch_view(p), planned=True)

        all_tasks = request.query_params.get("tasks") == "all"
        page_key = request.query_params.get("state")
        raw_planned = request.query_params.get("planned") or "0"
        planned = min(after, max(0, int(raw_planned))) if raw_planned.isdigit() else 0

        def state(snap: Snapshot, sent: dict[str, str]) -> dict[str, object]:
            out: dict[str, object] = {}
            waiting = [] if snap.cancel_requested else snap.state.in_state(TaskState.WAITING)
            ctx = {
                "info": snap.info,
                "run_id": run_id,
                "late": snap.late,
                "answered": snap.answered,
                "answered_by": snap.answered_by,
                "waiting": waiting,
                "cancel_requested": snap.cancel_requested,
                "pending": snap.pending,
                "task_times": snap.times,
            }
            drawn = drawing_of(snap)
            # The page was rendered from this very state: what it shows is the baseline.
            fresh = not sent and page_key == snap.key
            head = fragment("_head.html", **ctx)
            if sent.get("head") != (d := digest(head)):
                sent["head"] = d
                if not fresh:
                    out["head"] = head
            key = views.actions_key(waiting, snap.answered, snap.info, snap.cancel_requested)
            if sent.get("actions") != key:
                sent["actions"] = key
                if not fresh:
                    out["actions_key"] = key
                    out["actions"] = fragment("_actions.html", csrf=csrf, operator=operator, **ctx)
            rows: dict[str, str] = {}
            tasks = snap.state.tasks
            shown = drawn.order if all_tasks else drawn.order[:TASKS_SHOWN]
            for tid in shown:  # the rows the page can show, no others
                task = tasks[tid]
                mark = views.task_mark(task, tid in snap.late, views.task_time(snap.times, tid))
                if sent.get("t:" + tid) != mark:
                    sent["t:" + tid] = mark
                    if not fresh:
                        rows[tid] = fragment("_task_row.html", t=task, **ctx)
            if rows:
                out["tasks"] = rows
            if sent.get("graph") != drawn.shape:
                sent["graph"] = drawn.shape
                for b in drawn.layout.boxes:
                    sent["b:" + b.key] = views.box_mark(b)
                if not fresh:
                    out["graph"] = fragment("_graph.html", graph=drawn.layout, **ctx)
            else:
                boxes = {}
                for b in drawn.layout.boxes:
                    mark = views.box_mark(b)
                    if sent.get("b:" + b.key) != mark:
                        sent["b:" + b.key] = mark
                        boxes[b.key] = fragment("_box.html", b=b, graph=drawn.layout, run_id=run_id)
                if boxes:
                    out["boxes"] = boxes
            return out

        body = stream(
            client,
            watcher,
            run_id,
            after,
            Renderers(row=row, patch=patch, state=state),
            planned=planned,
            keepalive_seconds=keepalive_seconds,
        )
        return _Stream(
            body,
            watcher.release,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    # -- actions ------------------------------------------------------------------------

    async def authorized_form(request: Request, run_id: str) -> tuple[FormData, str | None]:
        """The posted form, once CSRF and authority are checked; with the run's approval
        token when that is what authorized it (``None``: the operator did)."""
        form = await request.form()
        if auth.is_bearer(request):  # a script: no browser sends this header cross-site
            return form, None
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

    def answered_by(request: Request) -> dict[str, str]:
        """What the inspector knows of who answers: how they came, from which address."""
        via = "web API, Bearer" if auth.is_bearer(request) else "web inspector"
        host = request.client.host if request.client is not None else None
        return {"via": via} if host is None else {"via": via, "address": host}

    async def decide(request: Request) -> Response:
        run_id = run_id_of(request)
        task_id = request.path_params["task_id"]
        try:
            form, token = await authorized_form(request, run_id)
            decision = form.get("decision")
            if decision not in ("approve", "reject"):
                raise _Refused(400, "decision must be approve or reject")
            raw = form.get("payload")
            text = raw.strip() if isinstance(raw, str) else ""
            try:  # the value door (loopkernel.graph.door): a refusal is a 400, nothing journaled
                payload = parse_payload(text) if text else None
            except UsageError as exc:
                raise _Refused(400, f"the payload is refused: {exc}") from None
            snap = await snapshot_of(run_id)
            if snap.cancel_requested:
                raise _Refused(409, "refused: a cancel of this run is journaled; it stops")
            verdict: Literal["approve", "reject"] = "approve" if decision == "approve" else "reject"
            who = answered_by(request)
            if token is None:  # the operator: the server checked the authority
                event = await client.decide_as_operator(
                    run_id, task_id, verdict, payload=payload, by=who
                )
            else:
                event = await client.decide(
                    run_id, task_id, verdict, payload=payload, token=token, by=who
                )
        except _Refused as exc:
            return render(request, "error.html", exc.status, message=exc.message, back=run_id)
        except ApprovalRefused as exc:
            return render(request, "error.html", 409, message=str(exc), back=run_id)
        return back_to(run_id, f"{decision} journaled for {task_id} (event #{event.seq})")

    async def cancel(request: Request) -> Response:
        run_id = run_id_of(request)
        try:
            form, token = await authorized_form(request, run_id)
            raw = form.get("reason")
            reason = (raw.strip() if isinstance(raw, str) else "") or "cancelled from the inspector"
            info = await client.info(run_id)
            if info.status in TERMINAL_RUN:
                raise _Refused(409, f"run {run_id} is already {info.status.value}")
            # Like the CLI: a waiting run (nobody executes it) is finished here and now.
            try:
                status = await client.cancel(run_id, reason, token=token, local=token is None)
            except RunHeld:
                status = RunStatus.RUNNING
        except _Refused as exc:
            return render(request, "error.html", exc.status, message=exc.message, back=run_id)
        except LoopKernelError as exc:
            return render(request, "error.html", 409, message=str(exc), back=run_id)
        if status is RunStatus.CANCELLED:
            return back_to(run_id, "cancelled")
        return back_to(run_id, "cancel journaled; the run's executor stops it")

    async def resume(request: Request) -> Response:
        """Execute a stopped run here, as ``loopkernel resume`` does (operator only)."""
        run_id = run_id_of(request)
        try:
            _, token = await authorized_form(request, run_id)
            if token is not None:
                raise _Refused(403, "resuming a run needs the operator token")
            info = await client.info(run_id)
            if info.status in TERMINAL_RUN:
                raise _Refused(409, f"run {run_id} is already {info.status.value}")
            outcome = await client.execute(run_id)
        except _Refused as exc:
            return render(request, "error.html", exc.status, message=exc.message, back=run_id)
        except LoopKernelError as exc:
            return render(request, "error.html", 409, message=str(exc), back=run_id)
        return back_to(run_id, f"resumed: the run is {outcome.status.value}")

    async def fork(request: Request) -> Response:
        """A new run from this one's journal up to an event (``loopkernel fork``); with
        ``retry`` it is executed at once."""
        run_id = run_id_of(request)
        try:
            form, token = await authorized_form(request, run_id)
            if token is not None:
                raise _Refused(403, "forking a run needs the operator token")
            raw = form.get("at")
            try:
                at = int(raw) if isinstance(raw, str) else 0
            except ValueError:
                raise _Refused(400, "at must be an event seq") from None
            info = await client.info(run_id)
            if not 0 < at <= info.last_seq:
                raise _Refused(400, f"the run has no event #{at}")
            started = await client.fork(run_id, at=at)
            if form.get("execute"):
                await client.execute(started.run_id)
        except _Refused as exc:
            return render(request, "error.html", exc.status, message=exc.message, back=run_id)
        except LoopKernelError as exc:
            return render(request, "error.html", 409, message=str(exc), back=run_id)
        return back_to(started.run_id, f"forked from {run_id} at event #{at}")

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
        response.set_cookie(
            SESSION_COOKIE,
            auth.new_session(),
            max_age=int(auth.session_seconds),
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(request: Request) -> Response:
        form = await request.form()
        csrf = form.get("csrf")
        if not auth.csrf_ok(request, csrf if isinstance(csrf, str) else None):
            return render(request, "error.html", 403, message="this form is stale; reload the page")
        auth.end_session(request)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    # -- the app ------------------------------------------------------------------------

    async def not_found(request: Request, exc: Exception) -> Response:
        run_id = getattr(exc, "attrs", {}).get("run_id")
        message = "no such run" if run_id is None else f"no run {run_id}"  # never the db path
        return render(request, "error.html", 404, message=message)

    async def bad_request(request: Request, exc: Exception) -> Response:
        if isinstance(exc, _Refused):
            return render(request, "error.html", exc.status, message=exc.message)
        return render(request, "error.html", 400, message=str(exc))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await watcher.stop()

    app = Starlette(
        routes=[
            Route("/", runs_page),
            Route("/runs", runs_fragment),
            Route("/login", login_page, methods=["GET"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/runs/{run_id}", run_page),
            Route("/runs/{run_id}/events", events_stream),
            Route("/runs/{run_id}/events/{seq}", event_value),
            Route("/runs/{run_id}/at/{seq}", at_page),
            Route("/runs/{run_id}/cancel", cancel, methods=["POST"]),
            Route("/runs/{run_id}/resume", resume, methods=["POST"]),
            Route("/runs/{run_id}/fork", fork, methods=["POST"]),
            Route("/runs/{run_id}/tasks/{task_id:path}/decide", decide, methods=["POST"]),
            Route("/runs/{run_id}/tasks/{task_id:path}/value/{part}", task_value),
            Route("/runs/{run_id}/tasks/{task_id:path}", task_page),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers={RunNotFound: not_found, UsageError: bad_request, _Refused: bad_request},
        lifespan=lifespan,
    )
    hosts = {h.strip("[]").lower() for h in (*LOOPBACK_HOSTS, *trusted_hosts)}
    app.add_middleware(_Headers, hosts=frozenset(hosts))
    app.state.watcher = watcher
    app.state.auth = auth
    return app


@dataclass(frozen=True, kw_only=True, slots=True)
class _Drawing:
    snapshot: Snapshot
    layout: Any
    shape: str
    order: list[TaskId]


class _Stream(StreamingResponse):
    """A streaming response that gives its stream slot back however it ends, even when
    the body never started (the browser left before the first byte)."""

    def __init__(self, content: Any, release: Any, **kw: Any) -> None:
        super().__init__(content, **kw)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


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
                if not static:
                    message["headers"] = [
                        (k, v) for k, v in message["headers"] if k.lower() != b"cache-control"
                    ] + [(b"cache-control", b"no-store")]
            await send(message)

        await self.app(scope, receive, with_headers)
