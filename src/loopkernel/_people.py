"""Who acted on a run, and what it spent, as the journal says: who answers a waiting task and
by what right (``Answerer``), the ``by`` of a human's answer or a cancel (``approver``,
``approver_text``), and a run's spend from its budget ledger (``usage_of``). Pure;
``loopkernel.client`` re-exports them."""

from __future__ import annotations

import getpass
import math
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loopkernel.evidence import redact_text
from loopkernel.graph import JSON
from loopkernel.store import EffectRecord

__all__ = ["Answerer", "approver", "approver_text", "usage_of"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Answerer:
    """Who answers a waiting task (``Client.decide``), and by what right."""

    token: str | None = None
    """The run's approval token (checked, then only its kind is journaled)."""
    local: bool = False
    """Write access to the store is the right, without a token: what the CLI does without
    ``--token``; not for a run started with ``require_token`` nor under
    ``LOOPKERNEL_REQUIRE_TOKEN``."""
    by: Mapping[str, str] | None = None
    """What the caller knows of the person (``approver``; default: the user and host this
    process runs as)."""


def approver(actor: str, known: Mapping[str, str] | None = None) -> dict[str, str]:
    """Who answered an approval, as the journal keeps it (``human_input``'s ``by``):
    ``actor`` is the authority the answer came with (``operator``: the web inspector's
    operator; ``run token``: the run's approval token; ``local``: write access to the
    store), then what the caller knows of the person (the CLI: the user and host it runs
    as; the inspector: ``via`` and the browser's ``address``). Never a token: a token is
    checked, then only its kind is written."""
    facts = dict(known) if known is not None else {"user": _user(), "host": socket.gethostname()}
    return {"actor": actor, **{k: redact_text(str(v))[:200] for k, v in facts.items()}}


def approver_text(by: JSON) -> str:
    """One line for a ``human_input``'s ``by``: ``operator (web inspector, 127.0.0.1)``,
    ``local (alice@build-1)``; ``unknown`` for an answer journaled before it was kept."""
    if not isinstance(by, Mapping) or not isinstance(by.get("actor"), str):
        return "unknown (journaled before approvers were recorded)"
    who = f"{by['user']}@{by['host']}" if "user" in by and "host" in by else None
    facts = [str(by[k]) for k in ("via", "address") if isinstance(by.get(k), str)]
    facts += [who] if who else []
    actor = str(by["actor"])
    if isinstance(by.get("name"), str) and by["name"] != actor:  # a named operator
        actor = f"{actor} {by['name']}"
    return f"{actor} ({', '.join(facts)})" if facts else actor


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return f"uid {os.getuid()}"


def usage_of(params: JSON, effects: Iterable[EffectRecord]) -> dict[str, float | int | None]:
    """What a run spent, from its budget ledger (the effect journal, as the policy counts
    it: ``tools.policy_hook``): ``tool_calls``, ``model_calls``, ``tokens`` (input +
    output), ``tool_usd`` and ``model_usd`` (the ``cost_usd`` that journaled tool
    results and model answers report), ``cost_usd`` (both), and ``limit_usd``: the run's
    ``max_usd`` when its parameters carry a policy (``params["policy"]``), else ``None``."""
    calls = models = tokens = 0
    tool_usd = model_usd = 0.0
    for e in effects:
        model = e.tool == "model"
        calls, models = calls + (not model), models + model
        if e.status != "done" or not isinstance(e.result, Mapping):
            continue
        if not model:
            tool_usd += _money(e.result.get("cost_usd"))
            continue
        model_usd += _money(e.result.get("cost_usd"))
        tokens += _count(e.result.get("input_tokens")) + _count(e.result.get("output_tokens"))
    policy = params.get("policy") if isinstance(params, Mapping) else None
    limit = policy.get("max_usd") if isinstance(policy, Mapping) else None
    return {
        "tool_calls": calls,
        "model_calls": models,
        "tokens": tokens,
        "tool_usd": tool_usd,
        "model_usd": model_usd,
        "cost_usd": tool_usd + model_usd,
        "limit_usd": None if limit is None else _money(limit),
    }


def _money(value: object) -> float:
    """A reported amount as a float (0 for anything that is not a finite number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) else 0.0


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
