"""GraphPatch: the one way the graph changes.

A patch is a value: a tuple of ops that is validated and applied whole, or not at all.
Build one fluently; every call returns a new patch::

    GraphPatch().add(TaskSpec(task_id="b", skill="fetch"), after=["a"]).cancel("c")
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from loopkernel.errors import UsageError
from loopkernel.graph._model import JSON, RunStatus, TaskSpec
from loopkernel.graph._verdict import Verdict
from loopkernel.ids import TaskId

__all__ = ["Add", "Cancel", "Connect", "Finish", "GraphPatch", "Op", "Resume", "Wait"]

FinishStatus: TypeAlias = Literal["succeeded", "failed", "escalated", "cancelled"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Add:
    task: TaskSpec
    """The task to add; it starts ``pending`` and turns ``ready`` once its predecessors succeed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Connect:
    src: TaskId
    """The predecessor."""
    dst: TaskId
    """The task that waits for ``src`` to succeed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Cancel:
    task_id: TaskId
    """A task that is not terminal; a running one is cancelled in flight."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Wait:
    task_id: TaskId
    """A pending or ready task to park until a human answers."""
    reason: str
    """Why; shown to the human who must act."""
    until: float | None = None
    """A timer: the wake-up time (seconds since the epoch). When it comes, the kernel
    journals ``timer_fired`` once and resumes the task; ``None``: a human must answer."""
    seconds: float | None = None
    """A timer as a duration: the executor turns it into ``until`` with its clock before
    the patch is validated and journaled, so the journal holds only ``until``."""
    on_timeout: Literal["reject", "escalate"] | None = None
    """With ``until`` or ``seconds``: an approval with a deadline instead of a sleep. A human
    answers before it; when it comes, ``reject`` answers as if a human had rejected and
    ``escalate`` stops the run ``escalated`` (``approval_timeout``). Journaled only if set."""

    def __post_init__(self) -> None:
        if self.on_timeout is None:
            return
        if self.on_timeout not in ("reject", "escalate"):
            raise UsageError(
                f"wait of {self.task_id!r}: on_timeout must be reject or escalate, "
                f"not {self.on_timeout!r}"
            )
        if self.until is None and self.seconds is None:
            raise UsageError(
                f"wait of {self.task_id!r}: on_timeout needs a deadline (until= or seconds=)"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class Resume:
    task_id: TaskId
    """A waiting task."""
    payload: JSON = None
    """What the human said; the worker sees it as ``ctx.human_input``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Finish:
    status: FinishStatus
    """How the run ends."""
    verdict: JSON = None
    """Why: kept in the run row."""


Op: TypeAlias = Add | Connect | Cancel | Wait | Resume | Finish


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphPatch:
    """An ordered list of ops; the empty patch means "wait for more events"."""

    ops: tuple[Op, ...] = field(default=())
    """Applied in order, atomically."""

    def __bool__(self) -> bool:
        return bool(self.ops)

    def _with(self, *ops: Op) -> GraphPatch:
        return GraphPatch(ops=self.ops + ops)

    def add(self, task: TaskSpec, *, after: Iterable[str] = ()) -> GraphPatch:
        """Add ``task``, connected after each of ``after``."""
        edges = [Connect(src=TaskId(a), dst=TaskId(task.task_id)) for a in after]
        return self._with(Add(task=task), *edges)

    def connect(self, src: str, dst: str) -> GraphPatch:
        return self._with(Connect(src=TaskId(src), dst=TaskId(dst)))

    def cancel(self, task_id: str) -> GraphPatch:
        return self._with(Cancel(task_id=TaskId(task_id)))

    def wait(
        self,
        task_id: str,
        reason: str,
        *,
        seconds: float | None = None,
        on_timeout: Literal["reject", "escalate"] | None = None,
    ) -> GraphPatch:
        """Park a pending or ready task until a human answers; with ``seconds`` and
        ``on_timeout``, an approval with a deadline (``Wait.on_timeout``)."""
        if (seconds is None) != (on_timeout is None):
            raise UsageError(f"wait of {task_id!r}: give both seconds= and on_timeout=, or neither")
        return self._with(
            Wait(task_id=TaskId(task_id), reason=reason, seconds=seconds, on_timeout=on_timeout)
        )

    def sleep(
        self,
        task_id: str,
        *,
        until: float | None = None,
        seconds: float | None = None,
        reason: str = "timer",
    ) -> GraphPatch:
        """Park a pending or ready task until a time (``until``, seconds since the epoch) or
        for a duration (``seconds``, from when the executor applies the patch): a ``wait``
        with a wake-up time, which the kernel answers itself when it comes."""
        if (until is None) == (seconds is None):
            raise UsageError("sleep takes exactly one of until= and seconds=")
        return self._with(
            Wait(task_id=TaskId(task_id), reason=reason, until=until, seconds=seconds)
        )

    def resume(self, task_id: str, payload: JSON = None) -> GraphPatch:
        return self._with(Resume(task_id=TaskId(task_id), payload=payload))

    def finish(
        self, status: FinishStatus | RunStatus, verdict: Verdict | JSON = None
    ) -> GraphPatch:
        """End the run; a ``Verdict`` is kept in its journal form (``to_json``)."""
        kept = verdict.to_json() if isinstance(verdict, Verdict) else verdict
        return self._with(Finish(status=RunStatus(status).value, verdict=kept))  # type: ignore[arg-type]

    def to_json(self) -> list[dict[str, JSON]]:
        """The journal form: a list of ``{"op": ..., ...}`` objects."""
        out: list[dict[str, JSON]] = []
        for op in self.ops:
            match op:
                case Add(task=t):
                    out.append({"op": "add", **t.to_json()})
                case Connect(src=s, dst=d):
                    out.append({"op": "connect", "src": s, "dst": d})
                case Cancel(task_id=t):
                    out.append({"op": "cancel", "task_id": t})
                case Wait(task_id=t, reason=r, until=u, seconds=sec, on_timeout=action):
                    wait: dict[str, JSON] = {"op": "wait", "task_id": t, "reason": r}
                    if u is not None:
                        wait["until"] = u
                    if sec is not None:
                        wait["seconds"] = sec
                    if action is not None:
                        wait["on_timeout"] = action
                    out.append(wait)
                case Resume(task_id=t, payload=p):
                    out.append({"op": "resume", "task_id": t, "payload": p})
                case Finish(status=s, verdict=v):
                    out.append({"op": "finish", "status": s, "verdict": v})
        return out

    @classmethod
    def from_json(cls, data: JSON) -> GraphPatch:
        """Parse the journal form strictly: unknown ops or fields raise ``UsageError``."""
        if not isinstance(data, list):
            raise UsageError("a patch is a JSON list of ops", got=type(data).__name__)
        ops: list[Op] = []
        for i, raw in enumerate(data):
            ops.append(_op_from_json(i, raw))
        return cls(ops=tuple(ops))


_FIELDS: dict[str, frozenset[str]] = {
    "add": frozenset({"op", "task_id", "skill", "input", "evidence_scope"}),
    "connect": frozenset({"op", "src", "dst"}),
    "cancel": frozenset({"op", "task_id"}),
    "wait": frozenset({"op", "task_id", "reason", "until", "seconds", "on_timeout"}),
    "resume": frozenset({"op", "task_id", "payload"}),
    "finish": frozenset({"op", "status", "verdict"}),
}
_REQUIRED: dict[str, frozenset[str]] = {
    "add": frozenset({"task_id", "skill"}),
    "connect": frozenset({"src", "dst"}),
    "cancel": frozenset({"task_id"}),
    "wait": frozenset({"task_id", "reason"}),
    "resume": frozenset({"task_id"}),
    "finish": frozenset({"status"}),
}


def _op_from_json(index: int, raw: JSON) -> Op:
    if not isinstance(raw, dict) or not isinstance(raw.get("op"), str) or raw["op"] not in _FIELDS:
        raise UsageError(f"op {index}: expected an object with op in {sorted(_FIELDS)}", op=index)
    kind = raw["op"]
    extra = set(raw) - _FIELDS[kind]
    missing = _REQUIRED[kind] - set(raw)
    if extra or missing:
        raise UsageError(
            f"op {index} ({kind}): unknown fields {sorted(extra)}, missing {sorted(missing)}",
            op=index,
        )
    for key in ("task_id", "src", "dst", "skill", "reason"):
        if key in raw and not isinstance(raw[key], str):
            raise UsageError(f"op {index} ({kind}): {key} must be a string", op=index)
    match kind:
        case "add":
            scope = raw.get("evidence_scope", "all")
            if scope not in ("all", "ancestors"):
                raise UsageError(f"op {index}: evidence_scope must be all or ancestors", op=index)
            spec = TaskSpec(
                task_id=TaskId(raw["task_id"]),
                skill=raw["skill"],
                input=raw.get("input"),
                evidence_scope=scope,
            )
            return Add(task=spec)
        case "connect":
            return Connect(src=TaskId(raw["src"]), dst=TaskId(raw["dst"]))
        case "cancel":
            return Cancel(task_id=TaskId(raw["task_id"]))
        case "wait":
            times = {k: raw.get(k) for k in ("until", "seconds")}
            for key, value in times.items():
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int | float)
                ):
                    raise UsageError(f"op {index} (wait): {key} must be a number", op=index)
            action = raw.get("on_timeout")
            if action not in (None, "reject", "escalate"):
                raise UsageError(
                    f"op {index} (wait): on_timeout must be reject or escalate", op=index
                )
            return Wait(
                task_id=TaskId(raw["task_id"]),
                reason=raw["reason"],
                until=None if times["until"] is None else float(times["until"]),
                seconds=None if times["seconds"] is None else float(times["seconds"]),
                on_timeout=action,
            )
        case "resume":
            return Resume(task_id=TaskId(raw["task_id"]), payload=raw.get("payload"))
        case _:
            status = raw["status"]
            if status not in ("succeeded", "failed", "escalated", "cancelled"):
                raise UsageError(f"op {index}: finish status {status!r} is not terminal", op=index)
            return Finish(status=status, verdict=raw.get("verdict"))
