"""The inspector's approval form and API pass the value door (issue 32, item 1): a payload
with NaN, a lone surrogate or runaway nesting is a 400 that names the rule, and nothing
is journaled; a good payload still goes through."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from lk_web import OPERATOR_TOKEN, Served, run_async
from loopkernel.client import Client
from loopkernel.graph import EventKind

BEARER = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


def parked(db: str, tmp_path: Path) -> str:
    async def go() -> str:
        async with Client(db) as client:
            overrides = {"ledger": str(tmp_path / "ledger")}
            _, started = await client.start("lk_testapps:approve_charge", overrides=overrides)
            assert (await client.execute(started.run_id)).status.value == "waiting"
            return started.run_id

    return run_async(go())


def answers(db: str, run_id: str) -> int:
    async def go() -> int:
        async with Client(db) as client:
            events = await client.events(run_id)
            return sum(1 for e in events if e.kind is EventKind.HUMAN_INPUT)

    return run_async(go())


@pytest.mark.parametrize(
    ("payload", "rule"),
    [
        ('{"a": NaN}', "not_finite"),
        ('{"a": "\\ud800"}', "not_unicode"),
        ("[" * 40 + "]" * 40, "too_deep"),
        ('{"a": ' + '"' + "x" * 70_000 + '"}', "too_large"),
    ],
    ids=["nan", "surrogate", "deep", "large"],
)
def test_a_payload_the_door_refuses_is_a_400_and_nothing_is_journaled(
    server: Served, tmp_path: Path, payload: str, rule: str
) -> None:
    run_id = parked(server.db, tmp_path)
    with server.client() as http:
        refused: httpx.Response = http.post(
            f"/runs/{run_id}/tasks/call/decide",
            data={"decision": "approve", "payload": payload},
            headers=BEARER,
        )
        assert refused.status_code == 400, refused.text
        assert rule in refused.text
        assert answers(server.db, run_id) == 0
        ok = http.post(
            f"/runs/{run_id}/tasks/call/decide",
            data={"decision": "approve", "payload": '{"by": "ana"}'},
            headers=BEARER,
        )
        assert ok.status_code == 303, ok.text
    assert answers(server.db, run_id) == 1
