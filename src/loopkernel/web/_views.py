"""What the pages show, computed from the client API's values: no HTML here (the templates
escape every value), no store access (DESIGN §10)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from loopkernel.graph import JSON, Event, EventKind, GraphState, RunStatus
from loopkernel.store import PatchRecord, RunInfo
from loopkernel.web._graph import Layout, layout

__all__ = [
    "JournalRow",
    "PatchView",
    "age",
    "answered",
    "graph_of",
    "journal_rows",
    "late_tasks",
    "patch_view",
    "pretty",
    "preview",
    "timestamp",
]

PREVIEW = 160


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


def patch_view(p: PatchRecord) -> PatchView:
    ops = p.ops if isinstance(p.ops, list) else []
    return PatchView(
        planner=p.planner,
        outcome=p.outcome,
        reason=p.reason,
        ops=[_op_line(op) for op in ops],
        raw=pretty(p.ops),
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


def journal_rows(events: Iterable[Event], patches: dict[int, PatchRecord]) -> list[JournalRow]:
    rows = []
    for ev in events:
        summary = preview(ev.data)
        full = pretty(ev.data) if len(summary) and summary.endswith("…") else None
        p = patches.get(ev.seq)
        rows.append(
            JournalRow(
                seq=ev.seq,
                kind=ev.kind.value,
                task_id=ev.task_id,
                summary=summary,
                data=full,
                patch=None if p is None else patch_view(p),
                planned=ev.kind is not EventKind.RUN_FINISHED,
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
