"""Patterns for planners: a run's shape as a few typed values, compiled to ordinary patches.

::

    flow = Flow(
        Step("load"),
        for_each(lambda at: at.result("load")["items"],
            Step("plan", input=lambda at: {"item": at.item}),
            retry(Step("act"), Step("check"), until=lambda at: at.prev.result["ok"], max=3),
        ),
        verdict=lambda at: {"done": len(at.result("load")["items"])},
    )

A ``Flow`` is a ``Planner``: it answers each event with the same ``GraphPatch`` ops a
hand-written planner would (``add`` after the previous task, ``cancel``, ``wait``,
``resume``, ``finish``), journaled against their events like any other patch.

**Task ids carry the place.** A step's task id is its name, then ``:`` and the counters of
the loops around it, outermost first: ``plan:2`` (second item), ``act:2.3`` (third attempt
at the second item). Answering an event, the flow reads its place from the finished task's
id and everything else from the snapshot, so it is a pure function of (snapshot, event):
a resumed run is planned exactly as an uninterrupted one. The callables a flow is given
(``input``, ``until``, ``items``, ``check``, ``verdict``) must be pure in the same way: read
``at``, nothing else.

Mistakes are ``UsageError`` when the flow is built (a duplicate or malformed step name, a
loop without a bound, a quorum that cannot be reached) or when it meets its worker registry
(``check_workers``, called by ``Kernel`` and ``AppParts``: a step whose skill nobody
registered).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from typing import TYPE_CHECKING, Literal, TypeAlias, TypeVar, assert_never

from loopkernel.errors import UsageError
from loopkernel.graph import (
    JSON,
    TERMINAL_TASK,
    Event,
    GraphPatch,
    Task,
    TaskSpec,
    TaskState,
    Verdict,
    VerdictKind,
)
from loopkernel.planner._protocol import BasePlanner, Snapshot

if TYPE_CHECKING:
    from loopkernel.executor import ApprovalTimeout

__all__ = [
    "At",
    "Flow",
    "Node",
    "Step",
    "for_each",
    "gate",
    "guard",
    "quorum",
    "repeat",
    "retry",
]

MAX_NAME = 100

_F = TypeVar("_F", bound=Callable[..., object])


@dataclass(frozen=True, eq=False, slots=True)
class Step:
    """One task of the flow: ``Step("fetch")``, ``Step("r1", "research", input=...)``."""

    name: str
    """Unique in the flow; the task id is the name plus the loop counters (``fetch:2``)."""
    skill: str = ""
    """The worker that runs it; empty means the same as ``name``."""
    _: KW_ONLY
    input: JSON | Callable[[At], JSON] = None
    """The task's JSON input, or a function of ``at`` that returns it."""
    evidence_scope: Literal["all", "ancestors"] = "all"
    """``ancestors``: the worker sees only its transitive predecessors' results."""
    approval: str | None = None
    """If set, the task is parked for a human as soon as it is added (``gate``)."""
    timeout: ApprovalTimeout | None = None
    """With ``approval``: what happens if nobody answers in time (``gate(..., timeout=)``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not 1 <= len(self.name) <= MAX_NAME:
            raise UsageError(f"a step name is 1..{MAX_NAME} characters, not {self.name!r}")
        if ":" in self.name:
            raise UsageError(f"step name {self.name!r}: ':' is kept for the loop counters")
        if not self.skill:
            object.__setattr__(self, "skill", self.name)


@dataclass(frozen=True, eq=False, slots=True)
class _ForEach:
    items: Callable[[At], Sequence[JSON]]
    body: tuple[Node, ...]


@dataclass(frozen=True, eq=False, slots=True)
class _Loop:
    body: tuple[Node, ...]
    until: Callable[[At], bool]
    max: int
    kind: Literal["retry", "repeat"]


@dataclass(frozen=True, eq=False, slots=True)
class _Quorum:
    k: int
    of: tuple[Step, ...]


@dataclass(frozen=True, eq=False, slots=True)
class _Guard:
    check: Callable[[At], str | None]


Node: TypeAlias = Step | _ForEach | _Loop | _Quorum | _Guard
"""What a flow is made of: a ``Step`` or what the pattern functions below return."""

_Container: TypeAlias = "Flow | _ForEach | _Loop | _Quorum"


def for_each(items: Callable[[At], Sequence[JSON]], *body: Node) -> Node:
    """Run ``body`` once per item, in order; ``at.item`` and ``at.index`` (from 1) say which.

    ``items`` is asked again whenever the flow needs it, so it must read only results that
    no longer change (those of steps before the loop). An empty list skips the loop.
    """
    return _ForEach(items=_callable("for_each", "items", items), body=_body("for_each", body))


def retry(*body: Node, until: Callable[[At], bool], max: int) -> Node:
    """Run ``body``; after its last step, ``until(at)`` judges the attempt (``at.prev`` is
    that step's task). Not yet: run it again, after it, at most ``max`` attempts in all;
    then the run stops ``escalated`` (``retries_exhausted``). ``at.attempt`` counts from 1.
    """
    until = _callable("retry", "until", until)
    return _Loop(body=_body("retry", body), until=until, max=_bound("retry", max), kind="retry")


def repeat(*body: Node, until: Callable[[At], bool], max: int) -> Node:
    """Rounds of ``body``: after each step, ``until(at)`` may end the loop; after ``max``
    rounds it ends anyway and the flow goes on (a bound, not a failure). ``at.attempt`` is
    the round, from 1. The shape of a bounded plan-and-act loop."""
    until = _callable("repeat", "until", until)
    return _Loop(body=_body("repeat", body), until=until, max=_bound("repeat", max), kind="repeat")


def quorum(k: int, *, of: Sequence[Step]) -> Node:
    """Start every step of ``of`` at once; when ``k`` have succeeded, cancel the others (in
    flight if they run) and go on after the ``k`` winners. A member that fails fails the
    run only once ``k`` can no longer be reached."""
    members = tuple(of)
    if not members or not all(isinstance(s, Step) for s in members):
        raise UsageError("quorum(k, of=[...]) needs a non-empty list of Step")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(members):
        raise UsageError(f"quorum k must be between 1 and {len(members)}, not {k!r}")
    return _Quorum(k=k, of=members)


def gate(step: Step, reason: str, *, timeout: ApprovalTimeout | None = None) -> Step:
    """An approval gate: ``step`` waits for a human (``reason`` is what they see) before it
    runs. ``approve`` lets it run; ``reject`` cancels it and the run.

    ``timeout``: an approval with a deadline, like a tool call's. Nobody answers within
    ``timeout.seconds`` of the step being added: ``action="reject"`` rejects it as a human
    would (``{"by": "timeout"}``); ``"escalate"`` stops the run ``escalated`` with an
    ``approval_timeout`` verdict. The run-level ``ApprovalTimeout`` does not apply to gates.
    """
    from loopkernel.executor import ApprovalTimeout  # here: the executor imports the planner

    if not reason:
        raise UsageError(f"gate({step.name!r}): give the reason a human will read")
    if timeout is not None and not isinstance(timeout, ApprovalTimeout):
        raise UsageError(
            f"gate({step.name!r}): timeout must be an ApprovalTimeout, not {timeout!r}"
        )
    return replace(step, approval=reason, timeout=timeout)


def guard(check: Callable[[At], str | None]) -> Node:
    """A check before what follows: ``check(at)`` returns ``None`` to go on, or a reason,
    and the run stops ``escalated`` with it before the next step is added."""
    return _Guard(check=_callable("guard", "check", check))


def _callable(what: str, name: str, fn: _F) -> _F:
    if not callable(fn):
        raise UsageError(f"{what}(): {name} must be a function of at, not {fn!r}")
    return fn


def _body(what: str, body: tuple[Node, ...]) -> tuple[Node, ...]:
    if not body:
        raise UsageError(f"{what}() needs at least one step")
    return body


def _bound(what: str, max: int) -> int:
    if isinstance(max, bool) or not isinstance(max, int) or max < 1:
        raise UsageError(f"{what}() needs a bound: max=N with N >= 1, not {max!r}")
    return max


def _task_id(name: str, counters: Sequence[int]) -> str:
    """``name``, then ``:`` and the loop counters: ``act:2.3``."""
    return f"{name}:{'.'.join(map(str, counters))}" if counters else name


class At:
    """Where the flow is, as the callables it was given see it."""

    def __init__(
        self,
        flow: Flow,
        snapshot: Snapshot,
        loops: tuple[_ForEach | _Loop, ...],
        counters: tuple[int, ...],
        prev: Task | None,
    ) -> None:
        self._flow = flow
        self.snapshot = snapshot
        """The run as it is now."""
        self._loops = loops
        self.counters = counters
        """The counters of the loops around this place, outermost first."""
        self._prev = prev

    @property
    def prev(self) -> Task:
        """The task that just finished: the one the next task comes after."""
        if self._prev is None:
            raise UsageError("at.prev: no task has finished yet (this is the run's start)")
        return self._prev

    @property
    def params(self) -> JSON:
        """The run's parameters."""
        return self.snapshot.params

    @property
    def index(self) -> int:
        """The innermost ``for_each``'s position, from 1."""
        return self._counter(_ForEach, "for_each")

    @property
    def attempt(self) -> int:
        """The innermost ``retry``'s attempt or ``repeat``'s round, from 1."""
        return self._counter(_Loop, "retry or repeat")

    @property
    def item(self) -> JSON:
        """The innermost ``for_each``'s current item."""
        depth = self._depth(_ForEach, "for_each")
        loop = self._loops[depth]
        assert isinstance(loop, _ForEach)
        outside = self._moved(self._loops[:depth], self.counters[:depth])
        return loop.items(outside)[self.counters[depth] - 1]

    def id(self, name: str) -> str:
        """The task id of step ``name`` as seen from here: in the same iteration, and for a
        step inside a loop this place is not in, its latest task."""
        loops, shared = self._shared(name)
        if shared == len(loops):
            return _task_id(name, self.counters[:shared])
        found = self.tasks(name)
        if not found:
            raise UsageError(f"step {name!r} has no task here yet")
        return found[-1].task_id

    def tasks(self, name: str) -> list[Task]:
        """Every task of step ``name`` seen from here, in loop order: one per iteration,
        attempt or round of the loops around it that this place is not in (every round's
        ``act`` after a ``repeat``), or the one task ``id`` names."""
        _, shared = self._shared(name)
        found: list[tuple[tuple[int, ...], Task]] = []
        for tid, task in self.snapshot.tasks.items():
            place = self._flow._place(tid)
            if place and place[0].name == name and place[1][:shared] == self.counters[:shared]:
                found.append((place[1], task))
        return [task for _, task in sorted(found, key=lambda pair: pair[0])]

    def _shared(self, name: str) -> tuple[tuple[_ForEach | _Loop, ...], int]:
        """Step ``name``'s loops, and how many of the outermost this place is inside too."""
        loops = self._flow._loops_of(name)
        shared = 0
        while shared < min(len(loops), len(self._loops)) and loops[shared] is self._loops[shared]:
            shared += 1
        return loops, shared

    def task(self, name: str) -> Task:
        """The task of step ``name`` (see ``id``)."""
        tid = self.id(name)
        task = self.snapshot.get(tid)
        if task is None:
            raise UsageError(f"step {name!r} has no task {tid!r} yet")
        return task

    def result(self, name: str) -> JSON:
        """The result of step ``name`` (see ``id``)."""
        return self.task(name).result

    def _depth(self, kind: type, what: str) -> int:
        for depth in range(len(self._loops) - 1, -1, -1):
            if isinstance(self._loops[depth], kind):
                return depth
        raise UsageError(f"this place is not inside a {what}")

    def _counter(self, kind: type, what: str) -> int:
        return self.counters[self._depth(kind, what)]

    def _moved(self, loops: tuple[_ForEach | _Loop, ...], counters: tuple[int, ...]) -> At:
        return At(self._flow, self.snapshot, loops, counters, self._prev)


class Flow(BasePlanner):
    """A planner made of steps and patterns, run in order; when the last one is done the
    run succeeds with ``verdict(at)``.

    A failed task fails the run (``BasePlanner``), except a quorum member while the quorum
    can still be reached. A human's ``approve`` resumes the waiting task; ``reject`` cancels
    it and stops the run ``cancelled``.
    """

    def __init__(self, *nodes: Node, verdict: Callable[[At], JSON] | None = None) -> None:
        if not nodes:
            raise UsageError("Flow() needs at least one step")
        if verdict is not None:
            _callable("Flow", "verdict", verdict)
        self.body: tuple[Node, ...] = nodes
        self.verdict = verdict
        self._steps: dict[str, Step] = {}
        self._where: dict[int, tuple[_Container, int]] = {}
        self._loops: dict[str, tuple[_ForEach | _Loop, ...]] = {}
        self._walk(self, ())

    def _walk(self, container: _Container, loops: tuple[_ForEach | _Loop, ...]) -> None:
        children: Sequence[Node] = (
            container.of if isinstance(container, _Quorum) else container.body
        )
        for i, node in enumerate(children):
            if id(node) in self._where:
                raise UsageError("the same pattern is used twice in one flow; build it twice")
            self._where[id(node)] = (container, i)
            match node:
                case Step(name=name):
                    if name in self._steps:
                        raise UsageError(f"two steps are named {name!r}; step names are unique")
                    self._steps[name] = node
                    self._loops[name] = loops
                case _ForEach() | _Loop():
                    self._walk(node, (*loops, node))
                case _Quorum():
                    self._walk(node, loops)
                case _Guard():
                    pass
                case _:
                    raise UsageError(f"a flow holds steps and patterns, not {node!r}")

    @property
    def skills(self) -> frozenset[str]:
        """Every skill a step of this flow names."""
        return frozenset(step.skill for step in self._steps.values())

    def check_workers(self, workers: Collection[str]) -> None:
        """Raise ``UsageError`` if a step names a skill that ``workers`` does not register."""
        if missing := sorted(self.skills - set(workers)):
            known = ", ".join(sorted(workers)) or "none"
            raise UsageError(
                f"the flow names skill(s) nobody registered: {', '.join(missing)} "
                f"(registered: {known})"
            )

    # -- answering events -----------------------------------------------------------------

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return self._enter(self.body[0], At(self, snapshot, (), (), None), [])

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        found = self._place(event.task_id)
        if found is None:
            return GraphPatch()
        step, counters = found
        task = snapshot.task(event.task_id)
        at = At(self, snapshot, self._loops[step.name], counters, task)
        container, _ = self._where[id(step)]
        if isinstance(container, _Quorum):
            return self._quorum_member_done(container, at)
        return self._next(step, at, [task.task_id])

    def on_failed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        found = self._place(event.task_id)
        if found is not None:
            step, counters = found
            container, _ = self._where[id(step)]
            if isinstance(container, _Quorum):
                states = [self._member(snapshot, m, counters) for m in container.of]
                alive = [s for s in states if s is not None and s.state not in TERMINAL_TASK]
                won = [s for s in states if s is not None and s.state is TaskState.SUCCEEDED]
                if len(alive) + len(won) >= container.k:
                    return GraphPatch()
        return super().on_failed(snapshot, event)

    def on_human_input(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        task = snapshot.get(event.task_id)
        if task is None or task.state is not TaskState.WAITING:
            return GraphPatch()
        if event.data["decision"] == "approve":
            return GraphPatch().resume(event.task_id, event.data.get("payload"))
        by = event.data.get("payload")
        verdict = Verdict(kind=VerdictKind.REJECTED, details={"task_id": event.task_id, "by": by})
        return GraphPatch().cancel(event.task_id).finish("cancelled", verdict)

    # -- moving through the flow ----------------------------------------------------------

    def _enter(self, node: Node, at: At, after: Sequence[str]) -> GraphPatch:
        """Start ``node``; its first task(s) come after ``after``."""
        match node:
            case Step():
                return self._add(GraphPatch(), node, at, after)
            case _ForEach(items=items, body=body):
                if not items(at):
                    return self._next(node, at, after)
                return self._enter(body[0], at._moved((*at._loops, node), (*at.counters, 1)), after)
            case _Loop(body=body):
                return self._enter(body[0], at._moved((*at._loops, node), (*at.counters, 1)), after)
            case _Quorum(of=members):
                patch = GraphPatch()
                for member in members:
                    patch = self._add(patch, member, at, after)
                return patch
            case _Guard(check=check):
                reason = check(at)
                if reason is None:
                    return self._next(node, at, after)
                guarded = Verdict(kind=VerdictKind.GUARD, details={"reason": reason})
                return GraphPatch().finish("escalated", guarded)
            case _:
                assert_never(node)

    def _next(self, node: Node, at: At, after: Sequence[str]) -> GraphPatch:
        """``node`` is done (its last tasks are ``after``): go on to what follows it."""
        container, i = self._where[id(node)]
        if isinstance(container, _Loop) and container.kind == "repeat" and container.until(at):
            return self._next(container, at._moved(at._loops[:-1], at.counters[:-1]), after)
        assert not isinstance(container, _Quorum)
        if i + 1 < len(container.body):
            return self._enter(container.body[i + 1], at, after)
        match container:
            case Flow():
                return GraphPatch().finish("succeeded", self.verdict(at) if self.verdict else None)
            case _ForEach(items=items, body=body):
                outside = at._moved(at._loops[:-1], at.counters[:-1])
                n = at.counters[-1]
                if n < len(items(outside)):
                    return self._enter(
                        body[0], at._moved(at._loops, (*outside.counters, n + 1)), after
                    )
                return self._next(container, outside, after)
            case _Loop(body=body, until=until, max=bound, kind=kind):
                outside = at._moved(at._loops[:-1], at.counters[:-1])
                n = at.counters[-1]
                if kind == "retry" and until(at):
                    return self._next(container, outside, after)
                if n < bound:
                    return self._enter(
                        body[0], at._moved(at._loops, (*outside.counters, n + 1)), after
                    )
                if kind == "repeat":
                    return self._next(container, outside, after)
                verdict = Verdict(
                    kind=VerdictKind.RETRIES_EXHAUSTED,
                    details={"task_id": at.prev.task_id, "attempts": bound},
                )
                return GraphPatch().finish("escalated", verdict)
            case _:
                assert_never(container)

    def _add(self, patch: GraphPatch, step: Step, at: At, after: Sequence[str]) -> GraphPatch:
        spec = TaskSpec(
            task_id=_task_id(step.name, at.counters),
            skill=step.skill,
            input=step.input(at) if callable(step.input) else step.input,
            evidence_scope=step.evidence_scope,
        )
        patch = patch.add(spec, after=after)
        if step.approval is None:
            return patch
        if step.timeout is None:
            return patch.wait(spec.task_id, step.approval)
        return patch.wait(
            spec.task_id,
            step.approval,
            seconds=step.timeout.seconds,
            on_timeout=step.timeout.action,
        )

    def _quorum_member_done(self, quorum: _Quorum, at: At) -> GraphPatch:
        members = [self._member(at.snapshot, m, at.counters) for m in quorum.of]
        won = sorted(
            (t for t in members if t is not None and t.state is TaskState.SUCCEEDED),
            key=lambda t: (t.done_seq or 0, t.task_id),
        )
        if len(won) < quorum.k or any(at.snapshot.successors(t.task_id) for t in won):
            return GraphPatch()  # not yet, or already decided at an earlier event
        patch = GraphPatch()
        for t in members:
            if t is not None and t.state not in TERMINAL_TASK:
                patch = patch.cancel(t.task_id)
        winners = sorted(t.task_id for t in won[: quorum.k])
        return GraphPatch(ops=patch.ops + self._next(quorum, at, winners).ops)

    # -- reading places ---------------------------------------------------------------------

    def _place(self, tid: str) -> tuple[Step, tuple[int, ...]] | None:
        """The step and loop counters a task id names, if this flow made it."""
        name, _, path = tid.partition(":")
        step = self._steps.get(name)
        if step is None:
            return None
        try:
            counters = tuple(int(p) for p in path.split(".")) if path else ()
        except ValueError:
            return None
        return (step, counters) if len(counters) == len(self._loops[name]) else None

    def _loops_of(self, name: str) -> tuple[_ForEach | _Loop, ...]:
        if name not in self._loops:
            raise UsageError(f"the flow has no step {name!r} (steps: {', '.join(self._steps)})")
        return self._loops[name]

    def _member(self, snapshot: Snapshot, step: Step, counters: tuple[int, ...]) -> Task | None:
        return snapshot.get(_task_id(step.name, counters))
