"""The client API: what the CLI and the web inspector call. One method, one operation.

One executor per run: ``execute`` first takes the run's lease (``Store.acquire``), keeps
it with a heartbeat while the run executes, writes only through a view fenced to that
lease, and gives it back at the end. A run held by another live executor is refused with
``RunHeld`` before anything is written; a holder that died on this machine is taken over
at once, one elsewhere when its lease runs out. A store that does not answer
(``StoreUnavailable``: locked, disk full, I/O error, PostgreSQL down) is retried with
backoff for ``ExecutionConfig.store_retry_s`` seconds; then ``StoreUnavailable`` leaves the
run as it was journaled, resumable. The lease and its heartbeat are ``hold_lease``'s.

Authority for approvals: whoever holds the run's approval token (printed once by ``run``)
may approve or reject; ``local=True`` means the caller has write access to the store
itself (the CLI on the machine that holds ``runs.db``), which by default is authority
enough, so no token is asked for. A run started with ``require_token=True``, or any run
seen by a client made with ``require_token=True`` (``LOOPKERNEL_REQUIRE_TOKEN=1``), needs
its token even then: for a shared PostgreSQL database that operators reach with the CLI
(``docs/workers.md`` says which setting fits which deployment). Every approval answers one
wait of one task once: a replayed or late approval is refused by the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import secrets
import time
import warnings
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from loopkernel._app import App, load_app, registered
from loopkernel._hold import HELD, acquire_here, hold_lease
from loopkernel._hooks import crashpoint
from loopkernel._people import approver, approver_text, usage_of
from loopkernel.errors import (
    ApprovalRefused,
    RunHeld,
    RunNotFound,
    StoreUnavailable,
    UsageError,
)
from loopkernel.evidence import redact, redact_text
from loopkernel.executor import (
    DEFAULT_LEASE_S,
    DEFAULT_MAX_EVENTS,
    DEFAULT_STORE_RETRY_S,
    TOKEN_REQUIRED,
    ExecutionConfig,
    Kernel,
    KernelParts,
    Observer,
    RunOutcome,
    StartedRun,
    hash_token,
)
from loopkernel.graph import (
    JSON,
    TERMINAL_RUN,
    TERMINAL_TASK,
    Event,
    EventKind,
    GraphPatch,
    GraphState,
    RunStatus,
    Task,
    TaskState,
    state_at,
    validate,
)
from loopkernel.graph.door import LIMITS, Entry, admit, parse
from loopkernel.ids import RunId, TaskId, check_id, valid_id
from loopkernel.ids import new_run_id as new_run_id_
from loopkernel.store import (
    EffectRecord,
    Fork,
    LoadedRun,
    NewEvent,
    PatchRecord,
    Reclaimed,
    RunInfo,
    SQLiteStore,
    Store,
    digest_of,
    dump_of_state,
    open_store,
)
from loopkernel.store._lockwait import lock_wait_at_most

if TYPE_CHECKING:
    from loopkernel.models import ModelLayer
    from loopkernel.tools import StartedServers, ToolSource

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_STORE_RETRY",
    "MAX_PAYLOAD_BYTES",
    "PRUNED_BY_DEFAULT",
    "Client",
    "Inspection",
    "Listeners",
    "Pruned",
    "approver",
    "approver_text",
    "check_payload",
    "parse_payload",
]

DEFAULT_LEASE_SECONDS = DEFAULT_LEASE_S
"""``ExecutionConfig.lease_s``'s default, by its name of before."""
DEFAULT_STORE_RETRY = DEFAULT_STORE_RETRY_S
"""``ExecutionConfig.store_retry_s``'s default, by its name of before."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Listeners:
    """Who ``Client.execute`` tells what happens, besides its return value."""

    observer: Observer | None = None
    """Told of every journaled event (``Progress`` prints them)."""
    on_retry: Callable[[StoreUnavailable, float], None] | None = None
    """Told of each retry of a store that did not answer: the error, the pause."""
    on_tool_server: Callable[[str, str], None] | None = None
    """Told when the run's tool layer starts a server: its name, ``starting``|``ready``."""


_LEGACY_EXECUTE = {
    "max_concurrency": "concurrency",
    "lease_seconds": "lease_s",
    "store_retry": "store_retry_s",
    "keep_finished": "keep_finished",
}
_LEGACY_LISTENERS = frozenset({"observer", "on_retry", "on_tool_server"})


def _legacy_execute(
    config: ExecutionConfig | None, listeners: Listeners | None, options: dict[str, Any]
) -> tuple[ExecutionConfig, Listeners]:
    """``execute``'s keyword arguments of before ``ExecutionConfig``, folded into its two
    values, with a ``DeprecationWarning`` naming the new spelling."""
    config, listeners = config or ExecutionConfig(), listeners or Listeners()
    if not options:
        return config, listeners
    unknown = sorted(set(options) - set(_LEGACY_EXECUTE) - _LEGACY_LISTENERS)
    if unknown:
        raise TypeError(f"execute() got unexpected keyword argument(s) {', '.join(unknown)}")
    warnings.warn(
        f"Client.execute({', '.join(f'{k}=' for k in options)}) is deprecated: pass "
        "config=ExecutionConfig(...) and listeners=Listeners(...)",
        DeprecationWarning,
        stacklevel=3,
    )
    knobs = {_LEGACY_EXECUTE[k]: v for k, v in options.items() if k in _LEGACY_EXECUTE}
    told = {k: v for k, v in options.items() if k in _LEGACY_LISTENERS}
    return replace(config, **knobs), replace(listeners, **told)


MAX_PAYLOAD_BYTES = LIMITS[Entry.PAYLOAD].max_bytes
"""The largest approval payload (its JSON, UTF-8) ``decide`` accepts (``loopkernel.graph.door``)."""


def check_payload(payload: JSON) -> None:
    """``UsageError`` unless an approval payload is ``None`` or a JSON object that passes
    the value door (``loopkernel.graph.door``: valid Unicode, finite, at most
    ``MAX_PAYLOAD_BYTES``): a task reads named fields of it (``by``, ``note`` ...)."""
    if payload is None:
        return
    if not isinstance(payload, dict):
        kind = {list: "an array", str: "a string", bool: "true or false"}.get(
            type(payload), "a number"
        )
        raise UsageError(f"an approval payload must be a JSON object ({{...}}), not {kind}")
    admit(payload, Entry.PAYLOAD)


def parse_payload(text: str | bytes) -> JSON:
    """An approval payload from JSON text (a command line, a form, an HTTP body): through
    the value door, then ``check_payload``; ``UsageError`` (``ValueRefused``) if refused."""
    payload = parse(text, Entry.PAYLOAD)
    check_payload(payload)
    return payload


PRUNED_BY_DEFAULT: frozenset[RunStatus] = frozenset(TERMINAL_RUN)
"""What ``prune`` and retention delete unless told otherwise: finished runs only."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Pruned:
    """What ``Client.prune`` did."""

    deleted: tuple[RunId, ...]
    """The runs deleted (or, with ``dry_run``, that would be)."""
    held: tuple[RunId, ...]
    """Old enough, but an executor holds them: kept."""
    dry_run: bool
    """Nothing was deleted."""
    reclaimed: Reclaimed | None = None
    """The space given back after the deletes (SQLite), in bytes; None when nothing was
    deleted, on a dry run, or where the server's vacuum reuses it (PostgreSQL)."""


def _rid(run_id: str) -> RunId:
    """A run id from a caller, checked against the id grammar before it reaches a store."""
    return RunId(check_id(run_id))


@dataclass(frozen=True, kw_only=True, slots=True)
class _Past:
    info: RunInfo
    events: tuple[Event, ...]
    patches: tuple[PatchRecord, ...]
    state: GraphState
    effects: tuple[EffectRecord, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Inspection:
    """A run as ``inspect`` shows it."""

    info: RunInfo
    digest: str
    tasks: list[dict[str, JSON]]
    edges: list[list[str]]
    events: list[Event] | None = None
    patches: list[PatchRecord] | None = None
    origin: tuple[RunId, int] | None = None
    """``(run, seq)`` it was forked from."""
    at_seq: int | None = None
    """Set when this is the run as of an earlier event (``inspect --at``)."""
    times: dict[int, float] | None = None
    """When each event of ``events`` was journaled (seq -> epoch seconds), if the store
    says; not in ``to_json``'s journal, which is the journal's content."""

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {
            "run_id": self.info.run_id,
            "app": self.info.app,
            "params": self.info.params,
            "status": self.info.status.value,
            "verdict": self.info.verdict,
            "digest": self.digest,
            "last_seq": self.info.last_seq,
            "tasks": self.tasks,
            "edges": self.edges,
        }
        if self.origin is not None:
            out["forked_from"] = {"run_id": self.origin[0], "seq": self.origin[1]}
        if self.at_seq is not None:
            out["at_seq"] = self.at_seq
        if self.events is not None:
            out["journal"] = [
                {"seq": e.seq, "kind": e.kind.value, "task_id": e.task_id, "data": e.data}
                for e in self.events
            ]
        if self.patches is not None:
            out["patches"] = [
                {
                    "event_seq": p.event_seq,
                    "outcome": p.outcome,
                    "planner": p.planner,
                    "reason": p.reason,
                    "ops": p.ops,
                    # only for a proposing planner's patches (docs/models.md)
                    **({} if p.proposal is None else {"proposal": p.proposal.to_json()}),
                }
                for p in self.patches
            ]
        return out


class Client:
    """Operations on the runs of one store. Use as ``async with Client(url) as client``."""

    def __init__(
        self,
        db: str | None = None,
        *,
        store: Store | None = None,
        create: bool = True,
        require_token: bool | None = None,
    ) -> None:
        """``create=False``: the database must exist already (``inspect``, ``runs`` ...).
        ``require_token``: every approval needs the run's token, database access or not
        (default: ``LOOPKERNEL_REQUIRE_TOKEN`` is ``1``/``true``/``yes``)."""
        self.store = store or open_store(db, create=create)
        if require_token is None:
            flag = os.environ.get("LOOPKERNEL_REQUIRE_TOKEN", "").strip().lower()
            require_token = flag in ("1", "true", "yes", "on")
        self.require_token = require_token

    async def __aenter__(self) -> Client:
        await self.store.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.store.close()

    def reader(self) -> Client | None:
        """A client that only reads, on a connection of its own (SQLite: a query-only
        connection and thread beside the store's writer; PostgreSQL: a connection of its
        own): its reads never slow the runs this client's store writes. Open it (``async
        with``) after this one. ``None`` for a store that has no such view."""
        make = getattr(self.store, "reader", None)
        if make is None:
            return None
        return Client(store=make(), require_token=self.require_token)

    def kernel(
        self,
        app: App,
        params: Mapping[str, JSON],
        *,
        config: ExecutionConfig | None = None,
        observer: Observer | None = None,
    ) -> Kernel:
        """A ``Kernel`` for a run of ``app`` with ``params``: its parts built on this store
        (tool layer, model layer, guard, clock, approval timeout, versions)."""
        built = app.build(params)
        parts = KernelParts(
            tools=None if built.tool_layer is None else built.tool_layer(self.store),
            models=self.model_layer(),
            observer=observer,
            guard=built.guard,
            approval_timeout=built.approval_timeout,
            app_version=app.app_version(),
            compatible_with=app.compatible_with,
            **({} if built.clock is None else {"clock": built.clock}),
        )
        return Kernel(self.store, built.planner, built.workers, config=config, parts=parts)

    def tool_sources(self, app: App, params: Mapping[str, JSON]) -> tuple[ToolSource, ...]:
        """The tool sources a run of ``app`` with ``params`` calls: its tool layer built on
        this store, which need not be open yet (a layer touches its store on its first
        call, never when it is built). Empty for an app without tools, or whose tool
        layer is not a ``ToolLayer``."""
        parts = app.build(params)
        if parts.tool_layer is None:
            return ()
        return tuple(getattr(parts.tool_layer(self.store), "sources", ()))

    def start_tool_servers(self, app: App, params: Mapping[str, JSON]) -> StartedServers:
        """The servers of ``tool_sources(app, params)``, to be started now (``async with``)
        and handed to ``execute(tool_servers=...)``: they start while the store opens, the
        run is journaled and planned, instead of on the run's first tool call."""
        from loopkernel.tools import StartedServers

        return StartedServers(self.tool_sources(app, params))

    def model_layer(self) -> ModelLayer | None:
        """``ctx.complete`` through the gateway that ``LOOPKERNEL_GATEWAY`` names, journaled
        in this store; None when no gateway is configured."""
        from loopkernel.models import ModelClient, ModelLayer

        client = ModelClient.from_env()
        return None if client is None else ModelLayer(self.store, client)

    async def start(
        self,
        app_name: str,
        *,
        scenario: str | None = None,
        overrides: Mapping[str, JSON] | None = None,
        run_id: str | None = None,
        max_events: int = DEFAULT_MAX_EVENTS,
        require_token: bool = False,
    ) -> tuple[App, StartedRun]:
        if run_id is not None:
            check_id(run_id)
        app = load_app(app_name)
        params = app.params(scenario, overrides)
        kernel = self.kernel(app, params)  # refuses bad parameters before anything is journaled
        started = await kernel.start(
            app=app_name,
            params=params,
            run_id=run_id,
            max_events=max_events,
            require_token=require_token,
        )
        return app, started

    async def execute(
        self,
        run_id: str,
        *,
        config: ExecutionConfig | None = None,
        listeners: Listeners | None = None,
        apps: Collection[str] | None = None,
        tool_servers: StartedServers | None = None,
        **legacy: Any,
    ) -> RunOutcome:
        """Run (or resume) a run with the app it was started with, as its one executor.

        ``RunHeld`` if another executor holds it (nothing written); ``LeaseLost`` if it was
        taken over meanwhile (this process stopped writing); ``StoreUnavailable`` once the
        store has not answered for ``config.store_retry_s`` seconds (the run stays
        resumable). ``config`` (``ExecutionConfig``) is handed down whole, to the lease and
        the ``Kernel``; ``listeners`` are told of events, retries and tool servers; ``apps``
        and ``tool_servers`` go to ``run_owned``. The keyword arguments of before
        (``max_concurrency=``, ``observer=`` ...) still work, with a ``DeprecationWarning``.
        """
        config, listeners = _legacy_execute(config, listeners, legacy)
        rid = RunId(run_id)
        retry = config.store_retry_s
        deadline: float | None = None  # set at the store's first failure: the outage's end
        delay = 0.05
        while True:
            left = retry if deadline is None else deadline - time.monotonic()
            bound = max(0.0, left)
            if config.lock_wait_s is not None:
                bound = min(bound, config.lock_wait_s)
            try:
                with lock_wait_at_most(bound):  # a lock wait counts in the total
                    return await self._execute_once(rid, config, listeners, apps, tool_servers)
            except StoreUnavailable as exc:
                if deadline is None:
                    waited = exc.attrs.get("waited", 0.0)
                    deadline = time.monotonic() + retry - float(waited)
                left = deadline - time.monotonic()
                if left <= 0:
                    attrs = {**exc.attrs, "run_id": rid}
                    raise StoreUnavailable(
                        f"{exc.message}; gave up after {retry:g} s of retries", **attrs
                    ) from exc
                pause = min(delay, left)
                if listeners.on_retry is not None:
                    listeners.on_retry(exc, pause)
                await asyncio.sleep(pause)
                delay = min(delay * 2, 2.0)

    async def _execute_once(
        self,
        rid: RunId,
        config: ExecutionConfig,
        listeners: Listeners,
        apps: Collection[str] | None,
        tool_servers: StartedServers | None,
    ) -> RunOutcome:
        loaded = await self.store.load_run(rid)  # a finished run: no lease, nothing written
        if (info := loaded.info).status in TERMINAL_RUN:
            return RunOutcome(run_id=rid, status=info.status, verdict=info.verdict)
        claim = await acquire_here(self.store, rid, config.lease_s)
        fresh = loaded.free_epoch is not None and claim.epoch == loaded.free_epoch + 1
        held = (self.store.url, rid)
        HELD.add(held)
        owner = Client(store=self.store.fenced(rid, claim.epoch))
        down = False
        try:
            # The run's own writes fail the same way as a missed heartbeat and are
            # retried; if the lease runs out meanwhile, fencing refuses what comes after.
            async with hold_lease(self.store, claim, lease_s=config.lease_s):
                if not fresh:  # held by another executor since: read again, under ours
                    loaded = await owner.store.load_run(rid)
                return await owner.run_owned(
                    rid,
                    config=config,
                    listeners=listeners,
                    apps=apps,
                    tool_servers=tool_servers,
                    loaded=loaded,
                )
        except StoreUnavailable:
            down = True
            raise
        finally:
            HELD.discard(held)
            # If the store is down, the lease runs out (or this machine sees its holder
            # gone; the retry takes its own lease back at once): trying to give it back
            # would wait one more lock wait, past the --store-retry bound.
            if not down:
                with contextlib.suppress(StoreUnavailable):
                    await self.store.release(rid, claim.epoch)

    async def run_owned(
        self,
        run_id: str,
        *,
        config: ExecutionConfig | None = None,
        listeners: Listeners | None = None,
        apps: Collection[str] | None = None,
        tool_servers: StartedServers | None = None,
        loaded: LoadedRun | None = None,
    ) -> RunOutcome:
        """Run (or resume) a run this process already owns: ``self.store`` is the view
        fenced to its lease (a worker's claim, or ``execute``'s own).

        ``apps`` closes the authority surface for a process that executes runs written by
        others (a worker): only installed apps (entry points) and the names in ``apps`` are
        run, and a run of any other app, or of one that cannot be loaded, ends ``failed``
        with an ``app_refused`` verdict instead of being retried. ``None`` (the local
        command line) runs any app, ``module:attribute`` included. ``listeners``: the
        ``observer``, and ``on_tool_server(name, "starting" | "ready")``, told when the
        run's tool layer starts a server. ``tool_servers`` (``start_tool_servers``):
        servers started for this run before it was set up, which its tool layer takes over
        instead of spawning its own. ``config``: the ``Kernel``'s. ``loaded``: the run as
        the caller just read it under the lease (``execute``), read here once if ``None``."""
        listeners = listeners or Listeners()
        loaded = loaded or await self.store.load_run(_rid(run_id))
        info = loaded.info
        if apps is not None:
            if info.status not in (RunStatus.RUNNING, RunStatus.WAITING):
                return RunOutcome(run_id=info.run_id, status=info.status, verdict=info.verdict)
            if info.app not in apps and (":" in info.app or not registered(info.app)):
                return await self.fail(
                    run_id,
                    "app_refused",
                    f"app {info.app!r} is not registered on this worker (install it as an "
                    "entry point, or start the worker with --app NAME)",
                )
            try:
                app = load_app(info.app)
            except UsageError as exc:
                return await self.fail(run_id, "app_refused", str(exc))
            if isinstance(info.params, Mapping):  # a row written past the door: final too
                try:
                    app.check(info.params)
                except UsageError as exc:
                    return await self.fail(run_id, "bad_params", str(exc))
        else:
            app = load_app(info.app)
        kernel = self.kernel(app, info.params, config=config, observer=listeners.observer)
        on_tool_server = listeners.on_tool_server
        tools = kernel.tools
        if tools is not None and getattr(tools, "on_restart", False) is None:
            tools.on_restart = self._journal_restart(_rid(run_id))  # type: ignore[attr-defined]
        if tools is not None and on_tool_server is not None and hasattr(tools, "on_server"):
            tools.on_server = on_tool_server
        if tools is not None and tool_servers is not None and hasattr(tools, "adopt"):
            tools.adopt(tool_servers)
        if tools is not None and hasattr(tools, "__aenter__"):
            async with tools:  # type: ignore[attr-defined]
                outcome = await kernel.run(run_id, loaded=loaded)
        else:
            outcome = await kernel.run(run_id, loaded=loaded)
        crashpoint("run_returned")  # the store is still open: close() has not checkpointed
        return outcome

    async def fail(self, run_id: str, kind: str, message: str) -> RunOutcome:
        """End a run ``failed`` with the verdict ``{kind, message}``, without executing it."""
        rid = _rid(run_id)
        loaded = await self.store.load_run(rid)
        verdict: JSON = {"kind": kind, "message": message}
        delta = validate(loaded.state, GraphPatch().finish("failed", verdict), ())
        final = NewEvent(kind=EventKind.RUN_FINISHED, data={"status": "failed", "verdict": verdict})
        await self.store.commit_patches(rid, [], delta, final)
        return RunOutcome(run_id=rid, status=RunStatus.FAILED, verdict=verdict)

    def _journal_restart(self, run_id: RunId) -> Callable[[str, str], Awaitable[None]]:
        """A tool server restart becomes a ``tool_restarted`` event of the run; the executor
        sees it as an event another writer slipped in, and plans it like any other."""

        async def on_restart(source: str, reason: str) -> None:
            event = NewEvent(
                kind=EventKind.TOOL_RESTARTED,
                data={"source": source, "reason": redact_text(reason)},
            )
            await self.store.append_events(run_id, [event])

        return on_restart

    async def waiting(self, run_id: str) -> list[Task]:
        """The run's tasks that wait for a human, with their reasons."""
        loaded = await self.store.load_run(_rid(run_id))
        return loaded.state.in_state(TaskState.WAITING)

    async def info(self, run_id: str) -> RunInfo:
        return await self.store.get_run(_rid(run_id))

    async def list_runs(
        self,
        limit: int = 50,
        *,
        status: RunStatus | None = None,
        app: str | None = None,
        before: tuple[float, str] | None = None,
    ) -> list[RunInfo]:
        """One page of runs, newest first; pass the last one's ``(created_at, run_id)`` as
        ``before`` for the next page."""
        return await self.store.list_runs(limit, status=status, app=app, before=before)

    async def run_counts(self, app: str | None = None) -> dict[str, int]:
        """status -> how many runs have it (of ``app`` only, when given); empty from a
        store that cannot say."""
        query = getattr(self.store, "run_counts", None)
        if query is None:
            return {}
        counts: dict[str, int] = await query(app)
        return counts

    async def graph(self, run_id: str) -> GraphState:
        """The run's materialized graph: tasks with their states, and edges."""
        return (await self.store.load_run(RunId(run_id))).state

    async def events(self, run_id: str, after: int = 0) -> list[Event]:
        """The run's journal after seq ``after``, in seq order."""
        return await self.store.events(RunId(run_id), after)

    async def patches(self, run_id: str, after: int = 0) -> list[PatchRecord]:
        """The run's patches (applied or rejected) answering events after seq ``after``, by
        the seq of the event each answers."""
        return await self.store.patches(RunId(run_id), after)

    async def effects(self, run_id: str, task_id: str | None = None) -> list[EffectRecord]:
        """The run's tool calls from the effect journal, of one task when ``task_id`` is given."""
        found = await self.store.effects(RunId(run_id))
        return found if task_id is None else [e for e in found if e.task_id == task_id]

    async def origin(self, run_id: str) -> tuple[RunId, int] | None:
        """``(run, seq)`` the run was forked from, or ``None``."""
        return await self.store.origin(RunId(run_id))

    async def wait_for_journal(self, seconds: float) -> None:
        """Return when some run's journal may have changed, or after ``seconds``."""
        await self.store.wait_for_journal(seconds)

    async def check_token(self, run_id: str, token: str) -> bool:
        """Whether ``token`` is the run's approval token (compared in constant time)."""
        expected = (await self.store.token_hash(_rid(run_id))).removeprefix(TOKEN_REQUIRED)
        return hmac.compare_digest(expected, hash_token(token))

    async def inspect(
        self, run_id: str, *, journal: bool = False, at: int | None = None
    ) -> Inspection:
        """The run now, or as of event ``at`` (its journal replayed up to there)."""
        rid = _rid(run_id)
        origin = await self.store.origin(rid)
        if at is not None:
            past = await self._as_of(rid, at)
            # Off the event loop: on a long run this is seconds of work that would hold
            # every other request of a server (the inspector's /at/SEQ) behind it.
            dump = await asyncio.to_thread(dump_of_state, past.state, past.effects)
            info = replace(
                past.info, status=past.state.status, verdict=past.state.verdict, last_seq=at
            )
            return Inspection(
                info=info,
                digest=digest_of(dump),
                tasks=dump["tasks"],
                edges=dump["edges"],
                events=list(past.events) if journal else None,
                patches=list(past.patches) if journal else None,
                origin=origin,
                at_seq=at,
                times=await self.event_times(run_id) if journal else None,
            )
        info = await self.store.get_run(rid)
        dump = await self.store.dump(rid)
        return Inspection(
            info=info,
            digest=digest_of(dump),
            tasks=dump["tasks"],
            edges=dump["edges"],
            events=await self.store.events(rid) if journal else None,
            patches=await self.store.patches(rid) if journal else None,
            origin=origin,
            times=await self.event_times(run_id) if journal else None,
        )

    async def fork(self, run_id: str, *, at: int, new_run_id: str | None = None) -> StartedRun:
        """A new run whose journal is ``run_id``'s up to and including event ``at``
        (``docs/fork.md``); resume it like any run. It has its own approval token."""
        rid = _rid(run_id)
        new = _rid(new_run_id) if new_run_id is not None else new_run_id_()
        if new == rid:
            raise UsageError("a fork needs a run id of its own")
        past = await self._as_of(rid, at)
        state = past.state
        prefix = f"{rid}/"
        token = "lk_" + secrets.token_urlsafe(24)  # never "-...": it follows --token
        # a fork keeps its source's approval rule (--require-token)
        strict = (await self.store.token_hash(rid)).startswith(TOKEN_REQUIRED)
        from loopkernel import telemetry

        trace = None
        if tracer := telemetry.tracer():  # the fork's run span, linked to its source's
            attributes = {
                "loopkernel.run_id": new,
                "loopkernel.app": past.info.app,
                "loopkernel.fork.source_run": rid,
                "loopkernel.fork.at_seq": at,
            }
            span = tracer.start(f"run {past.info.app}", attributes, links=(past.info.trace,))
            trace = tracer.traceparent(span)
            tracer.end(span)
        await self.store.fork_run(
            Fork(
                source=past.info,
                at_seq=at,
                run_id=new,
                token_hash=(TOKEN_REQUIRED if strict else "") + hash_token(token),
                events=past.events,
                patches=past.patches,
                state=state,
                effects=tuple(
                    replace(e, run_id=new, key=f"{new}/{e.key.removeprefix(prefix)}")
                    for e in past.effects
                ),
                trace=trace,
            )
        )
        return StartedRun(run_id=new, token=token)

    async def _as_of(self, rid: RunId, at: int) -> _Past:
        """The run's journal up to event ``at``, the graph it replays to, and the effects
        of the tasks that had finished by then."""
        info = await self.store.get_run(rid)
        events = tuple(e for e in await self.store.events(rid) if e.seq <= at)
        patches = tuple(p for p in await self.store.patches(rid) if p.event_seq <= at)
        final = (await self.store.load_run(rid)).state
        results = {t.task_id: t.result for t in final.tasks.values()}
        state = await asyncio.to_thread(
            state_at,
            run_id=rid,
            app=info.app,
            params=info.params,
            events=events,
            patches=[(p.event_seq, p.ops) for p in patches if p.outcome == "applied"],
            results=results,
            seq=at,
        )
        idle = not state.finished and not state.in_state(TaskState.READY)
        if idle and state.in_state(TaskState.WAITING):
            state.status = RunStatus.WAITING
        done = {t.task_id for t in state.tasks.values() if t.state in TERMINAL_TASK}
        effects = tuple(
            e for e in await self.store.effects(rid) if e.task_id in done and e.status != "intended"
        )
        return _Past(info=info, events=events, patches=patches, state=state, effects=effects)

    async def decide(
        self,
        run_id: str,
        task_id: str,
        decision: Literal["approve", "reject"],
        *,
        payload: JSON = None,
        token: str | None = None,
        local: bool = False,
        by: Mapping[str, str] | None = None,
    ) -> Event:
        """Journal a human's answer for a waiting task (``approve`` / ``reject``), with who
        answered (``approver``): the run token's holder or, without one, whoever has write
        access to the store; ``by`` is what the caller knows of them (default: the user
        and host this process runs as)."""
        rid = _rid(run_id)
        tid = TaskId(check_id(task_id, "task id"))
        check_payload(payload)
        stored = await self.store.token_hash(rid)
        strict = stored.startswith(TOKEN_REQUIRED)
        if not local or strict or self.require_token:
            if token is None:
                why = (
                    ": the run was started with --require-token"
                    if strict
                    else ": LOOPKERNEL_REQUIRE_TOKEN is set"
                    if local
                    else ""
                )
                raise ApprovalRefused(
                    f"an approval needs the run's approval token (--token){why}", run_id=rid
                )
            if not await self.check_token(run_id, token):
                raise ApprovalRefused(f"the approval token does not match run {rid}", run_id=rid)
        # secrets nowhere: the payload is journaled (and shown to the task) redacted
        payload = redact(payload)
        who = approver("run token" if token is not None else "local", by)
        event = await self.store.add_human_input(
            rid, tid, decision=decision, payload=payload, by=who
        )
        await self._trace_decision(event, who)
        return event

    async def cancel(
        self,
        run_id: str,
        reason: str = "cancelled by an operator",
        *,
        token: str | None = None,
        local: bool = True,
        finish_waiting: bool = True,
        by: Mapping[str, str] | None = None,
    ) -> RunStatus:
        """Ask for the run to stop (journaled as ``cancel_requested``, with who asked:
        ``approver``, ``by`` what the caller knows of them; a ``name`` in it is the web
        inspector's operator's). Unless ``local``, the run's
        approval token is required. With ``finish_waiting`` a stopped (waiting) run is
        finished here and now; without it the event waits for ``resume`` or a worker,
        like an approval."""
        rid = _rid(run_id)
        if not local and (token is None or not await self.check_token(run_id, token)):
            raise ApprovalRefused(f"cancelling run {rid} needs its approval token", run_id=rid)
        named = by is not None and "name" in by  # the inspector's named operator
        who = approver("run token" if token is not None else "operator" if named else "local", by)
        await self.store.request_cancel(rid, redact_text(reason), who)
        info = await self.store.get_run(rid)
        if info.status is RunStatus.WAITING and finish_waiting:
            return (await self.execute(run_id)).status
        return info.status

    async def export(self, run_id: str, to: str | os.PathLike[str]) -> None:
        if not isinstance(self.store, SQLiteStore):
            raise UsageError("export is implemented for the SQLite store")
        await self.store.export(_rid(run_id), to)

    # -- for the web inspector (docs/web.md); composed of the store's existing queries --

    async def event(self, run_id: str, seq: int) -> Event | None:
        """Event ``seq`` of the run, or ``None``."""
        found = await self.store.events(_rid(run_id), max(0, seq - 1))
        return found[0] if found and found[0].seq == seq else None

    async def task_events(self, run_id: str, task_id: str) -> list[Event]:
        """The events of one task, in seq order (filtered by the database when the store
        can; else read from the whole journal)."""
        query = getattr(self.store, "task_events", None)
        if query is not None:
            found: list[Event] = await query(_rid(run_id), task_id)
            return found
        return [e for e in await self.store.events(_rid(run_id)) if e.task_id == task_id]

    async def event_times(self, run_id: str, after: int = 0) -> dict[int, float]:
        """When each event after seq ``after`` was journaled (seq -> epoch seconds); empty
        from a store that does not say."""
        query = getattr(self.store, "event_times", None)
        if query is None:
            return {}
        times: dict[int, float] = await query(_rid(run_id), after)
        return times

    async def task_times(
        self, run_id: str, task_id: str | None = None
    ) -> dict[str, tuple[float | None, float | None]]:
        """task -> ``(started, finished)`` in epoch seconds (``None`` where unknown): when
        the task's latest attempt went running, and when its finishing event was journaled;
        every task, or the one ``task_id``. Empty from a store that does not say."""
        query = getattr(self.store, "task_times", None)
        if query is None:
            return {}
        times: dict[str, tuple[float | None, float | None]] = await query(_rid(run_id), task_id)
        return times

    async def usage(self, run_id: str) -> dict[str, float | int | None]:
        """What the run spent, from its budget ledger (the effect journal, as the policy
        counts it: ``tools.policy_hook``): ``tool_calls``, ``model_calls``, ``tokens``
        (input + output), ``tool_usd`` and ``model_usd`` (the ``cost_usd`` that journaled
        tool results and model answers report), ``cost_usd`` (both), and ``limit_usd``:
        the run's ``max_usd`` when its parameters carry a policy, else ``None``."""
        info = await self.store.get_run(_rid(run_id))
        return usage_of(info.params, await self.store.effects(_rid(run_id)))

    async def search_runs(
        self,
        text: str,
        limit: int = 50,
        *,
        status: str | None = None,
        app: str | None = None,
        scan: int = 5000,
    ) -> list[RunInfo]:
        """Runs whose id, app or verdict contains ``text`` (case-insensitive), newest
        first: the run of that exact id first, then the newest ``scan`` runs looked at."""
        needle = text.strip().lower()
        out: list[RunInfo] = []
        if valid_id(text.strip()):
            with contextlib.suppress(UsageError):
                out.append(await self.store.get_run(RunId(text.strip())))
        before: tuple[float, str] | None = None
        looked = 0
        want = None if status is None else RunStatus(status)
        while looked < scan and len(out) < limit:
            page = await self.store.list_runs(200, status=want, app=app, before=before)
            if not page:
                break
            looked += len(page)
            before = (page[-1].created_at, page[-1].run_id)
            for info in page:
                hay = f"{info.run_id}\n{info.app}\n{info.verdict}".lower()
                if needle in hay and all(o.run_id != info.run_id for o in out):
                    out.append(info)
        out = [o for o in out if want is None or o.status is want]
        return [o for o in out if app is None or o.app == app][:limit]

    async def forks(self, run_id: str, *, scan: int = 500) -> list[tuple[RunId, int]]:
        """``(run, seq)`` of the runs forked from this one (from a store that cannot say
        directly: among the ``scan`` newest runs created after it)."""
        rid = _rid(run_id)
        query = getattr(self.store, "forks_of", None)
        if query is not None:
            forks: list[tuple[RunId, int]] = await query(rid)
            return forks
        source = await self.store.get_run(rid)
        found: list[tuple[RunId, int]] = []
        before: tuple[float, str] | None = None
        looked = 0
        while looked < scan:
            page = await self.store.list_runs(100, before=before)
            if not page:
                break
            looked += len(page)
            before = (page[-1].created_at, page[-1].run_id)
            for info in page:
                if info.run_id != rid and info.created_at >= source.created_at:
                    origin = await self.store.origin(info.run_id)
                    if origin is not None and origin[0] == rid:
                        found.append((info.run_id, origin[1]))
            if page[-1].created_at < source.created_at:
                break
        return found[::-1]

    async def decide_as_operator(
        self,
        run_id: str,
        task_id: str,
        decision: Literal["approve", "reject"],
        *,
        payload: JSON = None,
        by: Mapping[str, str] | None = None,
    ) -> Event:
        """Journal a human's answer on an authority the caller checked itself (the web
        inspector's operator token): no run token is asked for, even for a run started
        with ``--require-token``. The store still refuses a replayed or late answer.
        Journaled as answered by the ``operator`` (``by``: what the caller knows)."""
        rid = _rid(run_id)
        tid = TaskId(check_id(task_id, "task id"))
        check_payload(payload)
        payload = redact(payload)
        who = approver("operator", by)
        event = await self.store.add_human_input(
            rid, tid, decision=decision, payload=payload, by=who
        )
        await self._trace_decision(event, who)
        return event

    async def _trace_decision(self, event: Event, by: Mapping[str, str]) -> None:
        """An ``approval`` span in the run's trace, when tracing is on."""
        from loopkernel import telemetry

        tracer = telemetry.tracer()
        if not tracer:
            return
        info = await self.store.get_run(event.run_id)
        data = event.data if isinstance(event.data, Mapping) else {}
        # A span of its own, linked to the run's: an answer days after the run's start is
        # not a child of a span that ended when the run was created.
        tracer.event(
            f"approval {event.task_id}",
            {
                "loopkernel.run_id": event.run_id,
                "loopkernel.task_id": event.task_id,
                "loopkernel.event.seq": event.seq,
                "loopkernel.decision": str(data.get("decision")),
                "loopkernel.by": by["actor"],
                "loopkernel.by.user": by.get("user"),
                "loopkernel.by.host": by.get("host"),
                "loopkernel.by.address": by.get("address"),
            },
            links=(info.trace,),
        )

    async def delete(self, run_id: str) -> None:
        """Remove every row of the run in one transaction (``Store.delete_run``):
        ``RunHeld`` while an executor holds it, ``RunNotFound`` if there is none."""
        await self.store.delete_run(_rid(run_id))

    async def prune(
        self,
        older_than: float,
        *,
        statuses: Collection[RunStatus] = PRUNED_BY_DEFAULT,
        dry_run: bool = False,
        now: float | None = None,
        vacuum: bool = False,
    ) -> Pruned:
        """Delete the runs in ``statuses`` (default: the finished ones) whose last change
        (``updated_at``) is more than ``older_than`` seconds ago. A run an executor holds
        is kept and named in ``held``. ``dry_run``: delete nothing, name what would go.
        Then the space is given back (``Store.reclaim``): at once in a file made by this
        version; ``vacuum`` rewrites an older SQLite file once so that it is too."""
        if not older_than >= 0:
            raise UsageError(f"older_than must be seconds >= 0, not {older_than!r}")
        cutoff = (time.time() if now is None else now) - older_than
        deleted: list[RunId] = []
        held: list[RunId] = []
        for status in sorted(set(statuses), key=lambda s: s.value):
            # created_at <= updated_at: only runs created before the cutoff can be old enough
            before: tuple[float, str] = (cutoff, "")
            while True:
                page = await self.store.list_runs(500, status=status, before=before)
                for info in page:
                    if info.updated_at >= cutoff:
                        continue
                    if dry_run:
                        deleted.append(info.run_id)
                        continue
                    try:
                        await self.store.delete_run(info.run_id)
                    except RunHeld:
                        held.append(info.run_id)
                    except RunNotFound:
                        continue  # deleted meanwhile by someone else
                    else:
                        deleted.append(info.run_id)
                if len(page) < 500:
                    break
                before = (page[-1].created_at, page[-1].run_id)
        reclaimed = None
        if (deleted or vacuum) and not dry_run:
            reclaimed = await self.store.reclaim(full=vacuum)
        return Pruned(
            deleted=tuple(deleted), held=tuple(held), dry_run=dry_run, reclaimed=reclaimed
        )
