"""What a provider's reply must look like before the gateway stores, bills or returns it.

A reply is checked against the request that asked for it, before anything reaches the
ledger:

- **size**: its text may take at most ``REPLY_BYTES_PER_TOKEN`` bytes per ``max_tokens``
  (+ ``REPLY_SLACK_BYTES``) and never more than ``MAX_REPLY_BYTES`` (so the gateway's
  answer, JSON-escaped, always fits the client's 16 MiB body cap);
- **usage**: ``output_tokens <= max_tokens``; ``input_tokens`` no more than the prompt
  could make (every byte a token, 8 per message, the schema's bytes, a little slack);
  no negative counts;
- **shape**: an OpenAI reply with no ``choices`` (an Anthropic one with no content) is no
  answer.

A reply that fails a check is a ``ProviderFault``: retried like a 5xx inside the call's
deadline, then ``ModelUnavailable`` (kind ``provider_fault``): resumable, never stored as
an answer. Each faulted request is recorded ``lost`` and charged its call's reservation
(the provider may bill it; the reservation is the most the call was allowed to cost).

A reply that passes is charged the larger of what the provider reported and what the
gateway measured (a lower bound: ``MEASURE_BYTES_PER_TOKEN`` bytes a token, of the prompt
and of the reply), the output never past ``max_tokens``: a provider that under-reports
cannot make a call cheap, one that over-reports cannot bill past the cap.

``RunGuard`` keeps, per run, a model time budget (``limits.run_model_seconds``) and a
breaker (``breaker_after`` timeouts or outages in a row: the run's calls are refused at
once, ``ModelUnavailable`` kind ``breaker_open``, for ``breaker_seconds``), so a slow or
dead provider costs a run seconds, not minutes.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loopkernel.errors import BudgetExceeded, ModelUnavailable
from loopkernel.gateway._providers import FaultKind, ProviderFault, ProviderReply
from loopkernel.models import Message

__all__ = [
    "MAX_REPLY_BYTES",
    "FaultKind",
    "Measured",
    "ProviderFault",
    "RunGuard",
    "inspect_reply",
    "measure",
]

MAX_REPLY_BYTES = 2 * 1024 * 1024
"""Bytes a reply's text may take, whatever ``max_tokens`` says: JSON escaping can make a
text at most six times larger, and 12 MiB fits the client's 16 MiB body cap."""
REPLY_BYTES_PER_TOKEN = 32
"""Bytes a reply may take per token of ``max_tokens`` (real tokenizers: 3-5 on average,
rarely past 16 for one token); a reply past it is far over ``max_tokens``."""
REPLY_SLACK_BYTES = 1024
MEASURE_BYTES_PER_TOKEN = 16
"""The measured token count is bytes / 16, rounded up: a lower bound no honest count is
below, so charging the larger of reported and measured never overcharges."""
PROMPT_SLACK_TOKENS = 1024
"""Input tokens a provider may add past the prompt's upper bound (its own template, the
structured-output instructions some providers inject)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    """What a call is charged: tokens in and out."""

    input_tokens: int
    output_tokens: int


def _ceil_div(n: int, d: int) -> int:
    return -(-n // d)


def prompt_bytes(messages: Sequence[Message]) -> int:
    return sum(len(m.content.encode()) for m in messages)


def prompt_upper_tokens(messages: Sequence[Message], schema: dict[str, Any] | None) -> int:
    """The most input tokens an honest provider can count for this request."""
    schema_bytes = 0 if schema is None else len(json.dumps(schema).encode())
    upper = sum(len(m.content.encode()) + 8 for m in messages)
    return upper + schema_bytes + PROMPT_SLACK_TOKENS


def reply_cap(max_tokens: int) -> int:
    """The most bytes a reply to ``max_tokens`` may take."""
    return min(MAX_REPLY_BYTES, max_tokens * REPLY_BYTES_PER_TOKEN + REPLY_SLACK_BYTES)


def inspect_reply(
    reply: ProviderReply,
    *,
    messages: Sequence[Message],
    max_tokens: int,
    schema: dict[str, Any] | None,
) -> None:
    """Raise ``ProviderFault`` unless ``reply`` can be an answer to this request."""
    size = len(reply.text.encode("utf-8", "surrogatepass"))
    cap = reply_cap(max_tokens)
    if size > cap:
        raise ProviderFault(
            FaultKind.TOO_LARGE,
            f"the provider's reply takes {size} bytes, over the {cap} a reply to "
            f"max_tokens={max_tokens} may take",
        )
    if not reply.usage:
        return
    if reply.input_tokens < 0 or reply.output_tokens < 0:
        raise ProviderFault(FaultKind.IMPLAUSIBLE_USAGE, "the provider reported negative usage")
    if reply.output_tokens > max_tokens:
        raise ProviderFault(
            FaultKind.OVER_MAX_TOKENS,
            f"the provider reported {reply.output_tokens} output tokens against "
            f"max_tokens={max_tokens}",
        )
    upper = prompt_upper_tokens(messages, schema)
    if reply.input_tokens > upper:
        raise ProviderFault(
            FaultKind.IMPLAUSIBLE_USAGE,
            f"the provider reported {reply.input_tokens} input tokens for a prompt that "
            f"can make at most {upper}",
        )


def measure(reply: ProviderReply, *, messages: Sequence[Message], max_tokens: int) -> Measured:
    """The tokens a checked reply is charged: the larger of reported and measured (a lower
    bound), the output capped at ``max_tokens``."""
    measured_in = _ceil_div(prompt_bytes(messages), MEASURE_BYTES_PER_TOKEN)
    size = len(reply.text.encode("utf-8", "surrogatepass"))
    measured_out = _ceil_div(size, MEASURE_BYTES_PER_TOKEN)
    return Measured(
        input_tokens=max(reply.input_tokens, measured_in),
        output_tokens=min(max_tokens, max(reply.output_tokens, measured_out)),
    )


@dataclass(kw_only=True, slots=True)
class _RunHealth:
    seconds: float = 0.0
    """Seconds the run's calls spent waiting on providers (replays excluded)."""
    failures: int = 0
    """Timeouts and outages in a row (an answer resets it)."""
    open_until: float = 0.0
    """While the clock is before this, the breaker is open: no call of the run is sent."""


class RunGuard:
    """Per run: a model time budget and a breaker, held in the gateway's memory.

    ``admit(run_id)`` before a call is sent: ``BudgetExceeded`` (limit
    ``gateway.run_model_seconds``) once the run's calls have waited ``model_seconds`` in
    all, ``ModelUnavailable`` (kind ``breaker_open``, retryable) while the breaker is open;
    else the seconds the call may still take (None: no time budget). ``record`` after it:
    ``breaker_after`` timeouts or outages in a row open the breaker for
    ``breaker_seconds``; then one call may try again (one more failure opens it again).
    """

    _MAX_RUNS = 10_000

    def __init__(
        self,
        *,
        model_seconds: float | None,
        breaker_after: int,
        breaker_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model_seconds = model_seconds
        self.breaker_after = breaker_after
        self.breaker_seconds = breaker_seconds
        self._clock = clock
        self._runs: OrderedDict[str, _RunHealth] = OrderedDict()

    def _health(self, run_id: str) -> _RunHealth:
        health = self._runs.get(run_id)
        if health is None:
            health = self._runs[run_id] = _RunHealth()
            while len(self._runs) > self._MAX_RUNS:
                self._runs.popitem(last=False)
        self._runs.move_to_end(run_id)
        return health

    def admit(self, run_id: str) -> float | None:
        health = self._health(run_id)
        now = self._clock()
        if now < health.open_until:
            raise ModelUnavailable(
                f"the model breaker of run {run_id} is open after {health.failures} "
                f"timeouts or outages in a row; no call of the run is sent for "
                f"{health.open_until - now:.0f} s more",
                kind="breaker_open",
                failures=health.failures,
            )
        if self.model_seconds is None:
            return None
        left = self.model_seconds - health.seconds
        if left <= 0:
            raise BudgetExceeded(
                f"run {run_id} has waited {health.seconds:.1f} s on models, its "
                f"run_model_seconds limit ({self.model_seconds:g} s); raise the limit in "
                "the gateway's config",
                limit="gateway.run_model_seconds",
                maximum=self.model_seconds,
                observed=round(health.seconds, 3),
                run_id=run_id,
            )
        return left

    def record(self, run_id: str, seconds: float, *, failed: bool) -> None:
        health = self._health(run_id)
        health.seconds += max(0.0, seconds)
        if not failed:
            health.failures = 0
            return
        health.failures += 1
        if self.breaker_after and health.failures >= self.breaker_after:
            health.open_until = self._clock() + self.breaker_seconds
