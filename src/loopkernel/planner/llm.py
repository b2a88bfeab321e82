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
``RUN/plan/SEQ``; the reply is judged strictly (``_judge``: parse, allowlist,
``validate``). The planner returns a ``Proposal``: the kernel runs the policy guard and
``validate`` on it once more, applies it (``planner="llm"``) or the fallback
(``planner="fallback"``), and journals the rejection's named reason, the raw reply's hash,
model, usage and latency beside the applied patch. A model error of any kind (timeout, 5xx,
budget, no gateway) is a rejection like any other: the run goes on.

The model is asked once per event: the patch journal is the planner's journal, and a
resumed run never re-plans an event that has a patch. An event planned when a crash
struck before its patch was committed is asked again with the same key, so the gateway's
ledger answers it without a second provider call.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from loopkernel.evidence import Evidence
from loopkernel.graph import JSON, Event, GraphPatch, GraphState
from loopkernel.ids import RunId
from loopkernel.planner._judge import REASONS, AllowedSkill, Allowlist, Judgement, judge
from loopkernel.planner._prompt import Prompt, build_prompt
from loopkernel.planner._protocol import Planner, Proposal, Snapshot

__all__ = [
    "REASONS",
    "AllowedSkill",
    "Allowlist",
    "Judgement",
    "LLMPlanner",
    "PlanTimings",
    "Prompt",
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
        max_tokens: int = 256,
        response_schema: dict[str, Any] | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - handed to the gateway
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


def plan_key(run_id: str, seq: int) -> str:
    """The model call's idempotency key for event ``seq``: the same in every execution."""
    return f"{run_id}/plan/{seq}"


def _reason_of(exc: BaseException) -> str:
    """The named reason for a failed model call: the error's stable code."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        return "budget" if code == "budget_exceeded" else code
    if isinstance(exc, TimeoutError):
        return "model_timeout"
    return "model_error"


class LLMPlanner:
    """A ``Planner`` whose patches a model proposes and a deterministic planner backs."""

    def __init__(
        self,
        *,
        allow: Allowlist,
        fallback: Planner,
        client: _Client | None,
        evidence: EvidenceSource | None = None,
        max_tokens: int = 256,
        timeout: float = 30.0,
        max_evidence: int = 20,
        suggest: bool = True,
    ) -> None:
        self.allow = allow
        self.fallback = fallback
        self.client = client
        self.evidence = evidence
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_evidence = max_evidence
        self.suggest = suggest
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
        timings = self.last = PlanTimings()
        if self.client is None:
            return Proposal(
                patch=None, fallback=fallback, reason="no_model", detail="no gateway configured"
            )
        t0 = time.perf_counter()
        items: Sequence[Evidence] = ()
        if self.evidence is not None:
            items = list(await self.evidence(snapshot.run_id))[-self.max_evidence :]
        prompt = build_prompt(
            snapshot,
            event,
            self.allow,
            evidence=items,
            suggestion=fallback if self.suggest else None,
        )
        messages = _messages(prompt)
        t1 = time.perf_counter()
        timings.prompt_ms = (t1 - t0) * 1000
        try:
            reply = await self.client.complete(
                messages,
                key=plan_key(snapshot.run_id, event.seq),
                run_id=snapshot.run_id,
                max_tokens=self.max_tokens,
                timeout=self.timeout,
            )
        except Exception as exc:
            timings.model_ms = (time.perf_counter() - t1) * 1000
            detail = f"{type(exc).__name__}: {exc}"
            return Proposal(patch=None, fallback=fallback, reason=_reason_of(exc), detail=detail)
        t2 = time.perf_counter()
        timings.model_ms = (t2 - t1) * 1000
        try:
            verdict = judge(reply.text, snapshot, self.allow, fallback=fallback)
        except Exception as exc:  # a bug of ours must not fail the run: the rules answer
            verdict = Judgement(reason="judge_error", detail=f"{type(exc).__name__}: {exc}")
        timings.judge_ms = (time.perf_counter() - t2) * 1000
        return Proposal(
            patch=verdict.patch,
            fallback=fallback,
            reason=verdict.reason,
            detail=verdict.detail,
            ops=verdict.ops,
            raw_sha256=hashlib.sha256(reply.text.encode("utf-8", "surrogatepass")).hexdigest(),
            model=reply.model,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            cost_usd=reply.cost_usd,
            latency_ms=reply.latency_ms,
        )


def planner_for(params: Mapping[str, JSON], *, rules: Planner, allow: Allowlist) -> Planner:
    """The planner an app's ``planner`` parameter asks for: ``rules`` (the default) or
    ``llm`` (an ``LLMPlanner`` backed by ``rules``, through the configured gateway)."""
    from loopkernel.errors import UsageError

    choice = params.get("planner", "rules")
    if choice == "rules":
        return rules
    if choice == "llm":
        # 192 tokens hold the longest patch the shipped apps make (speculation's three
        # researchers); a longer reply would be refused anyway, so it is not waited for.
        return LLMPlanner.from_env(allow=allow, fallback=rules, max_tokens=192)
    raise UsageError(f"planner must be rules or llm, not {choice!r}")


def _messages(prompt: Prompt) -> list[Any]:
    from loopkernel.models import Message

    return [
        Message(role="system", content=prompt.system),
        Message(role="user", content=prompt.user),
    ]
