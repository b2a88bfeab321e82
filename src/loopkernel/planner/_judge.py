"""Judge a model's reply: strict parse, the allowlist, then ``validate()``. Pure, no I/O.

``judge(raw, state, allow, fallback)`` never raises on any reply: it returns a
``Judgement`` whose ``patch`` is the proposal to apply, or whose ``reason`` names the rule
the reply broke (one of ``REASONS``). Rules, in the order they are checked:

=================== ============================================================
``empty``           the reply is empty or only whitespace
``too_long``        the reply is longer than ``Allowlist.max_reply_chars``
``bad_json``        not one JSON document (prose, a code fence, NaN, too deep)
``trailing_text``   a JSON document followed by anything but whitespace
``duplicate_key``   an object repeats a key (JSON allows it; we do not)
``not_a_patch``     neither a list of ops nor ``{"ops": [...]}``
``too_many_ops``    more ops than ``Allowlist.max_ops``
``unknown_op``      an op whose ``op`` is not one of GraphPatch's six
``bad_op``          a known op with unknown or missing fields, or wrong types
``op_not_allowed``  an op kind the allowlist does not admit (e.g. ``resume``)
``skill_not_allowed`` an ``add`` of a skill outside the allowlist
``bad_input``       an ``add`` whose input fails the skill's input schema
``finish_refused``  a ``finish`` with a status the allowlist does not admit
``<validate rule>`` what ``graph.validate`` says: ``cycle``, ``duplicate_task`` ...
``disagrees``       ``Allowlist.agree`` and the proposal's effect differs from the
                    fallback's (in anything but the input fields ``Allowlist.vary``
                    leaves to the model)
``idle``            (``agree`` off) an empty proposal where the rules' patch acts: the
                    model may change what is done, not leave the run waiting on nothing
``<postcondition>`` what ``_rules.check`` says: the runtime's ``approval_pending``,
                    ``escalated``, ``stalls``; the app's ``unfinished_work``,
                    ``uncited``, ``fan_out``, ``evidence_scope``, ``naming``,
                    ``off_path`` (``Allowlist.postconditions``)
=================== ============================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loopkernel.errors import PatchRejected, UsageError, install_hint
from loopkernel.graph import JSON, Delta, Event, EventKind, GraphPatch, GraphState, validate
from loopkernel.graph._patch import Add, Finish
from loopkernel.planner._rules import RULES, Postconditions, check

__all__ = ["OPS", "REASONS", "AllowedSkill", "Allowlist", "Judgement", "judge"]

OPS = frozenset({"add", "connect", "cancel", "wait", "resume", "finish"})

REASONS = frozenset(
    {
        "empty",
        "too_long",
        "bad_json",
        "trailing_text",
        "duplicate_key",
        "not_a_patch",
        "too_many_ops",
        "unknown_op",
        "bad_op",
        "op_not_allowed",
        "skill_not_allowed",
        "bad_input",
        "finish_refused",
        "disagrees",
        "idle",
    }
    | RULES
)
"""The judge's own rules; ``graph.validate``'s rules (``cycle`` ...) come on top."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AllowedSkill:
    """A skill (a role) a model may add tasks of."""

    name: str
    """The worker's name in the registry."""
    description: str = ""
    """What it does, for the prompt."""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    """JSON Schema the task's input must satisfy (``{}``: any JSON)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Allowlist:
    """What a model may propose. Anything else is refused and the fallback answers."""

    skills: tuple[AllowedSkill, ...] = ()
    """Skills a proposal may ``add``."""
    ops: frozenset[str] = frozenset({"add", "connect", "cancel", "wait", "finish"})
    """Op kinds it may use; ``resume`` (a human's answer) is out by default."""
    finish: frozenset[str] = frozenset({"succeeded", "failed"})
    """Statuses it may finish the run with."""
    agree: bool = False
    """Admit only a proposal whose effect on the graph (the validated delta) is exactly the
    fallback's: the path cannot change, only who planned it."""
    free: frozenset[str] = frozenset()
    """With ``agree``: op kinds a proposal made only of them may use without agreeing
    (e.g. ``{"finish"}``: the model may stop the run early); the postconditions judge it."""
    vary: frozenset[tuple[str, str]] = frozenset()
    """With ``agree``: ``(skill, field)`` pairs of task input the model may choose where the
    rules' patch would set them otherwise (or not at all), e.g. ``("act", "backoff_s")``:
    retry differently. The proposal must still agree on everything else (which tasks,
    their ids, the other fields, the edges); the skill's ``input_schema`` bounds the value."""
    max_ops: int = 32
    """The most ops one proposal may have."""
    max_reply_chars: int = 20_000
    """The longest reply that is parsed at all."""
    postconditions: Postconditions | None = None
    """The app's checkable rules on any proposal (``_rules.py``); the runtime's rules
    (approvals, escalations, liveness) are checked with or without them."""

    def __post_init__(self) -> None:
        unknown = set(self.ops) - OPS
        if unknown:
            raise UsageError(f"Allowlist.ops: unknown op kinds {sorted(unknown)}")
        names = [s.name for s in self.skills]
        if len(set(names)) != len(names):
            raise UsageError("Allowlist.skills: a skill is listed twice")

    def skill(self, name: str) -> AllowedSkill | None:
        return next((s for s in self.skills if s.name == name), None)


@dataclass(frozen=True, kw_only=True, slots=True)
class Judgement:
    """A reply's verdict: a patch to propose, or the rule it broke."""

    patch: GraphPatch | None = None
    """The proposal, when every check passed."""
    reason: str | None = None
    """The rule broken, when refused."""
    detail: str | None = None
    """One line on it."""
    ops: JSON = None
    """The reply's ops when it parsed as a patch (kept for the journal even if refused)."""


def _refuse(reason: str, detail: str, ops: JSON = None) -> Judgement:
    return Judgement(reason=reason, detail=detail[:300], ops=ops)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


class _Duplicate(Exception):
    pass


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(raw: str, allow: Allowlist) -> tuple[list[Any] | None, Judgement | None]:
    """The reply's op list, or the refusal."""
    if not raw.strip():
        return None, _refuse("empty", "the reply is empty")
    if len(raw) > allow.max_reply_chars:
        return None, _refuse("too_long", f"{len(raw)} chars > {allow.max_reply_chars}")
    try:
        data = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except _Duplicate as exc:
        return None, _refuse("duplicate_key", f"key {str(exc)[:40]!r} appears twice")
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            return None, _refuse("trailing_text", f"text after the JSON at char {exc.pos}")
        return None, _refuse("bad_json", f"{exc.msg} at char {exc.pos}")
    except (ValueError, RecursionError) as exc:
        return None, _refuse("bad_json", f"{type(exc).__name__}: {exc}")
    if isinstance(data, dict) and set(data) == {"ops"}:
        data = data["ops"]
    if not isinstance(data, list):
        return None, _refuse("not_a_patch", f"a {type(data).__name__}, not a list of ops")
    return data, None


def check_ops(ops: list[Any], allow: Allowlist) -> tuple[GraphPatch | None, Judgement | None]:
    """Shape and allowlist, op by op; the patch, or the refusal."""
    if len(ops) > allow.max_ops:
        return None, _refuse("too_many_ops", f"{len(ops)} ops > {allow.max_ops}")
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("op"), str) or op["op"] not in OPS:
            kind = op.get("op") if isinstance(op, dict) else type(op).__name__
            return None, _refuse("unknown_op", f"op {i} is {str(kind)[:40]!r}")
    try:
        patch = GraphPatch.from_json(ops)
    except UsageError as exc:
        return None, _refuse("bad_op", exc.message)
    journal = patch.to_json()
    for i, op in enumerate(patch.ops):
        kind = journal[i]["op"]
        if kind not in allow.ops:
            return None, _refuse("op_not_allowed", f"op {i}: {kind} is not allowed", journal)
        if isinstance(op, Add):
            skill = allow.skill(op.task.skill)
            if skill is None:
                detail = f"op {i}: skill {op.task.skill[:40]!r} is not on the allowlist"
                return None, _refuse("skill_not_allowed", detail, journal)
            problem = _schema_problem(op.task.input, skill.input_schema)
            if problem is not None:
                return None, _refuse("bad_input", f"op {i}: {problem}", journal)
        if isinstance(op, Finish) and op.status not in allow.finish:
            return None, _refuse("finish_refused", f"op {i}: finish {op.status}", journal)
    return patch, None


_VALIDATORS: dict[str, Any] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    """A checked, compiled validator per schema (building one costs milliseconds)."""
    key = json.dumps(schema, sort_keys=True)
    found = _VALIDATORS.get(key)
    if found is None:
        try:
            import jsonschema  # type: ignore[import-untyped]
        except ImportError:  # pragma: no cover - the models extra brings it
            raise UsageError(
                f"checking proposals needs jsonschema: {install_hint('models')}"
            ) from None
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        found = _VALIDATORS[key] = cls(dict(schema))
    return found


def _schema_problem(value: JSON, schema: Mapping[str, Any]) -> str | None:
    if not schema:
        return None
    try:
        error = next(iter(_validator(schema).iter_errors(value)), None)
    except RecursionError:
        return "input nested too deep"
    return None if error is None else f"input: {str(error.message)[:200]}"


def _effect(delta: Delta, vary: frozenset[tuple[str, str]] = frozenset()) -> tuple[Any, ...]:
    """A delta without its op order: what it does to the graph (less the input fields the
    model may choose, ``vary``)."""
    return (
        sorted(json.dumps(_task_key(t, vary), sort_keys=True) for t in delta.tasks),
        sorted(delta.edges),
        None if delta.finish is None else json.dumps(delta.finish, sort_keys=True),
        sorted(delta.cancelled_running),
    )


def _task_key(task: Any, vary: frozenset[tuple[str, str]] = frozenset()) -> Any:
    chosen = {f for skill, f in vary if skill == task.skill}
    given = task.input
    if chosen and isinstance(given, dict):
        given = {k: v for k, v in given.items() if k not in chosen}
    return [
        task.task_id,
        task.skill,
        given,
        task.evidence_scope,
        task.state.value,
        task.wait_reason,
        task.human_input,
        task.wait_epoch,
    ]


def _idle(delta: Delta) -> bool:
    return not (delta.tasks or delta.edges or delta.finish or delta.cancelled_running)


def judge(
    raw: str,
    state: GraphState,
    allow: Allowlist,
    *,
    fallback: GraphPatch | None = None,
    event: Event | None = None,
) -> Judgement:
    """The reply's verdict against ``state``: parse strictly, check the allowlist, then
    ``validate()`` (with the allowlisted skills as the registry). With ``allow.agree``,
    ``fallback`` is the patch whose effect the proposal must have. Then the
    postconditions (``_rules.check``); ``event``, the event planned, tells them which
    wait a human just answered."""
    ops, refused = parse(raw, allow)
    if refused is not None or ops is None:
        return refused or _refuse("not_a_patch", "no ops")
    patch, refused = check_ops(ops, allow)
    if refused is not None or patch is None:
        return refused or _refuse("bad_op", "no patch")
    journal = patch.to_json()
    try:
        delta = validate(state, patch, [s.name for s in allow.skills])
    except PatchRejected as exc:
        return _refuse(str(exc.attrs.get("rule") or "rejected"), exc.message, journal)
    skills = [s.name for s in allow.skills]
    try:
        wanted: Delta | None = validate(state, fallback or GraphPatch(), skills)
    except PatchRejected:
        wanted = None  # the rules' own patch is outside the allowlist
    free = bool(journal) and all(op["op"] in allow.free for op in journal)
    if allow.agree and not free:
        if wanted is None:
            return _refuse("disagrees", "the fallback's patch is outside the allowlist", journal)
        if _effect(delta, allow.vary) != _effect(wanted, allow.vary):
            return _refuse("disagrees", "its effect differs from the deterministic plan", journal)
    if not allow.agree and _idle(delta) and wanted is not None and not _idle(wanted):
        return _refuse("idle", "it does nothing where the rules act", journal)
    answered = None
    if event is not None and event.kind is EventKind.HUMAN_INPUT:
        answered = event.task_id
    broken = check(state, delta, allow.postconditions, answered=answered, rules=wanted)
    if broken is not None:
        return _refuse(broken.rule, broken.detail, journal)
    return Judgement(patch=patch, ops=journal)
