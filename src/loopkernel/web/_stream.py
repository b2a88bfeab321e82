"""``GET /runs/R/events``: a run page's live stream (Server-Sent Events), and the
fragments it sends, rendered for what that one page shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from loopkernel.graph import Event, TaskState
from loopkernel.store import PatchRecord
from loopkernel.web import _views as views
from loopkernel.web._auth import CSRF_COOKIE
from loopkernel.web._live import Renderers, Snapshot, digest, stream
from loopkernel.web._state import MAX_SEQ, TASKS_SHOWN, Inspector, inspector_of, run_id_of

__all__ = ["events_stream"]


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
        return self.lk.fragment("_row.html", row=found[0], run_id=self.run_id)

    def patch(self, seq: int, p: PatchRecord) -> str:
        return self.lk.fragment("_patch.html", patch=views.patch_view(p), planned=True)

    def state(self, snap: Snapshot, sent: dict[str, str]) -> dict[str, object]:
        """The ``state`` message as a delta against what this stream ``sent``."""
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
        head = lk.fragment("_head.html", **ctx)
        if sent.get("head") != (d := digest(head)):
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
        rows = self._task_rows(snap, sent, fresh, ctx)
        if rows:
            out["tasks"] = rows
        out.update(self._graph(snap, sent, fresh, ctx))
        return out

    def _task_rows(
        self, snap: Snapshot, sent: dict[str, str], fresh: bool, ctx: dict[str, Any]
    ) -> dict[str, str]:
        drawn = self.lk.drawing_of(snap)
        rows: dict[str, str] = {}
        tasks = snap.state.tasks
        shown = drawn.order if self.all_tasks else drawn.order[:TASKS_SHOWN]
        for tid in shown:  # the rows the page can show, no others
            task = tasks[tid]
            mark = views.task_mark(task, tid in snap.late, views.task_time(snap.times, tid))
            if sent.get("t:" + tid) != mark:
                sent["t:" + tid] = mark
                if not fresh:
                    rows[tid] = self.lk.fragment("_task_row.html", t=task, **ctx)
        return rows

    def _graph(
        self, snap: Snapshot, sent: dict[str, str], fresh: bool, ctx: dict[str, Any]
    ) -> dict[str, object]:
        drawn = self.lk.drawing_of(snap)
        if sent.get("graph") != drawn.shape:
            sent["graph"] = drawn.shape
            for b in drawn.layout.boxes:
                sent["b:" + b.key] = views.box_mark(b)
            if fresh:
                return {}
            return {"graph": self.lk.fragment("_graph.html", graph=drawn.layout, **ctx)}
        boxes = {}
        for b in drawn.layout.boxes:
            mark = views.box_mark(b)
            if sent.get("b:" + b.key) != mark:
                sent["b:" + b.key] = mark
                boxes[b.key] = self.lk.fragment(
                    "_box.html", b=b, graph=drawn.layout, run_id=self.run_id
                )
        return {"boxes": boxes} if boxes else {}


async def events_stream(request: Request) -> Response:
    lk = inspector_of(request)
    if (denied := lk.gate(request)) is not None:
        return denied
    run_id = run_id_of(request)
    info = await lk.reads.info(run_id)  # 404 before the stream starts
    after = _seq_of(request.headers.get("last-event-id") or request.query_params.get("after"))
    if after is None:
        return Response("Last-Event-ID must be an event seq\n", status_code=400)
    if after > min(MAX_SEQ, info.last_seq):
        return Response(
            f"Last-Event-ID {after} is past the run's last event ({info.last_seq})\n",
            status_code=400,
        )
    planned = _seq_of(request.query_params.get("planned"))
    if planned is None:
        return Response("planned must be an event seq\n", status_code=400)
    view = _PageView(
        lk=lk,
        run_id=run_id,
        started=info.created_at,
        operator=lk.auth.is_operator(request),
        csrf=request.cookies.get(CSRF_COOKIE, ""),
        all_tasks=request.query_params.get("tasks") == "all",
        page_key=request.query_params.get("state"),
    )
    # The slot is taken last, once nothing can refuse the request any more, and from here
    # to the response (which gives it back however it ends) nothing can raise.
    if not lk.watcher.reserve():
        return Response(
            "too many live streams; try again shortly\n",
            status_code=503,
            headers={"Retry-After": "5"},
        )
    body = stream(
        lk.reads,
        lk.watcher,
        run_id,
        after,
        Renderers(row=view.row, patch=view.patch, state=view.state),
        planned=min(after, planned),
        keepalive_seconds=lk.keepalive_seconds,
    )
    return _Stream(
        body,
        lk.watcher.release,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


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
