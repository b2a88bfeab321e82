"""The JSON Schema of a patch a model may propose, derived from the allowlist and the
snapshot; and the size of its largest valid reply. Pure, no I/O.

``proposal_schema(allow, state)`` is sent with every planner request (OpenAI-compatible
servers get it as ``response_format``, llama.cpp turns it into a grammar, Anthropic as
``output_config.format``), so a constrained model can only write a list of ops of the
allowed kinds::

    {"type": "array", "maxItems": N, "items": {"anyOf": [
        {"op": "add", "skill": <one allowed skill>, "input": <that skill's input schema>,
         "task_id": ID, "evidence_scope": "all"|"ancestors"},      one branch per skill
        {"op": "connect", "src": ID, "dst": ID},
        {"op": "cancel", "task_id": <a task the snapshot can cancel>},
        {"op": "wait", "task_id": <a pending or ready task>, "reason": TEXT},
        {"op": "resume", "task_id": <a waiting task>, "payload": SMALL_JSON},
        {"op": "finish", "status": <an allowed status>, "verdict": SMALL_JSON}]}}

Every string has a ``maxLength``, every number bounds, every array ``maxItems``, every
object a closed set of properties, so the reply has a largest size
(``max_reply_chars``): the planner sizes ``max_tokens`` from it instead of a constant. The
branches exclude each other by their ``op`` (and ``skill``) value, so ``anyOf`` is
``oneOf`` in effect; ``anyOf`` is what OpenAI's structured outputs and llama.cpp's grammar
converter both accept. The schema only shapes decoding: the judge stays the only
authority (schema-valid is not allowed, allowed is not valid).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from loopkernel.graph import GraphState, TaskState
from loopkernel.planner._judge import Allowlist

__all__ = [
    "CHARS_PER_TOKEN",
    "ID_MAX",
    "STRING_MAX",
    "bounded",
    "max_reply_chars",
    "proposal_schema",
    "reply_tokens",
]

ID_MAX = 32
"""The longest task id a proposal may use."""
STRING_MAX = 120
"""The ``maxLength`` given to a string the skill's schema left unbounded."""
NUMBER_BOUND = 1_000_000
"""The bounds given to a number the skill's schema left unbounded."""
CHARS_PER_TOKEN = 2.5
"""Compact JSON of short keys and ids runs 2.5-4 characters a token with today's BPE
tokenizers; sizing ``max_tokens`` at 2.5 leaves room for the denser replies."""
_ID = {"type": "string", "pattern": "^[A-Za-z0-9_.:-]+$", "minLength": 1, "maxLength": ID_MAX}
_SCALAR: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "maxLength": STRING_MAX},
        {"type": "integer", "minimum": -NUMBER_BOUND, "maximum": NUMBER_BOUND},
        {"type": "boolean"},
        {"type": "null"},
    ]
}
_SMALL_JSON: dict[str, Any] = {
    "type": "object",
    "maxProperties": 3,
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "maxLength": 80},
            {"type": "integer", "minimum": -NUMBER_BOUND, "maximum": NUMBER_BOUND},
            {"type": "boolean"},
            {"type": "null"},
        ]
    },
}
"""A verdict or a payload: an object of at most three short scalar fields."""
_SMALL_KEY = 24
"""Key length counted for ``_SMALL_JSON``'s free properties (``max_reply_chars``)."""


def bounded(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with a bound on everything unbounded: strings get ``maxLength``, numbers
    bounds, arrays ``maxItems``, objects a closed property set (a property ``required``
    but not described becomes a small scalar); ``{}`` (any JSON) becomes a small object."""
    if not schema:
        return dict(_SMALL_JSON)
    out: dict[str, Any] = dict(schema)
    for word in ("anyOf", "oneOf"):
        if word in out:
            out[word] = [bounded(s) for s in out[word]]
    kind = out.get("type")
    if "enum" in out or "const" in out:
        return out
    if kind == "string":
        out.setdefault("maxLength", STRING_MAX)
    elif kind in ("integer", "number"):
        out.setdefault("minimum", -NUMBER_BOUND)
        out.setdefault("maximum", NUMBER_BOUND)
    elif kind == "array":
        out.setdefault("maxItems", 8)
        out["items"] = bounded(out.get("items") or {"type": "string"})
    elif kind == "object" or "properties" in out or "required" in out:
        props = {k: bounded(v) for k, v in dict(out.get("properties") or {}).items()}
        for name in out.get("required") or ():
            props.setdefault(name, dict(_SCALAR))
        if not props:
            return dict(_SMALL_JSON)
        out.update(type="object", properties=props, additionalProperties=False)
        out.pop("maxProperties", None)
    elif kind is None and not any(w in out for w in ("anyOf", "oneOf")):
        return dict(_SCALAR)
    return out


def _op(kind: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"op": {"enum": [kind]}, **props},
        "required": ["op", *required],
        "additionalProperties": False,
    }


def proposal_schema(allow: Allowlist, state: GraphState, *, max_ops: int = 4) -> dict[str, Any]:
    """The schema of a proposal for ``state`` (see the module docstring). ``max_ops`` (and
    ``allow.max_ops``) bound the list."""
    branches: list[dict[str, Any]] = []
    ops = allow.ops
    if "add" in ops:
        for skill in allow.skills:
            branches.append(
                _op(
                    "add",
                    {
                        "task_id": _ID,
                        "skill": {"enum": [skill.name]},
                        "input": bounded(skill.input_schema),
                        "evidence_scope": {"enum": ["all", "ancestors"]},
                    },
                    ["task_id", "skill", "input"],
                )
            )
    if "connect" in ops:
        branches.append(_op("connect", {"src": _ID, "dst": _ID}, ["src", "dst"]))
    live = TaskState.PENDING, TaskState.READY, TaskState.RUNNING, TaskState.WAITING
    by_state = {
        "cancel": sorted(t.task_id for t in state.in_state(*live)),
        "wait": sorted(t.task_id for t in state.in_state(TaskState.PENDING, TaskState.READY)),
        "resume": sorted(t.task_id for t in state.in_state(TaskState.WAITING)),
    }
    if "cancel" in ops and by_state["cancel"]:
        branches.append(_op("cancel", {"task_id": {"enum": by_state["cancel"]}}, ["task_id"]))
    if "wait" in ops and by_state["wait"]:
        reason = {"type": "string", "maxLength": STRING_MAX}
        branches.append(
            _op("wait", {"task_id": {"enum": by_state["wait"]}, "reason": reason}, ["task_id"])
        )
    if "resume" in ops and by_state["resume"]:
        branches.append(
            _op(
                "resume",
                {"task_id": {"enum": by_state["resume"]}, "payload": _SMALL_JSON},
                ["task_id"],
            )
        )
    if "finish" in ops and allow.finish:
        branches.append(
            _op(
                "finish",
                {"status": {"enum": sorted(allow.finish)}, "verdict": _SMALL_JSON},
                ["status"],
            )
        )
    return {
        "type": "array",
        "maxItems": max(0, min(allow.max_ops, max_ops)) if branches else 0,
        "items": {"anyOf": branches} if branches else {},
    }


def _dumped(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def max_reply_chars(schema: Mapping[str, Any]) -> int:
    """The length of the longest compact JSON document valid against ``schema`` (every
    string at its ``maxLength``, no escapes; a bounded schema as ``bounded`` makes)."""
    if "enum" in schema:
        return max((_dumped(v) for v in schema["enum"]), default=4)
    if "const" in schema:
        return _dumped(schema["const"])
    for word in ("anyOf", "oneOf"):
        if word in schema:
            return max((max_reply_chars(s) for s in schema[word]), default=4)
    kind = schema.get("type")
    if isinstance(kind, list):
        return max((max_reply_chars({**schema, "type": k}) for k in kind), default=4)
    if kind == "string":
        return int(schema.get("maxLength", STRING_MAX)) + 2
    if kind in ("integer", "number"):
        lo, hi = schema.get("minimum", -NUMBER_BOUND), schema.get("maximum", NUMBER_BOUND)
        digits = max(len(str(int(lo))), len(str(int(hi))))
        return digits + (0 if kind == "integer" else 8)  # a fraction: a few decimals
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    if kind == "array":
        n = int(schema.get("maxItems", 8))
        item = max_reply_chars(schema.get("items") or {})
        return 2 + n * item + max(0, n - 1)
    if kind == "object":
        props: Mapping[str, Any] = schema.get("properties") or {}
        sizes = [len(k) + 3 + max_reply_chars(v) for k, v in props.items()]
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            n = int(schema.get("maxProperties", 3))
            sizes += [_SMALL_KEY + 3 + max_reply_chars(extra)] * n
        return 2 + sum(sizes) + max(0, len(sizes) - 1)
    return STRING_MAX + 2


def reply_tokens(schema: Mapping[str, Any], *, cap: int) -> int:
    """``max_tokens`` for a reply to ``schema``: its largest valid reply at
    ``CHARS_PER_TOKEN``, plus a little, at most ``cap``."""
    return max(16, min(cap, math.ceil(max_reply_chars(schema) / CHARS_PER_TOKEN) + 8))
