"""The error tree: retryable read from the error, refined classes keeping their family's
bytes, revived from a verdict, picklable; and ``Verdict``'s journal form."""

from __future__ import annotations

import pickle

import pytest

from loopkernel import errors
from loopkernel.errors import (
    LeaseLost,
    LoopKernelError,
    ModelError,
    ModelTimeout,
    ModelUnauthorized,
    ModelUnavailable,
    RunError,
    StoreUnavailable,
    ToolCannotStart,
    ToolError,
    ToolNotMCP,
    ToolServerDied,
    ToolTimeout,
    ToolTransientError,
    ToolUnavailable,
    UsageError,
    family_of,
    is_retryable,
    revive,
)
from loopkernel.graph import GraphPatch, Verdict, VerdictKind

RETRYABLE = {
    ToolTimeout,
    ToolServerDied,
    ToolTransientError,
    ModelTimeout,
    ModelUnavailable,
    StoreUnavailable,
    LeaseLost,
}


def _all_errors() -> list[type[LoopKernelError]]:
    return [
        cls
        for name in errors.__all__
        if isinstance(cls := getattr(errors, name), type) and issubclass(cls, LoopKernelError)
    ]


@pytest.mark.parametrize("cls", _all_errors(), ids=lambda c: c.__name__)
def test_retryable_is_the_class_answer_and_the_one_rule_reads_it(
    cls: type[LoopKernelError],
) -> None:
    err = cls("m")
    assert err.retryable is (cls in RETRYABLE)
    assert is_retryable(err) is (cls in RETRYABLE)
    assert cls.__name__ in (errors.__doc__ or ""), "draw every class in the docstring's tree"


def test_an_instance_may_say_otherwise_and_keeps_it_through_pickle() -> None:
    err = ToolError("m", kind="handler_error", retryable=True)
    assert is_retryable(err) and not is_retryable(ToolError("m"))
    again = pickle.loads(pickle.dumps(err))
    assert is_retryable(again) and again.attrs == {"kind": "handler_error"}
    assert "retryable" not in err.verdict()
    assert not is_retryable(ValueError("not ours"))


@pytest.mark.parametrize(
    ("cls", "family", "kind"),
    [
        (ToolServerDied, "ToolUnavailable", "server_died"),
        (ToolCannotStart, "ToolUnavailable", "cannot_start"),
        (ToolNotMCP, "ToolUnavailable", "not_mcp"),
        (ToolTransientError, "ToolError", "handler_transient"),
        (ModelUnauthorized, "ModelError", "unauthorized"),
    ],
)
def test_a_refined_class_writes_its_familys_verdict_and_is_revived_from_it(
    cls: type[LoopKernelError], family: str, kind: str
) -> None:
    err = cls("went away", source="s", tool="t")
    parent = next(c for c in cls.__mro__[1:] if c.__name__ == family)
    assert err.verdict() == parent("went away", kind=kind, source="s", tool="t").verdict()
    assert err.verdict()["type"] == family and err.verdict()["kind"] == kind
    assert family_of(err) == family
    back = revive(RunError, err.verdict())
    assert type(back) is cls and back.verdict() == err.verdict()
    assert type(pickle.loads(pickle.dumps(err))) is cls


def test_revive_falls_back_to_the_named_class_then_the_family() -> None:
    plain = ToolUnavailable("x", kind="outcome_unknown", tool="t")
    assert type(revive(RunError, plain.verdict())) is ToolUnavailable
    assert type(revive(RunError, ToolTimeout("x").verdict())) is ToolTimeout
    assert type(revive(ModelError, {"type": "Nothing", "message": "m"})) is ModelError


def test_retries_spent_marks_the_copy_and_the_verdict_keeps_the_old_key() -> None:
    err = ToolServerDied("gone", tool="t")
    spent = err.retries_spent(sent=3, effect="read_only")
    assert not err.gave_up and spent.gave_up and type(spent) is ToolServerDied
    assert spent.verdict() == {**err.verdict(), "sent": 3, "effect": "read_only", "transient": True}
    assert pickle.loads(pickle.dumps(spent)).gave_up
    assert revive(RunError, spent.verdict()).gave_up


def test_family_of_a_foreign_exception_is_its_class_name() -> None:
    assert family_of(KeyError("k")) == "KeyError"
    assert family_of(UsageError("u")) == "UsageError"


def test_verdict_writes_what_the_dict_literals_wrote() -> None:
    runaway = Verdict(
        kind=VerdictKind.RUNAWAY, message="m", details={"max_events": 5, "observed": 6}
    )
    assert runaway.to_json() == {"kind": "runaway", "message": "m", "max_events": 5, "observed": 6}
    cancelled = Verdict(kind=VerdictKind.CANCELLED, details={"reason": None})
    assert cancelled.to_json() == {"kind": "cancelled", "reason": None}
    empty = Verdict(kind=VerdictKind.EXECUTOR_ERROR, message="", details={"type": "KeyError"})
    assert empty.to_json() == {"kind": "executor_error", "message": "", "type": "KeyError"}
    patch = GraphPatch().finish("cancelled", cancelled)
    assert patch.to_json() == [
        {"op": "finish", "status": "cancelled", "verdict": {"kind": "cancelled", "reason": None}}
    ]


def test_a_verdict_detail_may_not_shadow_its_kind_or_message() -> None:
    with pytest.raises(ValueError, match="kind"):
        Verdict(kind=VerdictKind.GUARD, details={"kind": "other"})
