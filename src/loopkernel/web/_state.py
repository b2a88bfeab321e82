"""What every endpoint of the inspector shares, held on ``app.state.inspector``: the
client, the auth checks, the live watcher, the templates, and the helpers that render a
page, gate a read and find a run's snapshot."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from loopkernel.client import Client, Inspection, approver_text
from loopkernel.graph import RunStatus, TaskState
from loopkernel.ids import TaskId, valid_id
from loopkernel.web import _views as views
from loopkernel.web._auth import CSRF_COOKIE, Auth
from loopkernel.web._graph import Layout
from loopkernel.web._live import Hub, Snapshot, Watcher
from loopkernel.web._rows import journal_row, patch_cell

__all__ = [
    "Background",
    "Drawing",
    "Inspector",
    "Refused",
    "inspector_of",
    "run_id_of",
    "templates",
]

log = logging.getLogger("loopkernel.web")

HERE = Path(__file__).parent
PAGE_SIZE = 50
JOURNAL_TAIL = 500
"""The run page shows the journal's last entries; ``?journal=all`` shows every one."""
STATUSES = [s.value for s in RunStatus]
TASKS_SHOWN = 200
"""The run page's task table shows this many; ``?tasks=all`` shows every one."""
MAX_SEQ = 2**63 - 1
PAST_KEPT = 32
"""States at a seq kept (per server, least recently used dropped)."""
AT_PAGE = 200
"""Tasks per page of ``/runs/R/at/SEQ``."""


class Refused(Exception):
    """A request this server answers with ``status`` and a one-line ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, kw_only=True, slots=True)
class Drawing:
    """The graph's layout and the tasks' order of one snapshot."""

    snapshot: Snapshot
    layout: Layout
    shape: str
    order: list[TaskId]


def templates() -> Environment:
    """The inspector's Jinja2 templates, autoescaped, with the views' filters."""
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # they ship with the package: no stat of the file per render
    )
    env.filters["age"] = views.age
    env.filters["ts"] = views.timestamp
    env.filters["pretty"] = views.pretty
    env.filters["preview"] = views.preview
    env.filters["duration"] = views.duration
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.globals["approval_of"] = views.approval_of
    env.globals["journal_row"] = journal_row
    env.globals["patch_cell"] = patch_cell
    env.globals["task_time"] = views.task_time
    env.globals["now_ts"] = time.time
    return env


@dataclass(kw_only=True)
class Background:
    """Runs the inspector executes for the operator (resume, fork and run), after the
    request that asked was answered: the page follows the run live instead of waiting
    for its end. One owner: the app's lifespan holds the ``TaskGroup``; at shutdown the
    runs still going are cancelled (each is durable: ``loopkernel resume`` goes on)."""

    client: Client
    group: asyncio.TaskGroup | None = None
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """run -> its execution here."""

    def start(
        self, run_id: str, by: dict[str, str] | None = None, *, after_running: bool = False
    ) -> None:
        """Execute ``run_id`` in the background (``by``: who asked, for the log);
        refused when it already runs here (unless ``after_running``: then once that
        execution ends, so that an answer journaled meanwhile is seen) or the server is not
        serving (no lifespan)."""
        self.check(run_id, after_running=after_running)
        assert self.group is not None
        previous = self.running.get(run_id)
        log.warning(
            "run %s executed here, asked by %s",
            run_id,
            approver_text({"actor": "operator", **(by or {})}),
        )
        self.running[run_id] = self.group.create_task(self._execute(run_id, previous))

    def check(self, run_id: str, *, after_running: bool = False) -> None:
        """Refused (as ``start`` would be) unless ``run_id`` can start here now."""
        if self.group is None:
            raise Refused(503, "this server is not running its background executor")
        if run_id in self.running and not after_running:
            raise Refused(409, f"run {run_id} is already being resumed here")

    async def _execute(self, run_id: str, previous: asyncio.Task[None] | None = None) -> None:
        try:
            if previous is not None:
                try:
                    await asyncio.wait([previous])
                except asyncio.CancelledError:  # shutdown: the one it waits for stops too
                    previous.cancel()
                    raise
            outcome = await self.client.execute(run_id)
            log.info("run %s executed from the inspector: %s", run_id, outcome.status.value)
        except Exception:  # journaled by the executor; the page shows the run as it is
            log.warning("run %s executed from the inspector failed", run_id, exc_info=True)
        finally:
            if self.running.get(run_id) is asyncio.current_task():
                self.running.pop(run_id, None)

    def stop(self) -> None:
        """Cancel what still runs (the group's owner awaits them)."""
        self.group = None
        for task in self.running.values():
            task.cancel()


@dataclass(kw_only=True)
class PastCache:
    """The run as of one event, rebuilt once per ``(run, seq)`` (a journal only grows, so
    what it was at a seq never changes) and kept for the next reader. One rebuild at a
    time (the replay runs in a thread, off the event loop; two would only share the
    cores); readers of a seq being rebuilt wait for that one rebuild."""

    client: Client
    kept: int = PAST_KEPT
    _done: OrderedDict[tuple[str, int], Inspection] = field(default_factory=OrderedDict)
    _building: dict[tuple[str, int], asyncio.Future[Inspection]] = field(default_factory=dict)
    _one: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))

    async def at(self, run_id: str, seq: int) -> Inspection:
        key = (run_id, seq)
        if (found := self._done.get(key)) is not None:
            self._done.move_to_end(key)
            return found
        if (pending := self._building.get(key)) is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Inspection] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            async with self._one:
                past = await self.client.inspect(run_id, at=seq)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            future.set_result(past)
            self._done[key] = past
            while len(self._done) > self.kept:
                self._done.popitem(last=False)
        finally:
            del self._building[key]
        return past


@dataclass(kw_only=True)
class Inspector:
    """The server's shared state: one per app."""

    client: Client
    """Where the inspector writes (decisions, cancels, forks) and executes."""
    auth: Auth
    watcher: Watcher
    env: Environment
    keepalive_seconds: float
    past: PastCache
    background: Background
    reader: Client | None = None
    """Where every page, stream and hub reads: the client's read-only view on a
    connection of its own (``Client.reader``), opened by the app's lifespan; the client
    itself before that (or for a store that has none)."""
    drawings: dict[str, Drawing] = field(default_factory=dict)
    """run -> the drawing of its last snapshot: computed once for every stream of it."""

    @property
    def reads(self) -> Client:
        return self.client if self.reader is None else self.reader

    def use_reader(self, reader: Client) -> None:
        """Read through ``reader`` from now on (hubs, pages, states at a seq)."""
        self.reader = self.watcher.client = self.past.client = reader
        for hub in self.watcher.hubs.values():
            hub.client = reader

    def render(self, request: Request, name: str, code: int = 200, **ctx: Any) -> HTMLResponse:
        csrf = (
            self.auth.session_csrf(request)
            or request.cookies.get(CSRF_COOKIE)
            or secrets.token_urlsafe(24)
        )
        ctx.update(
            csrf=csrf,
            operator=self.auth.is_operator(request),
            operator_name=self.auth.operator_name(request),
            locked=self.auth.require_for_reads,
            path=request.url.path,
        )
        response = HTMLResponse(self.env.get_template(name).render(**ctx), status_code=code)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            secure = request.url.scheme == "https"
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", secure=secure)
        return response

    def fragment(self, name: str, **ctx: Any) -> str:
        return self.env.get_template(name).render(**ctx)

    def gate(self, request: Request) -> Response | None:
        """``None`` when the request may read; else the answer that sends it to sign in."""
        if self.auth.may_read(request):
            return None
        if request.headers.get("accept", "").startswith("text/event-stream"):
            return Response("sign in first\n", status_code=401)
        return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)

    def back_to(self, run_id: str, notice: str) -> RedirectResponse:
        """Back to the run page with a notice this server signed (never one from a link)."""
        query = urlencode({"notice": notice, "sig": self.auth.sign(f"{run_id}\n{notice}")})
        return RedirectResponse(f"/runs/{quote(run_id)}?{query}", status_code=303)

    def drawing_of(self, snap: Snapshot) -> Drawing:
        """The graph's layout and the tasks' order of one snapshot: computed once for
        every stream of the run, not once per stream."""
        found = self.drawings.get(snap.info.run_id)
        if found is None or found.snapshot is not snap:
            lay = views.graph_of(snap.state, snap.late)
            order = sorted(snap.state.tasks, key=views.natural_key)
            found = Drawing(snapshot=snap, layout=lay, shape=views.graph_shape(lay), order=order)
            self.drawings[snap.info.run_id] = found
            for rid in [r for r in self.drawings if r not in self.watcher.hubs]:
                del self.drawings[rid]  # nobody watches that run any more
        return found

    async def snapshot_of(self, run_id: str) -> Snapshot:
        """The run now: the live hub's snapshot when a stream watches it, else read."""
        hub = self.watcher.hubs.get(run_id)
        if hub is None:
            hub = Hub(client=self.reads, run_id=run_id)
        await hub.refresh()
        assert hub.snapshot is not None
        return hub.snapshot

    def run_context(self, run_id: str, snap: Snapshot, all_tasks: bool = False) -> dict[str, Any]:
        """What the run page and its stream's fragments are rendered from."""
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
            "failures": snap.failures,
            "graph": views.graph_of(state, snap.late),
            "late": snap.late,
            "task_times": snap.times,
            "live": views.is_live(snap.info),
            "run_id": run_id,
        }


def inspector_of(request: Request) -> Inspector:
    found = request.app.state.inspector
    assert isinstance(found, Inspector)
    return found


def run_id_of(request: Request) -> str:
    run_id = request.path_params["run_id"]
    if not valid_id(run_id):
        raise Refused(400, "that is not a run id")
    return str(run_id)
