"""Validation of a report draft, whoever wrote it: citations must exist and support their
claim, unsupported claims are dropped or downgraded, "confirmed" on an unverified cause
gets a note, remediation never executes."""

from __future__ import annotations

from typing import Any

from loopkernel_apps.sre._report import UNVERIFIED_NOTE, finalize

EVIDENCE = [
    {
        "ref": "E1",
        "tool": "describe_pod",
        "args": {"pod": "api-1"},
        "source": "pod prod/api-1",
        "content": "Name: api-1\n  api:\n    Last State: Terminated (OOMKilled) exit code 137",
        "truncated": False,
        "data": {},
    },
    {
        "ref": "E2",
        "tool": "pod_logs",
        "args": {"pod": "api-1"},
        "source": "logs",
        "content": "INFO start\nFATAL cannot open /etc/app.yaml\n",
        "truncated": False,
        "data": {},
    },
]


def draft(**parts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "question": "q",
        "namespace": "prod",
        "observed_facts": [],
        "verified_causes": [],
        "suspected_causes": [],
        "missing_evidence": [],
        "next_steps": [],
        "proposed_remediation": [],
        "coverage": {
            "exit": "complete",
            "exit_reason": "",
            "sources": [],
            "failed_tools": [],
            "refused_requests": [],
            "budget_exhausted": None,
            "tool_calls": 2,
            "already_collected": 0,
            "skills": [],
        },
    }
    return base | parts


def test_a_fact_without_a_real_or_supporting_citation_is_dropped() -> None:
    facts = [
        {"text": "OOMKilled seen", "evidence": ["E1"], "quote": "OOMKilled"},
        {"text": "invented ref", "evidence": ["E9"], "quote": "OOMKilled"},
        {"text": "wrong item", "evidence": ["E2"], "quote": "OOMKilled"},
        {"text": "no citation", "evidence": []},
        {"text": "pod 'api-1' exited with exit code 137", "evidence": ["E1"]},
        {"text": "pod 'api-2' exited with exit code 137", "evidence": ["E1"]},
    ]
    report = finalize(draft(observed_facts=facts), EVIDENCE)["report"]
    assert [f["text"] for f in report["observed_facts"]] == [
        "OOMKilled seen",
        "pod 'api-1' exited with exit code 137",
    ]
    assert any("E9 names no evidence item" in v for v in report["validation"])
    assert any("E2 does not contain" in v for v in report["validation"])


def test_a_verified_cause_whose_citation_does_not_support_it_becomes_suspected_low() -> None:
    causes = [
        {
            "detector": "oomkilled",
            "text": "OOM",
            "quote": "OOMKilled",
            "evidence": ["E1"],
            "identifiers": ["api-1"],
        },
        {
            "detector": "config_invalid",
            "text": "bad config",
            "quote": "yaml: line 3",
            "evidence": ["E2"],
            "identifiers": [],
        },
    ]
    report = finalize(draft(verified_causes=causes), EVIDENCE)["report"]
    assert [c["detector"] for c in report["verified_causes"]] == ["oomkilled"]
    assert report["suspected_causes"] == [
        {"text": f"bad config {UNVERIFIED_NOTE}", "confidence": "low", "evidence": []}
    ]


def test_confidence_and_confirmed_wording_on_unverified_causes() -> None:
    suspected = [
        {"text": "The root cause is confirmed: disk full", "confidence": "high", "evidence": []},
        {
            "text": "Config file missing",
            "confidence": "medium",
            "evidence": ["E2"],
            "quote": "cannot open /etc/app.yaml",
        },
        {"text": "Whatever", "confidence": "certain", "evidence": ["E2"], "quote": "FATAL"},
    ]
    report = finalize(draft(suspected_causes=suspected), EVIDENCE)["report"]
    got = report["suspected_causes"]
    assert got[0] == {
        "text": f"The root cause is confirmed: disk full {UNVERIFIED_NOTE}",
        "confidence": "low",
        "evidence": [],
    }
    assert got[1]["confidence"] == "medium" and got[1]["evidence"] == ["E2"]
    assert got[2]["confidence"] == "low"


def test_remediation_never_executes_and_the_digest_is_stable() -> None:
    remedy = [{"action": "kubectl delete ns prod", "requires_approval": False, "executable": True}]
    one = finalize(draft(proposed_remediation=remedy), EVIDENCE)
    assert one["report"]["proposed_remediation"] == [
        {"action": "kubectl delete ns prod", "requires_approval": True, "executable": False}
    ]
    assert one["digest"] == finalize(draft(proposed_remediation=remedy), EVIDENCE)["digest"]
    assert "nothing is executed" in one["markdown"]
