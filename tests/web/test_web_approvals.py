"""What an approval shows and what it leaves behind: the card names the parked call (its
tool, effect, key, cost and arguments, redacted as the journal stores them), the journal
records who approved or rejected and when (the operator, a run token's holder, a CLI user
on a host), never a token, and the task page and ``inspect --journal`` show it. Task pages
and the task table show when each task started and how long it took."""

from __future__ import annotations

import getpass
import json
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx

from lk_helpers import LOOPKERNEL, cli_env
from lk_testapps import PARKED_SECRET
from lk_web import OPERATOR_TOKEN, Served, csrf_of, make_run, run_async
from loopkernel.client import Client
from loopkernel.graph import Event, EventKind

BEARER = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


def get(server: Served, path: str) -> httpx.Response:
    with server.client() as http:
        return http.get(path)


def post(server: Served, path: str, **kw: Any) -> httpx.Response:
    with server.client() as http:
        return http.post(path, **kw)


def cli(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, "--db", db, *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def parked(db: str, tmp_path: Path) -> tuple[str, str]:
    """A run of ``approve_charge`` waiting at its one irreversible call."""

    async def go() -> tuple[str, str]:
        async with Client(db) as client:
            overrides = {"ledger": str(tmp_path / "ledger")}
            _, started = await client.start("lk_testapps:approve_charge", overrides=overrides)
            outcome = await client.execute(started.run_id)
            assert outcome.status.value == "waiting"
            return started.run_id, started.token

    return run_async(go())


def events_of(db: str, run_id: str) -> list[Event]:
    async def go() -> list[Event]:
        async with Client(db) as client:
            return await client.events(run_id)

    return run_async(go())


def stored_bytes(db: str) -> bytes:
    """Every byte of the SQLite database, its WAL included."""
    return b"".join(p.read_bytes() for p in Path(db).parent.glob(Path(db).name + "*"))


def answers(db: str, run_id: str) -> list[dict[str, Any]]:
    found = [e.data for e in events_of(db, run_id) if e.kind is EventKind.HUMAN_INPUT]
    return [d for d in found if isinstance(d, dict)]


def test_the_approval_card_shows_the_parked_call_redacted(server: Served, tmp_path: Path) -> None:
    run_id, _ = parked(server.db, tmp_path)
    (asked,) = [e for e in events_of(server.db, run_id) if e.kind is EventKind.APPROVAL_REQUIRED]
    assert isinstance(asked.data, dict)
    call = asked.data["call"]
    assert {k: call[k] for k in ("tool", "effect", "key")} == {
        "tool": "charge",
        "effect": "irreversible",
        "key": f"{run_id}/call/0",
    }
    assert call["arguments"]["ledger"] == str(tmp_path / "ledger")
    assert call["arguments"]["note"].startswith("pay with key [redacted:")
    assert PARKED_SECRET.encode() not in stored_bytes(server.db)

    page = get(server, f"/runs/{run_id}")
    assert page.status_code == 200
    card = page.text.split('<section class="card waiting">', 1)[1].split("</section>", 1)[0]
    assert '<dd class="mono tool">charge</dd>' in card
    assert "e-irreversible" in card
    assert f"{run_id}/call/0" in card
    shown = re.search(r'<pre class="call-arguments">(.*?)</pre>', card, re.S)
    assert shown is not None
    arguments = json.loads(shown.group(1).replace("&#34;", '"').replace("&quot;", '"'))
    assert arguments == call["arguments"]
    assert PARKED_SECRET not in page.text


def test_a_cost_on_the_call_is_the_cost_on_the_card(server: Served, tmp_path: Path) -> None:
    done = cli(server.db, "run", "looplab", "--scenario", "irreversible", "--quiet")
    assert done.returncode == 3, done.stdout + done.stderr
    run_id = done.stdout.split("run ", 1)[1].split(" ", 1)[0]
    (asked,) = [e for e in events_of(server.db, run_id) if e.kind is EventKind.APPROVAL_REQUIRED]
    assert isinstance(asked.data, dict)
    assert asked.data["call"]["tool"] == "publish"
    assert asked.data["call"]["cost_usd"] == asked.data["call"]["arguments"]["cost_usd"]
    page = get(server, f"/runs/{run_id}").text
    assert f'<dd class="cost">${asked.data["call"]["cost_usd"]:,.4f}</dd>' in page


def test_cli_approvals_record_the_user_and_host_and_never_the_token(
    server: Served, tmp_path: Path
) -> None:
    local, _ = parked(server.db, tmp_path / "a")
    assert cli(server.db, "approve", local, "call").returncode == 0
    by_token, token = parked(server.db, tmp_path / "b")
    done = cli(server.db, "reject", by_token, "call", "--token", token)
    assert done.returncode == 0, done.stderr
    me = {"user": getpass.getuser(), "host": socket.gethostname()}
    ((first,), (second,)) = answers(server.db, local), answers(server.db, by_token)
    assert first["by"] == {"actor": "local", **me}
    assert (second["decision"], second["by"]) == ("reject", {"actor": "run token", **me})
    assert token.encode() not in stored_bytes(server.db)

    shown = cli(server.db, "inspect", local, "--journal")
    assert shown.returncode in (0, 3), shown.stderr
    line = f"approve by local ({me['user']}@{me['host']}) at "
    assert re.search(re.escape(line) + r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", shown.stdout), (
        shown.stdout
    )


def test_web_approvals_record_the_operator_or_the_run_token(server: Served, tmp_path: Path) -> None:
    as_operator, _ = parked(server.db, tmp_path / "a")
    done = post(
        server,
        f"/runs/{as_operator}/tasks/call/decide",
        data={"decision": "approve"},
        headers=BEARER,
    )
    assert done.status_code == 303, done.text
    with_token, token = parked(server.db, tmp_path / "b")
    with server.client() as http:  # a browser's form, with the run's token
        csrf = csrf_of(http, f"/runs/{with_token}")
        done = http.post(
            f"/runs/{with_token}/tasks/call/decide",
            data={"decision": "reject", "token": token, "csrf": csrf},
        )
    assert done.status_code == 303, done.text
    ((first,), (second,)) = answers(server.db, as_operator), answers(server.db, with_token)
    assert first["by"] == {
        "actor": "operator",
        "via": "web API, Bearer",
        "name": "operator",  # the server's own token's holder (named ones: test_web_operators)
        "address": "127.0.0.1",
    }
    assert second["by"] == {"actor": "run token", "via": "web inspector", "address": "127.0.0.1"}
    assert token.encode() not in stored_bytes(server.db)
    assert OPERATOR_TOKEN.encode() not in stored_bytes(server.db)

    page = get(server, f"/runs/{with_token}/tasks/call").text
    row = page.split('<table class="decisions">', 1)[1].split("</table>", 1)[0]
    assert "reject" in row and "run token (web inspector, 127.0.0.1)" in row
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", row)


def test_tasks_show_when_they_started_and_how_long_they_took(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")
    page = get(server, f"/runs/{run_id}").text
    rows = re.findall(r'<tr id="task-([^"]+)" data-state="succeeded">(.*?)</tr>', page, re.S)
    assert {tid for tid, _ in rows} >= {"plan", "r1", "r2", "distill"}
    for tid, row in rows:
        started = re.search(r'<td class="num started nowrap" title="([^"]+)">\+([^<]+)</td>', row)
        took = re.search(r'<td class="num took nowrap">([^<]+)</td>', row)
        assert started is not None and started.group(1).endswith(" UTC"), (tid, row)
        assert took is not None and re.fullmatch(r"[\d.]+ (ms|s)|\d+m \d+s", took.group(1))
    task = get(server, f"/runs/{run_id}/tasks/r1").text
    assert re.search(r'<dd id="task-started">\d{4}-\d\d-\d\d [\d:]+ UTC \(\+', task), task
    assert re.search(r'<dd id="task-took">[\d.]+ (ms|s)</dd>', task)
