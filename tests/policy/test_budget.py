"""Budget, Tripwires and Policy as data: validation, each check, the tool-call decision."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopkernel.errors import BudgetExceeded, TripwireFired, UsageError
from loopkernel.policy import Budget, Policy, ToolCall, Tripwires, Usage


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_usd": -0.01},
        {"max_usd": float("nan")},
        {"max_usd": float("inf")},
        {"max_usd": True},
        {"max_usd": "1.0"},
        {"max_tool_calls": 2.5},
        {"max_tool_calls": -1},
        {"max_tasks": False},
        {"max_wall_seconds": -3},
    ],
)
def test_a_budget_refuses_limits_that_are_not_non_negative_numbers(kwargs: dict) -> None:
    with pytest.raises(UsageError, match=r"Budget\."):
        Budget(**kwargs)


def test_none_means_unlimited() -> None:
    b = Budget()
    b.check_spend(1e12, 1e12)
    b.check_tool_calls(10**9)
    b.check_tasks(10**9)
    b.check_wall(1e9)


def test_spend_may_reach_the_limit_exactly_but_not_pass_it() -> None:
    b = Budget(max_usd=0.3)
    b.check_spend(0.1 + 0.1, 0.1)  # 0.30000000000000004 in floats: still within
    with pytest.raises(BudgetExceeded) as info:
        b.check_spend(0.25, 0.1)
    err = info.value
    assert (err.limit, err.maximum, err.observed, err.spent, err.cost) == (
        "max_usd",
        0.3,
        0.35,
        0.25,
        0.1,
    )
    assert "raise Budget.max_usd" in str(err)
    verdict = err.verdict()
    assert verdict["kind"] == "budget_exceeded" and verdict["limit"] == "max_usd"
    assert pickle.loads(pickle.dumps(err)).verdict() == verdict


@given(
    limit=st.floats(0, 100, allow_nan=False),
    spent=st.floats(0, 100, allow_nan=False),
    cost=st.floats(0, 100, allow_nan=False),
)
def test_check_spend_raises_exactly_when_the_total_passes_the_limit(
    limit: float, spent: float, cost: float
) -> None:
    b = Budget(max_usd=limit)
    if spent + cost > limit + 1e-9:
        with pytest.raises(BudgetExceeded):
            b.check_spend(spent, cost)
    else:
        b.check_spend(spent, cost)


def test_counting_limits_name_the_limit_and_the_observed_value() -> None:
    b = Budget(max_tool_calls=3, max_tasks=5, max_wall_seconds=2.0)
    b.check_tool_calls(2)  # the third call is allowed
    with pytest.raises(BudgetExceeded) as calls:
        b.check_tool_calls(3)
    assert (calls.value.limit, calls.value.observed) == ("max_tool_calls", 4)
    b.check_tasks(5)
    with pytest.raises(BudgetExceeded) as tasks:
        b.check_tasks(6)
    assert (tasks.value.limit, tasks.value.observed) == ("max_tasks", 6)
    b.check_wall(2.0)
    with pytest.raises(BudgetExceeded) as wall:
        b.check_wall(2.5)
    assert (wall.value.limit, wall.value.observed) == ("max_wall_seconds", 2.5)


def test_tripwires_validate_and_fire_at_the_nth_failure() -> None:
    with pytest.raises(UsageError):
        Tripwires(irreversible="sometimes")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        Tripwires(verify_stuck_after=0)
    with pytest.raises(UsageError):
        Tripwires(verify_skills="verify")  # type: ignore[arg-type]
    t = Tripwires(verify_stuck_after=3)
    t.check_verify(2)
    with pytest.raises(TripwireFired) as info:
        t.check_verify(3)
    assert info.value.verdict()["tripwire"] == "verify_stuck"
    assert info.value.observed == 3
    Tripwires(verify_stuck_after=None).check_verify(10**6)


def call(effect: str, *, approved: bool = False, cost: float | None = None) -> ToolCall:
    args = {} if cost is None else {"cost_usd": cost}
    return ToolCall(tool="publish", effect=effect, arguments=args, approved=approved)


def test_an_irreversible_call_needs_approval_unless_approved_or_allowed() -> None:
    p = Policy()
    assert p.check_call(call("read_only"), Usage()) is None
    assert p.check_call(call("idempotent"), Usage()) is None
    reason = p.check_call(call("irreversible"), Usage())
    assert reason is not None and "publish is irreversible" in reason
    assert p.check_call(call("irreversible", approved=True), Usage()) is None
    allow = Policy(tripwires=Tripwires(irreversible="allow"))
    assert allow.check_call(call("irreversible"), Usage()) is None


def test_an_irreversible_call_escalates_when_so_configured() -> None:
    p = Policy(tripwires=Tripwires(irreversible="escalate"))
    with pytest.raises(TripwireFired) as info:
        p.check_call(call("irreversible"), Usage())
    assert info.value.verdict()["tripwire"] == "irreversible"
    assert info.value.tool == "publish"


def test_budgets_are_checked_before_a_human_is_asked() -> None:
    p = Policy(budget=Budget(max_usd=1.0, max_tool_calls=4))
    assert p.check_call(call("idempotent", cost=0.4), Usage(spent_usd=0.6)) is None
    with pytest.raises(BudgetExceeded, match="max_usd"):
        p.check_call(call("irreversible", cost=0.5), Usage(spent_usd=0.6))
    with pytest.raises(BudgetExceeded, match="max_tool_calls"):
        p.check_call(call("read_only"), Usage(tool_calls=4))


def test_a_price_that_is_not_a_number_counts_as_free() -> None:
    p = Policy(budget=Budget(max_usd=0.0))
    for price in ("5", True, None, [1]):
        tc = ToolCall(tool="t", effect="read_only", arguments={"cost_usd": price})
        assert p.check_call(tc, Usage()) is None


def test_a_policy_round_trips_through_run_parameters_and_refuses_unknown_keys() -> None:
    p = Policy(
        budget=Budget(max_usd=0.5, max_tool_calls=9, max_tasks=40, max_wall_seconds=60.0),
        tripwires=Tripwires(irreversible="escalate", verify_stuck_after=2),
    )
    assert Policy.from_json(p.to_json()) == p
    assert Policy.from_json({}) == Policy()
    with pytest.raises(UsageError, match="max_dollars"):
        Policy.from_json({"max_dollars": 1})
    with pytest.raises(UsageError):
        Policy.from_json({"max_usd": -1})
    with pytest.raises(UsageError):
        Policy.from_json([])
