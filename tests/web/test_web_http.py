"""The inspector over HTTP, against a real ``loopkernel serve`` subprocess: pages, paging
at 100,000 runs, the live stream's resume, and who may write."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_web import (
    OPERATOR_TOKEN,
    Served,
    csrf_of,
    ensure_database,
    make_run,
    run_async,
    sse,
    start_server,
    status_of,
    stop_server,
)
from loopkernel.client import Client
from loopkernel.graph import EventKind, RunStatus
from loopkernel.ids import RunId
from loopkernel.store import NewEvent, NewRun, SQLiteStore
from loopkernel.store._codec import run_page_filter

if TYPE_CHECKING:
    from lk_stores import Backend


def test_import_loopkernel_stays_free_of_the_web_stack() -> None:
    code = (
        "import sys, loopkernel, loopkernel.client, loopkernel.cli._main as m; m.build_parser(); "
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in "
        "('starlette', 'uvicorn', 'jinja2', 'multipart', 'playwright')); print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_pages_show_a_finished_speculation_run(server: Served) -> None:
    run_id, token = make_run(server.db, "speculation", "fast")
    with server.client() as http:
        runs = http.get("/")
        assert runs.status_code == 200 and run_id in runs.text
        page = http.get(f"/runs/{run_id}")
        assert page.status_code == 200
        html = page.text
        # the graph: r3 cancelled in flight and its late result discarded
        assert 'data-task="r3" data-state="cancelled"' in html
        assert "node st-cancelled late" in html
        assert 'data-task="distill" data-state="succeeded"' in html
        # the journal: every event, each beside its patch and planner
        assert html.count('<tr id="ev-') == status_seq(server.db, run_id)
        assert "late_result_discarded" in html and "cancel r3" in html
        assert 'class="planner p-planner"' in html
        # finished: no live stream
        assert "data-live" not in html
        task = http.get(f"/runs/{run_id}/tasks/r3")
        assert task.status_code == 200 and "late result discarded" in task.text
        assert http.get("/runs/no-such-run").status_code == 404
        assert http.get(f"/runs/{run_id}/tasks/nope").status_code == 404
        assert http.get("/?status=bogus").status_code == 400
        # security headers on every page; no token hash, no token
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert token not in html
        assert token_hash(server.db, run_id) not in html


def status_seq(db: str, run_id: str) -> int:
    async def go() -> int:
        async with Client(db) as client:
            return (await client.info(run_id)).last_seq

    return run_async(go())


def token_hash(db: str, run_id: str) -> str:
    async def go() -> str:
        async with Client(db) as client:
            return await client.store.token_hash(RunId(run_id))

    return run_async(go())


def fill_runs(db: Path, n: int, *, apps: int = 3) -> None:
    """``n`` runs written straight into a fresh SQLite file: fast enough for 100,000."""

    async def schema() -> None:
        store = SQLiteStore(db)
        await store.open()
        await store.close()

    run_async(schema())
    statuses = ["succeeded", "failed", "waiting", "running", "cancelled", "escalated"]
    t0 = 1_700_000_000.0
    con = sqlite3.connect(db)
    with con:
        con.executemany(
            "INSERT INTO runs (run_id, app, params, status, verdict, max_events, token_hash, "
            "created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                (
                    f"r{i:06d}",
                    f"app{i % apps}",
                    "{}",
                    statuses[i % 6],
                    "null",
                    1000,
                    "h",
                    t0 + i // 2,
                    t0 + i // 2,
                )  # pairs share a created_at: the run_id breaks ties
                for i in range(n)
            ),
        )
        con.executemany(
            "INSERT INTO events (run_id, seq, kind, task_id, data, created_at) "
            "VALUES (?, 1, 'run_started', NULL, '{}', ?)",
            ((f"r{i:06d}", t0) for i in range(n)),
        )
    con.close()


def older_link(html: str) -> str | None:
    import html as html_mod
    import re

    found = re.search(r'<a class="older" href="([^"]+)"', html)
    return None if found is None else html_mod.unescape(found.group(1))


def run_ids(html: str) -> list[str]:
    import re

    return re.findall(r'<td class="mono"><a href="/runs/([^"]+)">', html)


def test_runs_page_walks_every_run_once_newest_first_with_filters(
    db_path: Path, tmp_path: Path
) -> None:
    fill_runs(db_path, 230)
    served = start_server(str(db_path), tmp_path)
    try:
        with served.client() as http:
            seen: list[str] = []
            path: str | None = "/"
            while path is not None:
                page = http.get(path)
                assert page.status_code == 200
                seen += run_ids(page.text)
                path = older_link(page.text)
            expected = sorted((f"r{i:06d}" for i in range(230)), reverse=True)
            assert seen == expected  # created_at desc, then run_id desc; no gaps, no repeats
            waiting: list[str] = []
            path = "/?status=waiting&app=app2"
            while path is not None:
                page = http.get(path)
                waiting += run_ids(page.text)
                path = older_link(page.text)
            want = [r for r in expected if int(r[1:]) % 6 == 2 and int(r[1:]) % 3 == 2]
            assert waiting == want and want
    finally:
        stop_server(served)


@pytest.mark.slow
def test_100000_runs_page_on_the_indexes(db_path: Path, tmp_path: Path) -> None:
    fill_runs(db_path, 100_000)
    con = sqlite3.connect(db_path)
    for status, app, before in [
        (None, None, None),
        (RunStatus.WAITING, None, (1_700_040_000.0, "r080000")),
        (None, "app1", (1_700_010_000.0, "r020000")),
        (RunStatus.FAILED, "app1", None),
    ]:
        where, params = run_page_filter(status, app, before, "?")
        plan = " ".join(
            str(r[-1])
            for r in con.execute(
                f"EXPLAIN QUERY PLAN SELECT run_id FROM runs{where} "
                "ORDER BY created_at DESC, run_id DESC LIMIT 51",
                params,
            )
        )
        assert "USING INDEX runs_by_" in plan or "USING COVERING INDEX runs_by_" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # no sort of the whole table
    con.close()
    served = start_server(str(db_path), tmp_path)
    try:
        with served.client() as http:
            first = http.get("/")
            assert run_ids(first.text)[:2] == ["r099999", "r099998"]
            cursor = "1700040000.0:r080000"  # created_at, run_id of the last row seen
            deep = http.get("/", params={"status": "waiting", "before": cursor})
            ids = run_ids(deep.text)
            assert len(ids) == 50 and ids[0] == "r079994"  # waiting: i % 6 == 2
            assert all(int(r[1:]) % 6 == 2 for r in ids) and "Older" in deep.text
            tail = http.get("/", params={"status": "waiting", "before": "1700000100.0:r000200"})
            assert run_ids(tail.text) == [f"r{i:06d}" for i in range(194, 0, -6)]
            assert "Older" not in tail.text
    finally:
        stop_server(served)


def test_stream_resumes_after_last_event_id_without_loss_or_doubles(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast", execute=False)
    with server.client() as http:
        # a live run: read until its first event, then drop the connection
        with http.stream("GET", f"/runs/{run_id}/events") as live:
            assert live.headers["content-type"].startswith("text/event-stream")
            got: list[int] = []
            buffer = ""
            for chunk in live.iter_text():
                buffer += chunk
                got = [int(m["id"]) for m in sse(buffer) if m["event"] == "journal"]
                if got:
                    break
        assert got == [1]

        async def execute() -> None:
            async with Client(server.db) as client:
                await client.execute(run_id)

        run_async(execute())
        resumed = sse(http.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "1"}).text)
        ids = [int(m["id"]) for m in resumed if m["event"] == "journal"]
        last = status_seq(server.db, run_id)
        assert got + ids == list(range(1, last + 1))
        assert resumed[-1]["event"] == "end" and '"succeeded"' in resumed[-1]["data"]
        # patches committed while away are sent again for the rows the browser has
        patched = [m for m in resumed if m["event"] == "patch"]
        assert any('"seq":1' in m["data"] for m in patched)
        again = sse(http.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": str(last)}).text)
        assert [m for m in again if m["event"] == "journal"] == []
        assert http.get(f"/runs/{run_id}/events?after=x").status_code == 400


def test_writes_need_a_token_and_a_fresh_form(server: Served) -> None:
    run_id, token = make_run(server.db, "lk_testapps:gate")
    assert status_of(server.db, run_id) is RunStatus.WAITING
    action = f"/runs/{run_id}/tasks/gate/decide"
    before = status_seq(server.db, run_id)
    with server.client() as http:
        csrf = csrf_of(http, f"/runs/{run_id}")
        form = {"csrf": csrf, "decision": "approve", "payload": '{"by": "ana"}'}
        wrong = http.post(action, data={**form, "token": "not-the-token"})
        assert wrong.status_code == 403 and "refused" in wrong.text
        missing = http.post(action, data=form)
        assert missing.status_code == 403
        stale = http.post(action, data={**form, "token": token, "csrf": "forged"})
        assert stale.status_code == 403
        foreign = http.post(
            action, data={**form, "token": token}, headers={"Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403
        bad_json = http.post(action, data={**form, "token": token, "payload": "{nope"})
        assert bad_json.status_code == 400 and "not JSON" in bad_json.text
        assert status_seq(server.db, run_id) == before  # nothing journaled by any of these
        ok = http.post(action, data={**form, "token": token})
        assert ok.status_code == 303 and "approve+journaled" in ok.headers["location"]
        again = http.post(action, data={**form, "token": token})
        assert again.status_code == 409  # a wait is answered once
    events = journal(server.db, run_id)
    human = [e for e in events if e.kind.value == "human_input"]
    assert len(human) == 1 and human[0].data["payload"] == {"by": "ana"}
    resumed = subprocess.run(
        [*LOOPKERNEL, "--db", server.db, "resume", run_id, "--quiet"],
        env=cli_env(),
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


def journal(db: str, run_id: str) -> list:  # type: ignore[type-arg]
    async def go() -> list:  # type: ignore[type-arg]
        async with Client(db) as client:
            return await client.events(run_id)

    return run_async(go())


def test_operator_signs_in_and_cancels_a_waiting_run(server: Served) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")
    with server.client() as http:
        csrf = csrf_of(http, "/login")
        refused = http.post("/login", data={"csrf": csrf, "token": "wrong", "next": "/"})
        assert refused.status_code == 403
        for elsewhere in ("//evil.example/", "/\\evil.example/", "https://evil.example/"):
            csrf = csrf_of(http, "/login")  # each sign-in mints the next one
            away = http.post(
                "/login", data={"csrf": csrf, "token": OPERATOR_TOKEN, "next": elsewhere}
            )
            assert away.status_code == 303 and away.headers["location"] == "/"
        csrf = csrf_of(http, "/login")
        signed = http.post("/login", data={"csrf": csrf, "token": OPERATOR_TOKEN, "next": "/"})
        assert signed.status_code == 303 and "lk_session" in signed.headers["set-cookie"]
        assert OPERATOR_TOKEN not in signed.headers["set-cookie"]
        page = http.get(f"/runs/{run_id}")
        assert 'name="token"' not in page.text  # signed in: no token field
        assert csrf_of(http, f"/runs/{run_id}") != csrf  # minted at sign-in, not adopted
        stale = http.post(f"/runs/{run_id}/cancel", data={"csrf": csrf, "reason": "x"})
        assert stale.status_code == 403  # the token from before sign-in is spent
        csrf = csrf_of(http, f"/runs/{run_id}")
        done = http.post(f"/runs/{run_id}/cancel", data={"csrf": csrf, "reason": "not today"})
        assert done.status_code == 303
        # like `loopkernel cancel`: a waiting run is finished at once, and offers nothing
        assert status_of(server.db, run_id) is RunStatus.CANCELLED
        after = http.get(done.headers["location"])
        assert "cancelled" in after.text and 'class="notice" role="status"' in after.text
        assert "form.decide" not in after.text and 'class="decide"' not in after.text
        late = http.post(
            f"/runs/{run_id}/tasks/gate/decide", data={"csrf": csrf, "decision": "approve"}
        )
        assert late.status_code == 409  # cancel-then-approve: refused, nothing journaled
        kinds = [e.kind.value for e in journal(server.db, run_id)]
        assert kinds[-2:] == ["cancel_requested", "run_finished"]
        assert "human_input" not in kinds
        # sign out revokes this session: the same cookie is nobody's any more
        cookie = http.cookies["lk_session"]
        assert http.post("/logout", data={"csrf": csrf}).status_code == 303
        replay = httpx.get(
            f"{server.url}/runs/{run_id}", cookies={"lk_session": cookie, "lk_csrf": csrf}
        )
        assert 'name="token"' in replay.text or "Sign in" in replay.text
        assert "Sign out" not in replay.text


def test_locked_reads_and_bearer_token(db_path: Path, tmp_path: Path) -> None:
    run_id, _ = make_run(db_path, "speculation", "fast")
    served = start_server(str(db_path), tmp_path, "--require-token-for-reads")
    try:
        with served.client() as http:
            locked = http.get(f"/runs/{run_id}")
            assert locked.status_code == 303 and locked.headers["location"].startswith("/login")
            assert http.get(f"/runs/{run_id}/events").status_code == 303
            wrong = http.get("/", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 303
            ok = http.get(f"/runs/{run_id}", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
            assert ok.status_code == 200 and run_id in ok.text
    finally:
        assert stop_server(served) == 0  # Ctrl-C stops the server cleanly


def test_live_streams_are_capped(db_path: Path, tmp_path: Path) -> None:
    run_id, _ = make_run(db_path, "lk_testapps:gate")  # waiting: its stream stays open
    served = start_server(str(db_path), tmp_path, "--max-streams", "1")
    try:
        with served.client() as http, http.stream("GET", f"/runs/{run_id}/events") as first:
            chunks = first.iter_text()  # held: a dropped iterator would close the stream
            assert next(chunks).startswith("retry:")
            second = httpx.get(f"{served.url}/runs/{run_id}/events", timeout=10)
            assert second.status_code == 503 and second.headers["retry-after"] == "5"
    finally:
        stop_server(served)


def test_serve_refuses_bad_arguments_with_exit_2(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc")
    ensure_database(str(tmp_path / "r.db"))  # a good database: only the token file is bad
    for args in (["--token-file", str(tmp_path / "missing")], ["--token-file", str(short)]):
        out = subprocess.run(
            [*LOOPKERNEL, "--db", str(tmp_path / "r.db"), "serve", "--port", "0", *args],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr


def test_a_long_journal_shows_its_last_entries_and_all_on_request(server: Served) -> None:
    async def long_run() -> None:
        store = SQLiteStore(server.db)
        await store.open()
        try:
            await store.create_run(
                NewRun(run_id=RunId("long"), app="x", params={}, max_events=10_000, token_hash="h")
            )
            news = [NewEvent(kind=EventKind.TOOL_RESTARTED, data={"n": n}) for n in range(620)]
            await store.append_events(RunId("long"), news)
        finally:
            await store.close()

    run_async(long_run())
    with server.client() as http:
        tail = http.get("/runs/long").text
        assert tail.count('<tr id="ev-') == 500 and 'id="ev-621"' in tail
        assert 'id="ev-121"' not in tail and "121 earlier entries not shown" in tail
        assert "events?after=621&amp;" in tail  # the stream goes on after the last entry
        whole = http.get("/runs/long?journal=all").text
        assert whole.count('<tr id="ev-') == 621


def test_stream_follows_a_run_live_on_both_stores(backend: Backend, tmp_path: Path) -> None:
    """Connected before the run starts executing, the stream gets every event as it is
    committed (SQLite: data_version; PostgreSQL: LISTEN/NOTIFY), then ``end``."""
    run_id, _ = make_run(backend.url, "speculation", "fast", execute=False)
    served = start_server(backend.url, tmp_path)
    try:
        with served.client() as http, http.stream("GET", f"/runs/{run_id}/events") as live:
            chunks = live.iter_text()
            text = ""
            while not any(m["event"] == "journal" for m in sse(text)):
                text += next(chunks)

            async def execute() -> None:
                async with Client(backend.url) as client:
                    await client.execute(run_id)

            worker = threading.Thread(target=lambda: asyncio.run(execute()))  # its own thread
            worker.start()
            for chunk in chunks:  # the server ends the stream once the run is finished
                text += chunk
            worker.join()
        messages = sse(text)
        ids = [int(m["id"]) for m in messages if m["event"] == "journal"]
        assert ids == list(range(1, status_seq(backend.url, run_id) + 1))
        assert messages[-1]["event"] == "end" and '"succeeded"' in messages[-1]["data"]
        states = [m for m in messages if m["event"] == "state"]
        assert len(states) >= 2 and '"status":"succeeded"' in states[-1]["data"]
    finally:
        stop_server(served)


def test_a_forked_run_links_to_its_origin(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")

    async def fork() -> str:
        async with Client(server.db) as client:
            return (await client.fork(run_id, at=3)).run_id

    forked = run_async(fork())
    with server.client() as http:
        page = http.get(f"/runs/{forked}").text
        assert f'<a class="mono" href="/runs/{run_id}">{run_id}</a> at event #3' in page
        assert "Forked from" not in http.get(f"/runs/{run_id}").text
