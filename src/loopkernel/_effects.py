"""The effect journal: every call of a run that acts outside it (a tool call, a model
call) goes through ``EffectJournal.call``, so replay, the divergence check, redaction and
the unknown outcome are written once. Tools and models plug in a ``Plan`` with a ``send``.

One call, in order::

    key                  the caller's: the same in every execution of the task
    journaled already?   the same call?  tool and sha256 of the raw arguments, else
                                         ReplayDivergence
                         done    -> its result again, nothing sent (replayed)
                         failed  -> its error again
                         resent  -> follow the decision to the key it was resent under
                         intended-> in flight when the last execution ended: see below
    prepare              the caller resolves the call (a tool's definition, its schema
                         check) into a Plan
    plan.before          first send only: a policy hook (``NeedsApproval``), a server
    journal intended     Effects.intend_effect: arguments redacted, their digest kept
    crashpoint(sent)
    send                 plan.send(key)
    crashpoint(returned)
    journal the outcome  done + plan.settle(value), or failed + plan.answer(error) for an
                         error that answers the call; any other error leaves it intended

**In flight, no answer.** A call that was ``intended`` when the last execution ended (the
process died with it in flight), or whose send ended without an answer (its server died,
a deadline passed: the send raises ``OutcomeUnknown``) may or may not have had its effect.
A ``resendable`` call (read-only, idempotent, a tool that deduplicates by key, a model
call the gateway's ledger answers once) is sent again under the same key. Any other is an
**unknown outcome**: the journal never sends it again by itself. The task parks
(``NeedsApproval``) with a reason that begins ``outcome unknown``, and a human who has
checked the tool's side approves the task:

- with no payload (or any payload but the two below): send it once more. The decision is
  journaled first (the row ``failed`` with ``{"type": "Resent", "resent_as": KEY}``), and
  the call goes out under ``<key>/resend/<n>``: a crash after it finds the decision made
  and that new call in flight, which is again an unknown outcome.
- with ``{"resend": false, "result": VALUE}``: it happened; the row is ``done`` with
  ``VALUE`` and the call returns it.
- with ``{"resend": false}``: it is not sent; the row is ``failed`` with a
  ``ToolUnavailable`` of kind ``outcome_unknown``, raised to the task.

A send that ends with ``NoEffect`` (the tool answered that it did nothing, e.g. a handler
out of disk) leaves a non-resendable call closed the same way (``Resent``), so the next
execution sends it anew instead of asking a human about an outcome that is known.

**Secrets.** Arguments are stored redacted (``loopkernel.evidence.redact``, minus the
paths the caller keeps) with ``arguments_digest``, the sha256 of the canonical JSON of the
raw arguments, which is what a replay is compared by; a row written before digests
existed is compared by its arguments, as it always was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar, cast

from loopkernel import telemetry
from loopkernel._hooks import CallContext, NeedsApproval, crashpoint
from loopkernel.errors import LoopKernelError, ReplayDivergence, ToolUnavailable
from loopkernel.evidence import redact
from loopkernel.graph import JSON
from loopkernel.graph.door import Entry, ValueRefused, admit
from loopkernel.ids import RunId, TaskId
from loopkernel.store import EffectRecord

__all__ = [
    "OUTCOME_UNKNOWN",
    "RESENT",
    "Call",
    "EffectJournal",
    "Effects",
    "NoEffect",
    "OutcomeUnknown",
    "Plan",
    "arguments_digest",
    "canonical",
    "unknown_reason",
]

T = TypeVar("T")

OUTCOME_UNKNOWN = "outcome unknown"
"""How the reason of a task parked on an unknown outcome begins."""
RESENT = "Resent"
"""The ``error.type`` of a row closed by a decision to send its call anew."""


class Effects(Protocol):
    """The store calls the effect journal makes (``loopkernel.store.Store`` has them)."""

    async def get_effect(self, run_id: RunId, key: str) -> EffectRecord | None: ...
    async def intend_effect(self, record: EffectRecord) -> EffectRecord: ...
    async def finish_effect(
        self,
        run_id: RunId,
        key: str,
        *,
        status: Literal["done", "failed"],
        result: JSON = None,
        error: JSON = None,
    ) -> None: ...


class OutcomeUnknown(Exception):
    """Raised by a ``send`` whose call left and got no answer (its server died, its
    deadline passed) when the call may not be sent again (``Plan.resendable`` false)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class NoEffect(Exception):
    """Raised by a ``send`` when the tool answered that the call did nothing and may be
    sent again later (a handler out of disk): ``error`` is what the task is raised."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One call as the journal keys and compares it, before anything is resolved."""

    run_id: RunId
    """The run."""
    task_id: TaskId
    """The task that makes it."""
    call_index: int
    """The n-th effect of the task's execution (tool and model calls share the count)."""
    key: str
    """The idempotency key: the same in every execution."""
    tool: str
    """What is called (``"model"`` for a model call)."""
    arguments: Mapping[str, JSON]
    """The raw arguments, as they are sent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan(Generic[T]):
    """What the caller tells the journal once it has resolved a call."""

    effect: str
    """``read_only``, ``idempotent``, ``irreversible`` or ``model``."""
    send: Callable[[str], Awaitable[T]]
    """Send the call under the given key; raise ``OutcomeUnknown`` or ``NoEffect`` as
    above, any other error as it is."""
    settle: Callable[[T], tuple[JSON, T]]
    """A value sent back: ``(what the journal keeps, what the call returns)``."""
    answer: Callable[[BaseException], LoopKernelError | None]
    """An error that answers the call, as it is journaled and raised (redacted), or
    ``None``: the error says nothing of the call and the row stays ``intended``."""
    before: Callable[[], Awaitable[None]] | None = None
    """Awaited before the first send only, before anything is journaled: a policy hook
    (``NeedsApproval`` parks the task), a server that must start."""
    resendable: bool = True
    """Whether a call in flight without an answer may go out again under its key."""
    keep_arguments: Collection[str] = field(default=())
    """Argument paths left out of redaction (the caller's opt-out)."""


def canonical(value: Any) -> str:
    """One spelling of a JSON value (sorted keys, no spaces), for comparing and hashing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def arguments_digest(arguments: Mapping[str, JSON]) -> str:
    """sha256 of the canonical JSON of the raw arguments: what a replay is compared by."""
    return hashlib.sha256(canonical(arguments).encode()).hexdigest()


def unknown_reason(key: str, tool: str, why: str) -> str:
    """The reason a task parks with when call ``key`` has an unknown outcome."""
    return (
        f"{OUTCOME_UNKNOWN}: call {key} to {tool!r} was in flight with no answer ({why}); "
        "it may or may not have had its effect, and it is never sent twice by itself. "
        "Check the tool's side, then approve the task to send it again, or approve it with "
        'payload {"resend": false} (and "result": VALUE if it happened)'
    )


def _resent_key(root: str, n: int) -> str:
    return f"{root}/resend/{n}"


class EffectJournal:
    """One layer's door to the effect journal (``Effects``): ``call`` runs one call."""

    def __init__(
        self,
        store: Effects,
        *,
        points: tuple[str, str],
        span: str,
        redact_secrets: bool = True,
    ) -> None:
        self.store = store
        self.points = points
        """The crash points passed before the send and after it returns."""
        self.span = span
        """The span's name prefix (``"tool"``, ``"model"``)."""
        self.redact_secrets = redact_secrets
        """Store arguments redacted (the digest keeps the raw arguments comparable)."""

    async def call(
        self,
        ctx: CallContext,
        call: Call,
        *,
        prepare: Callable[[EffectRecord | None], Awaitable[Plan[T]]],
        revive: Callable[[JSON], T],
        revive_error: Callable[[JSON], BaseException],
        seen: Callable[[EffectRecord], None] | None = None,
        span_name: str | None = None,
        span_attributes: Mapping[str, JSON] | None = None,
        describe: Callable[[T], Mapping[str, JSON]] | None = None,
    ) -> T:
        """Run ``call`` through the journal (see the module doc).

        ``prepare(prior)`` resolves the call and is awaited unless a journaled answer is
        replayed; ``prior`` is ``None`` on the first send.
        ``revive`` and ``revive_error`` rebuild a journaled result and error; ``seen`` is
        shown every journaled row found. ``describe`` adds a value's facts to the span.
        """
        tracer = telemetry.tracer()
        facts: dict[str, JSON] = {}
        if not tracer:
            return await self._call(ctx, call, prepare, revive, revive_error, seen, facts)
        attrs: dict[str, JSON] = {"loopkernel.key": call.key, **(span_attributes or {})}
        span = tracer.start(span_name or f"{self.span} {call.tool}", attrs)
        with tracer.current(span):
            try:
                value = await self._call(ctx, call, prepare, revive, revive_error, seen, facts)
            except BaseException as exc:
                tracer.end(span, facts, error=exc)
                raise
        if describe is not None:
            facts.update(describe(value))
        tracer.end(span, facts)
        return value

    async def _call(
        self,
        ctx: CallContext,
        call: Call,
        prepare: Callable[[EffectRecord | None], Awaitable[Plan[T]]],
        revive: Callable[[JSON], T],
        revive_error: Callable[[JSON], BaseException],
        seen: Callable[[EffectRecord], None] | None,
        facts: dict[str, JSON],
    ) -> T:
        model = call.tool == "model"
        admit(call.arguments, Entry.MODEL_REQUEST if model else Entry.TOOL_ARGUMENTS)
        digest = arguments_digest(call.arguments)
        prior, resends = await self._lookup(call, digest)
        facts["loopkernel.replayed"] = prior is not None and prior.status != "intended"
        if prior is not None:
            facts["loopkernel.effect"] = prior.effect
            if seen is not None:
                seen(prior)
            if prior.status == "done":
                return revive(prior.result)
            if prior.status == "failed":
                raise revive_error(prior.error)
        plan = await prepare(prior)
        facts["loopkernel.effect"] = plan.effect
        key = call.key if resends == 0 else _resent_key(call.key, resends)
        if prior is not None and not plan.resendable:
            # In flight when the last execution ended, and not to be sent twice.
            decided = await self._decide(ctx, call, prior, plan, digest, resends)
            if not isinstance(decided, str):
                return decided.value
            key = decided
        elif prior is None:
            if plan.before is not None:
                try:
                    await plan.before()
                except NeedsApproval as ask:  # parked: say which call waits, redacted
                    if ask.call is None:
                        ask.call = self._pending(call, key, plan, ask.cost_usd)
                    raise
            record = await self.store.intend_effect(self._record(call, key, plan, digest))
            if record.status == "done":  # another executor got there first
                return revive(record.result)
            if record.status == "failed":
                raise revive_error(record.error)
        sent, returned = self.points
        crashpoint(sent)
        try:
            value = await plan.send(key)
        except OutcomeUnknown as lost:
            raise NeedsApproval(unknown_reason(key, call.tool, lost.why), tool=call.tool) from None
        except NoEffect as none:
            crashpoint(returned)
            await self._close(call, key, resends + 1, str(none.error))
            raise none.error from None
        except BaseException as err:
            clean = plan.answer(err) if isinstance(err, Exception) else None
            if clean is None:
                raise
            crashpoint(returned)
            await self.store.finish_effect(call.run_id, key, status="failed", error=clean.verdict())
            if clean is err:
                raise
            raise clean from None
        crashpoint(returned)
        kept, value = plan.settle(value)
        try:  # sent, so journaled either way: a reply the door refuses is the call's error
            admit(kept, Entry.MODEL_REPLY if model else Entry.TOOL_RESULT)
        except ValueRefused as refused:
            await self.store.finish_effect(
                call.run_id, key, status="failed", error=refused.verdict()
            )
            raise
        await self.store.finish_effect(call.run_id, key, status="done", result=kept)
        return value

    async def _lookup(self, call: Call, digest: str) -> tuple[EffectRecord | None, int]:
        """The row that stands for ``call`` now (following ``Resent`` decisions), and how
        many decisions were followed; the first row is checked against the call."""
        prior = await self.store.get_effect(call.run_id, call.key)
        if prior is None:
            return None, 0
        _check_same(prior, call, digest)
        resends = 0
        while prior is not None and prior.status == "failed" and _resent(prior.error):
            resends += 1
            prior = await self.store.get_effect(call.run_id, _resent_key(call.key, resends))
        return prior, resends

    def _arguments(self, call: Call, plan: Plan[Any]) -> JSON:
        """The arguments as the journal stores them: redacted, minus the caller's paths."""
        args: JSON = dict(call.arguments)
        return redact(args, keep=plan.keep_arguments) if self.redact_secrets else args

    def _pending(
        self, call: Call, key: str, plan: Plan[Any], cost_usd: float | None
    ) -> dict[str, JSON]:
        """A call parked before its first send (``NeedsApproval.call``), as it is stored."""
        if cost_usd is None:
            for name in ("cost_usd", "est_cost_usd"):
                value = call.arguments.get(name)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    cost_usd = float(value)
                    break
        return {
            "tool": call.tool,
            "key": key,
            "effect": plan.effect,
            "arguments": self._arguments(call, plan),
            "cost_usd": cost_usd,
        }

    def _record(self, call: Call, key: str, plan: Plan[Any], digest: str) -> EffectRecord:
        args = self._arguments(call, plan)
        return EffectRecord(
            run_id=call.run_id,
            key=key,
            task_id=call.task_id,
            call_index=call.call_index,
            tool=call.tool,
            effect=plan.effect,
            arguments=args,
            status="intended",
            arguments_digest=digest,
        )

    async def _close(self, call: Call, key: str, n: int, why: str) -> str:
        """Journal that the call at ``key`` goes out anew, under the ``n``-th resend key."""
        again = _resent_key(call.key, n)
        error: JSON = {"type": RESENT, "resent_as": again, "message": why}
        await self.store.finish_effect(call.run_id, key, status="failed", error=error)
        return again

    async def _decide(
        self,
        ctx: CallContext,
        call: Call,
        prior: EffectRecord,
        plan: Plan[T],
        digest: str,
        resends: int,
    ) -> str | _Decided[T]:
        """An unknown outcome: park, or carry out the human's answer (journaled first).
        Returns the key to send under, or the value the call returns without a send."""
        reason = unknown_reason(prior.key, call.tool, "the process or its server died")
        if ctx.wait_reason is None or not ctx.wait_reason.startswith(
            f"{OUTCOME_UNKNOWN}: call {prior.key} "
        ):
            raise NeedsApproval(reason, tool=call.tool)
        answer = ctx.human_input
        if isinstance(answer, dict) and answer.get("resend") is False:
            if "result" in answer:
                kept, value = plan.settle(cast(T, answer["result"]))
                await self.store.finish_effect(call.run_id, prior.key, status="done", result=kept)
                return _Decided(value)
            err = ToolUnavailable(
                f"call {prior.key} to {call.tool!r} had an unknown outcome and a human "
                "decided not to send it again",
                tool=call.tool,
                kind="outcome_unknown",
            )
            await self.store.finish_effect(
                call.run_id, prior.key, status="failed", error=err.verdict()
            )
            raise err
        again = await self._close(call, prior.key, resends + 1, "approved: send it again")
        await self.store.intend_effect(self._record(call, again, plan, digest))
        return again


@dataclass(frozen=True, slots=True)
class _Decided(Generic[T]):
    value: T


def _resent(error: JSON) -> bool:
    return isinstance(error, dict) and error.get("type") == RESENT


def _check_same(prior: EffectRecord, call: Call, digest: str) -> None:
    if prior.arguments_digest is not None:
        same = prior.arguments_digest == digest
    else:  # a row from before digests: its arguments were stored raw
        same = canonical(prior.arguments) == canonical(dict(call.arguments))
    if prior.tool != call.tool or not same:
        raise ReplayDivergence(
            f"call {prior.key} was journaled as {prior.tool!r} with other arguments than "
            f"{call.tool!r} asks for now: the task does not make the same tool calls and "
            "model calls in the same order on every execution (build them only from the "
            "task's input and what it may see)",
            key=prior.key,
            tool=call.tool,
            journaled_tool=prior.tool,
        )
