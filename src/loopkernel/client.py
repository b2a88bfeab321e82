"""The client API: what the CLI and the web inspector call. One method, one operation.

Authority for approvals: whoever holds the run's approval token (printed once by ``run``)
may approve or reject; ``local=True`` means the caller has write access to the store
itself (the CLI on the machine that holds ``runs.db``), which already is full authority
over the run, so no token is asked for. Every approval answers one wait of one task once:
a replayed or late approval is refused by the store.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from loopkernel._app import App, load_app
from loopkernel.errors import ApprovalRefused, UsageError
from loopkernel.executor import DEFAULT_MAX_EVENTS, Kernel, RunOutcome, StartedRun, hash_token
from loopkernel.executor._kernel import Observer
from loopkernel.graph import (
    JSON,
    TERMINAL_TASK,
    Event,
    EventKind,
    GraphState,
    RunStatus,
    Task,
    TaskState,
    state_at,
)
from loopkernel.ids import RunId, TaskId
from loopkernel.ids import new_run_id as new_run_id_
from loopkernel.store import (
    EffectRecord,
    Fork,
    NewEvent,
    PatchRecord,
    RunInfo,
    SQLiteStore,
    Store,
    digest_of,
    dump_of_state,
    open_store,
)

if TYPE_CHECKING:
    from loopkernel.models import ModelLayer

__all__ = ["Client", "Inspection"]


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

    def __init__(self, db: str | None = None, *, store: Store | None = None) -> None:
        self.store = store or open_store(db)

    async def __aenter__(self) -> Client:
        await self.store.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.store.close()

    def kernel(self, app: App, params: Mapping[str, JSON], **options: Any) -> Kernel:
        parts = app.build(params)
        tools = None if parts.tool_layer is None else parts.tool_layer(self.store)
        options.setdefault("models", self.model_layer())
        return Kernel(
            self.store, parts.planner, parts.workers, tools=tools, guard=parts.guard, **options
        )

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
    ) -> tuple[App, StartedRun]:
        app = load_app(app_name)
        params = app.params(scenario, overrides)
        kernel = self.kernel(app, params)  # refuses bad parameters before anything is journaled
        started = await kernel.start(
            app=app_name, params=params, run_id=run_id, max_events=max_events
        )
        return app, started

    async def execute(
        self, run_id: str, *, observer: Observer | None = None, max_concurrency: int = 16
    ) -> RunOutcome:
        """Run (or resume) a run with the app it was started with."""
        info = await self.store.get_run(RunId(run_id))
        app = load_app(info.app)
        kernel = self.kernel(app, info.params, observer=observer, max_concurrency=max_concurrency)
        tools = kernel.tools
        if tools is not None and getattr(tools, "on_restart", False) is None:
            tools.on_restart = self._journal_restart(RunId(run_id))  # type: ignore[attr-defined]
        if tools is not None and hasattr(tools, "__aenter__"):
            async with tools:  # type: ignore[attr-defined]
                return await kernel.run(run_id)
        return await kernel.run(run_id)

    def _journal_restart(self, run_id: RunId) -> Callable[[str, str], Awaitable[None]]:
        """A tool server restart becomes a ``tool_restarted`` event of the run; the executor
        sees it as an event another writer slipped in, and plans it like any other."""

        async def on_restart(source: str, reason: str) -> None:
            event = NewEvent(
                kind=EventKind.TOOL_RESTARTED, data={"source": source, "reason": reason}
            )
            await self.store.append_events(run_id, [event])

        return on_restart

    async def waiting(self, run_id: str) -> list[Task]:
        """The run's tasks that wait for a human, with their reasons."""
        loaded = await self.store.load_run(RunId(run_id))
        return loaded.state.in_state(TaskState.WAITING)

    async def info(self, run_id: str) -> RunInfo:
        return await self.store.get_run(RunId(run_id))

    async def inspect(
        self, run_id: str, *, journal: bool = False, at: int | None = None
    ) -> Inspection:
        """The run now, or as of event ``at`` (its journal replayed up to there)."""
        rid = RunId(run_id)
        origin = await self.store.origin(rid)
        if at is not None:
            past = await self._as_of(rid, at)
            dump = dump_of_state(past.state, past.effects)
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
        )

    async def fork(self, run_id: str, *, at: int, new_run_id: str | None = None) -> StartedRun:
        """A new run whose journal is ``run_id``'s up to and including event ``at``
        (``docs/fork.md``); resume it like any run. It has its own approval token."""
        rid = RunId(run_id)
        new = RunId(new_run_id) if new_run_id is not None else new_run_id_()
        if new == rid:
            raise UsageError("a fork needs a run id of its own")
        past = await self._as_of(rid, at)
        state = past.state
        prefix = f"{rid}/"
        token = secrets.token_urlsafe(24)
        await self.store.fork_run(
            Fork(
                source=past.info,
                at_seq=at,
                run_id=new,
                token_hash=hash_token(token),
                events=past.events,
                patches=past.patches,
                state=state,
                effects=tuple(
                    replace(e, run_id=new, key=f"{new}/{e.key.removeprefix(prefix)}")
                    for e in past.effects
                ),
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
        state = state_at(
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
    ) -> Event:
        """Journal a human's answer for a waiting task (``approve`` / ``reject``)."""
        rid = RunId(run_id)
        if not local:
            if token is None:
                raise ApprovalRefused("an approval needs the run's approval token", run_id=rid)
            expected = await self.store.token_hash(rid)
            if not hmac.compare_digest(expected, hash_token(token)):
                raise ApprovalRefused(f"the approval token does not match run {rid}", run_id=rid)
        return await self.store.add_human_input(
            rid, TaskId(task_id), decision=decision, payload=payload
        )

    async def cancel(self, run_id: str, reason: str = "cancelled by an operator") -> RunStatus:
        """Ask for the run to stop. A stopped (waiting) run is finished here and now."""
        rid = RunId(run_id)
        await self.store.request_cancel(rid, reason)
        info = await self.store.get_run(rid)
        if info.status is RunStatus.WAITING:
            return (await self.execute(run_id)).status
        return info.status

    async def export(self, run_id: str, to: str | os.PathLike[str]) -> None:
        if not isinstance(self.store, SQLiteStore):
            raise UsageError("export is implemented for the SQLite store")
        self.store.export_sync(RunId(run_id), to)
