"""The write tools' server (``loopkernel_apps.sre.fix``) over real stdio MCP, against a real
local HTTP server speaking the Kubernetes API to the official client: verbs and paths,
resourceVersion conflicts, 403/404/422, and a call re-sent with its key applied once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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


Step = tuple[str, dict[str, Any], str] | Callable[[], object]
"""A call (tool, arguments, key), or something done to the API server between two calls."""


def _calls(api: KubeAPI, calls: list[Step], ns: str = "prod") -> list[Any]:
    """The calls in one session of the fix server (one spawn: the client's import is slow)."""

    async def go() -> list[Any]:
        out: list[Any] = []
        async with SourceSession(_source(api, ns)) as session:
            for step in calls:
                if callable(step):
                    step()
                    continue
                name, args, key = step
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
        # the same key again is answered as the first time (a resumed run's journal ends
        # the same), without a write; a pod already gone too (it holds no key)
        assert [g["applied"] for g in got] == [True, True, True, True, True, True, True]
        assert got[1] == got[2] == got[0] and got[6] == got[5]
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


def test_conflicts_forbidden_missing_and_invalid() -> None:
    with _cluster() as api:

        def conflicts(n: int) -> Callable[[], None]:
            return lambda: setattr(api, "conflict_next", n)  # other writers got there first

        def forbid() -> None:
            api.allowed = ()

        got = _calls(
            api,
            [
                conflicts(2),
                ("scale", {"deployment": "checkout", "replicas": 4}, "k"),
                conflicts(fix.CONFLICT_RETRIES + 1),
                ("scale", {"deployment": "checkout", "replicas": 5}, "k2"),
                conflicts(0),
                ("rollout_restart", {"deployment": "nope"}, "b"),
                ("scale", {"deployment": "checkout", "replicas": 900}, "c"),
                ("set_image", {"deployment": "checkout", "container": "web", "image": "x"}, "d"),
                forbid,
                ("rollout_restart", {"deployment": "checkout"}, "a"),
            ],
        )
        applied, stuck, missing, invalid, bad_container, forbidden = got
        assert applied["applied"] is True and applied["data"]["replicas"] == 4
        assert isinstance(stuck, ToolError) and "still conflicting" in str(stuck)
        assert isinstance(forbidden, ToolError) and "403" in str(forbidden)
        assert isinstance(missing, ToolError) and "404" in str(missing)
        assert isinstance(invalid, ToolError) and "422" in str(invalid)
        assert isinstance(bad_container, ToolError) and "no container 'web'" in str(bad_container)
        assert api.writes == [("patch", "Deployment", "checkout")]  # the first, once


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
        assert [g["applied"] for g in got[:3]] == [True, True, True], got
        assert isinstance(got[3], ToolError) and "422" in str(got[3])
        assert isinstance(got[4], ToolError) and "no startupProbe" in str(got[4])
        assert isinstance(got[5], ToolError)  # refused by the input schema
        assert api.writes == [("patch", "Deployment", "checkout")] * 2
        shown = got[2]["data"]["containers"]["app"]
        assert shown["resources"]["limits"] == {"memory": "512Mi", "cpu": "1"}
        assert shown["livenessProbe"]["timeoutSeconds"] == 5
        assert shown["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8080}


# -- the fix as a run: parked, approved, sent once however it is killed -------------------------

FIX_APP = "loopkernel_apps.sre.fix._app:app"
PLAN = {
    "tool": "set_image",
    "args": {"deployment": "checkout", "container": "app", "image": "shop/checkout:1.4.1"},
}
SAMPLE = ["tool_returned", "event_committed"]
"""Killed after the request was answered and before its answer was journaled (re-sent on
resume, same key), and after the answer was journaled and before the re-check; every
boundary: ``python -m bench.sre_fix``."""


def _start(db: Path, api: KubeAPI, run_id: str, plan: dict[str, Any]) -> str:
    """Start the fix in this process, to its park: the output of its one execution."""
    from loopkernel.client import Client

    async def go() -> str:
        async with Client(str(db)) as client:
            params = {"plan": plan, "namespace": "prod", "api": api.url}
            await client.start(FIX_APP, overrides=params, run_id=run_id)
            done = await client.execute(run_id)
            events = await client.events(run_id)
            return f"{done.status.value} " + " ".join(str(e.data) for e in events)

    return asyncio.run(go())


def _digest(db: Path, run_id: str) -> tuple[str, Any]:
    from loopkernel.client import Client

    async def go() -> tuple[str, Any]:
        async with Client(str(db)) as client:
            shown = await client.inspect(run_id)
            checked = next(t for t in shown.tasks if t["task_id"] == "recheck")
            return shown.digest, checked["result"]

    return asyncio.run(go())


def fix_once(
    db: Path, api: KubeAPI, crash_at: str | None, plan: dict[str, Any] = PLAN
) -> tuple[str, Any, bool]:
    """Park, approve, resume in a new process (killed at ``crash_at``), resume again in
    another: the run's digest, its re-check, whether the kill fired."""
    parked = _start(db, api, "fix-1", plan)
    assert parked.startswith("waiting") and f"{plan['tool']} is irreversible" in parked
    assert api.writes == []  # parked: nothing sent before the approval
    assert run_cli(["approve", "fix-1", "apply"], db=db).returncode == 0
    first = run_cli(["resume", "fix-1"], db=db, crash_at=crash_at)
    killed = first.returncode == -9
    if crash_at is not None:
        out = run_cli(["resume", "fix-1"], db=db)
        assert "waiting" not in out.stdout + out.stderr, out.stdout[-400:]  # never asks again
    digest, checked = _digest(db, "fix-1")
    return digest, checked, killed


@pytest.fixture(scope="module")
def fix_api() -> Any:
    with KubeAPI() as api:  # one URL for every run: the same parameters, the same digest
        yield api


@pytest.fixture(scope="module")
def uninterrupted(fix_api: KubeAPI, tmp_path_factory: pytest.TempPathFactory) -> str:
    fix_api.reset(deployment("prod", "checkout", "shop/checkout:1.4.2"))
    digest, checked, _ = fix_once(tmp_path_factory.mktemp("base") / "runs.db", fix_api, None)
    assert checked["took"] is True and checked["object"]["images"] == [PLAN["args"]["image"]]
    assert fix_api.writes == [("patch", "Deployment", "checkout")]
    return digest


@pytest.mark.parametrize("crash_at", SAMPLE)
def test_an_approved_fix_killed_and_resumed_ends_as_the_uninterrupted_one(
    tmp_path: Path, fix_api: KubeAPI, uninterrupted: str, crash_at: str
) -> None:
    fix_api.reset(deployment("prod", "checkout", "shop/checkout:1.4.2"))
    digest, checked, killed = fix_once(tmp_path / "runs.db", fix_api, crash_at)
    assert killed, crash_at
    assert fix_api.writes == [("patch", "Deployment", "checkout")], crash_at  # exactly once
    dep = fix_api.get("Deployment", "prod", "checkout")
    assert dep is not None
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == PLAN["args"]["image"]
    assert checked["took"] is True
    assert digest == uninterrupted, crash_at


DELETE = {"tool": "delete_pod", "args": {"pod": "checkout-7d9-abcde"}}


def test_a_pod_deleted_then_killed_before_its_answer_ends_as_the_uninterrupted_one(
    tmp_path: Path, fix_api: KubeAPI
) -> None:
    """The pod holds no key once deleted: the re-send finds it gone and is answered as the
    first send was, so the digest is the uninterrupted one's (every boundary: bench)."""
    digests = []
    for crash_at in (None, "tool_returned"):
        fix_api.reset(pod("prod", "checkout-7d9-abcde"))
        digest, checked, killed = fix_once(tmp_path / f"{crash_at}.db", fix_api, crash_at, DELETE)
        assert killed is (crash_at is not None)
        assert fix_api.writes == [("delete", "Pod", "checkout-7d9-abcde")], crash_at  # once
        assert checked["took"] is True
        digests.append(digest)
    assert digests[1] == digests[0]
