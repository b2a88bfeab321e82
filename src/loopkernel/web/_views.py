"""What the pages show, computed from the client API's values: no HTML here (the templates
escape every value), no store access (DESIGN §10)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from loopkernel.client import approver_text
from loopkernel.graph import (
    JSON,
    UNPLANNED_EVENTS,
    Event,
    EventKind,
    GraphState,
    RunStatus,
    Task,
    TaskState,
)
from loopkernel.store import PatchRecord, RunInfo
from loopkernel.web._graph import Box, Layout, layout, natural_key

__all__ = [
    "Decision",
    "JournalRow",
    "PatchView",
    "TaskTime",
    "TaskValue",
    "Timeline",
    "actions_key",
    "added_by",
    "age",
    "answered",
    "approval_of",
    "box_mark",
    "decisions",
    "duration",
    "graph_of",
    "graph_shape",
    "journal_rows",
    "late_tasks",
    "natural_key",
    "patch_view",
    "planned_through",
    "pretty",
    "preview",
    "task_mark",
    "task_time",
    "task_values",
    "timeline",
    "timestamp",
    "traceback_of",
]

PREVIEW = 160
ROW_DATA = 4000
"""A journal row shows at most this much of its event's data; a link gives all of it."""
VALUE_SHOWN = 64_000
"""A task page shows at most this much of one value; a link gives all of it."""


def pretty(value: JSON) -> str:
    """Indented JSON for a ``<pre>``."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def preview(value: JSON, limit: int = PREVIEW) -> str:
    """One line of compact JSON, cut at ``limit`` characters."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def timestamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC"


def duration(seconds: float) -> str:
    """``850 ms``, ``12.3 s``, ``5m 2s``, ``3h 4m``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    return f"{s // 3600}h {s % 3600 // 60}m"


def age(t: float, now: float | None = None) -> str:
    """``12s``, ``5m``, ``3h 4m``, ``2d 1h``."""
    s = max(0, int((time.time() if now is None else now) - t))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _op_line(op: JSON) -> str:
    if not isinstance(op, dict):
        return preview(op)
    kind = op.get("op")
    if kind == "add":
        return f"add {op.get('task_id')} ({op.get('skill')})"
    if kind == "connect":
        return f"connect {op.get('src')} → {op.get('dst')}"
    if kind == "cancel":
        return f"cancel {op.get('task_id')}"
    if kind == "wait":
        return f"wait {op.get('task_id')}: {op.get('reason')}"
    if kind == "resume":
        return f"resume {op.get('task_id')}"
    if kind == "finish":
        return f"finish {op.get('status')}"
    return preview(op)


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchView:
    """A patch as the journal shows it beside its event."""

    planner: str
    outcome: str
    reason: str | None
    ops: list[str]
    """One line per op; an empty patch is ``wait for more events``."""
    raw: str
    """The ops as JSON, for the details."""


OPS_SHOWN = 40
"""A journal row lists this many of its patch's ops, then how many more there are."""


def patch_view(p: PatchRecord) -> PatchView:
    ops = p.ops if isinstance(p.ops, list) else []
    lines = [_op_line(op) for op in ops[:OPS_SHOWN]]
    if len(ops) > OPS_SHOWN:
        lines.append(f"… and {len(ops) - OPS_SHOWN:,} more ops")
    return PatchView(
        planner=p.planner,
        outcome=p.outcome,
        reason=p.reason,
        ops=lines,
        raw="" if len(ops) > OPS_SHOWN else pretty(p.ops),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class JournalRow:
    """One event and the patch that answered it (``None``: not planned yet, or never
    planned, like ``run_finished``)."""

    seq: int
    kind: str
    task_id: str | None
    summary: str
    data: str | None
    """The whole data as JSON when the summary had to cut it."""
    patch: PatchView | None
    planned: bool
    """Whether a patch is expected at all."""
    cut: bool = False
    """``data`` is the start of the data only (the row links to all of it)."""
    at: float | None = None
    """When it was journaled (epoch seconds), if the store says."""
    offset: float | None = None
    """Seconds after the run started."""
    gap: float | None = None
    """Seconds after the event before it."""


def _summary_of(ev: Event) -> JSON:
    """What a journal row says of its event on one line: a human's answer leads with who
    gave it (the data's ``by``), then the payload; a resume or fork, who made it; any
    other event, its data."""
    data = ev.data
    if ev.kind is EventKind.RUN_RESUMED and isinstance(data, dict):
        what = "resumed" if data.get("action") == "resume" else "forked"
        if data.get("action") == "fork":
            what = f"forked from {data.get('source')} at #{data.get('at')}"
        return f"{what} by {approver_text(data.get('by'))}"
    if ev.kind is not EventKind.HUMAN_INPUT or not isinstance(data, dict):
        return data
    head = f"{data.get('decision')} by {approver_text(data.get('by'))}"
    payload = data.get("payload")
    return head if payload is None else f"{head} · {json.dumps(payload, ensure_ascii=False)}"


_SAID = frozenset({EventKind.HUMAN_INPUT, EventKind.RUN_RESUMED})
"""Events whose row's one line is the inspector's, with the data itself below it."""


def journal_rows(
    events: Iterable[Event],
    patches: dict[int, PatchRecord],
    times: dict[int, float] | None = None,
    started_at: float = 0.0,
) -> list[JournalRow]:
    rows = []
    times = times or {}
    for ev in events:
        at = times.get(ev.seq)
        summary = preview(_summary_of(ev))
        said = summary.endswith("…") or ev.kind in _SAID  # the rest below
        full = pretty(ev.data) if said else None
        cut = full is not None and len(full) > ROW_DATA
        if full is not None and cut:
            full = full[:ROW_DATA] + "\n…"
        p = patches.get(ev.seq)
        rows.append(
            JournalRow(
                seq=ev.seq,
                kind=ev.kind.value,
                task_id=ev.task_id,
                summary=summary,
                data=full,
                patch=None if p is None else patch_view(p),
                planned=ev.kind not in UNPLANNED_EVENTS,
                cut=cut,
                at=at,
                offset=None if at is None else at - started_at,
                gap=None if at is None or ev.seq - 1 not in times else at - times[ev.seq - 1],
            )
        )
    return rows


def answered(events: Iterable[Event], state: GraphState) -> dict[str, str]:
    """Waiting tasks whose current wait a human already answered (journaled, not yet
    planned: the run's executor or a worker picks it up), with the decision."""
    out: dict[str, str] = {}
    for ev in events:
        if ev.kind is not EventKind.HUMAN_INPUT or ev.task_id is None:
            continue
        task = state.get(ev.task_id)
        data = ev.data if isinstance(ev.data, dict) else {}
        if task is not None and data.get("wait_epoch") == task.wait_epoch:
            out[ev.task_id] = str(data.get("decision"))
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """A human's answer to one of a task's waits, as the journal keeps it."""

    seq: int
    decision: str
    by: str
    """Who answered (``loopkernel.client.approver_text``): never a token."""
    at: float | None
    """When it was journaled (epoch seconds), if the store says."""
    wait_epoch: JSON


def decisions(events: Iterable[Event], times: dict[int, float]) -> list[Decision]:
    """The ``human_input`` events among ``events``: who approved or rejected, and when."""
    out = []
    for ev in events:
        if ev.kind is not EventKind.HUMAN_INPUT:
            continue
        data = ev.data if isinstance(ev.data, dict) else {}
        out.append(
            Decision(
                seq=ev.seq,
                decision=str(data.get("decision")),
                by=approver_text(data.get("by")),
                at=times.get(ev.seq),
                wait_epoch=data.get("wait_epoch"),
            )
        )
    return out


def late_tasks(events: Iterable[Event]) -> frozenset[str]:
    return frozenset(
        ev.task_id
        for ev in events
        if ev.kind is EventKind.LATE_RESULT_DISCARDED and ev.task_id is not None
    )


def graph_of(state: GraphState, late: frozenset[str]) -> Layout:
    tasks = [(t.task_id, t.skill, t.state.value) for t in state.tasks.values()]
    edges = [(s, d) for s, ds in state.succs.items() for d in ds]
    return layout(tasks, edges, late)


def is_live(info: RunInfo) -> bool:
    """Whether the page should listen for more: a finished run's journal is closed."""
    return info.status in (RunStatus.RUNNING, RunStatus.WAITING)


def report_of(state: GraphState) -> dict[str, Any] | None:
    """The investigation report a run wrote, if it wrote one: the result of a succeeded
    task ``report`` holding ``{"report": {summary, observed_facts, ..., evidence}}`` (the
    fields docs/sre.md fixes for other tools to read)."""
    task = state.get("report")
    if task is None or task.state is not TaskState.SUCCEEDED:
        return None
    result = task.result
    report = result.get("report") if isinstance(result, dict) else None
    if not isinstance(report, dict) or not {"summary", "evidence"} <= report.keys():
        return None
    return report


def actions_key(
    waiting: Iterable[Task], answered: dict[str, str], info: RunInfo, cancel: bool
) -> str:
    """What the approval forms depend on: the page replaces them only when it changes."""
    waits = "".join(f"{t.task_id}@{t.wait_epoch}{answered.get(t.task_id, '')}," for t in waiting)
    return f"{waits}|{info.status.value}|{'cancel' if cancel else ''}"


def task_mark(task: Task, late: bool, time: TaskTime | None = None) -> str:
    """What a task's row shows, compact: the live stream resends a row when it changes."""
    value = task.error if task.error is not None else task.result
    when = "" if time is None else f"{time.started}|{time.finished}"
    return (
        f"{task.state.value}|{task.attempts}|{task.wait_epoch}|{late}|{when}|{preview(value, 120)}"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskTime:
    """When a task ran, as the store recorded it (epoch seconds)."""

    started: float | None
    """When its latest attempt went running (``None``: not yet, or a store or fork that
    did not record it)."""
    finished: float | None
    """When its finishing event was journaled."""

    @property
    def took(self) -> float | None:
        """Seconds from start to finish, when both are known."""
        if self.started is None or self.finished is None:
            return None
        return max(0.0, self.finished - self.started)


def task_time(times: dict[str, tuple[float | None, float | None]], task_id: str) -> TaskTime | None:
    found = times.get(task_id)
    if found is None or found == (None, None):
        return None
    return TaskTime(started=found[0], finished=found[1])


def box_mark(box: Box) -> str:
    return f"{box.state}|{box.late}|{box.count}|{sorted(box.states.items())}"


def graph_shape(lay: Layout) -> str:
    """The drawing without its states: boxes and wires where they are."""
    parts = [f"{b.key}@{b.x:.0f},{b.y:.0f}" for b in lay.boxes]
    parts += [w.d for w in lay.wires]
    return f"{lay.width:.0f}x{lay.height:.0f}|" + "|".join(parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskValue:
    """One value of a task as its page shows it: cut when long."""

    part: str
    text: str
    cut: bool
    size: int
    """Characters of the whole value, indented."""


def task_values(task: Task) -> dict[str, TaskValue]:
    out = {}
    for part in ("input", "result", "error", "human_input"):
        text = pretty(getattr(task, part))
        cut = len(text) > VALUE_SHOWN
        shown = text[:VALUE_SHOWN] + "\n…" if cut else text
        out[part] = TaskValue(part=part, text=shown, cut=cut, size=len(text))
    return out


def traceback_of(error: JSON) -> str | None:
    """The traceback a task's error carries, when the worker's failure recorded one."""
    if not isinstance(error, dict):
        return None
    for key in ("traceback", "stack", "trace"):
        value = error.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return "".join(str(v) for v in value)
    return None


def failure_traceback(task: Task, events: Sequence[Event]) -> str | None:
    """The traceback of the task's latest failure: its ``task_failed`` event keeps it
    (redacted, bounded, ``executor._outcomes``); an older error may carry one itself."""
    for ev in reversed(events):
        if ev.kind is EventKind.TASK_FAILED and ev.task_id == task.task_id:
            data = ev.data if isinstance(ev.data, dict) else {}
            found = data.get("traceback")
            if isinstance(found, str) and found.strip():
                return found
            break
    return traceback_of(task.error)


def approval_of(task: Task, call: JSON = None) -> dict[str, str]:
    """What a waiting task asks approval for, as far as the journal says. With the parked
    call (its ``approval_required`` event's ``call``): its tool, effect, idempotency key,
    arguments (redacted, as the effect journal stores them) and cost. Else, for a wait
    journaled without one: the tool (the task input's ``tool``, else the one the
    policy's reason names: ``tool 'x' is ...``) and its cost (the input's
    ``est_cost_usd`` or ``cost_usd``)."""
    out: dict[str, str] = {}
    if isinstance(call, dict) and isinstance(call.get("tool"), str):
        out["tool"] = str(call["tool"])
        for name in ("effect", "key"):
            if isinstance(call.get(name), str):
                out[name] = str(call[name])
        out["arguments"] = pretty(call.get("arguments"))
        cost = call.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            out["cost"] = f"${cost:,.4f}"
            return out
    data = task.input if isinstance(task.input, dict) else {}
    tool = out.get("tool") or data.get("tool")
    if not isinstance(tool, str):
        found = re.search(r"tool '([^']+)'", task.wait_reason or "")
        tool = None if found is None else found.group(1)
    if tool:
        out["tool"] = tool
    for key in ("est_cost_usd", "cost_usd"):
        cost = data.get(key)
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            out["cost"] = f"${cost:,.4f}"
            break
    return out


def planned_through(events: Iterable[Event], patches: dict[int, PatchRecord], start: int) -> int:
    """The highest seq up to which every one of ``events`` (those after ``start``) has
    its patch: the page's live stream need not resend those."""
    through = start
    for ev in events:
        if ev.seq not in patches and ev.kind not in UNPLANNED_EVENTS:
            break
        through = ev.seq
    return through


TIMELINE_TASKS = 60
"""Most task bars the run page's timeline draws."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Bar:
    """One task on the timeline: from when it could start to when it finished."""

    task_id: str
    state: str
    start: float
    """Seconds after the run started."""
    end: float | None
    """``None``: not finished yet."""
    left: float
    """Where the bar starts, in percent of the run's duration."""
    width: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Timeline:
    span: float
    """The run's duration so far, in seconds."""
    bars: list[Bar]
    more: int
    """Tasks not drawn."""


def timeline(
    state: GraphState,
    times: dict[int, float],
    added: dict[str, int],
    started_at: float,
    now: float,
) -> Timeline | None:
    """Task bars from the journal's times: a task starts when it could (the event whose
    patch added it, or its last predecessor's finish if later) and ends at its own
    finishing event. ``None`` when the store gave no times."""
    if not times:
        return None
    span = max(now - started_at, 1e-3)
    done: dict[str, float] = {}
    for task in state.tasks.values():
        if task.done_seq is not None and task.done_seq in times:
            done[task.task_id] = times[task.done_seq] - started_at
    bars = []
    order = sorted(
        state.tasks.values(), key=lambda t: (t.done_seq or 1 << 62, natural_key(t.task_id))
    )
    for task in order[:TIMELINE_TASKS]:
        seq = added.get(task.task_id)
        start = times[seq] - started_at if seq is not None and seq in times else 0.0
        for p in state.predecessors(task.task_id):
            start = max(start, done.get(p, 0.0))
        end = done.get(task.task_id)
        stop = end if end is not None else span
        bars.append(
            Bar(
                task_id=task.task_id,
                state=task.state.value,
                start=start,
                end=end,
                left=100 * start / span,
                width=max(0.4, 100 * (stop - start) / span),
            )
        )
    return Timeline(span=span, bars=bars, more=max(0, len(order) - TIMELINE_TASKS))


def added_by(patches: Iterable[PatchRecord]) -> dict[str, int]:
    """task -> the seq of the event whose applied patch added it."""
    out: dict[str, int] = {}
    for p in patches:
        if p.outcome != "applied" or not isinstance(p.ops, list):
            continue
        for op in p.ops:
            if isinstance(op, dict) and op.get("op") == "add":
                out.setdefault(str(op.get("task_id")), p.event_seq)
    return out
