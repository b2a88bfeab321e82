"""Proposals a model can make: the planner derives an exact, bounded JSON Schema from the
allowlist and the snapshot and sends it on every request (captured on the wire by the
scripted provider, a real local HTTP server, behind a real in-process gateway); it sizes
``max_tokens`` from the schema's largest valid reply; it re-asks once with the judge's
named reason; it records a cut-off reply; an unreachable gateway is ``model_unavailable``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lk_models import gateway_for
from loopkernel.graph import Event, EventKind, GraphPatch, GraphState, TaskSpec
from loopkernel.ids import RunId, TaskId
from loopkernel.models import ModelClient
from loopkernel.models._http import Address
from loopkernel.planner._schema import max_reply_chars, proposal_schema, reply_tokens
from loopkernel.planner.llm import AllowedSkill, Allowlist, Asking, LLMPlanner, judge
from loopkernel.testing import ScriptedProvider, ScriptedReply

RESEARCH = AllowedSkill(
    name="research",
    description="look into one angle",
    input_schema={
        "type": "object",
        "properties": {"angle": {"type": "string"}, "delay": {"type": "number"}},
        "required": ["angle", "delay"],
        "additionalProperties": False,
    },
)
PLAN = AllowedSkill(
    name="plan",
    input_schema={
        "type": "object",
        "properties": {"researchers": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["researchers"],
    },
)
ALLOW = Allowlist(
    skills=(PLAN, RESEARCH),
    ops=frozenset({"add", "connect", "cancel", "finish"}),
    finish=frozenset({"succeeded", "failed"}),
)
GOOD = (
    '[{"op":"add","task_id":"r1","skill":"research","input":{"angle":"x","delay":0.5}},'
    '{"op":"connect","src":"plan","dst":"r1"}]'
)


class Rules:
    """The fallback: add r1 after plan."""

    def plan(self, snapshot: Any, event: Event) -> GraphPatch:
        return GraphPatch().add(
            TaskSpec(task_id="r1", skill="research", input={"angle": "rules", "delay": 0.0}),
            after=["plan"],
        )


def _state() -> tuple[GraphState, Event]:
    from loopkernel.graph import validate

    s = GraphState(run_id=RunId("run-s"), app="test", params={})
    s.apply(validate(s, GraphPatch().add(TaskSpec(task_id="plan", skill="plan")), {"plan"}))
    return s, Event(
        run_id=RunId("run-s"), seq=2, kind=EventKind.TASK_COMPLETED, task_id=TaskId("plan")
    )


def _plan(tmp_path: Path, replies: list[ScriptedReply | str], **options: Any) -> tuple[Any, Any]:
    state, event = _state()

    async def scenario() -> tuple[Any, Any]:
        async with ScriptedProvider(replies) as p, gateway_for(p, tmp_path) as (_gw, client):
            planner = LLMPlanner(
                allow=ALLOW, fallback=Rules(), client=client, asking=Asking(**options)
            )
            proposal = await planner.plan(state, event)
            return proposal, p.requests

    return asyncio.run(scenario())


def test_the_schema_is_exact_bounded_and_admits_what_the_judge_admits() -> None:
    state, _ = _state()
    schema = proposal_schema(ALLOW, state)
    jsonschema.Draft202012Validator.check_schema(schema)
    check = jsonschema.Draft202012Validator(schema)
    assert schema["maxItems"] == 4
    branches = schema["items"]["anyOf"]
    kinds = [(b["properties"]["op"]["enum"][0], b["properties"].get("skill")) for b in branches]
    assert ("add", {"enum": ["plan"]}) in kinds and ("add", {"enum": ["research"]}) in kinds
    research = next(b for b in branches if b["properties"].get("skill") == {"enum": ["research"]})
    angle = research["properties"]["input"]["properties"]["angle"]
    assert angle["maxLength"] > 0  # an unbounded string got a bound
    cancel = next(b for b in branches if b["properties"]["op"] == {"enum": ["cancel"]})
    assert cancel["properties"]["task_id"] == {"enum": ["plan"]}  # ids the snapshot allows
    assert not any(b["properties"]["op"] == {"enum": ["wait"]} for b in branches)  # not allowed
    assert check.is_valid(json.loads(GOOD))
    assert judge(GOOD, state, ALLOW).patch is not None
    # the schema refuses what the allowlist refuses
    for bad in (
        '[{"op":"add","task_id":"x","skill":"delete_all","input":{}}]',
        '[{"op":"add","task_id":"x","skill":"research","input":{"angle":"a"}}]',
        '[{"op":"resume","task_id":"plan"}]',
        '[{"op":"cancel","task_id":"nope"}]',
        '[{"op":"finish","status":"cancelled"}]',
    ):
        assert not check.is_valid(json.loads(bad)), bad
    # the largest valid reply is what max_tokens is sized from
    chars = max_reply_chars(schema)
    assert len(GOOD) < chars
    assert reply_tokens(schema, cap=100_000) == pytest.approx(chars / 2.5 + 8, abs=1)
    assert reply_tokens(schema, cap=300) == 300


def test_the_schema_goes_on_the_wire_with_max_tokens_sized_from_it(tmp_path: Path) -> None:
    proposal, requests = _plan(tmp_path, [GOOD])
    assert proposal.reason is None and proposal.patch is not None
    (req,) = requests
    fmt = req.body["response_format"]
    assert fmt["type"] == "json_schema"
    state, _ = _state()
    schema = proposal_schema(ALLOW, state, max_ops=4)
    assert fmt["json_schema"]["schema"] == schema
    assert req.body["max_tokens"] == reply_tokens(schema, cap=1024)
    assert "compact" in req.body["messages"][0]["content"]


def test_the_anthropic_protocol_gets_the_schema_as_output_format(tmp_path: Path) -> None:
    state, event = _state()

    async def scenario() -> Any:
        async with (
            ScriptedProvider([GOOD]) as p,
            gateway_for(p, tmp_path, kind="anthropic") as (_gw, client),
        ):
            planner = LLMPlanner(allow=ALLOW, fallback=Rules(), client=client)
            assert (await planner.plan(state, event)).patch is not None
            return p.requests

    (req,) = asyncio.run(scenario())
    assert req.protocol == "anthropic"
    assert req.body["output_config"]["format"]["schema"] == proposal_schema(ALLOW, state)


def test_a_refused_reply_is_re_asked_once_with_the_judges_reason(tmp_path: Path) -> None:
    bad = '[{"op":"add","task_id":"r1","skill":"research","input":{"angle":"x"}}]'
    proposal, requests = _plan(
        tmp_path,
        [
            ScriptedReply(text=bad, input_tokens=900, output_tokens=20),
            ScriptedReply(text=GOOD, input_tokens=1000, output_tokens=30),
        ],
    )
    assert proposal.patch is not None and proposal.reason is None  # the second reply is used
    assert "re-asked once after bad_input" in proposal.detail
    # (the counts a real prompt of this size makes: the gateway charges no less than its
    # own measure, prompt bytes / 16, so a scripted 11 would be raised to it)
    assert proposal.input_tokens == 900 + 1000 and proposal.output_tokens == 20 + 30
    first, second = requests
    assert [m["role"] for m in second.body["messages"]] == ["system", "user", "assistant", "user"]
    assert second.body["messages"][2]["content"] == bad
    assert "bad_input" in second.body["messages"][3]["content"]
    assert second.body["response_format"] == first.body["response_format"]


def test_a_second_refusal_falls_back_and_a_cut_off_reply_is_recorded(tmp_path: Path) -> None:
    cut = '[{"op":"add","task_id":"r1","skill":"resea'
    proposal, requests = _plan(
        tmp_path,
        [ScriptedReply(text=cut, finish_reason="length"), "I think we should research."],
    )
    assert len(requests) == 2  # asked, re-asked once, no more
    assert proposal.patch is None and proposal.reason == "bad_json"
    assert "re-asked once after bad_json" in proposal.detail
    assert "finish_reason=length (reply 1 cut off" in proposal.detail


def test_no_re_ask_when_reask_is_off(tmp_path: Path) -> None:
    proposal, requests = _plan(tmp_path, ["prose", GOOD], reask=0)
    assert len(requests) == 1 and proposal.reason == "bad_json"


def test_an_unreachable_gateway_is_model_unavailable_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, event = _state()
    client = ModelClient(Address(path=str(tmp_path / "nobody.sock")), "x" * 20, backoff=0.0)
    planner = LLMPlanner(allow=ALLOW, fallback=Rules(), client=client)

    async def twice() -> list[Any]:
        return [await planner.plan(state, event), await planner.plan(state, event)]

    proposals = asyncio.run(twice())
    assert [p.reason for p in proposals] == ["model_unavailable"] * 2
    assert capsys.readouterr().err.count("model gateway is unavailable") == 1


@pytest.mark.slow
def test_planner_llm_with_a_wrong_token_is_a_clear_error_before_the_run(tmp_path: Path) -> None:
    from loopkernel.testing import GatewayProcess, run_cli

    with (
        ScriptedProvider([]).running() as p,
        GatewayProcess(
            ["--provider", "openai", "--base-url", p.base_url, "--model", "m"],
            ledger=tmp_path / "ledger.db",
        ) as gw,
    ):
        env = {**gw.runtime_env(), "LOOPKERNEL_GATEWAY_TOKEN": "not-the-gateways-token-at-all"}
        db = tmp_path / "runs.db"
        out = run_cli(["run", "speculation", "--planner", "llm"], db=db, env=env)
        assert p.calls == 0
    assert out.returncode == 2, out.stderr
    assert "refused the token" in out.stderr and "LOOPKERNEL_GATEWAY_TOKEN" in out.stderr
    assert "not-the-gateways-token" not in out.stderr
    assert not db.exists() or run_cli(["runs"], db=db).stdout.strip() == ""
