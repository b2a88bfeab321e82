"""Postconditions: checkable rules the judge enforces on any proposal, whoever proposes it.

Pure, no I/O: ``check(state, delta, post)`` is a function of the run's state, the
validated delta of the proposal and the app's ``Postconditions``; it names the first rule
broken, or None. Two kinds of rules:

**The runtime's** (always on, whatever the app says): approvals, escalations and liveness
belong to the runtime, and no patch can skip or replace them.

=================== ============================================================
``approval_pending`` a finish while a task waits for a human, or a cancel of a waiting
                    task: only the human's answer (or its timeout) ends a wait
``escalated``       a finish after a policy stopped a task (``BudgetExceeded``,
                    ``TripwireFired``): the run escalates, no patch finishes it otherwise
``stalls``          a patch after which nothing is pending, ready, running or waiting and
                    the run is not finished: the run would hang
=================== ============================================================

**The app's** (``Postconditions`` on its ``Allowlist``):

=================== ============================================================
``unfinished_work`` ``finish succeeded`` without the succeeded tasks ``require`` asks
                    for (at least N of a skill, N from a parameter, or one per item of a
                    task's result list)
``uncited``         ``finish succeeded`` whose verdict field is not what ``cite`` says,
                    or (with ``cite``) a verdict field no ``Cite`` names
                    it is made of (copied from a succeeded task's result, their count,
                    their sum)
``fan_out``         more tasks of a skill than ``max_tasks`` allows (counted over the
                    whole run), fewer alive than its ``at_least_param`` once some are
                    added, or more active tasks at once than ``max_active``
``evidence_scope``  an ``add`` of a skill with another evidence scope than ``scopes``
                    fixes (the distiller sees only its ancestors)
``naming``          an ``add`` of a skill under an id its ``names`` pattern does not
                    match (the ids the rules know, so they can carry on)
``off_path``        an ``add`` of a skill ``follow`` names that is not the task the rules
                    add at this event (same id, input but for the ``Follow.vary``
                    fields, evidence scope, and the same edges into it), or a ``connect``
                    into such a task the rules do not draw: the inputs the policy reads
                    (an action's tool, price and approval, an attempt's number) stay the
                    rules', so its tripwires, budget and approvals count every task
=================== ============================================================
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loopkernel.graph import JSON, Delta, GraphState, RunStatus, Task, TaskState
from loopkernel.ids import TaskId

__all__ = [
    "RULES",
    "Bound",
    "Cite",
    "Derive",
    "Follow",
    "Name",
    "Postconditions",
    "Refusal",
    "Require",
    "Scope",
    "check",
]

_ACTIVE = frozenset({TaskState.PENDING, TaskState.READY, TaskState.RUNNING, TaskState.WAITING})
_LIVE = _ACTIVE | {TaskState.SUCCEEDED}
_POLICY_ERRORS = frozenset({"BudgetExceeded", "TripwireFired"})

RULES = frozenset(
    {"approval_pending", "escalated", "stalls", "unfinished_work", "uncited", "fan_out"}
    | {"evidence_scope", "naming", "off_path"}
)
"""Every rule name ``check`` may return."""


class Derive(enum.StrEnum):
    """How a verdict field is made of succeeded tasks' results."""

    COPY = "copy"
    """Equal to ``result[result_field]`` of one succeeded task of the skill."""
    COUNT = "count"
    """The number of succeeded tasks of the skill."""
    SUM = "sum"
    """The sum of ``result[result_field]`` over the succeeded tasks of the skill (to 1e-6)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Require:
    """``finish succeeded`` needs this many succeeded tasks of ``skill``: the largest of
    ``at_least``, the run parameter ``at_least_param``, and the length of the list at
    ``result[per_item[1]]`` of task ``per_item[0]`` (one per item)."""

    skill: str
    at_least: int = 1
    at_least_param: str | None = None
    per_item: tuple[str, str] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Cite:
    """``finish succeeded``'s ``verdict[field]`` is made of ``skill``'s succeeded results."""

    field: str
    skill: str
    derive: Derive = Derive.COPY
    result_field: str | None = None
    """The result field copied or summed (``COUNT`` needs none)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Bound:
    """At most ``at_most`` tasks of ``skill`` over the whole run (cancelled ones count);
    with ``at_least_param``, a patch that adds tasks of ``skill`` leaves at least
    ``params[at_least_param]`` of them alive (not failed or cancelled): a fan-out that
    cannot reach its quorum is refused when it is proposed, not found out later."""

    skill: str
    at_most: int
    at_least_param: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Name:
    """Every task of ``skill`` is added under an id that matches ``pattern`` (the ids the
    app's rules know, so they can carry on from the model's graph)."""

    skill: str
    pattern: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Scope:
    """Every task of ``skill`` is added with ``evidence_scope``."""

    skill: str
    evidence_scope: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Follow:
    """Every task of ``skill`` a proposal adds is one the rules add at the same event, the
    same but for the input fields ``vary`` leaves to the model (its schema bounds them)."""

    skill: str
    """The skill whose tasks are pinned."""
    vary: tuple[str, ...] = ()
    """Input fields the model may set otherwise (looplab: an action's ``backoff_s``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Postconditions:
    """An app's checkable rules (see the module docstring); the runtime's are always on."""

    require: tuple[Require, ...] = ()
    cite: tuple[Cite, ...] = ()
    max_tasks: tuple[Bound, ...] = ()
    max_active: int | None = None
    """Tasks pending, ready, running or waiting at once (fan-out), after the patch."""
    scopes: tuple[Scope, ...] = ()
    names: tuple[Name, ...] = ()
    follow: tuple[Follow, ...] = ()
    """Skills whose tasks a proposal adds only as the rules add them (``off_path``)."""

    def describe(self) -> list[str]:
        """One line per rule, for the prompt and the docs."""
        lines = []
        for r in self.require:
            n = [str(r.at_least)]
            if r.at_least_param:
                n.append(f"params.{r.at_least_param}")
            if r.per_item:
                n.append(f"one per item of {r.per_item[0]}.result.{r.per_item[1]}")
            lines.append(f"finish succeeded needs succeeded {r.skill} tasks: {' / '.join(n)}")
        for c in self.cite:
            src = f"{c.skill}.result.{c.result_field}" if c.result_field else c.skill
            lines.append(f"finish succeeded: verdict.{c.field} = {c.derive.value} of {src}")
        for b in self.max_tasks:
            lines.append(f"at most {b.at_most} {b.skill} tasks in the run")
        if self.max_active is not None:
            lines.append(f"at most {self.max_active} active tasks at once")
        for s in self.scopes:
            lines.append(f"{s.skill} tasks have evidence_scope {s.evidence_scope}")
        for name in self.names:
            lines.append(f"{name.skill} task ids match {name.pattern}")
        for f in self.follow:
            free = f" (but for {', '.join(f.vary)})" if f.vary else ""
            lines.append(f"{f.skill} tasks are added as the rules add them{free}")
        return lines


@dataclass(frozen=True, kw_only=True, slots=True)
class Refusal:
    """The rule a proposal broke."""

    rule: str
    detail: str


def _after(state: GraphState, delta: Delta) -> dict[TaskId, Task]:
    """The run's tasks once ``delta`` is applied."""
    tasks = dict(state.tasks)
    for task in delta.tasks:
        tasks[task.task_id] = task
    return tasks


def check(
    state: GraphState,
    delta: Delta,
    post: Postconditions | None,
    *,
    answered: TaskId | None = None,
    rules: Delta | None = None,
) -> Refusal | None:
    """The first rule the proposal (its validated ``delta``) breaks, or None. ``answered``:
    the task whose human answer is the event being planned (its wait may end); ``rules``:
    the validated delta of the rules' patch for the same event (``follow`` compares)."""
    after = _after(state, delta)
    found = _runtime(state, delta, after, answered)
    if found is None and post is not None:
        found = _followed(delta, after, post.follow, rules or Delta())
    if found is None and post is not None:
        found = _app(state, delta, after, post)
    return found


def _followed(
    delta: Delta, after: Mapping[TaskId, Task], follow: tuple[Follow, ...], rules: Delta
) -> Refusal | None:
    if not follow:
        return None
    free = {f.skill: frozenset(f.vary) for f in follow}
    theirs = {t.task_id: t for t in rules.tasks if t.task_id in rules.new_task_ids}
    for task in delta.tasks:
        if task.task_id not in delta.new_task_ids or task.skill not in free:
            continue
        own = theirs.get(task.task_id)
        if own is None or _key(task, free[task.skill]) != _key(own, free[task.skill]):
            detail = "is not the rules' own" if own is None else "differs from the rules' own"
            return Refusal(rule="off_path", detail=f"{task.skill} task {task.task_id} {detail}")
    for src, dst in set(delta.edges) ^ set(rules.edges):
        if dst in after and after[dst].skill in free:
            return Refusal(rule="off_path", detail=f"edge {src} -> {dst} is not the rules'")
    return None


def _key(task: Task, vary: frozenset[str]) -> str:
    given = task.input
    if vary and isinstance(given, dict):
        given = {k: v for k, v in given.items() if k not in vary}
    return json.dumps([task.skill, given, task.evidence_scope], sort_keys=True)


def _runtime(
    state: GraphState, delta: Delta, after: Mapping[TaskId, Task], answered: TaskId | None
) -> Refusal | None:
    waiting = [
        t.task_id
        for t in state.tasks.values()
        if t.state is TaskState.WAITING and t.task_id != answered
    ]
    if waiting and delta.finish is not None:
        return Refusal(
            rule="approval_pending",
            detail=f"finish while {', '.join(waiting[:3])} waits for a human",
        )
    for tid in waiting:
        if after[tid].state is TaskState.CANCELLED:
            return Refusal(
                rule="approval_pending", detail=f"cancels {tid}, which waits for a human"
            )
    if delta.finish is not None and delta.finish[0] is not RunStatus.ESCALATED:
        stopped = [
            t.task_id
            for t in state.tasks.values()
            if t.state is TaskState.FAILED and (t.error or {}).get("type") in _POLICY_ERRORS
        ]
        if stopped:
            return Refusal(rule="escalated", detail=f"finish after a policy stopped {stopped[0]}")
    if delta.finish is None and not any(t.state in _ACTIVE for t in after.values()):
        return Refusal(
            rule="stalls", detail="nothing would be left to run, wait for or finish the run"
        )
    return None


def _app(
    state: GraphState, delta: Delta, after: Mapping[TaskId, Task], post: Postconditions
) -> Refusal | None:
    for scope in post.scopes:
        for task in delta.tasks:
            if (
                task.task_id in delta.new_task_ids
                and task.skill == scope.skill
                and task.evidence_scope != scope.evidence_scope
            ):
                return Refusal(
                    rule="evidence_scope",
                    detail=f"{task.task_id} ({task.skill}) must have evidence_scope "
                    f"{scope.evidence_scope}, not {task.evidence_scope}",
                )
    added = [t for t in delta.tasks if t.task_id in delta.new_task_ids]
    for name in post.names:
        for task in added:
            if task.skill == name.skill and not re.fullmatch(name.pattern, task.task_id):
                return Refusal(
                    rule="naming",
                    detail=f"{task.skill} task {task.task_id[:40]!r} does not match {name.pattern}",
                )
    for bound in post.max_tasks:
        refused = _bounded(state, bound, added, after)
        if refused is not None:
            return refused
    if post.max_active is not None:
        active = sum(1 for t in after.values() if t.state in _ACTIVE)
        if active > post.max_active:
            return Refusal(rule="fan_out", detail=f"{active} active tasks > {post.max_active}")
    if delta.finish is not None and delta.finish[0] is RunStatus.SUCCEEDED:
        return _succeeded(state, delta.finish[1], after, post)
    return None


def _bounded(
    state: GraphState, bound: Bound, added: list[Task], after: Mapping[TaskId, Task]
) -> Refusal | None:
    n = sum(1 for t in after.values() if t.skill == bound.skill)
    if n > bound.at_most:
        return Refusal(rule="fan_out", detail=f"{n} {bound.skill} tasks > {bound.at_most}")
    if bound.at_least_param is None or not any(t.skill == bound.skill for t in added):
        return None
    params = state.params if isinstance(state.params, dict) else {}
    floor = params.get(bound.at_least_param)
    alive = sum(1 for t in after.values() if t.skill == bound.skill and t.state in _LIVE)
    if isinstance(floor, int) and not isinstance(floor, bool) and alive < floor:
        return Refusal(
            rule="fan_out",
            detail=f"{alive} {bound.skill} tasks < params.{bound.at_least_param}={floor}",
        )
    return None


def _succeeded(
    state: GraphState, verdict: JSON, after: Mapping[TaskId, Task], post: Postconditions
) -> Refusal | None:
    done = [t for t in after.values() if t.state is TaskState.SUCCEEDED]
    for req in post.require:
        need = _needed(state, req, after)
        have = sum(1 for t in done if t.skill == req.skill)
        if have < need:
            return Refusal(
                rule="unfinished_work",
                detail=f"finish succeeded with {have} succeeded {req.skill} task(s) of {need}",
            )
    for cite in post.cite:
        problem = _cited(cite, verdict, [t for t in done if t.skill == cite.skill])
        if problem is not None:
            return Refusal(rule="uncited", detail=problem)
    cited = {c.field for c in post.cite}
    extra = sorted(set(verdict) - cited) if cited and isinstance(verdict, dict) else []
    if extra:
        return Refusal(
            rule="uncited",
            detail=f"verdict.{extra[0]} is no cited field (only the work's own may be given)",
        )
    return None


def _needed(state: GraphState, req: Require, after: Mapping[TaskId, Task]) -> int:
    need = req.at_least
    params = state.params if isinstance(state.params, dict) else {}
    if req.at_least_param is not None:
        value = params.get(req.at_least_param)
        if isinstance(value, int) and not isinstance(value, bool):
            need = max(need, value)
    if req.per_item is not None:
        source = after.get(TaskId(req.per_item[0]))
        items = None
        if source is not None and source.state is TaskState.SUCCEEDED:
            result = source.result
            items = result.get(req.per_item[1]) if isinstance(result, dict) else None
        if not isinstance(items, list):
            return max(need, 1 << 30)  # the list is not known yet: the work is not done
        need = max(need, len(items))
    return need


def _field(value: JSON, name: str | None) -> Any:
    if name is None:
        return value
    return value.get(name) if isinstance(value, dict) else None


def _cited(cite: Cite, verdict: JSON, tasks: Iterable[Task]) -> str | None:
    if not isinstance(verdict, dict) or cite.field not in verdict:
        return f"the verdict has no {cite.field!r}"
    given = verdict[cite.field]
    results = [_field(t.result, cite.result_field) for t in tasks]
    match cite.derive:
        case Derive.COPY:
            if any(_same(given, r) for r in results):
                return None
            return f"verdict.{cite.field} is no succeeded {cite.skill} task's result"
        case Derive.COUNT:
            if given == len(results) and not isinstance(given, bool):
                return None
            return f"verdict.{cite.field}={given!r}, {len(results)} {cite.skill} succeeded"
        case Derive.SUM:
            numbers = [r for r in results if isinstance(r, int | float)]
            total = sum(numbers)
            if isinstance(given, int | float) and math.isclose(given, total, abs_tol=1e-6):
                return None
            return f"verdict.{cite.field}={given!r}, the {cite.skill} results sum to {total:g}"


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
