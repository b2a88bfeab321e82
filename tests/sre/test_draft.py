"""The draft's new contract: honest coverage, the healthy answer, the cause's entity."""

from __future__ import annotations

from typing import Any

from tests.sre.test_report import EVIDENCE, draft

from loopkernel_apps.sre._detect import detect, rank
from loopkernel_apps.sre._draft import Collected, Diagnosis, build_draft
from loopkernel_apps.sre._report import finalize

PARAMS = {
    "question": "Why is payments restarting?",
    "namespace": "prod",
    "max_rounds": 3,
    "max_tool_calls": 40,
    "max_wall_s": 120,
    "max_evidence_chars": 40000,
}


def _coverage(**extra: Any) -> dict[str, Any]:
    return {**draft()["coverage"], **extra}


def test_a_failed_read_makes_the_summary_start_with_incomplete() -> None:
    failed = [{"tool": "triage", "args": {}, "error": "ToolTimeout: triage timed out after 30 s"}]
    out = finalize(draft(coverage=_coverage(failed_tools=failed)), EVIDENCE)["report"]
    assert out["summary"].startswith("Incomplete: triage timed out")
    assert "No current fault" not in out["summary"]
    healthy = finalize(draft(history=["The last restart of container api was on D."]), EVIDENCE)
    assert healthy["report"]["summary"].startswith("No current fault in namespace prod.")
    assert "The last restart of container api" in healthy["report"]["summary"]


def test_entity_reason_and_explains_survive_validation() -> None:
    cause = {
        "detector": "oomkilled",
        "text": "OOMKilled",
        "evidence": ["E1"],
        "quote": "OOMKilled",
        "identifiers": [],
        "pod": "api-1",
        "container": "api",
        "entity": {"kind": "Deployment", "namespace": "prod", "name": "api"},
        "reason": "OOMKilled",
        "explains": [],
    }
    out = finalize(draft(verified_causes=[cause]), EVIDENCE)["report"]
    v = out["verified_causes"][0]
    assert v["entity"] == {"kind": "Deployment", "namespace": "prod", "name": "api"}
    assert v["reason"] == "OOMKilled" and v["explains"] == []


def _pod(name: str, *, started: str, waiting: bool) -> dict[str, Any]:
    state = {"waiting": {"reason": "CrashLoopBackOff"}} if waiting else {"running": {}}
    return {
        "metadata": {
            "name": name,
            "uid": f"u-{name}",
            "labels": {"pod-template-hash": "5d9"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "payments-5d9", "controller": True}],
        },
        "spec": {"containers": [{"name": "app", "resources": {"limits": {"memory": "1Gi"}}}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "restartCount": 2,
                    "ready": not waiting,
                    "state": state,
                    "lastState": {
                        "terminated": {
                            "reason": "OOMKilled",
                            "exitCode": 137,
                            "finishedAt": started,
                        }
                    },
                }
            ],
        },
    }


def test_the_workload_is_the_entity_and_an_old_restart_is_history() -> None:
    now, old = "2026-12-01T12:00:00Z", "2026-11-28T09:00:00Z"
    pod = _pod("payments-5d9-a", started=old, waiting=True)
    findings, _ = detect([{"ref": "E1", "pod": pod}], [], [])
    triage = {
        "now": now,
        "unhealthy": [
            {
                "pod": "payments-5d9-a",
                "phase": "Running",
                "owner_kind": "ReplicaSet",
                "owner": "payments-5d9",
                "workload": "payments",
                "containers": [
                    {
                        "name": "app",
                        "state": "waiting",
                        "ready": False,
                        "restarts": 2,
                        "reason": "CrashLoopBackOff",
                        "last_reason": "OOMKilled",
                    }
                ],
            }
        ],
    }
    c = Collected(calls=[], items=EVIDENCE, triage=triage)
    out = build_draft(PARAMS, c, Diagnosis(ranked=rank(findings, set())))
    v = out["verified_causes"][0]
    assert v["entity"] == {"kind": "Deployment", "namespace": "prod", "name": "payments"}
    assert v["reason"] == "OOMKilled"
    assert "+20" not in v["ranking"]  # the question named nothing in focus
    # the same container, running and Ready for three days: history, not a suspect
    entry = triage["unhealthy"][0]["containers"][0]
    entry.update(state="running", ready=True, reason=None, started=old, last_finished=old)
    out = build_draft(PARAMS, c, Diagnosis(ranked=[]))
    assert out["suspected_causes"] == []
    assert out["history"] and old in out["history"][0]
    assert out["next_steps"]
