"""The SRE tools server over real MCP stdio: read-only defs, scope held by the server,
redaction and caps at its result boundary, errors that name the fault."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from lk_sre import INCIDENTS
from loopkernel import ToolError
from loopkernel.tools import SourceSession, load_tool_defs
from loopkernel_apps.sre.tools import DEFS, ITEM_CAP, tool_source

SECRET = "hunter2-Zq8pX4vL9"


def _calls(incident: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Each call's result (or its ToolError) from a real stdio session with the server."""
    dump = INCIDENTS / incident / "dump"

    async def go() -> list[Any]:
        out: list[Any] = []
        async with SourceSession(tool_source(str(dump), "prod")) as session:
            for name, args in calls:
                try:
                    out.append(await session.call(name, args, key=None, time_limit=30))
                except ToolError as exc:
                    out.append(exc)
        return out

    return asyncio.run(go())


def test_every_tool_is_read_only_and_declares_the_namespace_argument() -> None:
    defs = load_tool_defs(DEFS)
    assert {t.effect for t in defs} == {"read_only"}
    assert set(defs.names()) == {
        "triage",
        "list_pods",
        "describe_pod",
        "pod_logs",
        "events",
        "workload_status",
        "rollout_history",
        "node_capacity",
        "services",
        "claims",
        "autoscalers",
        "kb_search",
    }
    for tool in defs:
        # The runbooks are the database's, not a namespace's: kb_search reads no cluster.
        assert ("namespace" in tool.input_schema["properties"]) == (tool.name != "kb_search")


@pytest.mark.slow
def test_another_namespace_is_refused_by_the_server() -> None:
    got = _calls(
        "scope-refusal",
        [
            ("events", {"namespace": "kube-system"}),
            ("list_pods", {"namespace": "kube-system"}),
            ("list_pods", {"namespace": "prod"}),
            ("describe_pod", {"pod": "coredns-x"}),
        ],
    )
    for refused in got[:2]:
        assert refused["refused"] and "outside this investigation's scope" in refused["refused"]
        assert refused["data"] == {} and "coredns" not in refused["content"]
    assert got[2]["refused"] is None and "reports-" in got[2]["content"]
    assert "coredns" not in got[2]["content"]  # the other namespace's pods are not listed
    assert isinstance(got[3], ToolError) and "no pod 'coredns-x' in namespace 'prod'" in str(got[3])


@pytest.mark.slow
def test_results_are_redacted_and_capped() -> None:
    dump = INCIDENTS / "dns-redis" / "dump"
    pod = next(d.name for d in (dump / "prod").iterdir() if d.name.startswith("sessions-"))
    assert SECRET in (dump / "prod" / pod / "logs-sessions-previous.txt").read_text()
    got = _calls(
        "dns-redis",
        [
            ("describe_pod", {"pod": pod}),
            ("pod_logs", {"pod": pod, "previous": True}),
        ],
    )
    described, logs = got
    assert re.search(r"REDIS_PASSWORD=\[redacted:[0-9a-f]{12}\]", described["content"])
    for result in got:
        text = str(result)
        assert SECRET not in text
        assert "AKIAIOSFODNN7EXAMPLE" not in text
        assert "eyJhbGciOiJIUzI1NiJ9" not in text
    assert re.search(r"password=\[redacted:[0-9a-f]{12}\]", logs["content"])
    assert "no such host" in logs["content"]
    assert logs["truncated"] is False


@pytest.mark.slow
def test_a_long_result_keeps_its_tail_and_says_it_was_cut() -> None:
    dump = INCIDENTS / "oom-payments" / "dump"
    pod = next(d.name for d in (dump / "prod").iterdir() if d.name.startswith("payments-"))
    (long,) = _calls("oom-payments", [("pod_logs", {"pod": pod, "previous": True, "tail": 5000})])
    assert long["truncated"] is True and len(long["content"]) <= ITEM_CAP + 80
    assert long["content"].startswith("[truncated: 3500 of")
    assert long["content"].rstrip().endswith("heap usage 251MiB of 256MiB")  # logs keep the tail


def test_redaction_patterns() -> None:
    from loopkernel.evidence import marker
    from loopkernel.evidence import redact as evidence_redact
    from loopkernel_apps.sre._redact import redact

    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAbc==\n-----END RSA PRIVATE KEY-----"
    text = (
        "login password=s3cret token: abc.def api_key='xyz123' "
        "url=postgres://app:pa55w0rd@db:5432/x AKIAABCDEFGHIJKLMNOP "
        f"Authorization: Bearer abcdefghijk {pem} "
        "aws_secret_access_key=wJalrXUtnFEMIK7MDENGbPxRfiCY"
    )
    out = redact(text)
    for secret in (
        "s3cret",
        "abc.def",
        "xyz123",
        "pa55w0rd",
        "AKIAABCDEFGHIJKLMNOP",
        "abcdefghijk",
        "MIIEow",
        "wJalrXUtnFEMIK7MDENGbPxRfiCY",
    ):
        assert secret not in out, (secret, out)
    # one redactor and one marker: the project's (loopkernel.evidence), hashed per secret
    assert marker("s3cret") in out and marker("pa55w0rd") in out
    assert "[REDACTED]" not in out
    env = {"env": [{"name": "DB_PASSWORD", "value": "x"}, {"name": "MODE", "value": "fast"}]}
    assert redact(env) == {
        "env": [{"name": "DB_PASSWORD", "value": marker("x")}, {"name": "MODE", "value": "fast"}]
    }
    verbatim = redact("value seen verbatim: opensesame", ["opensesame"])
    assert verbatim == "value seen verbatim: " + marker("opensesame")
    # the tool layer's pass over an already redacted result changes nothing
    assert evidence_redact(out) == out


def test_a_dump_path_that_does_not_exist_stops_the_server_at_start(tmp_path: Path) -> None:
    from loopkernel import ToolUnavailable

    async def go() -> None:
        async with SourceSession(tool_source(str(tmp_path / "nope"), "prod")) as session:
            await session.call("triage", {}, key=None, time_limit=10)

    with pytest.raises(ToolUnavailable):
        asyncio.run(go())
