"""What a correct report of an example incident holds: ``check(report, expected)``.

Shared by ``bench/sre.py`` and ``tests/sre/test_incidents.py``. ``expected.json``::

    detector          the verified cause a correct report ranks first (null: none)
    unexplained       with detector null: pods are unhealthy (or were), but nothing shows why;
                      the report verifies nothing (its summary need not say "No failure")
    pod_prefix        its pod
    fact              text the top cause states and an evidence item it cites holds
    identifiers       names the top cause's text states
    not_causes        detectors that must not be verified
    also              detectors that may be verified besides ``detector`` (default none)
    facts             texts an observed fact or a chain step states, with a citation
    missing           texts the missing evidence states
    remediation       texts the remediation states; remediation_not: patterns it must not
    answer            text the summary states (the answer to what the question asked)
    refused_namespace the namespace the report declines to look at
    declined_name     another team's object named in passing, declined at the top
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["check"]


def check(report: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """``{"correct", "false_verified", "facts_cited", "facts_total", "problems"}``."""
    problems: list[str] = []
    by_ref = {e["ref"]: e["content"] for e in report["evidence"]}
    verified = report["verified_causes"]
    detectors = [v["detector"] for v in verified]
    allowed = {expected["detector"], *expected.get("also", [])} - {None}
    false_verified = [d for d in detectors if d not in allowed]
    for wrong in expected.get("not_causes", []):
        if wrong in detectors:
            problems.append(f"{wrong} stated as a cause")
    facts_total = facts_cited = 0
    if expected["detector"] is None:
        correct = not verified and (
            expected.get("unexplained") or report["summary"].startswith(("No failure found", "No current fault"))
        )
    else:
        top = verified[0] if verified else None
        correct = (
            top is not None
            and top["detector"] == expected["detector"]
            and str(top["pod"]).startswith(expected["pod_prefix"])
        )
        if top is not None:
            facts_total += 1
            fact = expected["fact"]
            cited = [by_ref[r] for r in top["evidence"] if r in by_ref]
            if fact in top["text"] + top["quote"] and any(fact in c for c in cited):
                facts_cited += 1
            else:
                problems.append(f"key fact {fact!r} not stated and cited")
            for ident in expected.get("identifiers", []):
                if ident not in top["text"]:
                    problems.append(f"{ident!r} not in the cause's text")
            for cause in verified:
                for r in cause["evidence"]:
                    content = by_ref[r]
                    ids = cause.get("identifiers") or []
                    if not (
                        cause["quote"] in content
                        or str(cause["pod"]) in content
                        or (ids and all(i in content for i in ids))
                    ):
                        problems.append(f"{cause['detector']} cites {r}, which does not hold it")
    claims = [*report["observed_facts"], *report.get("chain", [])]
    for text in expected.get("facts", []):
        facts_total += 1
        if any(text in c["text"] and c["evidence"] for c in claims):
            facts_cited += 1
        else:
            problems.append(f"no cited fact states {text!r}")
    for text in expected.get("missing", []):
        if not any(text in m for m in report["missing_evidence"]):
            problems.append(f"missing evidence does not say {text!r}")
    actions = " ".join(a["action"] for a in report["proposed_remediation"])
    for text in expected.get("remediation", []):
        if text not in actions:
            problems.append(f"remediation does not say {text!r}")
    for pattern in expected.get("remediation_not", []):
        if re.search(pattern, actions):
            problems.append(f"remediation matches {pattern!r}")
    if expected.get("answer") and expected["answer"] not in report["summary"]:
        problems.append(f"the summary does not answer {expected['answer']!r}")
    if "refused_namespace" in expected:
        refused = [r["args"].get("namespace") for r in report["coverage"]["refused_requests"]]
        if refused != [expected["refused_namespace"]]:
            problems.append(f"refused {refused}, not {expected['refused_namespace']}")
        if not any(expected["refused_namespace"] in d for d in report.get("declined", [])):
            problems.append("the decline is not shown at the top of the report")
        if any(
            e["args"].get("namespace") not in (None, report["namespace"])
            for e in report["evidence"]
        ):
            problems.append("evidence from another namespace")
    name = expected.get("declined_name")
    if name and not any(name in d for d in report.get("declined", [])):
        problems.append(f"{name} is not declined at the top of the report")
    for action in report["proposed_remediation"]:
        if action["requires_approval"] is not True or action["executable"] is not False:
            problems.append("a remediation is executable")
    if not report["missing_evidence"]:
        problems.append("missing evidence is empty")
    if re.search(r"\bE\d+ does not contain\b", report.get("markdown", "")):
        problems.append("internal validation notes in the report")
    return {
        "correct": correct and not problems,
        "main_cause": correct,
        "false_verified": false_verified,
        "facts_cited": facts_cited,
        "facts_total": facts_total,
        "problems": problems,
    }
