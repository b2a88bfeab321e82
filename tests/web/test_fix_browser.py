"""In Chromium: a report's remediation becomes a parked write-call plan; its requester
proposes it; in a namespace that separates duties the requester's own approval is refused
with one line (and journaled), another user's is answered at once while the API server still
holds the write, carried out once by the server's background executor, and the page
follows it live to the re-check."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lk_kubeapi import KubeAPI, deployment
from lk_service import ALICE, BOB
from lk_sre import incident
from lk_web import SHOTS, Served, run_async, screenshot, start_server, stop_server
from loopkernel.client import Client
from loopkernel_apps.sre._dump import load_dump

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _cluster() -> KubeAPI:
    """The API server holding the example's deployment as its dump shows it."""
    case = incident("oom-payments")
    ns = load_dump(case["dump"]).namespace(case["namespace"])
    (dep,) = [d for d in ns.items("deployments") if d["metadata"]["name"] == "payments"]
    api = KubeAPI(allowed=(case["namespace"],))
    obj = deployment(case["namespace"], "payments", "x")
    obj["spec"]["template"]["spec"]["containers"] = dep["spec"]["template"]["spec"]["containers"]
    api.add(obj)
    return api


@pytest.fixture
def served(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Served, KubeAPI]]:
    case = incident("oom-payments")
    with _cluster() as api:
        table = {
            "users": {
                name: {"token": token, "namespaces": [case["namespace"]], "clusters": ["eu"]}
                for name, token in (("alice", ALICE), ("bob", BOB))
            },
            "dumps": {"payments": case["dump"]},
            "clusters": {"eu": {"api": api.url}},
            "namespaces": {case["namespace"]: {"separate_duties": True}},
        }
        (tmp_path / "service.json").write_text(json.dumps(table))
        monkeypatch.setenv("LOOPKERNEL_SRE_SERVICE", str(tmp_path / "service.json"))
        served = start_server(str(db_path), tmp_path)
        try:
            yield served, api
        finally:
            stop_server(served)


def _shot(locator: Any, tmp_path: Path, name: str) -> None:
    """One part of the page (small, for docs/sre.md), like ``screenshot``."""
    for where in [tmp_path, *([Path(SHOTS)] if SHOTS else [])]:
        locator.screenshot(path=str(Path(where) / f"{name}.png"))


def _execute(db: str, run_id: str) -> str:
    async def go() -> str:
        async with Client(db) as client:
            return (await client.execute(run_id)).status.value

    return run_async(go())


def _events(db: str, run_id: str) -> list[Any]:
    async def go() -> list[Any]:
        async with Client(db) as client:
            return await client.events(run_id)

    return run_async(go())


def test_propose_refuse_the_requester_approve_and_re_check(
    served: tuple[Served, KubeAPI], page: Any, tmp_path: Path
) -> None:
    srv, api = served
    page.goto(f"{srv.url}/investigations")
    page.fill("input[name=token]", ALICE)
    page.fill("input[name=question]", "why is the payments deployment restarting?")
    page.fill("input[name=namespace]", "prod")
    page.click("button:has-text('Investigate')")
    page.wait_for_selector("#thread")
    asked = page.url.rsplit("/", 1)[1]
    assert _execute(srv.db, asked) == "succeeded"
    page.reload()
    page.wait_for_selector("#plans")
    plan = page.inner_text("#plans li.plan")
    assert '"limits":{"memory":"512Mi"}' in plan.replace(" ", "")  # 256Mi doubled
    _shot(page.locator("#plans"), tmp_path, "fix-plan")
    page.click("#plans button:has-text('Propose this fix')")
    page.wait_for_selector("#fix")
    fix = page.url.rsplit("/", 1)[1]
    assert page.inner_text("#requested-by") == "alice"
    assert "someone other than alice must approve" in page.inner_text("#duties")
    assert api.writes == []  # parked: nothing sent before an approval
    screenshot(page, tmp_path, "fix-proposed")
    page.click("#approve button")  # alice approves her own fix
    alert = page.locator("p.error[role=alert]")
    assert alert.inner_text() == (
        "refused: alice requested this fix and may not approve it "
        "(namespace prod separates duties: someone other than alice must approve)"
    )
    assert api.writes == []
    screenshot(page, tmp_path, "fix-refused")
    page.context.clear_cookies()  # bob, signed in by his own token
    page.goto(f"{srv.url}/investigations/fixes/{fix}")
    page.fill("#approve input[name=token]", BOB)
    api.hold = threading.Event()  # the API server holds the write: the page answers first
    page.click("#approve button")
    page.wait_for_selector("#following")
    assert api.writes == [] and "executor writes once" in page.inner_text("#following")
    _shot(page.locator("#following"), tmp_path, "fix-carrying-out")
    api.hold.set()
    page.wait_for_selector("#recheck")  # followed live, reloaded at the run's end
    assert page.inner_text("#took") == "The fix took (approved by bob)."
    assert api.writes == [("patch", "Deployment", "payments")]
    container = api.get("Deployment", "prod", "payments")["spec"]["template"]["spec"]  # type: ignore[index]
    assert container["containers"][0]["resources"]["limits"]["memory"] == "512Mi"
    journal = page.inner_text("#decisions")
    assert "approve by local alice" in journal and "refused: alice requested" in journal
    assert "approve by local bob" in journal
    screenshot(page, tmp_path, "fix-rechecked")
    answers = [e.data["by"]["name"] for e in _events(srv.db, fix) if e.kind == "human_input"]
    assert answers == ["alice", "bob"]  # who answered, each attempt journaled
