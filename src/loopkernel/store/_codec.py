"""Row <-> value conversion, the rules both stores share, and the canonical digest.

Both stores select the same columns in the same order, so a row shaped here means the
same thing whichever database it came from; ``dump`` is assembled here once, which is
what makes the digest of a run byte-identical across SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from enum import Enum
from functools import lru_cache
from typing import Any

from loopkernel.errors import ApprovalRefused, UsageError
from loopkernel.evidence import Evidence, NewEvidence, SourceRef, bound, sha256_text
from loopkernel.graph import (
    JSON,
    TERMINAL_TASK,
    Delta,
    Event,
    EventKind,
    GraphState,
    RunStatus,
    Task,
    TaskState,
)
from loopkernel.ids import RunId, TaskId
from loopkernel.store._protocol import (
    EffectRecord,
    NewEvent,
    NewRun,
    PatchRecord,
    ProposalNote,
    RunInfo,
)

__all__ = [
    "DUMP_EFFECT_COLUMNS",
    "DUMP_TASK_COLUMNS",
    "EFFECT_COLUMNS",
    "EVIDENCE_COLUMNS",
    "INSERT_APPROVAL",
    "INSERT_EDGE",
    "INSERT_EFFECT",
    "INSERT_EVENT",
    "INSERT_EVIDENCE",
    "INSERT_PATCH",
    "INSERT_RUN",
    "INSERT_TASK",
    "PATCH_COLUMNS",
    "RUN_COLUMNS",
    "TASK_COLUMNS",
    "canonical",
    "check_decision",
    "digest_of",
    "dump_of",
    "dump_of_state",
    "dumps",
    "effect_from_row",
    "effect_params",
    "effect_row",
    "event_from_row",
    "evidence_from_row",
    "evidence_params",
    "human_input_event",
    "insert_sql",
    "loads",
    "patch_from_row",
    "patch_params",
    "run_info_from_row",
    "run_page_filter",
    "run_params",
    "task_from_row",
    "waiting_epoch",
    "with_done_seq",
]


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)
_encode = _ENCODER.encode
_ascii: Any = json.encoder.encode_basestring_ascii
_make_c: Any = getattr(json.encoder, "c_make_encoder", None)  # None without the C module
_threads = threading.local()
"""Each thread's own C encoder (``_encoder``): its circular-reference markers are its own."""


def _encoder() -> tuple[Any, dict[int, Any]]:
    """What ``_ENCODER.encode`` builds at every call, built once per thread: the C
    encoder with the same settings, and the markers it checks cycles with."""
    markers: dict[int, Any] = {}
    e = _ENCODER
    made = _make_c(
        markers, e.default, _ascii, None, e.key_separator, e.item_separator, True, False, False
    )
    _threads.encoder = made, markers
    return made, markers


def dumps(value: JSON) -> str:
    """Canonical JSON text: sorted keys, no spaces, no NaN. The text of ``_ENCODER.encode``
    (``tests/store/test_codec_dumps.py``), without its two Python frames and the C
    encoder it makes at every call: a step encodes several values."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return _ascii(value)  # type: ignore[no-any-return]
    if _make_c is None:
        return _encode(value)
    try:
        made, markers = _threads.encoder
    except AttributeError:
        made, markers = _encoder()
    try:
        return "".join(made(value, 0))
    except BaseException:
        markers.clear()  # an encoding that failed halfway leaves its markers behind
        raise


def loads(text: str | None) -> JSON:
    return None if text is None else json.loads(text)


canonical = dumps

_JSON_COLUMNS = frozenset(
    {"params", "verdict", "input", "result", "error", "human_input", "ops", "proposal", "arguments"}
)
"""The columns, in whichever table, that hold JSON text (``dumps``)."""


def _named(columns: str, row: Any) -> dict[str, Any]:
    """``row``'s first values, in ``columns`` order, by column name, its JSON columns parsed.
    (Not for the rows a step reads and writes, ``tasks`` and ``events``: their code reads by
    position, which is faster.)"""
    names = _names(columns)
    return {c: loads(v) if c in _JSON_COLUMNS else v for c, v in zip(names, row, strict=False)}


@lru_cache(maxsize=32)
def _names(columns: str) -> tuple[str, ...]:
    return tuple(columns.split(", "))


def insert_sql(table: str, columns: str) -> str:
    """``INSERT INTO table (columns) VALUES (?,?,...)``, a placeholder for each column."""
    return f"INSERT INTO {table} ({columns}) VALUES ({','.join('?' * (columns.count(',') + 1))})"


def task_from_row(row: Any) -> Task:
    """Row order: task_id, skill, input, evidence_scope, state, result, error, attempts,
    wait_reason, human_input, wait_epoch, done_seq, wake_at."""
    return Task(
        task_id=TaskId(row[0]),
        skill=row[1],
        input=loads(row[2]),
        evidence_scope=row[3],
        state=TaskState(row[4]),
        result=loads(row[5]),
        error=loads(row[6]),
        attempts=row[7],
        wait_reason=row[8],
        human_input=loads(row[9]),
        wait_epoch=row[10],
        done_seq=row[11],
        wake_at=row[12],
    )


TASK_COLUMNS = (
    "task_id, skill, input, evidence_scope, state, result, error, attempts, "
    "wait_reason, human_input, wait_epoch, done_seq, wake_at"
)
INSERT_TASK = insert_sql("tasks", f"run_id, {TASK_COLUMNS}")


def task_params(run_id: RunId, task: Task) -> tuple[Any, ...]:
    # A task's JSON columns are mostly empty: ``null`` without a call of ``dumps``; the
    # state's ``_value_`` without the enum's ``value`` property (a step writes two tasks).
    i, r, e, h = task.input, task.result, task.error, task.human_input
    return (
        run_id,
        task.task_id,
        task.skill,
        "null" if i is None else dumps(i),
        task.evidence_scope,
        task.state._value_,
        "null" if r is None else dumps(r),
        "null" if e is None else dumps(e),
        task.attempts,
        task.wait_reason,
        "null" if h is None else dumps(h),
        task.wait_epoch,
        task.done_seq,
        task.wake_at,
    )


INSERT_EVENT = insert_sql("events", "run_id, seq, kind, task_id, data, created_at")
INSERT_EDGE = insert_sql("edges", "run_id, src, dst")
INSERT_APPROVAL = insert_sql("approvals", "run_id, task_id, wait_epoch, decision, event_seq")


def event_from_row(run_id: RunId, row: Any) -> Event:
    """Row order: seq, kind, task_id, data."""
    return Event(
        run_id=run_id,
        seq=row[0],
        kind=EventKind(row[1]),
        task_id=None if row[2] is None else TaskId(row[2]),
        data=loads(row[3]),
    )


RUN_COLUMNS = (
    "run_id, app, params, status, verdict, max_events, created_at, updated_at, trace, app_version"
)
INSERT_RUN = insert_sql(
    "runs",
    "run_id, app, params, status, verdict, max_events, token_hash, created_at, updated_at, "
    "trace, app_version",
)


def run_params(
    run: NewRun,
    now: float,
    *,
    status: RunStatus = RunStatus.RUNNING,
    verdict: JSON = None,
) -> tuple[Any, ...]:
    """A new run (``running`` unless told, as a fork's may not be), for ``INSERT_RUN``."""
    head = (run.run_id, run.app, dumps(run.params), status.value, dumps(verdict))
    return (*head, run.max_events, run.token_hash, now, now, run.trace, run.app_version)


def run_info_from_row(row: Any, *, last_seq: int, task_counts: dict[str, int]) -> RunInfo:
    """Row order: ``RUN_COLUMNS``."""
    got = _named(RUN_COLUMNS, row) | {"status": RunStatus(row[3])}
    return RunInfo(**got, last_seq=last_seq, task_counts=task_counts)


def run_page_filter(
    status: RunStatus | None, app: str | None, before: tuple[float, str] | None, mark: str
) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (maybe empty) and parameters of one page of ``list_runs``, with
    ``mark`` as the placeholder (``?`` or ``%s``). Ordered by ``created_at DESC, run_id
    DESC``, it walks the ``runs_by_*`` indexes without sorting."""
    terms: list[str] = []
    params: list[Any] = []
    if status is not None:
        terms.append(f"status = {mark}")
        params.append(RunStatus(status).value)
    if app is not None:
        terms.append(f"app = {mark}")
        params.append(app)
    if before is not None:
        terms.append(f"(created_at < {mark} OR (created_at = {mark} AND run_id < {mark}))")
        params += [before[0], before[0], before[1]]
    return (" WHERE " + " AND ".join(terms) if terms else ""), params


PATCH_COLUMNS = "event_seq, ops, outcome, reason, planner, proposal, app_version"
INSERT_PATCH = insert_sql("patches", f"run_id, {PATCH_COLUMNS}, created_at")


def patch_from_row(row: Any) -> PatchRecord:
    """Row order: ``PATCH_COLUMNS``."""
    got = _named(PATCH_COLUMNS, row)
    return PatchRecord(**got | {"proposal": ProposalNote.from_json(got["proposal"])})


def patch_params(run_id: RunId, r: PatchRecord, now: float) -> tuple[Any, ...]:
    """``run_id, PATCH_COLUMNS, created_at``."""
    proposal = None if r.proposal is None else dumps(r.proposal.to_json())
    ops = dumps(r.ops)
    return (run_id, r.event_seq, ops, r.outcome, r.reason, r.planner, proposal, r.app_version, now)


EVIDENCE_COLUMNS = (
    "n, kind, content, source_kind, source_uri, source_task_id, source_event_seq, "
    "truncated, note, sha256, chars"
)
INSERT_EVIDENCE = insert_sql("evidence", f"run_id, ev_key, {EVIDENCE_COLUMNS}, created_at")


def evidence_from_row(row: Any) -> Evidence:
    """Row order: ``EVIDENCE_COLUMNS``."""
    return Evidence(
        ref=f"E{row[0]}",
        kind=row[1],
        content=row[2],
        source=SourceRef(
            kind=row[3],
            uri=row[4],
            task_id=None if row[5] is None else TaskId(row[5]),
            event_seq=row[6],
        ),
        truncated=bool(row[7]),
        note=row[8],
        sha256=row[9],
        chars=int(row[10]),
    )


def evidence_params(
    run_id: RunId, n: int, item: NewEvidence, *, item_cap: int, room: int, now: float
) -> tuple[Any, ...]:
    """``run_id, ev_key, EVIDENCE_COLUMNS, created_at`` for the run's ``n``-th item, cut to
    ``item_cap`` and to the ``room`` the run's cap leaves; the hash is of the full text."""
    why = "per-item cap" if item_cap <= room else "the run's evidence cap"
    content, cut, note = bound(item.content, min(item_cap, room), why)
    src = item.source
    return (
        run_id,
        item.key,
        n,
        item.kind,
        content,
        src.kind,
        src.uri,
        src.task_id,
        src.event_seq,
        cut,
        note,
        sha256_text(item.content),
        len(item.content),
        now,
    )


EFFECT_COLUMNS = (
    "run_id, idem_key, task_id, call_index, tool, effect, arguments, status, result, error, "
    "arguments_digest"
)
INSERT_EFFECT = insert_sql("effects", f"{EFFECT_COLUMNS}, created_at, updated_at")


def effect_row(run_id: RunId, e: EffectRecord, now: float) -> tuple[Any, ...]:
    """``e`` under ``run_id`` (a fork's copy), for ``INSERT_EFFECT``."""
    head = (run_id, e.key, e.task_id, e.call_index, e.tool, e.effect, dumps(e.arguments))
    return (*head, e.status, dumps(e.result), dumps(e.error), e.arguments_digest, now, now)


def effect_params(record: EffectRecord, now: float) -> tuple[Any, ...]:
    """A new ``intended`` effect, for ``INSERT_EFFECT``."""
    intended = replace(record, status="intended", result=None, error=None)
    return effect_row(record.run_id, intended, now)


def effect_from_row(row: Any) -> EffectRecord:
    """Row order: ``EFFECT_COLUMNS``."""
    got = _named(EFFECT_COLUMNS, row)
    return EffectRecord(key=got.pop("idem_key"), **got)


# -- rules both stores apply the same way ----------------------------------------------------


def with_done_seq(tasks: Sequence[Task], events: Sequence[Event]) -> list[Task]:
    """``tasks``, each terminal one without ``done_seq`` given the seq of the last event
    in ``events`` that names it (``None`` when none does)."""
    seq_of = {ev.task_id: ev.seq for ev in events if ev.task_id is not None}
    return [
        replace(t, done_seq=seq_of.get(t.task_id))
        if t.state in TERMINAL_TASK and t.done_seq is None
        else t
        for t in tasks
    ]


def as_new(event: Event) -> NewEvent:
    return NewEvent(kind=event.kind, task_id=event.task_id, data=event.data)


def rebase_step(
    planned: Sequence[Event], written: Sequence[Event], records: Sequence[PatchRecord], delta: Delta
) -> tuple[Sequence[PatchRecord], Delta]:
    """``commit_step``'s records and delta with the seqs the executor gave its events
    (``planned``) moved to the seqs the store wrote them at (``written``): the same unless
    another process appended to the run in between (an approval, a cancel request)."""
    if not planned or planned[0].seq == written[0].seq:
        return records, delta
    moved = {p.seq: w.seq for p, w in zip(planned, written, strict=True)}
    records = [replace(r, event_seq=moved.get(r.event_seq, r.event_seq)) for r in records]
    tasks = tuple(
        replace(t, done_seq=moved[t.done_seq]) if t.done_seq in moved else t for t in delta.tasks
    )
    return records, replace(delta, tasks=tasks)


def check_decision(decision: str) -> None:
    if decision not in ("approve", "reject"):
        raise UsageError(f"decision must be approve or reject, not {decision!r}")


def waiting_epoch(run_id: RunId, task_id: TaskId, row: Any) -> int:
    """The wait epoch a human answers, from the task's ``(state, wait_epoch)`` row, or
    ``ApprovalRefused`` when there is no such task or it is not waiting."""
    if row is None:
        raise ApprovalRefused(f"run {run_id} has no task {task_id!r}", run_id=run_id)
    state, epoch = TaskState(row[0]), int(row[1])
    if state is not TaskState.WAITING:
        raise ApprovalRefused(
            f"task {task_id!r} is {state}, not waiting: an approval answers a wait once",
            run_id=run_id,
            task_id=task_id,
        )
    return epoch


def human_input_event(
    task_id: TaskId, decision: str, payload: JSON, epoch: int, by: JSON = None
) -> NewEvent:
    data: dict[str, JSON] = {"decision": decision, "payload": payload, "wait_epoch": epoch}
    if by is not None:
        data["by"] = by  # who answered (docs/web.md, "Approvals"); the event's time says when
    return NewEvent(kind=EventKind.HUMAN_INPUT, task_id=task_id, data=data)


# -- the canonical dump ----------------------------------------------------------------------

DUMP_TASK_COLUMNS = "task_id, skill, input, evidence_scope, state, result, error, human_input"
DUMP_EFFECT_COLUMNS = "task_id, call_index, tool, effect, arguments, status, result, error"


def dump_of(
    run: Any, tasks: Iterable[Any], edges: Iterable[Any], effects: Iterable[Any]
) -> dict[str, JSON]:
    """The canonical dump of one run from its rows: ``run`` in ``RUN_COLUMNS`` order,
    ``tasks`` in ``DUMP_TASK_COLUMNS`` order by task_id, ``edges`` as (src, dst) by src,
    dst, ``effects`` in ``DUMP_EFFECT_COLUMNS`` order by task_id, call_index. No timestamps,
    no attempt counters, no model latencies: a resumed run digests like an uninterrupted
    one. Nor the ``planner`` parameter: who planned each event is the patch journal's
    business (docs/models.md), so a run planned by a model digests like the same run
    planned by rules."""
    return {
        "run": {
            "app": run[1],
            "params": _plannerless(loads(run[2])),
            "status": run[3],
            "verdict": loads(run[4]),
        },
        "tasks": [_named(DUMP_TASK_COLUMNS, r) for r in tasks],
        "edges": [list(r) for r in edges],
        "effects": [_timeless(_named(DUMP_EFFECT_COLUMNS, r)) for r in effects],
    }


def _plannerless(params: JSON) -> JSON:
    if isinstance(params, dict) and "planner" in params:
        return {k: v for k, v in params.items() if k != "planner"}
    return params


def dump_of_state(state: GraphState, effects: Iterable[EffectRecord]) -> dict[str, JSON]:
    """The same canonical dump, of a graph in memory (e.g. a run as of an earlier seq)."""
    run = (state.run_id, state.app, dumps(state.params), state.status.value, dumps(state.verdict))
    tasks = sorted(state.tasks.values(), key=lambda t: t.task_id)
    edges = sorted((s, d) for s, dsts in state.succs.items() for d in dsts)
    effects = sorted(effects, key=lambda e: (e.task_id, e.call_index))
    rows = [_row(DUMP_TASK_COLUMNS, t) for t in tasks]
    return dump_of(run, rows, edges, [_row(DUMP_EFFECT_COLUMNS, e) for e in effects])


def _row(columns: str, value: Task | EffectRecord) -> tuple[Any, ...]:
    """``value``'s ``columns`` as the database holds them: JSON as text, an enum's value."""
    values = [(c, getattr(value, c)) for c in _names(columns)]
    return tuple(
        dumps(v) if c in _JSON_COLUMNS else v.value if isinstance(v, Enum) else v for c, v in values
    )


def _timeless(effect: dict[str, JSON]) -> dict[str, JSON]:
    """A model answer's ``latency_ms`` is a measurement, like a timestamp: left out of the
    dump, so a resumed run digests like an uninterrupted one (the model effect's ``tool``
    is ``"model"``; see ``loopkernel.models``)."""
    result = effect["result"]
    if effect["tool"] == "model" and isinstance(result, dict) and "latency_ms" in result:
        effect["result"] = {k: v for k, v in result.items() if k != "latency_ms"}
    return effect


def digest_of(dump: dict[str, JSON]) -> str:
    """The state digest: sha256 of the canonical JSON of a store's ``dump``."""
    return hashlib.sha256(dumps(dump).encode()).hexdigest()
