"""The inspector as an operator uses it, in the system Chromium (Playwright) against a real
``loopkernel serve``: live updates after many streams came and went, a page that lost its
stream says so, keepalives, a 10,000-task run, the approval card, cancel-then-approve,
and a rebinding host name. Every wait is on the page (a selector, an attribute)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_web import (
    OPERATOR_TOKEN,
    Served,
    append_event,
    big_run,
    churn_streams,
    make_run,
    run_async,
    screenshot,
    start_server,
    status_of,
    stop_server,
)
from loopkernel.graph import RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PAGE_BUDGET_BYTES = 150_000
"""A 10,000-task run page's HTML (measured 70 KB by bench/web.py: docs/web.md)."""
BEARER = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The system Chromium (as ``conftest.chromium``), with its resolver mapping
    ``rebind.test`` to 127.0.0.1, as a DNS rebinding attack would."""
    if os.environ.get("LOOPKERNEL_TEST_BROWSER") == "skip":
        pytest.skip("LOOPKERNEL_TEST_BROWSER=skip: the browser tests were SKIPPED on purpose")
    path = os.environ.get("LOOPKERNEL_CHROMIUM", "/usr/bin/chromium")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no Chromium at {path}: run .ci/start-browser", pytrace=False)
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    from playwright.sync_api import sync_playwright

    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP rebind.test 127.0.0.1",
    ]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=flags)
        try:
            yield browser
        finally:
            browser.close()


def test_a_fresh_page_gets_live_updates_after_sixty_streams_churned(
    server: Served, page: Any, tmp_path: Path
) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")
    last = run_async(churn_streams(server.url, run_id, server.db, clients=60))
    page.goto(f"{server.url}/runs/{run_id}")
    assert page.inner_text("#event-count") == str(last)
    page.wait_for_selector("body[data-stream=live]")
    seq = append_event(server.db, run_id, {"after": "the churn"})
    page.wait_for_selector(f"#ev-{seq}", timeout=2_000)  # the bound: within 2 s
    page.wait_for_function(
        "s => document.getElementById('event-count').textContent === s",
        arg=str(seq),
        timeout=2_000,
    )
    assert page.locator("#stream-lost").is_hidden()


def test_a_page_without_a_stream_slot_says_so(db_path: Path, tmp_path: Path, page: Any) -> None:
    run_id, _ = make_run(db_path, "lk_testapps:gate")
    served = start_server(str(db_path), tmp_path, "--max-streams", "1")
    try:
        with (
            httpx.Client(base_url=served.url, timeout=30) as http,
            http.stream("GET", f"/runs/{run_id}/events") as held,
        ):
            chunks = held.iter_text()
            assert next(chunks).startswith("retry:")
            page.goto(f"{served.url}/runs/{run_id}")
            page.wait_for_selector("#stream-lost:not([hidden])")
            assert "out of date" in page.inner_text("#stream-lost")
            assert page.locator("#live-dot").is_hidden()
            screenshot(page, tmp_path, "stream-lost")
    finally:
        stop_server(served)


def test_keepalives_keep_a_quiet_page_live_and_silence_is_shown(
    db_path: Path, tmp_path: Path, page: Any
) -> None:
    """Nothing changes: keepalives arrive and the page stays live. The server stops
    answering (SIGSTOP): after three missed keepalives the page says its data may be stale;
    the server is back (SIGCONT): the page reconnects and says so no more."""
    run_id, _ = make_run(db_path, "lk_testapps:gate")
    served = start_server(str(db_path), tmp_path, "--keepalive-seconds", "0.3")
    try:
        page.goto(f"{served.url}/runs/{run_id}")
        page.wait_for_function("() => Number(document.body.dataset.keepalives || 0) >= 3")
        assert page.locator("#stream-lost").is_hidden()
        os.kill(served.proc.pid, signal.SIGSTOP)
        try:
            page.wait_for_selector("#stream-lost:not([hidden])")
        finally:
            os.kill(served.proc.pid, signal.SIGCONT)
        page.wait_for_selector("#stream-lost[hidden]", state="attached")
        seq = append_event(db_path, run_id, {"back": True})
        page.wait_for_selector(f"#ev-{seq}")
    finally:
        stop_server(served)


def test_a_10000_task_run_page_stays_under_its_budget(
    db_path: Path, tmp_path: Path, page: Any
) -> None:
    big_run(db_path, "fan", 10_000, shape="fan")
    big_run(db_path, "chain", 10_000, shape="chain")
    served = start_server(str(db_path), tmp_path)
    try:
        for run_id, boxes in (("fan", 17), ("chain", 13)):
            html = httpx.get(f"{served.url}/runs/{run_id}", timeout=120)
            assert html.status_code == 200
            assert len(html.content) < PAGE_BUDGET_BYTES, (run_id, len(html.content))
            page.goto(f"{served.url}/runs/{run_id}")
            assert page.locator("svg.graph a.node").count() == boxes
            assert page.locator("#task-rows tr").count() == 200
            assert page.locator("a", has_text="show all 10000").count() == 1
            height = page.evaluate("document.querySelector('svg.graph').getBBox().height")
            assert height < 2_000  # folded: not 56,000 px (fan) or 336,000 px (chain)
            page.wait_for_selector("body[data-stream=live]")
        group = page.locator('svg.graph a.node.group[data-box="group:middle"]')
        assert "+ 9988" in group.text_content()
        screenshot(page, tmp_path, "big-chain")
        page.goto(f"{served.url}/runs/fan")
        ids = page.eval_on_selector_all("#task-rows tr", "rs => rs.slice(0, 4).map(r => r.id)")
        assert ids == ["task-plan", "task-w0", "task-w1", "task-w2"]  # natural order
        screenshot(page, tmp_path, "big-fan")
    finally:
        stop_server(served)


def test_the_approval_card_shows_what_is_approved(
    server: Served, page: Any, tmp_path: Path
) -> None:
    started = subprocess.run(
        [*LOOPKERNEL, "--db", server.db, "run", "looplab", "--scenario", "irreversible", "--quiet"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 3, started.stdout + started.stderr
    run_id = started.stdout.split("run ", 1)[1].split(" ", 1)[0]
    page.goto(f"{server.url}/login?next=/runs/{run_id}")
    page.fill("input[name=token]", OPERATOR_TOKEN)
    page.click("button[type=submit]")
    card = page.locator("section.waiting")
    card.wait_for()
    text = card.inner_text()
    assert "irreversible" in text
    assert card.locator("dd.tool").inner_text() == "publish"  # the looplab step's tool
    assert card.locator("dd.cost").inner_text() == "$0.2500"
    # the parked call itself: its arguments as the journal stores them, its key
    called = json.loads(card.locator("pre.call-arguments").inner_text())
    assert called == {"step": "deploy", "attempt": 1, "cost_usd": 0.25}
    assert card.locator("details.approval-call summary").inner_text().count(f"{run_id}/act:") == 1
    shown = json.loads(card.locator("pre.task-input").text_content() or "")
    assert shown["tool"] == "publish" and shown["step"] == "deploy"
    assert card.locator("input[name=token]").count() == 0  # signed in: the operator decides
    screenshot(page, tmp_path, "approval-card")
    card.locator("button[value=approve]").click()
    page.wait_for_selector("p.notice >> text=approve journaled")
    page.wait_for_selector("section.answered .d-approve")
    # who approved: on the answered card, and with when on the task page
    answered = page.locator("section.answered p.by").inner_text()
    assert answered == "By operator (web inspector, 127.0.0.1)."
    page.locator("section.answered a.mono").click()
    by = page.locator("table.decisions td.by")
    assert by.inner_text() == "operator (web inspector, 127.0.0.1)"


def test_cancel_then_approve_is_refused(server: Served, chromium: Any, tmp_path: Path) -> None:
    """A page without script keeps its approval form after the run was cancelled
    elsewhere; submitting it is refused and journals nothing. A live page drops the form."""
    run_id, token = make_run(server.db, "lk_testapps:gate")
    still = chromium.new_context(java_script_enabled=False)
    live = chromium.new_context()
    try:
        stale, current = still.new_page(), live.new_page()
        stale.goto(f"{server.url}/runs/{run_id}")
        current.goto(f"{server.url}/runs/{run_id}")
        current.wait_for_selector("body[data-stream=live]")
        cancelled = httpx.post(
            f"{server.url}/runs/{run_id}/cancel", data={"reason": "not now"}, headers=BEARER
        )
        assert cancelled.status_code == 303
        assert status_of(server.db, run_id) is RunStatus.CANCELLED  # finished at once
        current.wait_for_selector("body[data-stream=ended]")
        assert current.locator("section.waiting").count() == 0
        assert current.inner_text("#run-status") == "cancelled"
        form = stale.locator("section.waiting form.decide")
        form.locator("input[name=token]").fill(token)
        with stale.expect_navigation() as nav:
            form.locator("button[value=approve]").click()
        assert nav.value.status == 409
        assert "cancelled" in stale.inner_text("p.error")
        screenshot(stale, tmp_path, "cancel-then-approve")
    finally:
        still.close()
        live.close()
    kinds = [line for line in _kinds(server.db, run_id)]
    assert "human_input" not in kinds and kinds[-1] == "run_finished"


def _kinds(db: str, run_id: str) -> list[str]:
    from loopkernel.client import Client

    async def go() -> list[str]:
        async with Client(db) as client:
            return [e.kind.value for e in await client.events(run_id)]

    return run_async(go())


def test_a_rebinding_host_name_is_refused(server: Served, chromium: Any) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")
    port = server.url.rsplit(":", 1)[1]
    context = chromium.new_context()
    try:
        page = context.new_page()
        answer = page.goto(f"http://rebind.test:{port}/runs/{run_id}")
        assert answer is not None and answer.status == 421
        assert run_id not in page.content()
        fetched = page.evaluate("async (p) => (await fetch(p)).status", f"/runs/{run_id}/events")
        assert fetched == 421
        ok = page.goto(f"http://127.0.0.1:{port}/runs/{run_id}")
        assert ok is not None and ok.status == 200 and run_id in page.content()
    finally:
        context.close()


def test_the_runs_list_updates_itself_and_search_finds_a_run(
    server: Served, page: Any, tmp_path: Path
) -> None:
    first, _ = make_run(server.db, "speculation", "fast")
    page.goto(f"{server.url}/")
    page.wait_for_selector(f'tr[data-run="{first}"]')
    waiting, _ = make_run(server.db, "lk_testapps:gate")  # started after the page loaded
    page.wait_for_selector(f'tr[data-run="{waiting}"] .badge.s-waiting')
    page.fill("input[name=q]", first)
    page.click("form.filters button[type=submit]")
    page.wait_for_selector(f'tr[data-run="{first}"]')
    assert page.locator(f'tr[data-run="{waiting}"]').count() == 0
    screenshot(page, tmp_path, "runs-search")
