"""Cause before symptom, end to end: "api fails because auth cannot pull its image".

The scene (built with the examples' own kit, ``examples/incidents/_make.py``): api runs but
is not Ready, its readiness probe failing because every request to its login backend, the
Service auth, is refused; auth's only pod cannot pull its image. The rules verify api's
failing upstream (the Service auth) and rank it first; they never read auth's pod, so its
image pull is only a low suspect. With ``--model`` the investigation is a real ``loopkernel
investigate`` subprocess, through a real ``loopkernel gateway`` subprocess, to a real local
HTTP server speaking the OpenAI protocol that answers as an engineer would: describe auth's
pod, then one claim quoting auth's pull failure, saying it explains api. The image pull is
then verified by the detectors (the model only fetched its evidence), and the quoted claim,
which api's own evidence supports (its log names auth), ranks it first and says what it
explains."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lk_sre import INCIDENTS
from loopkernel.testing import GatewayProcess, ScriptedProvider, run_cli
from loopkernel.testing._scripted import ScriptedReply

pytestmark = pytest.mark.slow

QUESTION = "Why is api failing?"
CLAIM = "api fails because auth cannot pull its image"
QUOTE = "Waiting (ImagePullBackOff)"
_ITEM = re.compile(r"^### (E\d+) (\S+) (\{.*\})$")


def _kit() -> Any:
    spec = importlib.util.spec_from_file_location("_make", INCIDENTS / "_make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scene(out: Path) -> Path:
    """The dump: frontend healthy, auth unable to pull its image, api not Ready."""
    m = _kit()
    k = m.Cluster("prod")
    k.healthy("frontend")
    image = "registry.example.com/shop/auth:2.4.1"
    c = m.container("auth", image)
    rs, rs_uid = k.deployment("auth", [c], replicas=1, ready=0)
    name = m.podname(rs)
    s = m.waiting("auth", image, "ImagePullBackOff", f'Back-off pulling image "{image}"')
    s.pop("imageID", None)
    pod = k.pod(name, [c], [s], owner=("ReplicaSet", rs, rs_uid), phase="Pending")
    k.log(name, "auth", [])
    k.event(
        pod,
        "Failed",
        f'Failed to pull image "{image}": rpc error: code = NotFound desc = '
        f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
        f"{image}: not found: manifest unknown",
        count=6,
        field_path="spec.containers{auth}",
    )
    k.event(pod, "BackOff", f'Back-off pulling image "{image}"', count=23)
    m.service(k, "auth", "10.96.4.20", {"app": "auth"})
    api_image = "registry.example.com/shop/api:3.1.0"
    probe = {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 10}
    env = [{"name": "AUTH_URL", "value": "http://auth.prod.svc.cluster.local:8080"}]
    c = m.container("api", api_image, readiness=probe, env=env)
    rs, rs_uid = k.deployment("api", [c], replicas=1, ready=0)
    name = m.podname(rs)
    pod = k.pod(
        name, [c], [m.running("api", api_image, ready=False)], owner=("ReplicaSet", rs, rs_uid)
    )
    refused = (
        "ERROR GET /readyz 503: login backend auth.prod.svc.cluster.local:8080 "
        "unavailable: dial tcp 10.96.4.20:8080: connect: connection refused"
    )
    k.log(
        name,
        "api",
        [
            *m.noise("api", 20, "api"),
            *(f"2026-11-30T09:17:{10 + i * 5}.000Z {refused}" for i in range(8)),
        ],
    )
    k.event(
        pod,
        "Unhealthy",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
        count=40,
        field_path="spec.containers{api}",
    )
    k.write_dir(out / "dump")
    return out / "dump"


def _calls(body: dict[str, Any], prompt: str) -> dict[str, Any]:
    """Describe auth's pod once (the pod enum of the schema names it)."""
    done = prompt.split("already collected:", 1)[-1].split("\n\n", 1)[0]
    if 'describe_pod {"pod": "auth-' in done:
        return {"calls": []}
    branches = body["response_format"]["json_schema"]["schema"]["properties"]["calls"]["items"]
    for branch in branches.get("anyOf", []):
        if branch["properties"]["tool"]["enum"] == ["describe_pod"]:
            pods = branch["properties"]["args"]["properties"]["pod"]["enum"]
            auth = [p for p in pods if p.startswith("auth-")]
            return {"calls": [{"tool": "describe_pod", "args": {"pod": auth[0]}}]}
    return {"calls": []}


def _claims(prompt: str) -> dict[str, Any]:
    """One claim quoting the pull failure in auth's description, explaining api."""
    ref, quote = None, None
    for line in prompt.splitlines():
        m = _ITEM.match(line)
        if m:
            pod = str(json.loads(m.group(3)).get("pod", ""))
            ref = m.group(1) if m.group(2) == "describe_pod" and pod.startswith("auth-") else None
        elif ref and QUOTE in line:
            quote = QUOTE
            break
    if ref is None or quote is None:
        return {"claims": []}
    return {
        "claims": [
            {
                "text": CLAIM,
                "kind": "suspected_cause",
                "refs": [ref],
                "quote": quote,
                "object": {"kind": "Deployment", "name": "auth"},
                "explains": {"kind": "Deployment", "name": "api"},
            }
        ]
    }


class Engineer(ScriptedProvider):
    """Reads each request (its schema, its prompt) and pushes the answer."""

    async def _handle(self, req: Any) -> Any:
        body = json.loads(req.body)
        prompt = str(next(m["content"] for m in body["messages"] if m["role"] == "user"))
        schema = body["response_format"]["json_schema"]["schema"]
        answer = _claims(prompt) if "claims" in schema["properties"] else _calls(body, prompt)
        self.push(ScriptedReply(text=json.dumps(answer)))
        return await super()._handle(req)


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scene(tmp_path_factory.mktemp("scene"))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engineer, GatewayProcess]]:
    tmp = tmp_path_factory.mktemp("gw")
    with (
        Engineer(default='{"calls": []}').running() as provider,
        GatewayProcess(
            ["--provider", "openai", "--base-url", provider.base_url, "--model", "m"],
            ledger=tmp / "ledger.db",
        ) as gw,
    ):
        yield provider, gw


def _run(db: Path, dump: Path, env: dict[str, str] | None, *extra: str) -> dict[str, Any]:
    args = ["investigate", QUESTION, "--dump", str(dump), "--namespace", "prod", "--json", *extra]
    proc = run_cli(args, db=db, env=env or {}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def _causes(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (v["detector"], v["entity"]["kind"], v["entity"]["name"]) for v in report["verified_causes"]
    ]


def test_the_rules_alone_rank_the_symptom_first(tmp_path: Path, dump: Path) -> None:
    report = _run(tmp_path / "runs.db", dump, None)
    assert _causes(report) == [("upstream_unavailable", "Service", "auth")]
    assert report["summary"].startswith("Verified (upstream_unavailable)")
    assert "It explains" not in report["summary"]


def test_the_models_evidence_orders_the_cause_before_the_symptom(
    tmp_path: Path, dump: Path, gateway: tuple[Engineer, GatewayProcess]
) -> None:
    provider, gw = gateway
    report = _run(tmp_path / "runs.db", dump, gw.runtime_env(), "--model")
    assert provider.calls >= 2  # the calls of a round, then the claims
    causes = _causes(report)
    assert causes[0] == ("image_pull", "Deployment", "auth"), causes
    assert ("upstream_unavailable", "Service", "auth") in causes[1:]
    top = report["verified_causes"][0]
    assert {"kind": "Deployment", "namespace": "prod", "name": "api"} in top["explains"]
    assert "a quoted model claim" in top["ranking"]
    summary = report["summary"]
    assert summary.startswith("Verified (image_pull): Container auth of pod auth-"), summary
    assert re.search(r"It explains [^.]*Deployment api", summary), summary
    (kept,) = report["coverage"]["claims"]["kept"]
    assert kept["text"] == CLAIM and kept["status"] == "suspected"
    assert kept["effect"] == "orders auth before api"
    assert kept["quote"] == QUOTE
    # the model verified nothing itself: every verified cause is a detector's
    assert all(v["detector"] for v in report["verified_causes"])
