"""People, not "operator": named operator tokens (``serve --operators FILE``), every
decision and cancel journaled with the name of who made it and shown on the pages,
sessions listed and revoked (one, or all) without a restart, and the operator's path
refusing every payload the CLI refuses."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_web import OPERATOR_TOKEN, Served, csrf_of, make_run, run_async, start_server, stop_server
from loopkernel.client import Client
from loopkernel.graph import EventKind
from loopkernel.web._auth import read_operators, token_hash

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"


@pytest.fixture
def named(db_path: Path, tmp_path: Path) -> Iterator[Served]:
    """A server with two named operators beside the printed token."""
    path = tmp_path / "operators"
    path.write_text(f"# who may act\nalice {token_hash(ALICE)}\nbob sha256:{token_hash(BOB)}\n")
    served = start_server(str(db_path), tmp_path, "--operators", str(path))
    try:
        yield served
    finally:
        stop_server(served)


def _signed_in(served: Served, token: str) -> httpx.Client:
    http = served.client()
    csrf = csrf_of(http, "/login")
    done = http.post("/login", data={"token": token, "csrf": csrf, "next": "/"})
    assert done.status_code == 303, done.text
    return http


def _sign_in(served: Served, token: str) -> contextlib.closing[httpx.Client]:
    return contextlib.closing(_signed_in(served, token))


def _events(db: str, run_id: str, kind: EventKind) -> list[Any]:
    async def go() -> list[Any]:
        async with Client(db) as client:
            return [e.data for e in await client.events(run_id) if e.kind is kind]

    return run_async(go())


def test_each_decision_and_cancel_names_the_operator_who_made_it(named: Served) -> None:
    gated, _ = make_run(named.db, "lk_testapps:gate")
    other, _ = make_run(named.db, "lk_testapps:gate")
    with _sign_in(named, ALICE) as alice:
        page = alice.get(f"/runs/{gated}").text
        assert '<span class="who" id="who">alice</span>' in page
        csrf = csrf_of(alice, f"/runs/{gated}")
        done = alice.post(
            f"/runs/{gated}/tasks/gate/decide", data={"decision": "approve", "csrf": csrf}
        )
        assert done.status_code == 303, done.text
    with named.client() as script:  # bob, as a script
        done = script.post(
            f"/runs/{other}/cancel",
            data={"reason": "wrong input"},
            headers={"Authorization": f"Bearer {BOB}"},
        )
        assert done.status_code == 303, done.text
    (answer,) = _events(named.db, gated, EventKind.HUMAN_INPUT)
    assert answer["by"] == {
        "actor": "operator",
        "via": "web inspector",
        "name": "alice",
        "address": "127.0.0.1",
    }
    (cancel,) = _events(named.db, other, EventKind.CANCEL_REQUESTED)
    assert cancel["reason"] == "wrong input"
    assert cancel["by"]["actor"] == "operator" and cancel["by"]["name"] == "bob"
    # Shown where an operator looks: the task's decisions, the journal row.
    with named.client() as http:
        task = http.get(f"/runs/{gated}/tasks/gate").text
        assert "operator alice (web inspector, 127.0.0.1)" in task
        run = http.get(f"/runs/{other}").text
        assert "bob" in run.split('id="journal"', 1)[1]
    # The server's own token still works, as "operator"; a token nobody holds does not.
    with _sign_in(named, OPERATOR_TOKEN) as http:
        assert '<span class="who" id="who">operator</span>' in http.get("/").text
    with named.client() as http:
        csrf = csrf_of(http, "/login")
        wrong = http.post("/login", data={"token": "x" * 28, "csrf": csrf, "next": "/"})
        assert wrong.status_code == 403


def test_revoking_every_session_signs_everyone_out_without_a_restart(named: Served) -> None:
    run_id, _ = make_run(named.db, "lk_testapps:gate")
    alice, bob, bob2 = (_signed_in(named, t) for t in (ALICE, BOB, BOB))
    try:
        listed = alice.get("/sessions")
        assert listed.status_code == 200
        assert listed.text.count("<tr data-session=") == 3
        # One: bob's first browser only.
        handle = listed.text.split("<td>bob</td>", 1)[1].split('class="mono">', 1)[1][:16]
        csrf = csrf_of(alice, "/sessions")
        assert alice.post("/sessions/revoke", data={"session": handle, "csrf": csrf}).is_redirect
        states = [c.get("/sessions").status_code for c in (alice, bob, bob2)]
        assert sorted(states) == [200, 200, 403]
        # All of them, at once: the next request of each is signed out.
        csrf = csrf_of(alice, "/sessions")
        done = alice.post("/sessions/revoke", data={"session": "all", "csrf": csrf})
        assert done.status_code == 303 and done.headers["location"] == "/"
        for http in (alice, bob, bob2):
            assert http.get("/sessions").status_code == 403
            assert 'id="who"' not in http.get(f"/runs/{run_id}").text
            csrf = csrf_of(http, f"/runs/{run_id}")
            refused = http.post(
                f"/runs/{run_id}/tasks/gate/decide", data={"decision": "approve", "csrf": csrf}
            )
            assert refused.status_code == 403
        assert named.proc.poll() is None  # the same server: no restart
        assert _events(named.db, run_id, EventKind.HUMAN_INPUT) == []
        again = _signed_in(named, BOB)  # and signing in again works
        assert again.get("/sessions").status_code == 200
        again.close()
    finally:
        for http in (alice, bob, bob2):
            http.close()


def test_revoking_needs_an_operator_and_the_form_token(named: Served) -> None:
    with _sign_in(named, ALICE) as alice, named.client() as stranger:
        csrf = csrf_of(stranger, "/login")
        refused = stranger.post("/sessions/revoke", data={"session": "all", "csrf": csrf})
        assert refused.status_code == 403
        stale = alice.post("/sessions/revoke", data={"session": "all", "csrf": "forged"})
        assert stale.status_code == 403
        assert alice.get("/sessions").status_code == 200  # still signed in


@pytest.mark.parametrize(
    "payload",
    ['"just a string"', "[1, 2]", '{"a": NaN}', '{"a": "' + "x" * 100_000 + '"}', "{"],
    ids=["bare-string", "array", "nan", "100kb", "not-json"],
)
def test_the_operator_path_refuses_what_the_cli_refuses(named: Served, payload: str) -> None:
    run_id, _ = make_run(named.db, "lk_testapps:gate")
    cli = subprocess.run(
        [*LOOPKERNEL, "--db", named.db, "approve", run_id, "gate", "--payload", payload],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert cli.returncode == 2, cli.stderr
    with _sign_in(named, ALICE) as alice:
        csrf = csrf_of(alice, f"/runs/{run_id}")
        web = alice.post(
            f"/runs/{run_id}/tasks/gate/decide",
            data={"decision": "approve", "csrf": csrf, "payload": payload},
        )
        assert web.status_code == 400, web.text[:300]
    with named.client() as script:
        api = script.post(
            f"/runs/{run_id}/tasks/gate/decide",
            data={"decision": "approve", "payload": payload},
            headers={"Authorization": f"Bearer {BOB}"},
        )
        assert api.status_code == 400
    assert _events(named.db, run_id, EventKind.HUMAN_INPUT) == []


def test_an_operators_file_is_read_strictly() -> None:
    good = read_operators(f"alice {token_hash(ALICE)}  # ops\n\nbob sha256:{token_hash(BOB)}\n")
    assert good == {"alice": token_hash(ALICE), "bob": token_hash(BOB)}
    for bad in (
        "alice",
        f"alice {token_hash(ALICE)[:-1]}",
        f"al ice {token_hash(ALICE)}",
        f"alice {token_hash(ALICE)}\nalice {token_hash(BOB)}",
        f"alice {token_hash(ALICE)}\nbob {token_hash(ALICE)}",
        f"operator {token_hash(ALICE)}",
    ):
        with pytest.raises(ValueError, match="line"):
            read_operators(bad)


def test_serve_refuses_an_operators_file_it_cannot_read(db_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "operators"
    path.write_text("alice not-a-hash\n")
    make_run(str(db_path), "lk_testapps:gate")
    done = subprocess.run(
        [*LOOPKERNEL, "--db", str(db_path), "serve", "--port", "0", "--operators", str(path)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert done.returncode == 2
    assert "line 1: expected NAME SHA256-OF-TOKEN" in done.stderr


def test_each_resume_and_fork_from_the_page_names_the_operator(named: Served) -> None:
    """A resume and a fork from the inspector are journaled (``run_resumed``) with who
    made them, unplanned (no planner sees them), and shown in the journal."""
    gated, _ = make_run(named.db, "lk_testapps:gate")  # waiting: a resume runs it on, to wait
    with _sign_in(named, ALICE) as alice:
        csrf = csrf_of(alice, f"/runs/{gated}")
        done = alice.post(f"/runs/{gated}/resume", data={"csrf": csrf})
        assert done.status_code == 303, done.text
    with named.client() as script:  # bob, as a script: a fork at event 2
        done = script.post(
            f"/runs/{gated}/fork", data={"at": "2"}, headers={"Authorization": f"Bearer {BOB}"}
        )
        assert done.status_code == 303, done.text
        forked = done.headers["location"].split("?")[0].removeprefix("/runs/")
    (resumed,) = _events(named.db, gated, EventKind.RUN_RESUMED)
    assert resumed["action"] == "resume"
    assert resumed["by"] == {
        "actor": "operator",
        "via": "web inspector",
        "name": "alice",
        "address": "127.0.0.1",
    }
    (made,) = _events(named.db, forked, EventKind.RUN_RESUMED)
    assert (made["action"], made["source"], made["at"]) == ("fork", gated, 2)
    assert made["by"]["name"] == "bob" and made["by"]["via"] == "web API, Bearer"

    async def unplanned() -> list[int]:
        async with Client(named.db) as client:
            held = False
            for _ in range(200):  # until the background execution took the run and let go
                owner = (await client.info(gated)).owner
                if held and owner is None:
                    break
                held = held or owner is not None
                await asyncio.sleep(0.02)
            events = await client.events(gated)
            seq = next(e.seq for e in events if e.kind is EventKind.RUN_RESUMED)
            return [p.event_seq for p in await client.patches(gated) if p.event_seq == seq]

    assert run_async(unplanned()) == []  # for the record: no planner saw it
    with named.client() as http:
        journal = http.get(f"/runs/{gated}").text.split('id="journal"', 1)[1]
        assert "resumed by operator alice (web inspector, 127.0.0.1)" in journal
        journal = http.get(f"/runs/{forked}").text.split('id="journal"', 1)[1]
        assert f"forked from {gated} at #2 by operator bob (web API, Bearer" in journal
