"""The write tools' server (``loopkernel_apps.sre.fix``) over real stdio MCP, against a real
local HTTP server speaking the Kubernetes API to the official client: verbs and paths,
resourceVersion conflicts, 403/404/422, and a call re-sent with its key applied once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lk_kubeapi import KubeAPI, deployment, pod
from loopkernel import ToolError
from loopkernel.testing import run_cli
from loopkernel.tools import SourceSession, ToolSource, load_tool_defs
from loopkernel_apps.sre import fix
from loopkernel_apps.sre.tools import DEFS as READ_DEFS

pytestmark = pytest.mark.slow


def _source(api: KubeAPI, namespace: str = "prod") -> ToolSource:
    defs = load_tool_defs(fix.DEFS)
    return ToolSource.python_module(
        "sre-fix",
        "loopkernel_apps.sre.fix",
        "--api",
        api.url,
        "--namespace",
        namespace,
        defs=defs,
        timeouts={n: 60.0 for n in defs.names()},
    )


def _calls(
    api: KubeAPI, calls: list[tuple[str, dict[str, Any], str]], ns: str = "prod"
) -> list[Any]:
    async def go() -> list[Any]:
        out: list[Any] = []
        async with SourceSession(_source(api, ns)) as session:
            for name, args, key in calls:
                try:
                    out.append(await session.call(name, args, key=key, time_limit=60))
                except ToolError as exc:
                    out.append(exc)
        return out

    return asyncio.run(go())


def _cluster() -> KubeAPI:
    api = KubeAPI()
    api.add(deployment("prod", "checkout", "shop/checkout:1.4.2"))
    api.add(pod("prod", "checkout-7d9-abcde"))
    return api


def test_the_write_tools_are_irreversible_and_not_in_the_read_server() -> None:
    writes, reads = load_tool_defs(fix.DEFS), load_tool_defs(READ_DEFS)
    assert {t.effect for t in writes} == {"irreversible"}
    assert all(t.dedupes_by_key for t in writes)  # a kill in flight: re-sent, answered once
    assert {t.effect for t in reads} == {"read_only"}
    assert not set(writes.names()) & set(reads.names())


def test_each_write_is_applied_once_per_key_and_re_read() -> None:
    with _cluster() as api:
        got = _calls(
            api,
            [
                ("set_image", {"deployment": "checkout", "container": "app",
                               "image": "shop/checkout:1.4.1"}, "run/fix/0"),
                # The same key again: an answer lost to a kill, the call re-sent (and once
                # more as an operator's re-send, KEY/resend/N: the same call).
                ("set_image", {"deployment": "checkout", "container": "app",
                               "image": "shop/checkout:1.4.1"}, "run/fix/0"),
                ("set_image", {"deployment": "checkout", "container": "app",
                               "image": "shop/checkout:1.4.1"}, "run/fix/0/resend/1"),
                ("scale", {"deployment": "checkout", "replicas": 3}, "run/fix/1"),
                ("rollout_restart", {"deployment": "checkout"}, "run/fix/2"),
                ("delete_pod", {"pod": "checkout-7d9-abcde"}, "run/fix/3"),
                ("delete_pod", {"pod": "checkout-7d9-abcde"}, "run/fix/3"),
            ],
        )  # fmt: skip
        assert [g["applied"] for g in got] == [True, False, False, True, True, True, False]
        assert api.writes == [
            ("patch", "Deployment", "checkout"),
            ("patch", "Deployment", "checkout"),
            ("patch", "Deployment", "checkout"),
            ("delete", "Pod", "checkout-7d9-abcde"),
        ]
        first = got[0]["data"]
        assert first["images"] == ["shop/checkout:1.4.1"] and first["generation"] == 2
        assert first["observedGeneration"] == 2  # the re-read says the fix took
        assert got[1]["data"]["resourceVersion"] == first["resourceVersion"]
        assert got[3]["data"]["replicas"] == 3
        dep = api.get("Deployment", "prod", "checkout")
        assert dep is not None
        assert dep["metadata"]["annotations"][fix.FIX_KEY] == "run/fix/2"
        assert (
            "kubectl.kubernetes.io/restartedAt"
            in dep["spec"]["template"]["metadata"]["annotations"]
        )
        assert api.get("Pod", "prod", "checkout-7d9-abcde") is None


def test_a_conflict_is_read_again_and_applied_once() -> None:
    with _cluster() as api:
        api.conflict_next = 2  # two other writers got there first
        (got,) = _calls(api, [("scale", {"deployment": "checkout", "replicas": 4}, "k")])
        assert got["applied"] is True and got["data"]["replicas"] == 4
        assert api.writes == [("patch", "Deployment", "checkout")]
        api.conflict_next = fix.CONFLICT_RETRIES + 1
        (stuck,) = _calls(api, [("scale", {"deployment": "checkout", "replicas": 5}, "k2")])
        assert isinstance(stuck, ToolError) and "still conflicting" in str(stuck)
        assert len(api.writes) == 1


def test_forbidden_missing_and_invalid_are_tool_errors_naming_the_status() -> None:
    with _cluster() as api:
        api.add(deployment("other", "ledger", "x:1"))
        (forbidden,) = _calls(api, [("rollout_restart", {"deployment": "ledger"}, "a")], "other")
        missing, invalid, bad_container = _calls(
            api,
            [
                ("rollout_restart", {"deployment": "nope"}, "b"),
                ("scale", {"deployment": "checkout", "replicas": 900}, "c"),
                ("set_image", {"deployment": "checkout", "container": "web", "image": "x"}, "d"),
            ],
        )
        assert isinstance(forbidden, ToolError) and "403" in str(forbidden)
        assert isinstance(missing, ToolError) and "404" in str(missing)
        assert isinstance(invalid, ToolError) and "422" in str(invalid)
        assert isinstance(bad_container, ToolError) and "no container 'web'" in str(bad_container)
        assert api.writes == []


def test_patch_changes_only_the_limits_or_the_probe_it_names() -> None:
    with _cluster() as api:
        dep = api.get("Deployment", "prod", "checkout")
        assert dep is not None
        app = dep["spec"]["template"]["spec"]["containers"][0]
        app["resources"] = {"limits": {"memory": "256Mi", "cpu": "1"}}
        app["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "timeoutSeconds": 1}
        api.conflict_next = 1  # another writer in between: read again, applied once
        limit = {"deployment": "checkout", "container": "app", "limits": {"memory": "512Mi"}}
        probe = {"deployment": "checkout", "container": "app",
                 "probe": {"kind": "livenessProbe", "set": {"timeoutSeconds": 5}}}  # fmt: skip
        got = _calls(
            api,
            [
                ("patch", limit, "p/0"),
                ("patch", limit, "p/0"),  # re-sent with its key: nothing written
                ("patch", probe, "p/1"),
                ("patch", {**limit, "limits": {"memory": "lots"}}, "p/2"),  # 422
                ("patch", {**probe, "probe": {"kind": "startupProbe",
                                              "set": {"timeoutSeconds": 5}}}, "p/3"),
                ("patch", {"deployment": "checkout", "container": "app"}, "p/4"),  # nothing named
            ],
        )  # fmt: skip
        assert [g["applied"] for g in got[:3]] == [True, False, True], got
        assert isinstance(got[3], ToolError) and "422" in str(got[3])
        assert isinstance(got[4], ToolError) and "no startupProbe" in str(got[4])
        assert isinstance(got[5], ToolError)  # refused by the input schema
        assert api.writes == [("patch", "Deployment", "checkout")] * 2
        shown = got[2]["data"]["containers"]["app"]
        assert shown["resources"]["limits"] == {"memory": "512Mi", "cpu": "1"}
        assert shown["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": 8080}, "timeoutSeconds": 5}


# -- the fix as a run: parked, approved, sent once however it is killed -------------------------

FIX_APP = "loopkernel_apps.sre.fix._app:app"
PLAN = {
    "tool": "set_image",
    "args": {"deployment": "checkout", "container": "app", "image": "shop/checkout:1.4.1"},
}


def _start(db: Path, api: KubeAPI, run_id: str, **extra: str) -> Any:
    sets = {"plan": json.dumps(PLAN), "namespace": "prod", "api": api.url, **extra}
    args = ["run", FIX_APP, "--run-id", run_id]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    return run_cli(args, db=db)


def _until_done(db: Path, run_id: str, crash_at: str | None) -> str:
    """Approve and resume (killed once at ``crash_at``) until the run ends; its status."""
    assert run_cli(["approve", run_id, "apply"], db=db).returncode == 0
    first = run_cli(["resume", run_id], db=db, crash_at=crash_at)
    assert crash_at is None or first.returncode == -9, (crash_at, first.stderr[-400:])
    for _ in range(3):
        out = run_cli(["resume", run_id], db=db)
        if "waiting" not in out.stdout + out.stderr:
            return out.stdout + out.stderr
        # A write sent whose answer was lost parks again (never re-sent by itself): the
        # operator re-approves; the fix server answers it from the key on the object.
        assert run_cli(["approve", run_id, "apply"], db=db).returncode == 0
    raise AssertionError("still waiting")


@pytest.mark.parametrize(
    "crash_at",
    [None, "tool_sent", "tool_returned", "task_returned", "event_committed", "patch_committed"],
)
def test_an_approved_fix_is_applied_exactly_once_however_it_is_killed(
    tmp_path: Path, crash_at: str | None
) -> None:
    db = tmp_path / "runs.db"
    with _cluster() as api:
        parked = _start(db, api, "fix-1")
        assert "set_image is irreversible" in parked.stdout + parked.stderr
        assert api.writes == []  # parked: nothing sent before the approval
        _until_done(db, "fix-1", crash_at)
        assert api.writes == [("patch", "Deployment", "checkout")], crash_at
        dep = api.get("Deployment", "prod", "checkout")
        assert dep is not None
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == PLAN["args"]["image"]
        shown = run_cli(["inspect", "fix-1", "--json"], db=db)
        assert '"took": true' in shown.stdout.replace(": True", ": true"), shown.stdout[-600:]
