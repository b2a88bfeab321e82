"""Redaction's fast walks (nothing kept: no paths built; short strings through a cache)
give exactly what the walk with paths gives, on values with secrets in keys and text."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loopkernel.evidence import _redact
from loopkernel.evidence._redact import redact, redact_text

SECRETISH = st.sampled_from(
    ["api_key", "password", "X-Auth-Token", "note", "token", "auth", "tokens_used", "ok"]
)
TEXT = st.sampled_from(
    [
        "t1",
        "noop",
        "AKIAIOSFODNN7EXAMPLE",
        "Bearer abcdefghijklmnop",
        "password=hunter22",
        "[redacted:0123456789ab]",
        "x" * 70 + " token=abcdef",
        "sk-" + "a" * 30,
    ]
) | st.text(max_size=80)
values = st.recursive(
    st.none() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SECRETISH | st.text(), inner),
    max_leaves=20,
)


def _with_paths(value: Any) -> Any:
    return _redact._walk(value, "", frozenset(), secret=False)


@given(values)
def test_nothing_kept_is_the_walk_with_paths(value: Any) -> None:
    assert redact(value) == _with_paths(value)
    assert redact(value) == redact(value)  # the cache answers the second time alike


@given(TEXT)
def test_short_text_through_the_cache_is_redact_text(text: str) -> None:
    assert _redact._short(text) == redact_text(text)
