"""A fix approved over HTTP against a real ``loopkernel serve`` and a real local Kubernetes
API server: the Investigations page's approval only journals the decision and answers at
once, while the write is still held at the API server; the server's background executor
carries it out once and the fix page follows it. From the inspector's own run page the
approver is the signed-in operator (``serve --operators``): the requester is refused, a
payload naming someone else changes nothing (nor for the printed token, which names
nobody), another operator's approval is carried out."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lk_kubeapi import KubeAPI, deployment
from lk_service import ALICE, BOB
from lk_web import Served, csrf_of, run_async, start_server, stop_server
from loopkernel.client import Client
from loopkernel.graph import EventKind
from loopkernel.web._auth import token_hash
from loopkernel_apps.sre._fixes import Fixes
from loopkernel_apps.sre._people import load_people

pytestmark = pytest.mark.slow

PLAN = {"tool": "scale", "args": {"deployment": "checkout", "replicas": 3}}
OP_ALICE = "alice-operator-token-0123456789"
OP_BOB = "bob-operator-token-0123456789ab"


@pytest.fixture
def served(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Served, KubeAPI]]:
    """alice and bob: users of the service (prod on cluster eu, which separates duties)
    and operators of the inspector under the same names."""
    with KubeAPI() as api:
        api.add(deployment("prod", "checkout", "shop/checkout:1.4.2"))
        users = {n: {"token": t, "namespaces": ["prod"], "clusters": ["eu"]}
                 for n, t in (("alice", ALICE), ("bob", BOB))}  # fmt: skip
        table = {"users": users, "clusters": {"eu": {"api": api.url}},
                 "namespaces": {"prod": {"separate_duties": True}}}  # fmt: skip
        (tmp_path / "service.json").write_text(json.dumps(table))
        monkeypatch.setenv("LOOPKERNEL_SRE_SERVICE", str(tmp_path / "service.json"))
        operators = tmp_path / "operators"
        operators.write_text(f"alice {token_hash(OP_ALICE)}\nbob {token_hash(OP_BOB)}\n")
        srv = start_server(str(db_path), tmp_path, "--operators", str(operators))
        try:
            yield srv, api
        finally:
            stop_server(srv)


def _propose(db: str, table: str) -> str:
    async def go() -> str:
        async with Client(db) as client:
            fixes = Fixes(client, load_people(table))
            return await fixes.propose(user="alice", namespace="prod", cluster="eu", plan=PLAN)

    return run_async(go())


def _until(db: str, run_id: str, done: Any, timeout: float = 30.0) -> Any:
    """Poll the run until ``done(info, events)``; the events."""

    async def go() -> Any:
        async with Client(db) as client:
            deadline = time.monotonic() + timeout
            while True:
                info, events = await client.info(run_id), await client.events(run_id)
                if done(info, events):
                    return events
                assert time.monotonic() < deadline, f"run {run_id} is {info.status.value}"
                await _sleep(0.2)

    return run_async(go())


async def _sleep(s: float) -> None:
    import asyncio

    await asyncio.sleep(s)


def _parks(events: list[Any]) -> list[str]:
    return [e.data["reason"] for e in events if e.kind is EventKind.APPROVAL_REQUIRED]


def test_the_pages_approval_answers_at_once_and_the_fix_runs_in_the_background(
    served: tuple[Served, KubeAPI], tmp_path: Path
) -> None:
    srv, api = served
    fix = _propose(srv.db, str(tmp_path / "service.json"))
    page = f"/investigations/fixes/{fix}"
    with srv.client() as http:
        csrf = csrf_of(http, page)
        own = http.post(f"{page}/approve", data={"csrf": csrf, "token": ALICE})
        assert own.status_code == 403 and "alice requested this fix" in own.text
        assert 'id="approve"' in http.get(page).text  # refused: still waiting for someone
        api.hold = threading.Event()  # the API server answers no write until released
        asked = http.post(f"{page}/approve", data={"csrf": csrf, "token": BOB})
        assert asked.status_code == 303 and asked.headers["location"] == page
        following = http.get(page).text
        assert api.writes == []  # answered while the write is still held (or not sent yet)
        assert 'id="following"' in following and 'id="approve"' not in following
        api.hold.set()
        _until(srv.db, fix, lambda info, _: info.status.value == "succeeded")
        shown = http.get(page).text
    assert api.writes == [("patch", "Deployment", "checkout")]  # once
    assert "The fix took (approved by bob)." in shown and 'id="following"' not in shown


def _operator(srv: Served, token: str) -> httpx.Client:
    http = srv.client()
    done = http.post("/login", data={"token": token, "csrf": csrf_of(http, "/login"), "next": "/"})
    assert done.status_code == 303, done.text
    return http


def _approve_and_resume(srv: Served, token: str, fix: str, payload: str = "") -> None:
    with contextlib.closing(_operator(srv, token)) as http:
        csrf = csrf_of(http, f"/runs/{fix}")
        form = {"decision": "approve", "csrf": csrf, "payload": payload}
        assert http.post(f"/runs/{fix}/tasks/apply/decide", data=form).status_code == 303
        assert http.post(f"/runs/{fix}/resume", data={"csrf": csrf}).status_code == 303


def test_the_inspectors_approval_names_the_signed_in_operator(
    served: tuple[Served, KubeAPI], tmp_path: Path
) -> None:
    srv, api = served
    fix = _propose(srv.db, str(tmp_path / "service.json"))
    # alice, the requester, approves from the run page, her payload naming bob: refused
    _approve_and_resume(srv, OP_ALICE, fix, payload='{"approved_by": "bob"}')
    events = _until(srv.db, fix, lambda info, ev: len(_parks(ev)) == 2)
    assert _parks(events)[1].startswith("refused: alice requested this fix")
    # the server's printed token ("operator") names no one person: the payload's approver
    # is dropped, and the approval refused
    _approve_and_resume(srv, srv.token, fix, payload='{"approved_by": "bob"}')
    events = _until(srv.db, fix, lambda info, ev: len(_parks(ev)) == 3)
    assert _parks(events)[2].startswith("refused: an approval that names no approver")
    assert api.writes == []
    _approve_and_resume(srv, OP_BOB, fix)
    events = _until(srv.db, fix, lambda info, _: info.status.value == "succeeded")
    assert api.writes == [("patch", "Deployment", "checkout")]
    answers = [(e.data["by"].get("name"), e.data["payload"]) for e in events
               if e.kind is EventKind.HUMAN_INPUT]  # fmt: skip
    assert answers == [("alice", {"approved_by": "alice"}), ("operator", {}),
                       ("bob", {"approved_by": "bob"})]  # fmt: skip
