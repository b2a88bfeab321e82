"""Rendering for the terminal: a live progress view and ``inspect``."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from loopkernel._waits import WaitingOn, WaitKind, clock, owner_note
from loopkernel.graph import JSON, Event, EventKind, GraphState, RunStatus, TaskState
from loopkernel.store import PatchRecord

if TYPE_CHECKING:
    from loopkernel.client import Inspection

__all__ = ["Progress", "one_line", "render_inspection", "summarize_ops"]

_MARK = {
    TaskState.SUCCEEDED: "✓",
    TaskState.FAILED: "✗",
    TaskState.CANCELLED: "⊘",
    TaskState.RUNNING: "▶",
    TaskState.WAITING: "⏸",
    TaskState.READY: "·",
    TaskState.PENDING: "·",
}


def one_line(text: str) -> str:
    """A message on one line: a server's multi-line error joined with `` | ``."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def summarize_ops(ops: JSON) -> str:
    """``add r1,r2 · cancel r3 · finish succeeded`` for a patch's journal form."""
    if not ops:
        return "(wait)"
    parts: list[str] = []
    groups: dict[str, list[str]] = {}
    for op in ops:
        kind = op["op"]
        if kind == "connect":
            groups.setdefault("connect", []).append(f"{op['src']}→{op['dst']}")
        elif kind == "finish":
            parts.append(f"finish {op['status']}")
        else:
            groups.setdefault(kind, []).append(str(op["task_id"]))
    head = [f"{k} {','.join(v)}" for k, v in groups.items() if k != "connect"]
    if "connect" in groups:
        head.append(f"connect {len(groups['connect'])}")
    return " · ".join(head + parts)


def planner_note(record: PatchRecord) -> str:
    """``llm smollm2 41 ms`` or ``fallback: bad_json (smollm2)`` or ``kernel: runaway guard``."""
    note = record.proposal
    if note is None:
        return f"{record.planner}: {record.reason}"
    model = note.model or "no model"
    latency = "" if note.latency_ms is None else f" {note.latency_ms:.0f} ms"
    if note.accepted:
        return f"{record.planner} {model}{latency}"
    return f"{record.planner}: {note.reason} ({model}{latency})"


class Progress:
    """An observer that prints one line per planned event, with the patch that answered it."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.t0 = time.monotonic()
        self.started = self.t0

    def tool_server(self, name: str, phase: str) -> None:
        """A line when a tool server starts and when it answers (it takes a second)."""
        elapsed = time.monotonic() - self.t0
        if phase == "starting":
            self.started = time.monotonic()
            line = f"tool server {name} starting..."
        else:
            line = f"tool server {name} ready ({time.monotonic() - self.started:.2f}s)"
        print(f"  {elapsed:6.2f}s  {line}", file=self.out, flush=True)

    def __call__(self, event: Event, state: GraphState, record: PatchRecord | None) -> None:
        elapsed = time.monotonic() - self.t0
        running = sorted(t.task_id for t in state.in_state(TaskState.RUNNING))
        done = state.finished_count()  # reads no evicted task back (--keep-finished)
        subject = event.task_id or ""
        answer = summarize_ops(record.ops) if record is not None else ""
        if record is not None and record.planner != "planner":
            answer += f" [{planner_note(record)}]"
        line = f"  {elapsed:6.2f}s  #{event.seq:<4} {event.kind.value:<22} {subject:<10} "
        line += f"→ {answer}" if answer else ""
        if running:
            line += f"   (running: {', '.join(running[:6])}{'…' if len(running) > 6 else ''})"
        line += f"   [{done}/{len(state.tasks)} done]"
        print(line.rstrip(), file=self.out, flush=True)


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC"


def _render_now(ins: Inspection, out: TextIO, waits: Sequence[WaitingOn]) -> None:
    """A lost owner, a timer's wake-up time and an approval's deadline: what the row says
    now (not shown ``--at`` an older seq). ``waits``: what the waiting tasks wait for."""
    info = ins.info
    if ins.at_seq is not None:
        return
    lost = owner_note(info)
    if lost is not None:
        print(f"owner:   {lost}; a worker --adopt-orphans or `resume` takes it over", file=out)
    for w in waits:
        if w.kind is WaitKind.APPROVAL and w.until is not None:
            print(f"approval: task {w.task_id}, deadline {clock(w.until)}", file=out)
    timers = [w.until for w in waits if w.kind is WaitKind.TIMER and w.until is not None]
    wake = min(timers) if timers else (None if waits else info.wake_at)
    if wake is not None and info.status is RunStatus.WAITING:
        print(f"timer:   wakes at {clock(wake)}", file=out)


def render_inspection(
    ins: Inspection, out: TextIO, *, journal: bool, waits: Sequence[WaitingOn] = ()
) -> None:
    from loopkernel.client import approver_text

    info = ins.info
    print(f"run {info.run_id}  app={info.app}  status={info.status.value}", file=out)
    _render_now(ins, out, waits)
    if ins.at_seq is not None:
        print(f"as of:   event #{ins.at_seq} (the journal replayed up to there)", file=out)
    if ins.origin is not None:
        print(f"forked:  from {ins.origin[0]} at event #{ins.origin[1]}", file=out)
    if info.verdict is not None:
        print(f"verdict: {json.dumps(info.verdict)}", file=out)
    print(f"digest:  {ins.digest}", file=out)
    print(f"params:  {json.dumps(info.params)}", file=out)
    preds: dict[str, list[str]] = {}
    for src, dst in ins.edges:
        preds.setdefault(dst, []).append(src)
    print(f"tasks ({len(ins.tasks)}):", file=out)
    for task in ins.tasks:
        state = TaskState(str(task["state"]))
        after = f"  after {','.join(preds[task['task_id']])}" if task["task_id"] in preds else ""
        scope = "  [ancestors]" if task["evidence_scope"] == "ancestors" else ""
        print(
            f"  {_MARK[state]} {task['task_id']:<14} {task['skill']:<12} {state.value:<10}"
            f"{after}{scope}",
            file=out,
        )
        if task["error"] is not None:
            print(f"      error: {json.dumps(task['error'])}", file=out)
    if journal and ins.events is not None:
        by_seq = {p.event_seq: p for p in ins.patches or []}
        print("journal:", file=out)
        for e in ins.events:
            p = by_seq.get(e.seq)
            answer = "" if p is None else f"→ {summarize_ops(p.ops)}"
            if p is not None and p.outcome == "rejected":
                answer += f"  REJECTED: {p.reason}"
            elif p is not None and p.planner != "planner":
                answer += f"  [{planner_note(p)}]"
            print(f"  #{e.seq:<4} {e.kind.value:<22} {e.task_id or '':<12} {answer}", file=out)
            if e.kind is EventKind.HUMAN_INPUT and isinstance(e.data, dict):
                at = (ins.times or {}).get(e.seq)
                when = "" if at is None else f" at {_utc(at)}"
                by = approver_text(e.data.get("by"))
                print(f"        {e.data.get('decision')} by {by}{when}", file=out)
            if p is not None and p.proposal is not None and not p.proposal.accepted:
                if p.proposal.ops is not None:
                    proposed = summarize_ops(p.proposal.ops) or "(empty patch)"
                    print(f"        rejected proposal: {proposed}", file=out)
                if p.proposal.detail:
                    print(f"        why: {p.proposal.detail}", file=out)
