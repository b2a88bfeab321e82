"""The inspector's write endpoints: decide, cancel, resume, fork, sign in and out. Each is
a module-level function over ``app.state.inspector``; every one checks CSRF and
authority before it touches a run."""

from __future__ import annotations

import logging
from typing import Literal

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from loopkernel.client import Answerer, approver, parse_payload
from loopkernel.errors import ApprovalRefused, LoopKernelError, RunHeld, UsageError
from loopkernel.graph import JSON, TERMINAL_RUN, EventKind, RunStatus
from loopkernel.ids import RunId
from loopkernel.store import NewEvent
from loopkernel.web._auth import CSRF_COOKIE, OPERATOR, SESSION_COOKIE
from loopkernel.web._state import Inspector, Refused, inspector_of, run_id_of

__all__ = [
    "cancel",
    "decide",
    "fork",
    "login",
    "login_page",
    "logout",
    "resume",
    "revoke",
    "sessions_page",
]

log = logging.getLogger("loopkernel.web")


async def authorized_form(
    lk: Inspector, request: Request, run_id: str
) -> tuple[FormData, str | None]:
    """The posted form, once CSRF and authority are checked; with the run's approval
    token when that is what authorized it (``None``: the operator did)."""
    auth = lk.auth
    form = await request.form()
    if auth.is_bearer(request):  # a script: no browser sends this header cross-site
        return form, None
    csrf = form.get("csrf")
    if not auth.csrf_ok(request, csrf if isinstance(csrf, str) else None):
        raise Refused(403, "this form is stale or came from another site; reload the page")
    if auth.is_operator(request):
        return form, None
    raw = form.get("token")
    token = raw.strip() if isinstance(raw, str) else ""
    if auth.is_operator_token(token):
        return form, None
    if token and await lk.client.check_token(run_id, token):
        return form, token
    raise Refused(403, "refused: that is neither the operator token nor this run's token")


def answered_by(lk: Inspector, request: Request) -> dict[str, str]:
    """What the inspector knows of who acts: the operator's name (when an operator
    token authorized it), how they came, from which address."""
    via = "web API, Bearer" if lk.auth.is_bearer(request) else "web inspector"
    out = {"via": via}
    if (name := lk.auth.operator_name(request)) is not None:
        out["name"] = name
    if request.client is not None:
        out["address"] = request.client.host
    return out


async def decide(request: Request) -> Response:
    lk = inspector_of(request)
    run_id = run_id_of(request)
    task_id = request.path_params["task_id"]
    try:
        form, token = await authorized_form(lk, request, run_id)
        decision = form.get("decision")
        if decision not in ("approve", "reject"):
            raise Refused(400, "decision must be approve or reject")
        raw = form.get("payload")
        text = raw.strip() if isinstance(raw, str) else ""
        try:  # the value door (loopkernel.graph.door): a refusal is a 400, nothing journaled
            payload = parse_payload(text) if text else None
        except UsageError as exc:
            raise Refused(400, f"the payload is refused: {exc}") from None
        snap = await lk.snapshot_of(run_id)
        if snap.cancel_requested:
            raise Refused(409, "refused: a cancel of this run is journaled; it stops")
        verdict: Literal["approve", "reject"] = "approve" if decision == "approve" else "reject"
        who = _acting(lk, request, token, form)
        if verdict == "approve":
            payload = await _with_approver(lk, run_id, payload, who)
        if token is None:  # the operator: the server checked the authority
            event = await lk.client.decide_as_operator(
                run_id, task_id, verdict, payload=payload, by=who
            )
        else:
            event = await lk.client.decide(
                run_id, task_id, verdict, payload=payload, answerer=Answerer(token=token, by=who)
            )
    except Refused as exc:
        return lk.render(request, "error.html", exc.status, message=exc.message, back=run_id)
    except ApprovalRefused as exc:
        return lk.render(request, "error.html", 409, message=str(exc), back=run_id)
    return lk.back_to(run_id, f"{decision} journaled for {task_id} (event #{event.seq})")


def _acting(lk: Inspector, request: Request, token: str | None, form: FormData) -> dict[str, str]:
    """``answered_by``; when the form's own token named an operator (typed in, not
    signed in), that operator's name."""
    who = answered_by(lk, request)
    raw = form.get("token")
    name = lk.auth.who(raw) if token is None and isinstance(raw, str) else None
    if name is not None and "name" not in who:
        who["name"] = name
    return who


async def _with_approver(lk: Inspector, run_id: str, payload: JSON, who: dict[str, str]) -> JSON:
    """``payload`` with the approver under the run's app's ``approver_key``: the named
    operator who acts (``who["name"]``), whatever the form said; no name (or the printed
    token's ``operator``, which names no one person), no key."""
    from loopkernel import load_app

    try:
        key = load_app((await lk.client.info(run_id)).app).approver_key
    except LoopKernelError:  # an app this server cannot load: its payload as given
        return payload
    if key is None:
        return payload
    out = dict(payload) if isinstance(payload, dict) else {}
    out.pop(key, None)
    if who.get("name", OPERATOR) != OPERATOR:
        out[key] = who["name"]
    return out


async def cancel(request: Request) -> Response:
    lk = inspector_of(request)
    run_id = run_id_of(request)
    try:
        form, token = await authorized_form(lk, request, run_id)
        raw = form.get("reason")
        reason = (raw.strip() if isinstance(raw, str) else "") or "cancelled from the inspector"
        info = await lk.client.info(run_id)
        if info.status in TERMINAL_RUN:
            raise Refused(409, f"run {run_id} is already {info.status.value}")
        who = _acting(lk, request, token, form)
        # Like the CLI: a waiting run (nobody executes it) is finished here and now.
        try:
            status = await lk.client.cancel(
                run_id, reason, token=token, local=token is None, by=who
            )
        except RunHeld:
            status = RunStatus.RUNNING
    except Refused as exc:
        return lk.render(request, "error.html", exc.status, message=exc.message, back=run_id)
    except LoopKernelError as exc:
        return lk.render(request, "error.html", 409, message=str(exc), back=run_id)
    if status is RunStatus.CANCELLED:
        return lk.back_to(run_id, "cancelled")
    return lk.back_to(run_id, "cancel journaled; the run's executor stops it")


async def resume(request: Request) -> Response:
    """Execute a stopped run here, as ``loopkernel resume`` does (operator only): in the
    background, answered at once; the run page follows it live."""
    lk = inspector_of(request)
    run_id = run_id_of(request)
    try:
        form, token = await authorized_form(lk, request, run_id)
        if token is not None:
            raise Refused(403, "resuming a run needs the operator token")
        info = await lk.client.info(run_id)
        if info.status in TERMINAL_RUN:
            raise Refused(409, f"run {run_id} is already {info.status.value}")
        lk.background.check(run_id)
        who = _acting(lk, request, token, form)
        await _journal_resumed(lk, run_id, "resume", who)  # who, before it goes on
        lk.background.start(run_id, by=who)
    except Refused as exc:
        return lk.render(request, "error.html", exc.status, message=exc.message, back=run_id)
    except LoopKernelError as exc:
        return lk.render(request, "error.html", 409, message=str(exc), back=run_id)
    return lk.back_to(run_id, "resumed: the run goes on here, in the background")


async def fork(request: Request) -> Response:
    """A new run from this one's journal up to an event (``loopkernel fork``); with
    ``execute`` it is executed in the background at once."""
    lk = inspector_of(request)
    run_id = run_id_of(request)
    try:
        form, token = await authorized_form(lk, request, run_id)
        if token is not None:
            raise Refused(403, "forking a run needs the operator token")
        raw = form.get("at")
        try:
            at = int(raw) if isinstance(raw, str) else 0
        except ValueError:
            raise Refused(400, "at must be an event seq") from None
        info = await lk.client.info(run_id)
        if not 0 < at <= info.last_seq:
            raise Refused(400, f"the run has no event #{at}")
        execute = bool(form.get("execute"))
        if execute:
            lk.background.check("")  # serving: a fork it could not run is not made
        started = await lk.client.fork(run_id, at=at)
        who = _acting(lk, request, token, form)
        await _journal_resumed(lk, started.run_id, "fork", who, source=run_id, at=at)
        if execute:
            lk.background.start(started.run_id, by=who)
    except Refused as exc:
        return lk.render(request, "error.html", exc.status, message=exc.message, back=run_id)
    except LoopKernelError as exc:
        return lk.render(request, "error.html", 409, message=str(exc), back=run_id)
    return lk.back_to(started.run_id, f"forked from {run_id} at event #{at}")


async def _journal_resumed(
    lk: Inspector, run_id: str, action: Literal["resume", "fork"], by: dict[str, str], **more: JSON
) -> None:
    """Journal who resumed the run, or made it as a fork (``run_resumed``: ``by`` as
    ``approver`` keeps an operator; a fork's ``source`` and ``at``). Unplanned, like
    ``run_finished``: for the record, no planner sees it."""
    data: dict[str, JSON] = {"action": action, "by": approver("operator", by), **more}
    news = [NewEvent(kind=EventKind.RUN_RESUMED, data=data)]
    await lk.client.store.append_events(RunId(run_id), news)


async def login_page(request: Request) -> Response:
    lk = inspector_of(request)
    return lk.render(request, "login.html", next=request.query_params.get("next", "/"))


async def login(request: Request) -> Response:
    lk = inspector_of(request)
    auth = lk.auth
    form = await request.form()
    csrf = form.get("csrf")
    if not auth.csrf_ok(request, csrf if isinstance(csrf, str) else None):
        return lk.render(request, "error.html", 403, message="this form is stale; reload the page")
    token = form.get("token")
    name = auth.who(token if isinstance(token, str) else None)
    if name is None:
        return lk.render(request, "login.html", 403, next="/", error="wrong token")
    target = form.get("next")
    # Only a path on this server: never "//host" or "/\\host", which browsers treat as
    # another site.
    ok = isinstance(target, str) and target.startswith("/") and target[1:2] not in "/\\"
    target = target if ok and isinstance(target, str) else "/"
    response = RedirectResponse(target, status_code=303)
    sid, csrf = auth.new_session(name)
    secure = request.url.scheme == "https"
    for name, value in ((SESSION_COOKIE, sid), (CSRF_COOKIE, csrf)):
        response.set_cookie(
            name,
            value,
            max_age=int(auth.session_seconds),
            httponly=True,
            samesite="strict",
            secure=secure,
        )
    return response


async def logout(request: Request) -> Response:
    lk = inspector_of(request)
    form = await request.form()
    csrf = form.get("csrf")
    if not lk.auth.csrf_ok(request, csrf if isinstance(csrf, str) else None):
        return lk.render(request, "error.html", 403, message="this form is stale; reload the page")
    lk.auth.end_session(request)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response


async def sessions_page(request: Request) -> Response:
    """The live sign-ins (operator, time left), each revocable; operators only."""
    lk = inspector_of(request)
    if not lk.auth.is_operator(request):
        return lk.render(request, "error.html", 403, message="sign in as an operator first")
    return lk.render(request, "sessions.html", sessions=lk.auth.sessions())


async def revoke(request: Request) -> Response:
    """End one session (``session=HANDLE``) or every one (``session=all``), at once: the
    next request of each is signed out. Operators only; CSRF checked."""
    lk = inspector_of(request)
    form = await request.form()
    csrf = form.get("csrf")
    bearer = lk.auth.is_bearer(request)
    if not bearer and not lk.auth.csrf_ok(request, csrf if isinstance(csrf, str) else None):
        return lk.render(request, "error.html", 403, message="this form is stale; reload the page")
    name = lk.auth.operator_name(request)
    if name is None:
        return lk.render(request, "error.html", 403, message="sign in as an operator first")
    raw = form.get("session")
    which = raw if isinstance(raw, str) and raw else None
    if which is None:
        return lk.render(request, "error.html", 400, message="which session? (or all)")
    ended = lk.auth.revoke(None if which == "all" else which)
    log.warning("%s revoked %d session(s) (%s)", name, ended, which)
    return RedirectResponse("/sessions" if lk.auth.is_operator(request) else "/", status_code=303)
