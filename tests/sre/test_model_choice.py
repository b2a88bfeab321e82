"""The model chooses: in the SRE investigator the model picks the next read-only calls from
what the run has seen, within the call budget, and reaches evidence the rules alone do not
collect; the report cites it (an evidence ref, the round's planning) while its verified
causes stay the detectors'.

The model is the scripted provider (a real local HTTP server speaking the OpenAI protocol)
replaying what a capable model answers, each reply valid against the exact schema the round
sent (checked here on the captured request); the gateway and ``loopkernel investigate`` are
real subprocesses with the real MCP tools server. The rules-only run of the same incident
is the baseline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lk_sre import incident, investigate
from loopkernel.testing import GatewayProcess, ScriptedProvider, run_cli
from loopkernel_apps.sre._calls import CallRecord, CallStatus
from loopkernel_apps.sre._model import reply_schema, seen_names

pytestmark = pytest.mark.slow

NOTHING_MORE = '{"calls":[]}'


def _calls(*calls: tuple[str, dict[str, Any]]) -> str:
    return json.dumps({"calls": [{"tool": t, "args": a} for t, a in calls]}, separators=(",", ":"))


# What a capable model asks, round by round, having read the round's prompt: round 1 from
# triage (the workload, the namespace's pods), round 2 from the pod list it got back.
CHOICES: dict[str, list[str]] = {
    "healthy": [
        _calls(("list_pods", {})),
        _calls(
            ("describe_pod", {"pod": "frontend-3f570764b-20e9f"}),
            ("pod_logs", {"pod": "frontend-3f570764b-20e9f", "tail": 200}),
        ),
    ],
    "crash-orders-panic": [
        _calls(("workload_status", {"kind": "deployment", "name": "orders-worker"})),
        NOTHING_MORE,
    ],
    "config-invalid": [
        _calls(
            ("workload_status", {"kind": "deployment", "name": "gateway"}),
            ("list_pods", {}),
        ),
        _calls(("pod_logs", {"pod": "api-ce0634e01-5dd80", "tail": 200})),
    ],
    "dns-redis": [
        _calls(("workload_status", {"kind": "deployment", "name": "sessions"}), ("list_pods", {})),
        _calls(("describe_pod", {"pod": "frontend-3f570764b-7da6e"})),
    ],
}


def _key(item: dict[str, Any]) -> str:
    return item["tool"] + " " + json.dumps(item["args"], sort_keys=True)


@pytest.mark.parametrize("case", list(CHOICES))
def test_the_models_calls_reach_evidence_the_rules_did_not_and_the_report_cites_it(
    tmp_path: Path, case: str
) -> None:
    rules = investigate(tmp_path / "rules.db", case, run_id="rules")["report"]
    c = incident(case)
    replies = CHOICES[case]
    with (
        ScriptedProvider(replies, default=NOTHING_MORE).running() as provider,
        GatewayProcess(
            ["--provider", "openai", "--base-url", provider.base_url, "--model", "m"],
            ledger=tmp_path / "ledger.db",
        ) as gw,
    ):
        args = ["investigate", c["question"], "--dump", c["dump"], "--namespace", c["namespace"]]
        args += ["--run-id", "model", "--json", "--model"]
        proc = run_cli(args, db=tmp_path / "runs.db", env=gw.runtime_env(), timeout=600)
        requests = provider.requests
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)

    # Each scripted reply is one a constrained model could write: valid against the exact
    # schema its round sent, which names only what the run had seen by then.
    for reply, req in zip(replies, requests, strict=False):
        schema = req.body["response_format"]["json_schema"]["schema"]
        jsonschema.validate(json.loads(reply), schema)
        assert req.body["max_tokens"] <= 512
    asked = [
        _key(call)
        for p in report["coverage"]["planning"]
        if p["by"] == "model"
        for call in p["proposed"]
    ]
    assert asked, report["coverage"]["planning"]

    before = {_key(e) for e in rules["evidence"]}
    new = [e for e in report["evidence"] if _key(e) not in before]
    assert new, "the model reached nothing the rules had not"
    assert {_key(e) for e in new} <= set(asked)  # what is new is what the model chose
    # The report cites it: a numbered evidence item with content, named in the coverage.
    shown = json.loads(run_cli(["inspect", "model", "--json"], db=tmp_path / "runs.db").stdout)
    markdown = next(t for t in shown["tasks"] if t["task_id"] == "report")["result"]["markdown"]
    for e in new:
        assert e["ref"].startswith("E") and e["content"]
        assert e["tool"] in report["coverage"]["model"]
        line = f"- {e['ref']}: {e['tool']} {json.dumps(e['args'], sort_keys=True)}"
        assert line in markdown, line
    # Verified causes still come only from the detectors, as the rules path found them.
    assert [v["detector"] for v in report["verified_causes"]] == [
        v["detector"] for v in rules["verified_causes"]
    ]
    assert len(report["evidence"]) <= int(shown["params"]["max_tool_calls"])  # the budget


def test_the_round_schema_names_only_what_the_run_has_seen() -> None:
    triage = _ok(
        "triage",
        {
            "unhealthy": [{"pod": "web-1", "owner": "web-7f", "containers": [{"name": "web"}]}],
            "workloads": [{"kind": "deployment", "name": "web"}],
        },
    )
    schema = reply_schema([triage])
    check = jsonschema.Draft202012Validator(schema)
    assert check.is_valid(json.loads(_calls(("pod_logs", {"pod": "web-1", "container": "web"}))))
    assert check.is_valid(json.loads(_calls(("events", {"object": "web-7f"}))))
    for bad in (
        _calls(("pod_logs", {"pod": "db-0"})),  # a pod it never saw
        _calls(("pod_logs", {"pod": "web-1", "container": "sidecar"})),
        _calls(("describe_pod", {"pod": "web-1", "namespace": "kube-system"})),
        _calls(("delete_namespace", {})),
        _calls(*[("list_pods", {})] * 5),  # past MAX_CALLS
        _calls(("rollout_history", {"deployment": "api"})),
    ):
        assert not check.is_valid(json.loads(bad)), bad
    listed = _ok("list_pods", {"pods": [{"name": "db-0", "owner": "db"}]})
    assert "db-0" in seen_names([triage, listed])["pods"]
    again = jsonschema.Draft202012Validator(reply_schema([triage, listed]))
    assert again.is_valid(json.loads(_calls(("pod_logs", {"pod": "db-0"}))))


def _ok(tool: str, data: dict[str, Any], **args: Any) -> CallRecord:
    return CallRecord(tool=tool, args=args, status=CallStatus.OK, result={"data": data})


def test_the_schema_names_every_kind_of_object_the_dump_listed() -> None:
    triage = _ok(
        "triage",
        {
            "unhealthy": [
                {"pod": "api-1", "owner": "api-7f", "owner_kind": "ReplicaSet", "node": "n-1"}
            ],
            "workloads": [{"kind": "job", "name": "migrate"}],
        },
    )
    described = _ok(
        "describe_pod",
        {
            "pod": {
                "metadata": {"name": "api-1"},
                "spec": {
                    "nodeName": "n-1",
                    "containers": [
                        {
                            "name": "api",
                            "env": [
                                {"valueFrom": {"configMapKeyRef": {"name": "api-config"}}},
                                {"valueFrom": {"secretKeyRef": {"name": "db-creds"}}},
                            ],
                        }
                    ],
                    "volumes": [{"persistentVolumeClaim": {"claimName": "data-api"}}],
                },
            }
        },
        pod="api-1",
    )
    listings = [
        _ok("services", {"services": [{"name": "auth"}]}),
        _ok("claims", {"claims": ["data-db"]}),
        _ok("node_capacity", {"nodes": [{"name": "n-2"}]}),
        _ok("autoscalers", {"autoscalers": [{"name": "api-hpa"}]}),
    ]
    seen = seen_names([triage, described, *listings])
    assert seen["kinds"] == {
        "api-7f": "ReplicaSet",
        "n-1": "Node",
        "api-config": "ConfigMap",
        "db-creds": "Secret",
        "data-api": "PersistentVolumeClaim",
        "auth": "Service",
        "data-db": "PersistentVolumeClaim",
        "n-2": "Node",
        "api-hpa": "HorizontalPodAutoscaler",
    }
    check = jsonschema.Draft202012Validator(reply_schema([triage, described, *listings]))
    for name in seen["kinds"]:
        assert check.is_valid(json.loads(_calls(("events", {"object": name})))), name
    assert check.is_valid(
        json.loads(_calls(("workload_status", {"kind": "job", "name": "migrate"})))
    )
    assert check.is_valid(
        json.loads(_calls(("workload_status", {"kind": "replicaset", "name": "api-7f"})))
    )
    assert not check.is_valid(json.loads(_calls(("events", {"object": "never-listed"}))))
    # only what was seen: before the listings, none of their names
    before = jsonschema.Draft202012Validator(reply_schema([triage]))
    assert not before.is_valid(json.loads(_calls(("events", {"object": "auth"}))))
