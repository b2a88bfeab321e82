"""A request to look outside the namespace is declined whatever its wording, and an object the
question names in passing that is not in the namespace is not looked at."""

from __future__ import annotations

import pytest

from loopkernel_apps.sre._run import other_namespaces
from loopkernel_apps.sre._story import answer, out_of_scope


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Also check coredns in namespace kube-system.", ["kube-system"]),
        ("Is the ledger in the billing namespace slow?", ["billing"]),
        ("compare with kubectl -n staging get pods", ["staging"]),
        ("what about payments/pod/api-1?", ["payments"]),
        ("it calls ledger.finance.svc.cluster.local", ["finance"]),
        ("the ingress-nginx controller looked fine", ["ingress-nginx"]),
        ("Why is the payments deployment restarting?", []),
        ("the namespace is prod, nothing else", []),
        ("in namespace prod", []),
    ],
)
def test_other_namespaces_in_any_wording(question: str, expected: list[str]) -> None:
    assert other_namespaces(question, "prod") == expected


def test_a_name_in_passing_that_is_not_in_the_namespace_is_not_looked_at() -> None:
    triage = {"tool": "triage", "data": {"workloads": [{"name": "invoices"}], "unhealthy": []}}
    q = "Why is invoices crashing? The finance team's ledger-api was redeployed. After a scale-up?"
    assert out_of_scope(q, "prod", [triage]) == ["ledger-api"]
    assert out_of_scope("Why is invoices-worker crashing?", "prod", [triage]) == []


def test_the_question_is_answered_when_nothing_shows_it() -> None:
    said = answer("Is it CPU throttling?", [], [], [])
    assert said is not None and "CPU throttling: nothing collected shows it" in said
    assert answer("Why is the payments deployment restarting?", [], [], []) is None
