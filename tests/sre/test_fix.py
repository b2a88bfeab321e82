"""The write tools' server (``loopkernel_apps.sre.fix``) over real stdio MCP, against a real
local HTTP server speaking the Kubernetes API to the official client: verbs and paths,
resourceVersion conflicts, 403/404/422, and a call re-sent with its key applied once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lk_kubeapi import KubeAPI, deployment, pod
from loopkernel import ToolError
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
    assert {t.effect for t in reads} == {"read_only"}
    assert not set(writes.names()) & set(reads.names())


def test_each_write_is_applied_once_per_key_and_re_read() -> None:
    with _cluster() as api:
        got = _calls(
            api,
            [
                ("set_image", {"deployment": "checkout", "container": "app",
                               "image": "shop/checkout:1.4.1"}, "run/fix/0"),
                # The same key again: an answer lost to a kill, the call re-sent.
                ("set_image", {"deployment": "checkout", "container": "app",
                               "image": "shop/checkout:1.4.1"}, "run/fix/0"),
                ("scale", {"deployment": "checkout", "replicas": 3}, "run/fix/1"),
                ("rollout_restart", {"deployment": "checkout"}, "run/fix/2"),
                ("delete_pod", {"pod": "checkout-7d9-abcde"}, "run/fix/3"),
                ("delete_pod", {"pod": "checkout-7d9-abcde"}, "run/fix/3"),
            ],
        )  # fmt: skip
        assert [g["applied"] for g in got] == [True, False, True, True, True, False]
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
        assert got[2]["data"]["replicas"] == 3
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
