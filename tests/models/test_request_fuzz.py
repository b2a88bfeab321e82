"""The gateway's request parser on generated bodies: every body is either a call or a
``UsageError`` naming the problem; nothing else escapes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopkernel.errors import UsageError
from loopkernel.gateway import GatewayConfig, ProviderConfig
from loopkernel.gateway._server import _Call

CONFIG = GatewayConfig(
    providers=(ProviderConfig(name="p", kind="openai", model="m", base_url="http://127.0.0.1:1"),)
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "user", "tool", 3]),
        "content": st.text(max_size=20) | st.text(max_size=20) | json_values,
    }
)
near_valid = st.fixed_dictionaries(
    {
        "messages": st.lists(message, min_size=1, max_size=3) | json_values,
        "key": st.text(min_size=1, max_size=4) | json_values,
        "run_id": st.text(min_size=1, max_size=4) | json_values,
    },
    optional={
        "task_id": json_values,
        "max_tokens": st.integers(-5, 70_000),
        "response_schema": st.just({"type": "object"}) | json_values,
        "timeout": st.floats(-1, 400, allow_nan=False),
        "model": st.sampled_from(["p", "m", "zzz"]) | json_values,
    },
)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(json_values, near_valid, near_valid.map(lambda b: {**b, "extra": 1})))
def test_a_body_is_a_call_or_a_usage_error(body: Any) -> None:
    try:
        call = _Call(body, CONFIG)
    except UsageError as err:
        assert err.message
        return
    assert call.key and call.run_id and call.messages
    assert 1 <= call.max_tokens <= 65_536 and 0 < call.timeout <= CONFIG.max_timeout
    usd, tokens = call.reservation()
    assert usd == 0.0 and tokens >= call.max_tokens
