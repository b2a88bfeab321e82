"""Separation of duties and the report's remediation as a plan: the command line refuses the
requester's approval (journaled, nothing written) and carries out another user's once,
against a real local Kubernetes API server; each remediation the write tools can make
becomes the write a fix parks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lk_kubeapi import KubeAPI, deployment
from lk_sre import incident
from loopkernel.testing import run_cli
from loopkernel_apps.sre._dump import Namespace, load_dump
from loopkernel_apps.sre._plans import plans_for
from loopkernel_apps.sre.fix._app import refusal

PLAN = {"tool": "scale", "args": {"deployment": "checkout", "replicas": 3}}


def _table(tmp: Path, api: KubeAPI, separate: bool) -> dict[str, str]:
    users = {n: {"namespaces": ["prod"], "clusters": ["eu"]} for n in ("alice", "bob")}
    users["carol"] = {"namespaces": ["billing"], "clusters": ["eu"]}
    table = {
        "users": users,
        "clusters": {"eu": {"api": api.url}},
        "namespaces": {"prod": {"separate_duties": separate}},
    }
    (tmp / "service.json").write_text(json.dumps(table))
    return {"LOOPKERNEL_SRE_SERVICE": str(tmp / "service.json")}


def _fix(db: Path, env: dict[str, str], *args: str) -> Any:
    return run_cli(["sre", "fix", *args, "--json"], db=db, env=env)


@pytest.mark.slow
def test_the_requester_may_not_approve_where_the_namespace_separates_duties(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    with KubeAPI() as api:
        api.add(deployment("prod", "checkout", "shop/checkout:1.4.2"))
        env = _table(tmp_path, api, separate=True)
        proposed = _fix(db, env, "propose", "--user", "alice", "--namespace", "prod",
                        "--cluster", "eu", "--plan", json.dumps(PLAN))  # fmt: skip
        assert proposed.returncode == 0, proposed.stderr[-600:]
        run = json.loads(proposed.stdout)["run_id"]
        outsider = _fix(db, env, "approve", run, "--user", "carol")
        assert "carol may not investigate namespace prod" in outsider.stderr
        own = _fix(db, env, "approve", run, "--user", "alice")
        assert own.returncode != 0
        assert own.stderr.strip().splitlines()[-1] == (
            "loopkernel: refused: alice requested this fix and may not approve it "
            "(namespace prod separates duties: someone other than alice must approve)"
        )
        assert api.writes == []  # refused before anything was sent
        # The bare approve command names no approver: refused the same way.
        assert run_cli(["approve", run, "apply"], db=db, env=env).returncode == 0
        assert "waiting" in run_cli(["resume", run], db=db, env=env).stdout
        assert api.writes == []
        done = _fix(db, env, "approve", run, "--user", "bob")
        assert done.returncode == 0, done.stderr[-600:]
        assert json.loads(done.stdout) == {
            "run_id": run, "status": "succeeded", "took": True,
            "requested_by": "alice", "approved_by": "bob",
        }  # fmt: skip
        assert api.writes == [("patch", "Deployment", "checkout")]
        journal = json.loads(run_cli(["inspect", run, "--journal", "--json"], db=db).stdout)
    events = [j for j in journal["journal"] if "kind" in j]
    parks = [e["data"]["reason"] for e in events if e["kind"] == "approval_required"]
    answers = [(e["data"]["by"].get("name"), e["data"]["payload"]) for e in events
               if e["kind"] == "human_input"]  # fmt: skip
    assert parks[0] == "scale is irreversible; a human must approve it before it is sent"
    assert parks[1].startswith("refused: alice requested this fix")
    assert parks[2].startswith("refused: an approval that names no approver")
    assert answers == [("alice", {"approved_by": "alice"}), (None, None),
                       ("bob", {"approved_by": "bob"})]  # fmt: skip


def test_refusal_is_a_pure_rule_of_the_run_parameters() -> None:
    params: dict[str, Any] = {"namespace": "prod", "service": None}
    assert refusal(params, None) is None  # not through the service: no rule
    params["service"] = {"requested_by": "alice", "separate_duties": False}
    assert refusal(params, {"approved_by": "alice"}) is None
    params["service"]["separate_duties"] = True
    assert refusal(params, {"approved_by": "bob"}) is None
    assert "alice requested this fix" in str(refusal(params, {"approved_by": "alice"}))
    assert "names no approver" in str(refusal(params, {"by": "bob"}))


def _rs(name: str, rev: int, image: str, desired: int | None = None) -> dict[str, Any]:
    notes = {"deployment.kubernetes.io/revision": str(rev)}
    if desired is not None:
        notes["deployment.kubernetes.io/desired-replicas"] = str(desired)
    meta = {"name": f"{name}-{rev}", "annotations": notes,
            "ownerReferences": [{"kind": "Deployment", "name": name}]}  # fmt: skip
    containers = [{"name": "app", "image": image}]
    return {"metadata": meta, "spec": {"template": {"spec": {"containers": containers}}}}


def _cause(detector: str, **extra: Any) -> dict[str, Any]:
    return {"detector": detector, "container": "app", "pod": "web-1-abc",
            "entity": {"kind": "Deployment", "name": "web"}, **extra}  # fmt: skip


def _report(*causes: dict[str, Any]) -> dict[str, Any]:
    return {
        "verified_causes": list(causes),
        "proposed_remediation": [{"action": f"do {c['detector']}", "detector": c["detector"]}
                                 for c in causes],
    }  # fmt: skip


def test_each_remediation_a_write_can_make_becomes_a_plan() -> None:
    case = incident("oom-payments")
    ns = load_dump(case["dump"]).namespace(case["namespace"])
    oom = {"detector": "oomkilled", "container": "payments", "pod": "payments-1",
           "entity": {"kind": "Deployment", "name": "payments"}}  # fmt: skip
    (got,) = plans_for(_report(oom), ns)
    raised = {"deployment": "payments", "container": "payments", "limits": {"memory": "512Mi"}}
    assert got["plan"] == {"tool": "patch", "args": raised}
    assert got["action"] == "do oomkilled"

    dep = deployment("prod", "web", "web:2")
    dep["spec"]["template"]["spec"]["containers"][0]["livenessProbe"] = {"timeoutSeconds": 2}
    web = Namespace(name="prod", lists={"deployments": [dep], "replicasets": [
        _rs("web", 1, "web:1", desired=4), _rs("web", 2, "web:2")]})  # fmt: skip
    same = Namespace(name="prod", lists={"deployments": [dep], "replicasets": [
        _rs("web", 1, "web:2", desired=4), _rs("web", 2, "web:2")]})  # fmt: skip

    def plan(ns: Namespace, cause: dict[str, Any]) -> Any:
        found = plans_for(_report(cause), ns)
        return found[0]["plan"] if found else None

    # the newest revision changed the image: back to the previous revision's
    back = {"deployment": "web", "container": "app", "image": "web:1"}
    assert plan(web, _cause("crash_log_reason")) == {"tool": "set_image", "args": back}
    assert plan(same, _cause("crash_log_reason")) == {
        "tool": "rollout_restart", "args": {"deployment": "web"}}  # fmt: skip
    assert plan(same, _cause("probe_failure", text="Liveness probe failed")) == {
        "tool": "patch", "args": {"deployment": "web", "container": "app",
        "probe": {"kind": "livenessProbe", "set": {"timeoutSeconds": 4}}}}  # fmt: skip
    assert plan(same, _cause("scaled_to_zero")) == {
        "tool": "scale", "args": {"deployment": "web", "replicas": 4}}  # fmt: skip
    assert plan(same, _cause("node_not_ready")) == {
        "tool": "delete_pod", "args": {"pod": "web-1-abc"}}  # fmt: skip
    assert plan(same, _cause("missing_env")) is None  # a person defines the variable
    assert plans_for(_report(_cause("oomkilled", entity={"kind": "Job", "name": "x"})), same) == []
