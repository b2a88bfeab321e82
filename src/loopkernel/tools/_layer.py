"""The tool layer: every tool call of a run goes through ``ToolLayer.call``, which runs it
through the run's effect journal (``loopkernel._effects``: key, replay, divergence check,
redaction, the unknown outcome) with this layer's plan for sending it.

One call, in order::

    key = run_id/task_id/call_index
    journaled already?   done -> return its result      failed -> raise its error again
                         intended -> in flight at a crash: re-sent below with the same key
                         if the tool may be re-sent, else an unknown outcome (below)
    resolve the tool     (frozen defs first: no server is spawned to learn a schema)
    check arguments      against inputSchema                   -> ToolError invalid_arguments
    policy hook          first send only; may raise NeedsApproval (the task parks)
    journal intended     store.intend_effect (arguments redacted, their sha256 kept)
    crashpoint("tool_sent")
    send                 one long-lived session per source; key in _meta; deadline
                         the server died? restart it once (on_restart), re-send, same key
                         (only a tool that may be re-sent, below)
    crashpoint("tool_returned")
    journal the outcome  done + result (redacted), or failed + error for a ToolError

A fault that may pass (``is_transient``: a timeout, a server that died, a handler out of
disk) leaves the effect ``intended``: nobody knows whether the call had its effect. The
call is re-sent under the same key by the tool's ``RetryPolicy``; when that is spent,
``TransientFault`` stops the executor and leaves the run ``running``, and ``resume``
re-sends the call with the same key, where the server's duplicate check decides. Any
other ``ToolError`` is an answer, journaled as ``failed`` and raised again on replay, so a
resumed run fails the same way without calling again. A ``ToolUnavailable`` that is not
transient (a server that cannot start, or speaks no MCP) fails the task and leaves the
effect ``intended``.

**An irreversible tool is never sent twice by the layer** unless it declares that it
deduplicates by key (``dedupesByKey`` in its defs). A server that died or a deadline that
passed with such a call in flight, or a process that died with it in flight, is an
unknown outcome: the task parks ``waiting`` with a reason that begins "outcome unknown",
and a human's approval decides whether it is sent again (journaled once; see
``loopkernel._effects``). A handler that answered with a fault that may pass (out of
disk) did nothing: the journal closes the call and the resumed run sends it anew.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeAlias

from loopkernel import telemetry
from loopkernel._effects import Call, EffectJournal, NoEffect, OutcomeUnknown, Plan
from loopkernel._hooks import CallContext, NeedsApproval
from loopkernel.errors import (
    LoopKernelError,
    RunError,
    ToolError,
    ToolServerDied,
    ToolTimeout,
    ToolUnavailable,
    UsageError,
    is_retryable,
    revive,
)
from loopkernel.evidence import redact, redact_text
from loopkernel.graph import JSON
from loopkernel.ids import RunId, TaskId
from loopkernel.store import EffectRecord, Store
from loopkernel.tools._defs import NO_RETRY, Effect, RetryPolicy, ToolDef
from loopkernel.tools._extra import require_mcp
from loopkernel.tools._schema import SchemaCache, json_problem
from loopkernel.tools._source import SourceSession, ToolSource, check_arguments
from loopkernel.tools._started import StartedServers

__all__ = [
    "PolicyHook",
    "RestartHook",
    "ServerRestart",
    "ToolCallRequest",
    "ToolLayer",
    "allow_all",
    "idempotency_key",
    "is_transient",
    "require_approval",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRequest:
    """What the policy hook is shown before a call is sent for the first time."""

    run_id: RunId
    task_id: TaskId
    attempt: int
    """The task's attempt (more than 1 after a crash)."""
    call_index: int
    """0-based index of the call within this execution of the task."""
    key: str
    """The idempotency key, ``run_id/task_id/call_index``."""
    tool: str
    source: str
    """The name of the tool source that serves it."""
    effect: Effect
    arguments: Mapping[str, JSON]
    human_input: JSON
    """What a human answered when the task was last resumed (``ctx.human_input``)."""
    wait_epoch: int
    """How many times the task was parked, so how many approvals it has had."""
    irreversible_seq: int
    """1-based count of irreversible calls in this execution so far, this one included
    (0 for a call that is not irreversible)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerRestart:
    """One restart of a dead tool server, as ``restart_log`` keeps it."""

    source: str
    reason: str
    """Why: the error the dead server caused."""
    run_id: RunId
    task_id: TaskId
    tool: str
    """The call that found the server dead (and is re-sent after the restart)."""
    count: int
    """Restarts of this source so far, this one included."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CallRules:
    """How long a layer's tool calls may take and how they are retried, where a tool's
    source and definition do not say (``retries`` overrides what they say)."""

    timeout_s: float = 30.0
    """The deadline of a call whose source declares none for its tool."""
    retry: RetryPolicy | None = None
    """The policy of a tool that declares none (``None``: ``DEFAULT_RETRY``)."""
    retries: Mapping[str, RetryPolicy] = dataclasses.field(default_factory=dict)
    """Per tool name, a policy that overrides the declared one."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise UsageError(f"CallRules.timeout_s must be > 0, not {self.timeout_s}")


PolicyHook: TypeAlias = Callable[[ToolCallRequest], Awaitable[None] | None]
"""Return to allow the call; raise ``NeedsApproval`` to park the task, or a ``RunError``
(``BudgetExceeded``, ``TripwireFired`` ...) to stop it."""

RestartHook: TypeAlias = Callable[[str, str], Awaitable[None] | None]
"""``on_restart(source_name, reason)``, awaited before the dead server is restarted."""


def _same(value: JSON) -> JSON:
    return value


def _redacted_error(err: ToolError) -> ToolError:
    """``err`` with credential-shaped text in its message and string attributes redacted."""
    attrs: dict[str, Any] = {
        k: redact_text(v) if isinstance(v, str) else v for k, v in err.attrs.items()
    }
    return type(err)(redact_text(err.message), **attrs)


def idempotency_key(run_id: str, task_id: str, index: int) -> str:
    """The key of the ``index``-th tool call of a task: the same in every execution."""
    return f"{run_id}/{task_id}/{index}"


def allow_all(request: ToolCallRequest) -> None:
    """A policy hook that allows every call (tests, read-only tool sets)."""


def require_approval(request: ToolCallRequest) -> None:
    """The default hook: an irreversible call waits for a human's approval.

    The n-th irreversible call of a task execution is allowed once the task has been
    approved n times (``wait_epoch >= n``: a parked task only runs again when a human
    resumed it). Until then the task parks with a reason naming the tool and the key.
    A worker that parks its task for reasons of its own spends epochs this rule counts;
    the real policy module will key approvals to calls.
    """
    if request.effect != "irreversible" or request.wait_epoch >= request.irreversible_seq:
        return
    raise NeedsApproval(
        f"tool {request.tool!r} is irreversible: approve task {request.task_id!r} "
        f"to send call {request.key}",
        tool=request.tool,
    )


class _Slot:
    """One source's live state in a layer: its session, restarts, or why it is gone."""

    def __init__(self, source: ToolSource) -> None:
        self.source = source
        self.session: SourceSession | None = None
        self.lock = asyncio.Lock()
        self.restarts = 0
        self.failed: ToolUnavailable | None = None


class ToolLayer:
    """The ``ToolCaller`` a ``Kernel`` is given: journaled, validated, policed tool calls.

    ::

        async with ToolLayer(store, [ToolSource.python_module("rec", "my.tools")]) as tools:
            kernel = Kernel(store, planner, workers, parts=KernelParts(tools=tools))
            await kernel.run(run_id)

    Sessions open lazily, one per source, on the first call that needs them, and stay open
    until the layer closes. Use one layer per run: the restart budget is per layer.
    """

    def __init__(
        self,
        store: Store,
        sources: Sequence[ToolSource],
        *,
        policy_hook: PolicyHook = require_approval,
        on_restart: RestartHook | None = None,
        rules: CallRules = CallRules(),
        redact_secrets: bool = True,
    ) -> None:
        require_mcp()
        self.redact_secrets = redact_secrets
        """Redact secrets in arguments, results and errors before they are journaled
        (``loopkernel.evidence.redact``; a tool opts out per field with ``keepSecrets``
        for results and ``keepArguments`` for arguments)."""
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise UsageError(f"tool source names must be unique: {names}")
        self.store = store
        self.sources = tuple(sources)
        self.policy_hook = policy_hook
        self.on_restart = on_restart
        self.rules = rules
        """Deadlines and retry policies where the tools do not say."""
        self.on_server: Callable[[str, str], None] | None = None
        """``on_server(source_name, "starting" | "ready")`` around a server's start: a
        progress view shows the second or so a server takes to start."""
        self.spawns = 0
        """Server processes started so far (restarts included)."""
        self.sent = 0
        """``tools/call`` requests sent so far (a re-send after a restart counts)."""
        self._slots = [_Slot(s) for s in self.sources]
        self._where: dict[str, tuple[_Slot, ToolDef]] = {}
        self._schemas = SchemaCache()
        self._restart_log: list[ServerRestart] = []
        self._irreversible: weakref.WeakKeyDictionary[CallContext, int] = (
            weakref.WeakKeyDictionary()
        )
        self._journal = EffectJournal(
            store, points=("tool_sent", "tool_returned"), span="tool", redact_secrets=redact_secrets
        )
        self._started: StartedServers | None = None
        self._open = False

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> ToolLayer:
        self._open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every session (each server gets its stdin closed, then a kill if need be)."""
        self._open = False
        sessions = [s.session for s in self._slots if s.session is not None]
        for slot in self._slots:
            slot.session = None
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)

    def adopt(self, servers: StartedServers) -> None:
        """Take sessions over from ``servers`` (started before this layer, while the run
        was being set up) instead of spawning: each on the first call that needs its
        source, each by this layer alone (``StartedServers`` hands a session over once).
        A restart after a server died spawns anew, as it always does."""
        self._started = servers

    @property
    def restarts(self) -> dict[str, int]:
        """Restarts so far, per source name."""
        return {slot.source.name: slot.restarts for slot in self._slots}

    @property
    def restart_log(self) -> tuple[ServerRestart, ...]:
        return tuple(self._restart_log)

    # -- discovery -------------------------------------------------------------------------

    async def resolve(self, name: str) -> tuple[str, ToolDef]:
        """``(source name, definition)`` of tool ``name``; the first source that has it wins.

        Sources with frozen defs answer without spawning; the others are opened in order.
        """
        slot, tool = await self._resolve(name)
        return slot.source.name, tool

    async def list_tools(self) -> list[tuple[str, ToolDef]]:
        """Every tool of every source, as ``(source name, definition)`` (opens them all)."""
        out: list[tuple[str, ToolDef]] = []
        for slot in self._slots:
            session = await self._session(slot, tool=None)
            out.extend((slot.source.name, t) for t in session.tools.values())
        return out

    async def _resolve(self, name: str) -> tuple[_Slot, ToolDef]:
        hit = self._where.get(name)
        if hit is not None:
            return hit
        for slot in self._slots:
            defs = slot.source.defs
            if defs is not None and (tool := defs.get(name)) is not None:
                effect = slot.source.effects.get(name, tool.effect)
                if effect != tool.effect:
                    tool = dataclasses.replace(tool, effect=effect)
                self._where[name] = (slot, tool)
                return slot, tool
        for slot in self._slots:
            if slot.source.defs is not None:
                continue
            session = await self._session(slot, tool=name)
            if name in session.tools:
                self._where[name] = (slot, session.tools[name])
                return self._where[name]
        raise ToolError(
            f"no tool source serves {name!r} (sources: "
            f"{', '.join(s.name for s in self.sources) or 'none'})",
            tool=name,
            kind="unknown_tool",
        )

    # -- the call --------------------------------------------------------------------------

    async def call(
        self,
        ctx: CallContext,
        index: int,
        name: str,
        arguments: Mapping[str, JSON],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-call deadline handed on
    ) -> JSON:
        """Call tool ``name`` as the ``index``-th call of ``ctx``'s task; see the module doc.

        ``timeout`` overrides the tool's deadline (``ToolSource.timeouts``, else the
        layer's ``rules.timeout_s``) for this call.
        """
        if not self._open:
            raise UsageError("the tool layer is not open; use `async with ToolLayer(...)`")
        args = dict(arguments)
        if (problem := json_problem(args)) is not None:
            raise ToolError(
                f"{name}: arguments are not JSON: {problem}", tool=name, kind="invalid_arguments"
            )
        key = idempotency_key(ctx.run_id, ctx.task_id, index)
        call = Call(
            run_id=ctx.run_id,
            task_id=ctx.task_id,
            call_index=index,
            key=key,
            tool=name,
            arguments=args,
        )

        async def prepare(prior: EffectRecord | None) -> Plan[JSON]:
            slot, tool = await self._resolve(name)
            check_arguments(self._schemas, tool, args)

            async def before() -> None:  # the first send: policed, its server started
                seq = self._count(ctx, tool.effect)
                await self._police(ctx, index, key, slot, tool, args, seq)
                await self._session(slot, tool=name)  # cannot start: nothing journaled

            return self._plan(ctx, slot, tool, args, timeout, before)

        return await self._journal.call(
            ctx,
            call,
            prepare=prepare,
            revive=_same,
            revive_error=lambda error: _error_from_journal(error, name),
            seen=lambda prior: self._seen(ctx, prior),
            span_attributes={"loopkernel.tool": name},
        )

    def _plan(
        self,
        ctx: CallContext,
        slot: _Slot,
        tool: ToolDef,
        args: dict[str, JSON],
        timeout: float | None,
        before: Callable[[], Awaitable[None]],
    ) -> Plan[JSON]:
        """How the journal sends ``tool``: retries of faults that may pass, a restart of a
        dead server, and what is journaled of an answer."""
        limit = timeout or slot.source.timeouts.get(tool.name) or self.rules.timeout_s
        policy = self.retry_policy(tool)
        resendable = self.resendable(tool)

        async def send(key: str) -> JSON:
            sent = 0
            while True:
                sent += 1
                try:
                    return await self._send(slot, tool, args, key, limit, ctx, resendable)
                except (ToolError, ToolTimeout, ToolUnavailable) as err:
                    if not is_transient(err):
                        raise
                    if not resendable:
                        if isinstance(err, ToolError):  # the tool answered: it did nothing
                            raise NoEffect(_gave_up(err, tool, sent)) from err
                        raise OutcomeUnknown(err.message) from err
                    # It may pass: the effect stays `intended` (nobody knows whether it
                    # happened) and the same key goes out again.
                    if sent >= policy.attempts:
                        raise _gave_up(err, tool, sent) from err
                    await asyncio.sleep(policy.delay(sent))

        def settle(value: JSON) -> tuple[JSON, JSON]:
            # before it is journaled; the task sees what the journal keeps
            if self.redact_secrets:
                value = redact(value, keep=tool.keep_secrets)
            return value, value

        def answer(err: BaseException) -> LoopKernelError | None:
            if not isinstance(err, ToolError) or is_transient(err):
                return None  # says nothing of the call: it stays intended
            return _redacted_error(err) if self.redact_secrets else err

        return Plan(
            effect=tool.effect,
            send=send,
            settle=settle,
            answer=answer,
            before=before,
            resendable=resendable,
            keep_arguments=tool.keep_arguments,
        )

    def resendable(self, tool: ToolDef) -> bool:
        """Whether a call of ``tool`` that got no answer may go out again under its key:
        anything but an irreversible tool, and an irreversible one that declares it
        deduplicates by key (``dedupesByKey``)."""
        return tool.effect != "irreversible" or tool.dedupes_by_key

    def retry_policy(self, tool: ToolDef) -> RetryPolicy:
        """The layer's override for the tool, else its declared policy, else the layer's
        default, else ``DEFAULT_RETRY``; an irreversible tool is sent once, whatever is said."""
        if tool.effect == "irreversible":
            return NO_RETRY
        declared = self.rules.retries.get(tool.name) or tool.retry or self.rules.retry
        return declared or tool.retry_policy

    def _seen(self, ctx: CallContext, prior: EffectRecord) -> None:
        self._count(ctx, prior.effect)

    def _count(self, ctx: CallContext, effect: str) -> int:
        if effect != "irreversible":
            return 0
        n = self._irreversible.get(ctx, 0) + 1
        self._irreversible[ctx] = n
        return n

    async def _police(
        self,
        ctx: CallContext,
        index: int,
        key: str,
        slot: _Slot,
        tool: ToolDef,
        args: dict[str, JSON],
        seq: int,
    ) -> None:
        request = ToolCallRequest(
            run_id=ctx.run_id,
            task_id=ctx.task_id,
            attempt=ctx.attempt,
            call_index=index,
            key=key,
            tool=tool.name,
            source=slot.source.name,
            effect=tool.effect,
            arguments=args,
            human_input=ctx.human_input,
            wait_epoch=ctx.wait_epoch,
            irreversible_seq=seq,
        )
        verdict = self.policy_hook(request)
        if inspect.isawaitable(verdict):
            await verdict

    async def _send(
        self,
        slot: _Slot,
        tool: ToolDef,
        args: dict[str, JSON],
        key: str,
        limit: float,
        ctx: CallContext,
        resendable: bool,
    ) -> JSON:
        while True:
            session = await self._session(slot, tool=tool.name)
            self.sent += 1
            try:
                return await session.call(tool.name, args, key=key, time_limit=limit)
            except ToolServerDied as err:
                restarted = await self._restart(slot, session, err, ctx, tool.name)
                if not resendable:  # the server is replaced for later calls; not this one
                    raise OutcomeUnknown(f"its server died: {err.message}") from None
                if not restarted:
                    raise ToolServerDied(
                        f"{err.message} (it died again after {slot.restarts} restart(s))",
                        **err.attrs,
                    ) from None
            except ToolUnavailable as err:
                await self._fail(slot, session, err)
                raise

    # -- sessions --------------------------------------------------------------------------

    async def _session(self, slot: _Slot, *, tool: str | None) -> SourceSession:
        if slot.session is not None and slot.failed is None:
            return slot.session
        async with slot.lock:
            if slot.failed is not None:
                raise _again(slot.failed, tool)
            if slot.session is None:
                if not self._open:
                    raise UsageError("the tool layer is closed")
                tracer = telemetry.tracer()
                if not tracer:
                    slot.session = await self._start(slot, tool)
                    return slot.session
                # the start-up's own span: a cold server's seconds are not the call's
                attributes = {"loopkernel.tool_server": slot.source.name, "loopkernel.tool": tool}
                span = tracer.start(f"start server {slot.source.name}", attributes)
                try:
                    slot.session = await self._start(slot, tool)
                except BaseException as exc:
                    tracer.end(span, error=exc)
                    raise
                tracer.end(span, {"loopkernel.tool_server.restarts": slot.restarts})
            return slot.session

    async def _start(self, slot: _Slot, tool: str | None) -> SourceSession:
        """Start ``slot``'s server (or take the one started early) until it answers."""
        early = None if self._started is None else self._started.take(slot.source)
        session = early or SourceSession(slot.source, schemas=self._schemas)
        session.schemas = self._schemas
        self.spawns += 1
        if self.on_server is not None:
            self.on_server(slot.source.name, "starting")
        try:
            if early is None:
                await session.open()
            else:
                await session.wait_ready()
        except ToolServerDied:
            # killed while it started: one more start, then a fault that may pass
            # (the run stays resumable; nothing was sent)
            session = SourceSession(slot.source, schemas=self._schemas)
            self.spawns += 1
            try:
                await session.open()
            except ToolServerDied as again:
                raise _again(again, tool).retries_spent() from None
            except ToolUnavailable as again:
                slot.failed = again
                raise _again(again, tool) from None
        except ToolUnavailable as err:
            slot.failed = err  # a setup that is wrong: final for this layer
            raise _again(err, tool) from None
        if self.on_server is not None:
            self.on_server(slot.source.name, "ready")
        return session

    async def _fail(self, slot: _Slot, session: SourceSession, err: ToolUnavailable) -> None:
        """Mark a source gone for the rest of the layer's life (garbage on stdout ...)."""
        async with slot.lock:
            if slot.session is session:
                slot.failed = err
                slot.session = None
        await session.close()

    async def _restart(
        self,
        slot: _Slot,
        dead: SourceSession,
        err: ToolUnavailable,
        ctx: CallContext,
        tool: str,
    ) -> bool:
        """Replace a dead session if the budget allows; whether the caller may re-send."""
        async with slot.lock:
            if slot.session is not dead:  # another call restarted it (or it failed for good)
                return slot.failed is None
            if slot.restarts >= slot.source.max_restarts:
                slot.failed = err
                slot.session = None
                await dead.close()
                return False
            slot.restarts += 1
            slot.session = None
            await dead.close()
            entry = ServerRestart(
                source=slot.source.name,
                reason=err.message,
                run_id=ctx.run_id,
                task_id=ctx.task_id,
                tool=tool,
                count=slot.restarts,
            )
            self._restart_log.append(entry)
            if self.on_restart is not None:
                done = self.on_restart(slot.source.name, err.message)
                if inspect.isawaitable(done):
                    await done
        return True


def is_transient(err: LoopKernelError) -> bool:
    """Whether a tool error is a fault that may pass (retry, then leave the run resumable)
    or an answer (the task fails with it): the error's ``retryable`` (``errors``' one rule).
    ``docs/tools.md`` has the table.

    - ``ToolTimeout`` (MCP error -32001, the client's deadline): may pass.
    - ``ToolServerDied`` (MCP -32000, the connection closed; the layer already restarted
      the server once): may pass. ``ToolCannotStart`` and ``ToolNotMCP`` are a setup that
      is wrong: final.
    - ``ToolTransientError`` (the handler raised ENOSPC, EIO, ``TimeoutError`` ...): may
      pass. Every other ``ToolError`` (bad arguments, bad output, a handler that raised
      anything else, MCP -32602 and -32603): final.
    """
    return isinstance(err, ToolError | ToolTimeout | ToolUnavailable) and is_retryable(err)


def _gave_up(
    err: ToolError | ToolTimeout | ToolUnavailable, tool: ToolDef, sent: int
) -> ToolError | ToolTimeout | ToolUnavailable:
    """The error again, marked as a fault that may pass that the layer stopped re-sending:
    the executor leaves the run resumable instead of failing the task (``TransientFault``).
    A worker that catches it may still decide otherwise."""
    return err.retries_spent(sent=sent, effect=tool.effect)


def _again(err: ToolUnavailable, tool: str | None) -> ToolUnavailable:
    """A fresh copy of a source's failure (its class kept), naming the tool this call
    wanted."""
    attrs: dict[str, Any] = dict(err.attrs)
    if tool is not None:
        attrs["tool"] = tool
    return type(err)(err.message, **attrs)


_FAMILIES = frozenset({"ToolError", "ToolTimeout", "ToolUnavailable"})


def _error_from_journal(error: JSON, tool: str) -> ToolError | ToolTimeout | ToolUnavailable:
    """The error a journaled failure stands for, rebuilt so its verdict is the same."""
    if not isinstance(error, dict):
        return ToolError(f"{tool}: failed (journaled)", tool=tool, kind="handler_error")
    data = {"tool": tool, **error}
    if data.get("type") not in _FAMILIES:
        data["type"] = "ToolError"
    err = revive(RunError, data)
    assert isinstance(err, ToolError | ToolTimeout | ToolUnavailable)
    return err
