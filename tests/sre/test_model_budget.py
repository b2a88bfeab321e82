"""The model's calls are made in a budget of their own (``model_calls``, ``MODEL_CHARS``):
at a tight evidence budget a model call can never push out the rules' follow-up.

The model is the scripted provider (a real local HTTP server speaking the OpenAI protocol)
behind a real ``loopkernel gateway`` process; ``loopkernel investigate`` is a real
subprocess with the real MCP tools server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lk_sre import incident, investigate
from loopkernel.testing import GatewayProcess, ScriptedProvider, run_cli
from loopkernel_apps.sre._calls import CallRecord, CallStatus
from loopkernel_apps.sre._model import cluster_text, prompt, untrusted_room

pytestmark = pytest.mark.slow

NOTHING_MORE = '{"calls":[]}'
# round 1: the model asks for the three namespace-wide listings, thousands of characters
GREEDY = json.dumps(
    {"calls": [{"tool": t, "args": {}} for t in ("node_capacity", "list_pods", "services")]}
)


def _run(tmp: Path, case: str, replies: list[str], *sets: str) -> dict[str, Any]:
    c = incident(case)
    with (
        ScriptedProvider(replies, default=NOTHING_MORE).running() as provider,
        GatewayProcess(
            ["--provider", "openai", "--base-url", provider.base_url, "--model", "m"],
            ledger=tmp / "ledger.db",
        ) as gw,
    ):
        args = ["investigate", c["question"], "--dump", c["dump"], "--namespace", c["namespace"]]
        args += ["--run-id", "model", "--json", "--model"]
        for s in sets:
            args += ["--set", s]
        proc = run_cli(args, db=tmp / "runs.db", env=gw.runtime_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def test_at_a_tight_evidence_budget_the_rules_follow_up_still_happens(tmp_path: Path) -> None:
    # quota-exceeded: round 1 reads the deployment's history, round 2 follows it to the
    # newest ReplicaSet's events, where the FailedCreate (exceeded quota) is
    rules = investigate(tmp_path / "rules.db", "quota-exceeded", max_evidence_chars=1000)
    assert rules["report"]["summary"].startswith("Verified (failed_create)")

    report = _run(tmp_path, "quota-exceeded", [GREEDY], "max_evidence_chars=1000")
    first = report["coverage"]["planning"][0]
    assert first["by"] == "model" and len(first["proposed"]) == 3
    by_model = [e for e in report["evidence"] if e["tool"] in ("node_capacity", "services")]
    assert by_model, "the model's calls were made"
    # the rules' round-2 follow-up was made, and the cause found, as without the model
    follow_up = {"tool": "events", "args": {"object": "reports-worker-bfc1fc857"}}
    assert any({k: e[k] for k in ("tool", "args")} == follow_up for e in report["evidence"])
    assert report["summary"].startswith("Verified (failed_create)"), report["summary"]
    assert "No cause found" not in report["summary"]
    assert [v["entity"] for v in report["verified_causes"]] == [
        v["entity"] for v in rules["report"]["verified_causes"]
    ]
    assert report["coverage"]["exit"] == rules["report"]["coverage"]["exit"]


def test_the_models_own_call_budget_bounds_its_calls(tmp_path: Path) -> None:
    # oom-payments: the rules read node_capacity and services themselves; the model asks
    # what they do not (a call the rules make this round costs the model nothing)
    asks = [
        _asks("node_capacity", "list_pods", "autoscalers"),
        _asks("claims"),
    ]
    report = _run(tmp_path, "oom-payments", asks, "model_calls=1")
    planning = report["coverage"]["planning"]
    assert planning[0]["by"] == "model"
    made = [e["tool"] for e in report["evidence"] if e["tool"] in ("list_pods", "autoscalers")]
    assert made == ["list_pods"]  # one call of its own: model_calls=1
    assert not [e for e in report["evidence"] if e["tool"] == "claims"]
    assert all(p["by"] == "rules" for p in planning[1:])
    assert "model_calls" in planning[1]["reason"]


def _asks(*tools: str) -> str:
    return json.dumps({"calls": [{"tool": t, "args": {}} for t in tools]})


def test_the_prompt_is_sized_to_the_models_context() -> None:
    listing = "\n".join(f"line {i}: " + "x" * 60 for i in range(2000))
    calls = [
        CallRecord(tool=tool, args={}, status=CallStatus.OK, result={"content": listing})
        for tool in ("list_pods", "services")
    ]

    def shown(context: int) -> int:
        messages = prompt(
            run_id="r", round_=1, question="why?", namespace="prod", calls=calls,
            context_tokens=context,
        )  # fmt: skip
        return len(messages[1]["content"])

    small, default, large = shown(2048), shown(8192), shown(32768)
    assert small < default < large  # more context, more of the cluster's text
    assert untrusted_room(2048, 3000, 512) == 1500  # never less than the floor
    assert untrusted_room(1_000_000, 3000, 512) == 24000  # nor more than the ceiling
    assert len(cluster_text(calls, 1500)) < 1500 + 400
