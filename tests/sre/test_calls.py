"""A call record as a value: every shape a task's result holds reads back into a
``CallRecord`` and writes the same bytes again (the journals and run digests of the
investigations before the records were dicts stay what they were)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopkernel_apps.sre._calls import CallBy, CallRecord, CallStatus

RESULT = {"source": "pods", "content": "web-1 CrashLoopBackOff", "truncated": False, "data": {}}
SHAPES: list[dict[str, Any]] = [
    {"tool": "triage", "args": {}, "status": "ok", "result": RESULT},
    {"tool": "events", "args": {"object": "web"}, "by": "model", "status": "ok", "result": RESULT},
    {"tool": "describe_pod", "args": {}, "status": "refused", "result": {"refused": "scope"}},
    {"tool": "pod_logs", "args": {"pod": "x"}, "status": "failed", "error": "ToolTimeout: 5 s"},
    {"tool": "services", "args": {}, "by": "model", "status": "skipped", "note": "model_calls"},
    {"tool": "triage", "args": {}, "status": "duplicate", "note": "already collected"},
    {
        "tool": "events",
        "args": {"object": "web"},
        "status": "ok",
        "result": RESULT,
        "reused": {"from_run": "inv-1", "age_s": 12.5, "collected_at": 1.0},
    },
]  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['status']}-{s.get('by', 'rules')}")
def test_a_journaled_record_reads_back_and_writes_the_same_bytes(shape: dict[str, Any]) -> None:
    record = CallRecord.from_json(json.loads(json.dumps(shape)))
    assert json.dumps(record.to_json()) == json.dumps(shape)  # keys in the same order
    assert record.status is CallStatus(shape["status"])
    assert record.by is CallBy(shape.get("by", "rules"))


def test_made_is_what_spends_a_budget_and_content_only_what_answered() -> None:
    made = {s for s in CallStatus if s.made}
    assert made == {CallStatus.OK, CallStatus.REFUSED, CallStatus.FAILED}
    records = [CallRecord.from_json(s) for s in SHAPES]
    assert [r.content for r in records if r.content] == [RESULT["content"]] * 3
    assert CallRecord.from_json(SHAPES[2]).content == ""  # refused: nothing collected
