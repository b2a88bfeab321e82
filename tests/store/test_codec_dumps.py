"""``dumps`` (the journal's canonical JSON) gives exactly the text of the encoder it
stands for, on every kind of value, and fails the same way on what JSON cannot hold."""

from __future__ import annotations

import json
import math
import threading
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopkernel.store._codec import dumps

REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=25,
)


class Color(StrEnum):
    RED = "red"


@given(values)
def test_the_reference_text_for_any_json(value: Any) -> None:
    assert dumps(value) == REFERENCE(value)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "é\u2028\x00",
        1.5,
        -0.0,
        10**30,
        True,
        [],
        {},
        {"b": 1, "a": [None, "x"]},
        (1, 2),
        Color.RED,
        {"k": Color.RED},
    ],
)
def test_the_reference_text_for_edge_values(value: Any) -> None:
    assert dumps(value) == REFERENCE(value)


def test_refusals_are_the_reference_errors_and_leave_no_trace() -> None:
    loop: list[Any] = []
    loop.append(loop)
    for bad in (loop, {"a": math.nan}, {"a": object()}, {1: {2: [math.inf]}}):
        with pytest.raises((ValueError, TypeError)) as ours:
            dumps(bad)
        with pytest.raises(type(ours.value)):
            REFERENCE(bad)
    # A failure halfway through a nested value must not leave markers behind that
    # would make the same (acyclic) value look circular next time.
    shared = [1, [2]]
    with pytest.raises(TypeError):
        dumps([shared, object()])
    assert dumps([shared, shared]) == REFERENCE([shared, shared])


def test_each_thread_encodes_alone() -> None:
    value = {"a": [{"b": list(range(50))} for _ in range(50)]}
    want = REFERENCE(value)
    got: list[str] = []

    def work() -> None:
        got.extend(dumps(value) for _ in range(200))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 800
