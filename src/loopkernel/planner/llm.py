"""``LLMPlanner``: a model proposes each patch; anything invalid falls back, journaled.

::

    planner = LLMPlanner(
        allow=Allowlist(skills=(AllowedSkill(name="research", input_schema={...}),)),
        fallback=MyRulesPlanner(),
        client=ModelClient.from_env(),
    )

For each event: the fallback planner answers first (it is the deterministic answer, and
the model is shown it); the prompt is built from the snapshot, the event and bounded
evidence (``_prompt``); the model is called through the gateway under the key
``RUN/plan/SEQ`` with the proposal schema (``_schema``: the allowlist and the snapshot as an
exact, bounded JSON Schema; ``max_tokens`` sized from its largest valid reply); the reply
is judged strictly (``_judge``: parse, allowlist, ``validate``); a refused reply is asked
again once with the judge's reason (``RUN/plan/SEQ/1``), inside the same deadline. The
planner returns a ``Proposal``: the kernel runs the policy guard and ``validate`` on it
once more, applies it (``planner="llm"``) or the fallback
(``planner="fallback"``), and journals the rejection's named reason, the raw reply's hash,
model, usage and latency beside the applied patch. A model error of any kind (timeout, 5xx,
budget, no gateway) is a rejection like any other: the run goes on; an unreachable gateway
or a refused token is ``model_unavailable``, said once on stderr.

The model is asked once per event (twice with the re-ask): the patch journal is the
planner's journal, and a resumed run never re-plans an event that has a patch. An event
planned when a crash struck before its patch was committed is asked again with the same
keys, so the gateway's ledger answers it without a second provider call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import inspect
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from loopkernel.errors import ModelUnauthorized, ModelUnavailable
from loopkernel.evidence import Evidence
from loopkernel.graph import JSON, Event, GraphPatch, GraphState
from loopkernel.ids import RunId
from loopkernel.planner._judge import REASONS, AllowedSkill, Allowlist, Judgement, judge
from loopkernel.planner._prompt import Prompt, PromptStyle, build_prompt
from loopkernel.planner._protocol import Planner, Proposal, Snapshot
from loopkernel.planner._rules import (
    Bound,
    Cite,
    Derive,
    Follow,
    Name,
    Postconditions,
    Require,
    Scope,
)
from loopkernel.planner._schema import proposal_schema, reply_tokens

if TYPE_CHECKING:  # the model face loads when a planner first asks (not at import)
    from loopkernel.models import Ask as ModelAsk

__all__ = [
    "REASONS",
    "AllowedSkill",
    "Allowlist",
    "Asking",
    "Bound",
    "Cite",
    "Derive",
    "Follow",
    "Judgement",
    "LLMPlanner",
    "Name",
    "PlanTimings",
    "Postconditions",
    "Prompt",
    "PromptStyle",
    "Require",
    "Scope",
    "build_prompt",
    "judge",
    "plan_key",
    "planner_for",
]


class _Completion(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def latency_ms(self) -> float: ...


class _Client(Protocol):
    """``loopkernel.models.ModelClient`` as the planner uses it."""

    async def complete(
        self,
        messages: Sequence[Any],
        *,
        key: str,
        run_id: str,
        task_id: str | None = None,
        ask: ModelAsk = ...,
    ) -> _Completion: ...


EvidenceSource = Callable[[RunId], Awaitable[Sequence[Evidence]]]
"""Where the planner reads a run's typed evidence (e.g. ``store.evidence``)."""


@dataclass(kw_only=True, slots=True)
class PlanTimings:
    """Where one event's planning time went (for ``bench/planner_overhead.py``)."""

    prompt_ms: float = 0.0
    """Building the prompt."""
    model_ms: float = 0.0
    """Waiting for the gateway (the model's latency and the HTTP round trip)."""
    judge_ms: float = 0.0
    """Parsing, the allowlist and ``validate``."""


def plan_key(run_id: str, seq: int, attempt: int = 0) -> str:
    """The model call's idempotency key for event ``seq`` (``attempt`` 1: the re-ask): the
    same in every execution."""
    return f"{run_id}/plan/{seq}" + (f"/{attempt}" if attempt else "")


def _reason_of(exc: BaseException) -> str:
    """The named reason for a failed model call: the error's stable code."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        return "budget" if code == "budget_exceeded" else code
    if isinstance(exc, TimeoutError):
        return "model_timeout"
    return "model_error"


@dataclass(frozen=True, kw_only=True, slots=True)
class Asking:
    """How an ``LLMPlanner`` asks the model for one event."""

    max_tokens: int = 1024
    """The cap on a call's ``max_tokens``, which is sized from the proposal schema."""
    timeout_s: float = 30.0
    """Seconds for the event's calls together (a re-ask included)."""
    max_evidence: int = 20
    """The run's last so many evidence items go in the prompt."""
    suggest: bool = True
    """Whether the prompt shows the fallback's patch as the deterministic answer."""
    reask: int = 1
    """Re-asks after a refused reply (0 or 1), with the judge's reason, inside the same
    deadline; journaled in the gateway under ``RUN/plan/SEQ/1``."""
    max_ops: int = 4
    """``maxItems`` of the proposal schema (at least the fallback's own op count)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reask", max(0, min(1, self.reask)))


class LLMPlanner:
    """A ``Planner`` whose patches a model proposes and a deterministic planner backs."""

    def __init__(
        self,
        *,
        allow: Allowlist,
        fallback: Planner,
        client: _Client | None,
        evidence: EvidenceSource | None = None,
        asking: Asking = Asking(),
    ) -> None:
        self.allow = allow
        self.fallback = fallback
        self.client = client
        self.evidence = evidence
        self.asking = asking
        """How the model is asked (caps, deadline, re-ask)."""
        self._warned = False
        self.last = PlanTimings()
        """The timings of the last event planned."""

    @classmethod
    def from_env(cls, *, allow: Allowlist, fallback: Planner, **options: Any) -> LLMPlanner:
        """The planner with the gateway ``LOOPKERNEL_GATEWAY`` names; ``UsageError`` (one
        line, nothing written) when no gateway is configured."""
        from loopkernel.errors import UsageError
        from loopkernel.models import ModelClient

        client = ModelClient.from_env()
        if client is None:
            raise UsageError(
                "--planner llm needs a model gateway: start `loopkernel gateway ...` and set "
                "LOOPKERNEL_GATEWAY and LOOPKERNEL_GATEWAY_TOKEN (docs/models.md)"
            )
        return cls(allow=allow, fallback=fallback, client=client, **options)

    async def plan(self, snapshot: Snapshot, event: Event) -> Proposal:
        answer = self.fallback.plan(snapshot, event)
        fallback = await answer if inspect.isawaitable(answer) else answer
        if not isinstance(fallback, GraphPatch):
            raise TypeError(f"the fallback planner returned {type(fallback).__name__}")
        if not isinstance(snapshot, GraphState):
            raise TypeError("LLMPlanner plans against the kernel's GraphState")
        from loopkernel.models import Ask as ModelAsk

        timings = self.last = PlanTimings()
        if self.client is None:
            return Proposal(
                patch=None, fallback=fallback, reason="no_model", detail="no gateway configured"
            )
        t0 = time.perf_counter()
        items: Sequence[Evidence] = ()
        if self.evidence is not None:
            items = list(await self.evidence(snapshot.run_id))[-self.asking.max_evidence :]
        shown = fallback if self.asking.suggest else None
        prompt = build_prompt(snapshot, event, self.allow, evidence=items, suggestion=shown)
        messages = _messages(prompt)
        most = max(self.asking.max_ops, len(fallback.ops))
        schema = proposal_schema(self.allow, snapshot, max_ops=most)
        max_tokens = reply_tokens(schema, cap=self.asking.max_tokens)
        t1 = time.perf_counter()
        timings.prompt_ms = (t1 - t0) * 1000
        end = time.monotonic() + self.asking.timeout_s
        asked: list[_Asked] = []
        verdict = Judgement(reason="empty", detail="not asked")
        for attempt in range(1 + self.asking.reask):
            left = end - time.monotonic()
            if attempt and left <= 1.0:  # a re-ask shares the first call's deadline
                break
            t = time.perf_counter()
            try:
                ask = ModelAsk(
                    max_tokens=max_tokens, response_schema=schema, timeout_s=left, validate=False
                )
                key = plan_key(snapshot.run_id, event.seq, attempt)
                reply = await self.client.complete(
                    messages, key=key, run_id=snapshot.run_id, ask=ask
                )
            except Exception as exc:
                timings.model_ms += (time.perf_counter() - t) * 1000
                if asked:  # the re-ask failed: the first reply's verdict stands
                    break
                reason = self._unavailable(exc)
                detail = f"{type(exc).__name__}: {exc}"
                return Proposal(patch=None, fallback=fallback, reason=reason, detail=detail)
            t2 = time.perf_counter()
            timings.model_ms += (t2 - t) * 1000
            try:
                verdict = judge(reply.text, snapshot, self.allow, fallback=fallback, event=event)
            except Exception as exc:  # a bug of ours must not fail the run: the rules answer
                verdict = Judgement(reason="judge_error", detail=f"{type(exc).__name__}: {exc}")
            timings.judge_ms += (time.perf_counter() - t2) * 1000
            asked.append(_Asked(reply=reply, verdict=verdict))
            if verdict.patch is not None or verdict.reason in _FINAL:
                break
            messages = [
                *_messages(prompt),
                _message("assistant", _clip(reply.text, 2_000)),
                _message("user", _reask(verdict)),
            ]
        last = asked[-1].reply
        notes = []
        if len(asked) > 1:
            first = asked[0].verdict
            notes.append(f"re-asked once after {first.reason}: {first.detail}")
        cut = [i + 1 for i, a in enumerate(asked) if _finish(a.reply) == "length"]
        if cut:
            notes.append(
                "finish_reason=length (reply "
                + ", ".join(map(str, cut))
                + f" cut off at max_tokens={max_tokens})"
            )
        if verdict.detail:
            notes.append(verdict.detail)
        return Proposal(
            patch=verdict.patch,
            fallback=fallback,
            reason=verdict.reason,
            detail="; ".join(notes) or None,
            ops=verdict.ops,
            raw_sha256=hashlib.sha256(last.text.encode("utf-8", "surrogatepass")).hexdigest(),
            model=last.model,
            input_tokens=sum(a.reply.input_tokens for a in asked),
            output_tokens=sum(a.reply.output_tokens for a in asked),
            cost_usd=sum(a.reply.cost_usd for a in asked),
            latency_ms=sum(a.reply.latency_ms for a in asked),
        )

    def _unavailable(self, exc: BaseException) -> str:
        """The named reason of a failed call; an unreachable gateway or a refused token is
        ``model_unavailable``, said once on stderr (the rules plan every event meanwhile)."""
        kind = getattr(exc, "attrs", {}).get("kind") if hasattr(exc, "attrs") else None
        if kind in ("breaker_open", "provider_fault"):
            return str(kind)  # the gateway's breaker, a reply that was no answer
        if not isinstance(exc, ModelUnavailable | ModelUnauthorized):
            return _reason_of(exc)
        if not self._warned:
            self._warned = True
            print(
                f"loopkernel: the model gateway is unavailable ({type(exc).__name__}: "
                f"{str(exc)[:200]}); the rules plan each event it cannot answer "
                "(model_unavailable in the patch journal)",
                file=sys.stderr,
                flush=True,
            )
        return "model_unavailable"


_FINAL = frozenset({"judge_error", "disagrees", "idle"})
"""Rejections a second reply cannot fix: a bug of ours, or ``agree`` / ``idle`` (the model
was shown the deterministic answer already)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Asked:
    reply: _Completion
    verdict: Judgement


def _finish(reply: _Completion) -> str | None:
    value = getattr(reply, "finish_reason", None)
    return value if isinstance(value, str) else None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def _reask(verdict: Judgement) -> str:
    return (
        f"That patch was refused: {verdict.reason}: {(verdict.detail or '')[:300]}. "
        "Reply with a corrected patch: a compact JSON list of ops only."
    )


def planner_for(params: Mapping[str, JSON], *, rules: Planner, allow: Allowlist) -> Planner:
    """The planner an app's ``planner`` parameter asks for: ``rules`` (the default) or
    ``llm`` (an ``LLMPlanner`` backed by ``rules``, through the configured gateway)."""
    from loopkernel.errors import UsageError

    choice = params.get("planner", "rules")
    if choice == "rules":
        return rules
    if choice == "llm":
        planner = LLMPlanner.from_env(allow=allow, fallback=rules)
        check_gateway(planner.client)
        return planner
    raise UsageError(f"planner must be rules or llm, not {choice!r}")


_CHECKED: dict[tuple[str, str], str | None] = {}


def check_gateway(client: Any, *, timeout: float = 5.0) -> None:
    """Before a run plans with a model: ``UsageError`` when the gateway refuses the token
    (nothing would ever be answered); one line on stderr when it cannot be reached (the
    rules plan each event until it can). Asked once per gateway and token in a process."""
    from loopkernel.errors import ModelError, ModelUnauthorized, UsageError

    if client is None:
        return
    token = str(getattr(client, "_token", ""))
    key = (str(client.address), hashlib.sha256(token.encode()).hexdigest())
    if key in _CHECKED:
        return

    def ask() -> str | None:
        try:
            asyncio.run(client.health(timeout=timeout))
        except ModelUnauthorized:
            return "unauthorized"
        except ModelError:
            return None
        except Exception as err:
            return f"unreachable: {type(err).__name__}: {err}"
        return None

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # works inside a running loop too
        found = _CHECKED[key] = pool.submit(ask).result()
    if found == "unauthorized":
        raise UsageError(
            f"--planner llm: the model gateway at {client.address} refused the token; set "
            "LOOPKERNEL_GATEWAY_TOKEN to the token the gateway was started with"
        )
    if found is not None:
        print(
            f"loopkernel: --planner llm: the model gateway is {found[:240]}; the rules plan "
            "each event it cannot answer (model_unavailable in the patch journal)",
            file=sys.stderr,
            flush=True,
        )


def _message(role: str, content: str) -> Any:
    from loopkernel.models import Message

    return Message(role=role, content=content)  # type: ignore[arg-type]


def _messages(prompt: Prompt) -> list[Any]:
    return [_message("system", prompt.system), _message("user", prompt.user)]
