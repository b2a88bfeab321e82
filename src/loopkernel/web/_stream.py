"""``GET /runs/R/events``: a run page's live stream (Server-Sent Events), and the
fragments it sends, rendered for what that one page shows; ``GET /live``: the live views
of every tab of one browser multiplexed on one stream (the pages' SharedWorker)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from loopkernel.graph import Event, TaskState
from loopkernel.ids import TaskId, valid_id
from loopkernel.store import PatchRecord
from loopkernel.web import _views as views
from loopkernel.web._auth import CSRF_COOKIE
from loopkernel.web._live import Renderers, Snapshot, Watcher, digest, once, stream
from loopkernel.web._rows import journal_row, patch_cell
from loopkernel.web._state import MAX_SEQ, TASKS_SHOWN, Inspector, inspector_of, run_id_of

__all__ = ["events_stream", "shared_stream"]


@dataclass(frozen=True, kw_only=True, slots=True)
class _PageView:
    """What one live page shows, so its stream renders only that."""

    lk: Inspector
    run_id: str
    started: float
    """The run's creation time (journal rows show times relative to it)."""
    operator: bool
    csrf: str
    all_tasks: bool
    page_key: str | None
    """The snapshot key the page was rendered from (``?state=``)."""

    def row(self, ev: Event, p: PatchRecord | None, times: dict[int, float]) -> str:
        found = views.journal_rows([ev], {} if p is None else {ev.seq: p}, times, self.started)
        return journal_row(found[0], self.run_id)

    def patch(self, seq: int, p: PatchRecord) -> str:
        return patch_cell(views.patch_view(p), True)

    def state(self, snap: Snapshot, sent: dict[str, str]) -> dict[str, object]:
        """The ``state`` message as a delta against what this stream ``sent``. What does
        not depend on the viewer (header, rows, boxes, their marks) is rendered once per
        snapshot for every stream of the run (``once``); only the approval forms (they
        carry this viewer's CSRF token) are rendered per stream, when they change."""
        lk = self.lk
        out: dict[str, object] = {}
        waiting = [] if snap.cancel_requested else snap.state.in_state(TaskState.WAITING)
        ctx: dict[str, Any] = {
            "info": snap.info,
            "run_id": self.run_id,
            "late": snap.late,
            "answered": snap.answered,
            "answered_by": snap.answered_by,
            "waiting": waiting,
            "cancel_requested": snap.cancel_requested,
            "pending": snap.pending,
            "task_times": snap.times,
        }
        # The page was rendered from this very state: what it shows is the baseline.
        fresh = not sent and self.page_key == snap.key
        head, d = once(snap, "head", lambda: _digested(lk.fragment("_head.html", **ctx)))
        if sent.get("head") != d:
            sent["head"] = d
            if not fresh:
                out["head"] = head
        key = views.actions_key(waiting, snap.answered, snap.info, snap.cancel_requested)
        if sent.get("actions") != key:
            sent["actions"] = key
            if not fresh:
                out["actions_key"] = key
                out["actions"] = lk.fragment(
                    "_actions.html", csrf=self.csrf, operator=self.operator, **ctx
                )
        failures, d = once(
            snap,
            "failures",
            lambda: _digested(lk.fragment("_failures.html", failures=snap.failures, **ctx)),
        )
        if sent.get("failures") != d:
            sent["failures"] = d
            if not fresh:
                out["failures"] = failures
        rows = self._task_rows(snap, sent, fresh, ctx)
        if rows:
            out["tasks"] = rows
        out.update(self._graph(snap, sent, fresh, ctx))
        return out

    def _task_rows(
        self, snap: Snapshot, sent: dict[str, str], fresh: bool, ctx: dict[str, Any]
    ) -> dict[str, str]:
        rows: dict[str, str] = {}
        tasks = snap.state.tasks
        for tid, mark in once(snap, ("marks", self.all_tasks), lambda: self._marks(snap)):
            if sent.get("t:" + tid) != mark:
                sent["t:" + tid] = mark
                if not fresh:
                    rows[tid] = once(
                        snap,
                        ("t", tid),
                        partial(self.lk.fragment, "_task_row.html", t=tasks[tid], **ctx),
                    )
        return rows

    def _marks(self, snap: Snapshot) -> list[tuple[TaskId, str]]:
        """(task, mark) of the rows the page can show, no others."""
        drawn = self.lk.drawing_of(snap)
        shown = drawn.order if self.all_tasks else drawn.order[:TASKS_SHOWN]
        tasks = snap.state.tasks
        return [
            (tid, views.task_mark(tasks[tid], tid in snap.late, views.task_time(snap.times, tid)))
            for tid in shown
        ]

    def _graph(
        self, snap: Snapshot, sent: dict[str, str], fresh: bool, ctx: dict[str, Any]
    ) -> dict[str, object]:
        lk = self.lk
        drawn = lk.drawing_of(snap)
        marks = once(snap, "boxes", lambda: [(b, views.box_mark(b)) for b in drawn.layout.boxes])
        if sent.get("graph") != drawn.shape:
            sent["graph"] = drawn.shape
            for b, mark in marks:
                sent["b:" + b.key] = mark
            if fresh:
                return {}
            return {
                "graph": once(
                    snap, "graph", lambda: lk.fragment("_graph.html", graph=drawn.layout, **ctx)
                )
            }
        boxes = {}
        for b, mark in marks:
            if sent.get("b:" + b.key) != mark:
                sent["b:" + b.key] = mark
                boxes[b.key] = once(
                    snap,
                    ("b", b.key),
                    partial(lk.fragment, "_box.html", b=b, graph=drawn.layout, run_id=self.run_id),
                )
        return {"boxes": boxes} if boxes else {}


def _digested(html: str) -> tuple[str, str]:
    return html, digest(html)


async def events_stream(request: Request) -> Response:
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    run_id = run_id_of(request)
    last = request.headers.get("last-event-id")
    opened = await _open_view(lk, request, run_id, request.query_params, last)
    if isinstance(opened, Response):
        return opened
    # The slot is taken last, once nothing can refuse the request any more, and from here
    # to the response (which gives it back however it ends) nothing can raise.
    if not lk.watcher.reserve():
        return _too_many()
    return _Stream(opened, lk.watcher.release, media_type="text/event-stream", headers=_HEADERS)


_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _too_many() -> Response:
    return Response(
        "too many live streams; try again shortly\n",
        status_code=503,
        headers={"Retry-After": "5"},
    )


async def _open_view(
    lk: Inspector,
    request: Request,
    run_id: str,
    query: Mapping[str, str],
    last_event_id: str | None,
) -> AsyncIterator[str] | Response:
    """The messages of one run page's stream (``stream``), for the page that ``query``
    describes (``after``, ``planned``, ``state``, ``tasks``); or the answer refusing it."""
    info = await lk.reads.info(run_id)  # 404 before the stream starts
    after = _seq_of(last_event_id or query.get("after"))
    if after is None:
        return Response("Last-Event-ID must be an event seq\n", status_code=400)
    if after > min(MAX_SEQ, info.last_seq):
        return Response(
            f"Last-Event-ID {after} is past the run's last event ({info.last_seq})\n",
            status_code=400,
        )
    planned = _seq_of(query.get("planned"))
    if planned is None:
        return Response("planned must be an event seq\n", status_code=400)
    view = _PageView(
        lk=lk,
        run_id=run_id,
        started=info.created_at,
        operator=lk.auth.is_operator(request),
        csrf=request.cookies.get(CSRF_COOKIE, ""),
        all_tasks=query.get("tasks") == "all",
        page_key=query.get("state"),
    )
    return stream(
        lk.reads,
        lk.watcher,
        run_id,
        after,
        Renderers(row=view.row, patch=view.patch, state=view.state),
        planned=min(after, planned),
        keepalive_seconds=lk.keepalive_seconds,
    )


MAX_SUBSCRIPTIONS = 32
"""Live views one shared stream (``GET /live``) carries at most."""


async def shared_stream(request: Request) -> Response:
    """``GET /live?subs=[...]``: the live views of every tab of one browser on one
    connection (the page's SharedWorker, ``static/shared.js``). Each subscription is
    ``{"id": ID, "url": "/runs/R/events?after=..."}`` (a run page's stream, as that
    page would open it) or ``{"id": ID, "runs": true}`` (the runs list: told when some
    journal moved). Every message is the one the view's own stream would send, with
    ``"sub": ID`` in its data. One stream slot for the whole connection."""
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    try:
        subs = json.loads(request.query_params.get("subs") or "[]")
    except ValueError:
        subs = None
    if not isinstance(subs, list) or not 0 < len(subs) <= MAX_SUBSCRIPTIONS:
        return Response(f"subs must be a list of 1 to {MAX_SUBSCRIPTIONS}\n", status_code=400)
    views: dict[str, AsyncIterator[str]] = {}
    for sub in subs:
        opened = await _subscription(lk, request, sub)
        if isinstance(opened, Response):
            return opened
        views[str(sub["id"])] = opened
    if not lk.watcher.reserve():
        return _too_many()
    body = merged(views, lk.keepalive_seconds)
    return _Stream(body, lk.watcher.release, media_type="text/event-stream", headers=_HEADERS)


async def _subscription(lk: Inspector, request: Request, sub: Any) -> AsyncIterator[str] | Response:
    if not isinstance(sub, dict) or not isinstance(sub.get("id"), str) or len(sub["id"]) > 64:
        return Response("each subscription needs an id\n", status_code=400)
    if sub.get("runs") is True:
        return runs_changes(lk.watcher)
    url = urlsplit(str(sub.get("url", "")))
    parts = url.path.split("/")
    if len(parts) != 4 or parts[:2] != ["", "runs"] or parts[3] != "events":
        return Response("a subscription's url is a run's /events\n", status_code=400)
    run_id = unquote(parts[2])
    if not valid_id(run_id):
        return Response("that is not a run id\n", status_code=400)
    query = dict(parse_qsl(url.query))
    return await _open_view(lk, request, run_id, query, None)


async def runs_changes(watcher: Watcher) -> AsyncIterator[str]:
    """The runs list's view: a ``runs`` message whenever some journal moved (at most every
    ``RUNS_GAP`` seconds); the page then reads its rows again."""
    wake = asyncio.Event()
    watcher.listeners.add(wake)
    watcher.start()
    try:
        yield "retry: 1000\n\n"
        while True:
            await wake.wait()
            wake.clear()
            yield "event: runs\ndata: {}\n\n"
            await asyncio.sleep(RUNS_GAP)
    finally:
        watcher.listeners.discard(wake)


RUNS_GAP = 1.0
"""Seconds between two ``runs`` messages of one runs list."""


async def merged(
    views: dict[str, AsyncIterator[str]], keepalive_seconds: float
) -> AsyncIterator[str]:
    """The messages of every view, as each comes, with its subscription's id spliced into
    its data; a view that ended (``end``) leaves the others going, and the stream ends
    with the last one. Each view is pumped by a task this generator owns: cancelled and
    awaited however the stream ends (the browser went away)."""
    queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue(maxsize=256)

    async def pump(sub: str, messages: AsyncIterator[str]) -> None:
        try:
            async for message in messages:
                await queue.put((sub, message))
        finally:
            await messages.aclose()  # type: ignore[attr-defined]
        await queue.put(None)  # this view ended (not reached when cancelled)

    tasks = [asyncio.ensure_future(pump(sub, views[sub])) for sub in views]
    live = len(tasks)
    try:
        yield f"retry: 1000\n\n: keepalive every {keepalive_seconds:g} s\n\n"
        while live:
            got = await queue.get()
            if got is None:
                live = sum(not t.done() for t in tasks)
                continue
            if (tagged := tag(*got)) is not None:
                yield tagged
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def tag(sub: str, chunk: str) -> str | None:
    """One view's messages for the shared stream (a chunk of one or more, as its stream
    sends them at one wake-up): each one's ``event:`` and ``data:`` lines, ``"sub"``
    spliced into the data object (its ``id:`` dropped: the worker keeps each view's last
    seq); ``None`` when none is a message (the retry line, comments)."""
    spliced = '{"sub":' + json.dumps(sub)
    out = []
    for message in chunk.split("\n\n"):
        kind = data = None
        for line in message.split("\n"):
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: {"):
                data = line[6:]
        if kind is None or data is None:
            continue
        inner = data[1:] if data[1:2] == "}" else "," + data[1:]
        out.append(f"event: {kind}\ndata: {spliced}{inner}\n\n")
    return "".join(out) or None


def _seq_of(raw: str | None) -> int | None:
    """An event seq from a header or query (absent, or below the start: 0), or ``None``
    when it is not one: ASCII digits only (``'²'.isdigit()`` is true and ``int('²')``
    raises), at most 19 of them."""
    digits = (raw or "0").removeprefix("-")
    if not (digits.isascii() and digits.isdecimal()) or len(digits) > 19:
        return None
    return 0 if raw is None or raw.startswith("-") else min(int(raw), MAX_SEQ)


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
