"""The inspector's guards over HTTP, against a real ``loopkernel serve`` subprocess: host
names (DNS rebinding), bad ids, ``Last-Event-ID`` bounds, sessions, signed notices,
caching, Bearer scripts, and an operator approving a ``--require-token`` run."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx

from lk_web import (
    OPERATOR_TOKEN,
    Served,
    append_event,
    csrf_of,
    make_run,
    run_async,
    start_server,
    status_of,
    stop_server,
)
from loopkernel.client import Client
from loopkernel.graph import RunStatus
from loopkernel.web._auth import Auth


def test_a_foreign_host_name_is_refused(db_path: Path, tmp_path: Path) -> None:
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 sends
    ``Host: evil.example``; the server answers only its own names."""
    run_id, _ = make_run(db_path, "speculation", "fast")
    served = start_server(str(db_path), tmp_path, "--allow-host", "inspector.internal")
    port = served.url.rsplit(":", 1)[1]
    try:
        with served.client() as http:
            for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
                refused = http.get(f"/runs/{run_id}", headers={"Host": host})
                assert refused.status_code == 421, host
                assert run_id not in refused.text
            assert http.get("/", headers={"Host": "evil.example"}).status_code == 421
            stream = http.get(f"/runs/{run_id}/events", headers={"Host": "evil.example"})
            assert stream.status_code == 421
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", "[::1]:80"):
                assert http.get(f"/runs/{run_id}", headers={"Host": host}).status_code == 200
            named = http.get(f"/runs/{run_id}", headers={"Host": f"inspector.internal:{port}"})
            assert named.status_code == 200 and run_id in named.text
    finally:
        stop_server(served)


def test_bad_ids_are_400_or_404_and_never_show_the_database(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")
    with server.client() as http:
        for path in ("/runs/a%20b", "/runs/" + "x" * 129, "/runs/-x", "/runs/a%20b/events"):
            bad = http.get(path)
            assert bad.status_code == 400, (path, bad.status_code)
            assert "Traceback" not in bad.text
        for path in ("/runs/no-such-run", "/runs/no-such-run/events", "/runs/nope/tasks/t"):
            missing = http.get(path)
            assert missing.status_code == 404, path
            assert server.db not in missing.text and Path(server.db).name not in missing.text
        assert http.get(f"/runs/{run_id}/tasks/nope").status_code == 404
        assert http.get(f"/runs/{run_id}/events/x").status_code == 400
        assert http.get(f"/runs/{run_id}/events/{2**70}").status_code == 404
        assert http.get(f"/runs/{run_id}/at/0").status_code == 404
        assert http.get(f"/runs/{run_id}/tasks/r1/value/params").status_code == 404
        assert http.get(f"/runs/{run_id}/tasks/r1/value/input").status_code == 200


def test_last_event_id_must_be_a_seq_the_run_has(server: Served) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")  # waiting: a stream stays open
    with server.client() as http:
        last = len(run_async(_events(server.db, run_id)))
        for raw in (str(2**64), str(2**63), str(last + 1), "1e3", "x"):
            bad = http.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": raw})
            assert bad.status_code == 400, raw
        for raw in (str(last), "0", "-5"):  # the last seq, the start, and below it
            with http.stream("GET", f"/runs/{run_id}/events", headers={"Last-Event-ID": raw}) as r:
                assert r.status_code == 200, raw
                assert next(r.iter_text()).startswith("retry:")


async def _events(db: str, run_id: str) -> list:  # type: ignore[type-arg]
    async with Client(db) as client:
        return await client.events(run_id)


def test_sessions_are_one_per_sign_in_and_sign_out_revokes_only_its_own(server: Served) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")

    def sign_in() -> httpx.Client:
        http = server.client()
        csrf = csrf_of(http, "/login")
        done = http.post("/login", data={"csrf": csrf, "token": OPERATOR_TOKEN, "next": "/"})
        assert done.status_code == 303
        return http

    ana, bob = sign_in(), sign_in()
    try:
        assert ana.cookies["lk_session"] != bob.cookies["lk_session"]
        for http in (ana, bob):
            assert "Sign out" in http.get(f"/runs/{run_id}").text
        kept = ana.cookies["lk_session"]
        csrf = csrf_of(ana, "/")
        assert ana.post("/logout", data={"csrf": csrf}).status_code == 303
        replay = httpx.get(f"{server.url}/runs/{run_id}", cookies={"lk_session": kept})
        assert "Sign out" not in replay.text  # revoked on the server, not only in the browser
        assert "Sign out" in bob.get(f"/runs/{run_id}").text  # the other session lives on
    finally:
        ana.close()
        bob.close()


def test_a_session_expires() -> None:
    now = [1000.0]
    auth = Auth(operator_token="x" * 20, session_seconds=60, clock=lambda: now[0])

    class Req:
        def __init__(self, sid: str) -> None:
            self.cookies = {"lk_session": sid}
            self.headers: dict[str, str] = {}

    sid, _ = auth.new_session()
    assert auth.is_operator(Req(sid))  # type: ignore[arg-type]
    now[0] += 59
    assert auth.is_operator(Req(sid))  # type: ignore[arg-type]
    now[0] += 2
    assert not auth.is_operator(Req(sid))  # type: ignore[arg-type]
    assert not auth.is_operator(Req("made-up"))  # type: ignore[arg-type]


def test_a_notice_in_a_link_is_never_shown(server: Served) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")
    forged = "Your session expired: sign in again at evil.example"
    with server.client() as http:
        page = http.get(f"/runs/{run_id}", params={"notice": forged, "sig": "0" * 32})
        assert page.status_code == 200 and forged not in page.text
        page = http.get(f"/runs/{run_id}", params={"notice": forged})
        assert forged not in page.text
        # the server's own notice, after an action, is shown
        done = http.post(
            f"/runs/{run_id}/tasks/gate/decide",
            data={"decision": "approve"},
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
        )
        assert done.status_code == 303
        shown = http.get(done.headers["location"])
        assert "approve journaled for gate" in shown.text
        # the same signed notice on another run is not shown there
        other, _ = make_run(server.db, "lk_testapps:gate")
        query = done.headers["location"].split("?", 1)[1]
        assert "approve journaled" not in http.get(f"/runs/{other}?{query}").text


def test_pages_with_run_data_are_never_cached(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")
    with server.client() as http:
        for path in ("/", f"/runs/{run_id}", f"/runs/{run_id}/tasks/r1", "/runs", "/login"):
            assert http.get(path).headers["cache-control"] == "no-store", path
        assert http.get("/runs/nope").headers["cache-control"] == "no-store"
        assert "no-store" not in http.get("/static/live.js").headers.get("cache-control", "")


def test_a_bearer_script_needs_no_csrf_token_and_a_cookie_does(server: Served) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")
    action = f"/runs/{run_id}/tasks/gate/decide"
    with server.client() as http:
        wrong = http.post(
            action, data={"decision": "approve"}, headers={"Authorization": "Bearer x"}
        )
        assert wrong.status_code == 403
        ok = http.post(
            action,
            data={"decision": "approve", "payload": '{"by": "a script"}'},
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
        )
        assert ok.status_code == 303
    human = [e for e in run_async(_events(server.db, run_id)) if e.kind.value == "human_input"]
    assert len(human) == 1 and human[0].data["payload"] == {"by": "a script"}


def test_a_signed_in_operator_approves_a_require_token_run(server: Served) -> None:
    async def start() -> str:
        async with Client(server.db) as client:
            _, started = await client.start("lk_testapps:gate", require_token=True)
            await client.execute(started.run_id)
            return started.run_id

    run_id = run_async(start())
    assert status_of(server.db, run_id) is RunStatus.WAITING
    with server.client() as http:
        csrf = csrf_of(http, "/login")
        http.post("/login", data={"csrf": csrf, "token": OPERATOR_TOKEN, "next": "/"})
        page = http.get(f"/runs/{run_id}").text
        assert 'name="token"' not in page and 'class="decide"' in page
        csrf = csrf_of(http, f"/runs/{run_id}")  # the session's, minted at sign-in
        ok = http.post(
            f"/runs/{run_id}/tasks/gate/decide", data={"csrf": csrf, "decision": "approve"}
        )
        assert ok.status_code == 303, ok.text
        assert "approve journaled" in http.get(ok.headers["location"]).text
    kinds = [e.kind.value for e in run_async(_events(server.db, run_id))]
    assert kinds.count("human_input") == 1


def test_the_stream_cap_holds_under_a_burst(db_path: Path, tmp_path: Path) -> None:
    """Thirty connections at once against ``--max-streams 8``: exactly eight streams, the
    rest 503; once they close, a new one gets a slot again."""
    run_id, _ = make_run(db_path, "lk_testapps:gate")
    served = start_server(str(db_path), tmp_path, "--max-streams", "8")

    async def burst() -> list[int]:
        opened = asyncio.Event()
        codes: list[int] = []
        release = asyncio.Event()

        async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:

            async def one() -> None:
                async with http.stream("GET", f"/runs/{run_id}/events") as r:
                    codes.append(r.status_code)
                    if len(codes) == 30:
                        opened.set()
                    if r.status_code == 200:
                        await release.wait()

            tasks = [asyncio.create_task(one()) for _ in range(30)]
            await opened.wait()
            release.set()
            await asyncio.gather(*tasks)
        return codes

    try:
        codes = run_async(burst())
        assert sorted(codes) == [200] * 8 + [503] * 22
        with served.client() as http, http.stream("GET", f"/runs/{run_id}/events") as again:
            assert again.status_code == 200  # every slot was given back
    finally:
        stop_server(served)


def test_run_page_search_and_links(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")
    other, _ = make_run(server.db, "lk_testapps:gate")
    with server.client() as http:
        found = http.get("/", params={"q": run_id}).text
        assert f'href="/runs/{run_id}"' in found and f'href="/runs/{other}"' not in found
        by_app = http.get("/", params={"q": "testapps"}).text
        assert f'href="/runs/{other}"' in by_app and f'href="/runs/{run_id}"' not in by_app
        rows = http.get("/runs").text
        assert f'data-run="{run_id}"' in rows and f'data-run="{other}"' in rows
        at = http.get(f"/runs/{run_id}/at/2")
        assert at.status_code == 200 and "as of event #2" in at.text
        assert re.search(r'data-state="(pending|ready|running)"', at.text)


def test_a_source_lists_its_forks_and_long_values_link_to_all_of_them(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")

    async def fork() -> str:
        async with Client(server.db) as client:
            return (await client.fork(run_id, at=3)).run_id

    forked = run_async(fork())
    big = {"text": "x" * 100_000}
    seq = append_event(server.db, run_id, big)
    with server.client() as http:
        page = http.get(f"/runs/{run_id}").text
        forks = page.split('id="forks">', 1)[1].split("</dd>", 1)[0]
        assert f'href="/runs/{forked}"' in forks and "at #3" in forks
        row = page.split(f'id="ev-{seq}"', 1)[1].split("</tr>", 1)[0]
        assert len(row) < 6_000 and f'href="/runs/{run_id}/events/{seq}"' in row
        whole = http.get(f"/runs/{run_id}/events/{seq}")
        assert whole.headers["content-type"].startswith("application/json")
        assert json.loads(whole.text) == big
        # times: each row says when it was journaled; the timeline has a bar per task
        assert re.search(r'<td class="num time nowrap" title="[^"]+">\+', page)
        assert 'id="timeline"' in page and 'data-task="distill"' in page
        task = http.get(f"/runs/{run_id}/tasks/distill").text
        assert "into the run" in task and 'class="k-task_completed"' in task


def finished(db: str, run_id: str) -> None:
    """Wait (at most 60 s) for the run the server executes in the background to succeed."""
    deadline = time.monotonic() + 60
    while (status := status_of(db, run_id)) is not RunStatus.SUCCEEDED:
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def test_the_operator_resumes_and_forks_from_the_page(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast", execute=False)
    with server.client(headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}) as http:
        done = http.post(f"/runs/{run_id}/resume")
        assert done.status_code == 303
        assert "resumed: the run goes on here" in http.get(done.headers["location"]).text
        finished(server.db, run_id)
        again = http.post(f"/runs/{run_id}/fork", data={"at": "2", "execute": "1"})
        assert again.status_code == 303
        forked = again.headers["location"].split("/runs/", 1)[1].split("?", 1)[0]
        assert forked != run_id
        finished(server.db, forked)
        assert f"forked from {run_id} at event #2" in http.get(again.headers["location"]).text
        assert http.post(f"/runs/{run_id}/fork", data={"at": "999"}).status_code == 400
    with server.client() as anonymous:
        csrf = csrf_of(anonymous, "/login")
        refused = anonymous.post(f"/runs/{run_id}/fork", data={"csrf": csrf, "at": "2"})
        assert refused.status_code == 403


def test_a_planted_csrf_cookie_is_replaced_at_sign_in(server: Served) -> None:
    """A page on another port of this host can set a ``lk_csrf`` cookie for it (cookies
    do not keep ports apart). Signing in mints a new token; the planted one no longer
    passes for the session."""
    run_id, _ = make_run(server.db, "lk_testapps:gate")
    planted = "planted-by-another-port-0123456789"
    with server.client() as http:
        http.cookies.set("lk_csrf", planted)
        assert csrf_of(http, "/login") == planted  # before sign-in: the cookie's token
        signed = http.post("/login", data={"csrf": planted, "token": OPERATOR_TOKEN})
        assert signed.status_code == 303
        minted = signed.cookies.get("lk_csrf")
        assert minted and minted != planted
        http.cookies.set("lk_csrf", planted)  # planted again, after sign-in
        refused = http.post(f"/runs/{run_id}/cancel", data={"csrf": planted})
        assert refused.status_code == 403
        assert status_of(server.db, run_id) is RunStatus.WAITING
        assert csrf_of(http, f"/runs/{run_id}") == minted  # the pages carry the session's
        done = http.post(f"/runs/{run_id}/cancel", data={"csrf": minted})
        assert done.status_code == 303, done.text
        assert status_of(server.db, run_id) is RunStatus.CANCELLED
