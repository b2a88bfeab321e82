"""The inspector's read endpoints: the runs list, a run, a task, one value, the run as of
one event. Each is a module-level function over ``app.state.inspector``."""

from __future__ import annotations

import asyncio
import json

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from loopkernel.client import Client
from loopkernel.graph import RunStatus
from loopkernel.store import RunInfo
from loopkernel.web import _views as views
from loopkernel.web._state import (
    AT_PAGE,
    JOURNAL_TAIL,
    MAX_SEQ,
    PAGE_SIZE,
    STATUSES,
    inspector_of,
    run_id_of,
)

__all__ = [
    "at_page",
    "event_value",
    "history",
    "run_page",
    "runs_fragment",
    "runs_page",
    "task_page",
    "task_value",
]


async def runs_page(request: Request) -> Response:
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    q = request.query_params
    status = q.get("status") or None
    app = q.get("app") or None
    search = (q.get("q") or "").strip()
    before = None
    if status is not None and status not in STATUSES:
        return lk.render(request, "error.html", 400, message=f"unknown status {status!r}")
    if q.get("before"):
        at, _, rid = q["before"].partition(":")
        try:
            before = (float(at), rid)
        except ValueError:
            return lk.render(request, "error.html", 400, message="bad page cursor")
    if search:
        runs = await lk.reads.search_runs(search, PAGE_SIZE + 1, status=status, app=app)
        before = None
    else:
        runs = await lk.reads.list_runs(
            PAGE_SIZE + 1,
            status=None if status is None else RunStatus(status),
            app=app,
            before=before,
        )
    more = len(runs) > PAGE_SIZE and not search
    runs = runs[:PAGE_SIZE]
    counts = await lk.reads.run_counts(app)
    cursor = f"{runs[-1].created_at!r}:{runs[-1].run_id}" if more and runs else None
    live = not search and before is None
    return lk.render(
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
        counts=counts,
        costs=await _costs(lk.reads, runs),
    )


async def runs_fragment(request: Request) -> Response:
    """The first page of runs as table rows: the runs page polls it to stay current;
    with the status counts its chips show (``X-Run-Counts``, JSON status -> count)."""
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    q = request.query_params
    status = q.get("status") or None
    if status is not None and status not in STATUSES:
        return Response("unknown status\n", status_code=400)
    app = q.get("app") or None
    runs = await lk.reads.list_runs(
        PAGE_SIZE, status=None if status is None else RunStatus(status), app=app
    )
    costs = await _costs(lk.reads, runs)
    counts = json.dumps(await lk.reads.run_counts(app), separators=(",", ":"))
    html = lk.fragment("_runs_rows.html", runs=runs, costs=costs)
    return HTMLResponse(html, headers={"X-Run-Counts": counts})


async def _costs(client: Client, runs: list[RunInfo]) -> dict[str, dict[str, float | int | None]]:
    """run -> what it spent (``Client.usage``: the budget ledger), for a page of runs."""
    return {r.run_id: await client.usage(r.run_id) for r in runs}


async def run_page(request: Request) -> Response:
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    client = lk.reads
    run_id = run_id_of(request)
    snap = await lk.snapshot_of(run_id)
    info = snap.info
    ctx = lk.run_context(run_id, snap, request.query_params.get("tasks") == "all")
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
    if notice is not None and not lk.auth.signed(
        f"{run_id}\n{notice}", request.query_params.get("sig")
    ):
        notice = None  # not written by this server: never shown as if it were
    return lk.render(
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
        keepalive=lk.keepalive_seconds,
        window=max(JOURNAL_TAIL, len(rows)),
        state_key=snap.key,
        times=times,
        timeline=line,
        planned=views.planned_through(shown, patches, start),
        all_tasks=request.query_params.get("tasks") == "all",
        **ctx,
    )


async def task_page(request: Request) -> Response:
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    client = lk.reads
    run_id = run_id_of(request)
    task_id = request.path_params["task_id"]
    info = await client.info(run_id)
    state = await client.graph(run_id)
    task = state.get(task_id)
    if task is None:
        return lk.render(request, "error.html", 404, message="this run has no such task")
    events = await client.task_events(run_id, task_id)
    first = events[0].seq - 1 if events else info.last_seq
    patches = {p.event_seq: p for p in await client.patches(run_id, after=first)}
    times = await client.event_times(run_id, first)
    return lk.render(
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
        traceback=views.failure_traceback(task, events),
    )


async def task_value(request: Request) -> Response:
    """One value of a task in full, as JSON (the pages show long values cut)."""
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    run_id = run_id_of(request)
    task = (await lk.reads.graph(run_id)).get(request.path_params["task_id"])
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
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    run_id = run_id_of(request)
    try:
        seq = int(request.path_params["seq"])
    except ValueError:
        return Response("not an event seq\n", status_code=400)
    found = await lk.reads.event(run_id, seq) if 0 < seq <= MAX_SEQ else None
    if found is None:
        return Response("no such event\n", status_code=404)
    return Response(
        views.pretty(found.data),
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def at_page(request: Request) -> Response:
    """The run as of one event (``inspect --at``)."""
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    run_id = run_id_of(request)
    info = await lk.reads.info(run_id)
    try:
        seq = int(request.path_params["seq"])
    except ValueError:
        return lk.render(request, "error.html", 400, message="not an event seq")
    if not 0 < seq <= info.last_seq:
        return lk.render(request, "error.html", 404, message=f"the run has no event #{seq}")
    past = await lk.past.at(run_id, seq)
    pages = max(1, -(-len(past.tasks) // AT_PAGE))
    raw = request.query_params.get("page") or "1"
    page = int(raw) if raw.isascii() and raw.isdecimal() and len(raw) < 10 else 0
    if not 1 <= page <= pages:
        return lk.render(request, "error.html", 400, message=f"pages run from 1 to {pages}")
    return lk.render(
        request,
        "at.html",
        run_id=run_id,
        info=info,
        past=past,
        seq=seq,
        tasks=past.tasks[(page - 1) * AT_PAGE : page * AT_PAGE],
        page=page,
        pages=pages,
        per=AT_PAGE,
        total=len(past.tasks),
    )


async def history(request: Request) -> Response:
    """The run's whole history as JSON, as ``loopkernel inspect --journal --json`` prints
    it (state, journal, patches), as a download. Encoded off the event loop."""
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    run_id = run_id_of(request)
    found = await lk.reads.inspect(run_id, journal=True)
    body = await asyncio.to_thread(
        lambda: json.dumps(found.to_json(), ensure_ascii=False, sort_keys=True).encode()
    )
    return Response(
        body,
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{run_id}.history.json"'},
    )
