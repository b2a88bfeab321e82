"""The model speaks in the report only through quote-checked claims (``_speak``): a kept
claim adds a *suspected* cause, never a verified one; it orders a verified cause before its
symptom only where the cause graph supports it; everything else is listed as refused with
why and never shown as a finding. A report without claims is the rules' report, byte for
byte."""

from __future__ import annotations

import json
from typing import Any

from loopkernel_apps.sre._claims import Claim, ClaimKind, DropReason, check_claims
from loopkernel_apps.sre._report import finalize
from loopkernel_apps.sre._speak import _current, _kept_json, item_about, supports_order

NS = "prod"
API_LOG = "2026-12-01T10:00:01Z ERROR dial tcp auth.prod.svc:8080: connect: connection refused"
AUTH_EVENTS = (
    'Warning  Failed  kubelet  Failed to pull image "registry.local/auth:2.4": '
    "rpc error: code = NotFound desc = manifest unknown"
)


def _item(ref: str, tool: str, args: dict[str, Any], content: str) -> dict[str, Any]:
    return {
        "ref": ref,
        "tool": tool,
        "args": args,
        "source": f"{tool} {ref}",
        "content": content,
        "truncated": False,
        "data": {},
    }


EVIDENCE = [
    _item("E1", "triage", {}, "api-5d9-x1 CrashLoopBackOff; auth-7c4-q2 ImagePullBackOff"),
    _item("E2", "pod_logs", {"pod": "api-5d9-x1", "container": "api"}, API_LOG),
    _item("E3", "describe_pod", {"pod": "auth-7c4-q2"}, AUTH_EVENTS),
    _item("E4", "services", {}, "service ledger: matches NO pod in the namespace (no endpoints)"),
]


def _entity(kind: str, name: str) -> dict[str, str]:
    return {"kind": kind, "namespace": NS, "name": name}


def _verified(detector: str, text: str, ref: str, quote: str, name: str) -> dict[str, Any]:
    return {
        "detector": detector,
        "text": text,
        "evidence": [ref],
        "quote": quote,
        "identifiers": [],
        "ranking": "as drafted",
        "entity": _entity("Deployment", name),
        "reason": detector,
        "explains": [],
    }


# the rules rank the symptom (api cannot reach auth) above its cause (auth has no image)
SYMPTOM = _verified(
    "upstream_unavailable", "api cannot reach auth", "E2", "connect: connection refused", "api"
)
CAUSE = _verified("image_pull", "auth cannot pull its image", "E3", "manifest unknown", "auth")


def _draft(*verified: dict[str, Any]) -> dict[str, Any]:
    return {
        "question": "why does api fail?",
        "namespace": NS,
        "observed_facts": [],
        "verified_causes": [dict(v) for v in verified],
        "suspected_causes": [],
        "missing_evidence": [],
        "next_steps": ["kubectl describe pod auth-7c4-q2"],
        "proposed_remediation": [],
        "coverage": {
            "exit": "complete",
            "exit_reason": "",
            "sources": [],
            "failed_tools": [],
            "refused_requests": [],
            "budget_exhausted": None,
            "tool_calls": 4,
            "already_collected": 0,
            "skills": [],
        },
    }


def _claims(*claims: Claim) -> dict[str, Any]:
    """What ``ask_claims`` journals: the claims checked against the evidence shown."""
    by_ref = {e["ref"]: e for e in EVIDENCE}
    checked = check_claims(
        claims,
        {r: e["content"] for r, e in by_ref.items()},
        current=lambda r: True,
        about={r: item_about(e) for r, e in by_ref.items()},
    )
    refused = [
        {"text": d.text, "reason": d.reason.value, "detail": d.detail} for d in checked.dropped
    ]
    return {
        "model": "m",
        "reason": None,
        "kept": [_kept_json(k) for k in checked.kept],
        "refused": refused,
    }


def _cause(text: str, quote: str, ref: str, obj: str, explains: str | None = None) -> Claim:
    return Claim(
        text=text,
        kind=ClaimKind.SUSPECTED_CAUSE,
        refs=(ref,),
        quote=quote,
        obj=("Deployment", obj),
        explains=("Deployment", explains) if explains else None,
    )


def test_a_report_without_claims_is_the_rules_report_byte_for_byte() -> None:
    plain = finalize(_draft(SYMPTOM, CAUSE), EVIDENCE)
    assert finalize(_draft(SYMPTOM, CAUSE), EVIDENCE, None) == plain
    assert "claims" not in plain["report"]["coverage"]
    assert "claim" not in plain["markdown"]


def test_a_quoted_claim_orders_the_cause_before_its_symptom() -> None:
    claim = _cause("api fails because auth cannot pull its image", "manifest unknown", "E3",
                   "auth", explains="api")  # fmt: skip
    rules = finalize(_draft(SYMPTOM, CAUSE), EVIDENCE)["report"]
    assert [v["detector"] for v in rules["verified_causes"]] == [
        "upstream_unavailable",
        "image_pull",
    ]

    out = finalize(_draft(SYMPTOM, CAUSE), EVIDENCE, _claims(claim))
    report = out["report"]
    top, second = report["verified_causes"]
    assert (top["detector"], top["rank"], second["rank"]) == ("image_pull", 1, 2)
    assert _entity("Deployment", "api") in top["explains"]
    assert "a quoted model claim, E3" in top["ranking"]
    assert report["summary"].startswith("Verified (image_pull): auth cannot pull its image")
    assert "It explains Deployment api." in report["summary"]
    # nothing new was verified: the same two detectors' causes, only reordered
    assert sorted(v["detector"] for v in report["verified_causes"]) == sorted(
        v["detector"] for v in rules["verified_causes"]
    )
    (kept,) = report["coverage"]["claims"]["kept"]
    assert kept["effect"] == "orders auth before api" and kept["status"] == "suspected"
    assert "claim kept (suspected; orders auth before api)" in out["markdown"]


def test_an_order_the_cause_graph_does_not_support_is_refused() -> None:
    # api's own evidence does not name auth: nothing says api depends on it
    quiet = dict(SYMPTOM, evidence=["E1"], quote="CrashLoopBackOff")
    claim = _cause("api fails because auth cannot pull", "manifest unknown", "E3", "auth",
                   explains="api")  # fmt: skip
    assert not supports_order(CAUSE, quiet, {e["ref"]: e for e in EVIDENCE})
    report = finalize(_draft(quiet, CAUSE), EVIDENCE, _claims(claim))["report"]
    assert [v["detector"] for v in report["verified_causes"]] == [
        "upstream_unavailable",
        "image_pull",
    ]
    (refused,) = report["coverage"]["claims"]["refused"]
    assert refused["reason"] == "order_unsupported"
    assert not report["coverage"]["claims"]["kept"]
    # and the graph saying the reverse refuses it too
    reverse = dict(SYMPTOM, explains=[_entity("Deployment", "auth")])
    assert not supports_order(CAUSE, reverse, {e["ref"]: e for e in EVIDENCE})


def test_a_cause_the_detectors_do_not_know_is_suspected_never_verified() -> None:
    claim = _cause("ledger has no endpoints", "service ledger: matches NO pod", "E4", "ledger")
    report = finalize(_draft(), EVIDENCE, _claims(claim))["report"]
    assert report["verified_causes"] == []
    (suspect,) = report["suspected_causes"]
    assert suspect["by"] == "model" and suspect["confidence"] == "medium"
    assert suspect["entity"] == _entity("Deployment", "ledger") and suspect["evidence"] == ["E4"]
    assert '"service ledger: matches NO pod"' in suspect["text"]
    assert "A quoted model claim suspects: ledger has no endpoints" in report["summary"]
    assert not report["summary"].startswith("Verified")


def test_refused_claims_are_listed_with_why_and_never_shown_as_findings() -> None:
    claims = _claims(
        # the quote is in api's log, not in evidence about auth
        _cause("auth is down", "connect: connection refused", "E2", "auth"),
        # a quote that is nowhere
        _cause("auth ran out of memory", "OOMKilled exit code 137", "E3", "auth"),
        # a cause naming no object
        Claim(
            text="something broke",
            kind=ClaimKind.SUSPECTED_CAUSE,
            refs=("E3",),
            quote="manifest unknown",
        ),
    )
    reasons = [r["reason"] for r in claims["refused"]]
    assert reasons == [
        DropReason.NOT_ON_OBJECT.value,
        DropReason.QUOTE_NOT_FOUND.value,
        DropReason.NO_OBJECT.value,
    ]
    out = finalize(_draft(SYMPTOM), EVIDENCE, claims)
    report = out["report"]
    assert report["suspected_causes"] == [] and len(report["verified_causes"]) == 1
    shown = json.dumps({k: v for k, v in report.items() if k != "coverage"})
    for text in ("auth is down", "auth ran out of memory", "something broke"):
        assert text not in shown  # not a finding, not a fact, not in the summary
        assert f"): {text}" in out["markdown"]  # listed as refused, with why
    assert report["coverage"]["claims"]["refused"] == claims["refused"]


def test_a_next_step_needs_approval_and_stale_evidence_is_not_current() -> None:
    step = Claim(text="fix the auth image tag", kind=ClaimKind.NEXT_STEP, refs=("E3",),
                 quote="manifest unknown")  # fmt: skip
    report = finalize(_draft(CAUSE), EVIDENCE, _claims(step))["report"]
    assert report["next_steps"][-1].endswith("(suggested by the model, citing E3; needs approval)")
    assert report["proposed_remediation"] == []  # never a remediation
    draft = {
        "observed_facts": [
            {"text": "old", "evidence": ["E2"], "stale": True},
            {"text": "now", "evidence": ["E3"]},
        ]
    }
    events = dict(_item("E5", "events", {}, "x"), data={"stale": ["old", "older"]})
    assert _current([*EVIDENCE, events], draft) == {"E1", "E3", "E4"}


def test_where_a_cause_is_verified_an_unrelated_model_suspect_is_not_applied() -> None:
    claim = _cause("ledger has no endpoints", "service ledger: matches NO pod", "E4", "ledger")
    report = finalize(_draft(CAUSE), EVIDENCE, _claims(claim))["report"]
    assert report["suspected_causes"] == []
    (refused,) = report["coverage"]["claims"]["refused"]
    assert refused["reason"] == "not_applied"
    # one that says it explains the verified cause's object is added, as suspected
    explaining = _cause("ledger down makes auth fail", "service ledger: matches NO pod", "E4",
                        "ledger", explains="auth")  # fmt: skip
    report = finalize(_draft(CAUSE), EVIDENCE, _claims(explaining))["report"]
    (suspect,) = report["suspected_causes"]
    assert suspect["explains"] == [_entity("Deployment", "auth")]
    assert [v["detector"] for v in report["verified_causes"]] == ["image_pull"]
