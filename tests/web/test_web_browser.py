"""The inspector in the system Chromium (Playwright): live updates, approval by a click,
escaping, refusal. Every wait is on the page's DOM (a selector appearing), never a sleep.
Screenshots of each page go in the test's directory (and in $LOOPKERNEL_SCREENSHOTS)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_web import Served, make_run, screenshot, start_server, status_of, stop_server
from loopkernel.graph import RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def resume(db: str, run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LOOPKERNEL, "--db", db, "resume", run_id, "--quiet"],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(proc: subprocess.Popen[str]) -> int:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode is not None, out
    return proc.returncode


def test_speculation_page_follows_the_run_live(server: Served, page: Any, tmp_path: Path) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast", execute=False)
    page.goto(f"{server.url}/runs/{run_id}")
    assert page.inner_text("#event-count") == "1"
    page.wait_for_selector("#live-dot:not([hidden])", state="attached")  # stream open
    proc = resume(server.db, run_id)  # another process runs it; the page only watches
    page.wait_for_selector(
        'svg.graph a.node[data-task="r3"][data-state="cancelled"]', state="attached"
    )
    page.wait_for_selector("tr.k-late_result_discarded")
    page.wait_for_selector("body[data-stream=ended]")
    assert finished(proc) == 0
    assert page.inner_text("#run-status") == "succeeded"
    rows = page.eval_on_selector_all("#journal tr", "rows => rows.map(r => r.id)")
    last = int(page.inner_text("#event-count"))
    assert last > 1 and rows == [f"ev-{n}" for n in range(1, last + 1)]  # none lost or doubled
    assert page.locator("#ev-2 td.patch .planner").inner_text() == "planner"
    assert page.locator("#journal td.patch.pending").count() == 0  # every patch arrived
    assert page.locator("#task-r3 .tag.late").count() == 1
    screenshot(page, tmp_path, "run")


def test_waiting_looplab_run_is_approved_by_a_click_then_finishes(
    server: Served, page: Any, tmp_path: Path
) -> None:
    started = subprocess.run(
        [*LOOPKERNEL, "--db", server.db, "run", "looplab", "--scenario", "irreversible", "--quiet"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 3, started.stdout + started.stderr  # waiting
    run_id = re.search(r"run (\S+) started", started.stdout).group(1)  # type: ignore[union-attr]
    token = re.search(r"approval token \(shown once\): (\S+)", started.stdout).group(1)  # type: ignore[union-attr]

    make_run(server.db, "speculation", "fast")  # company on the runs page
    make_run(server.db, "lk_testapps:gate")
    page.goto(f"{server.url}/")
    page.wait_for_selector(f'a[href="/runs/{run_id}"]')
    screenshot(page, tmp_path, "runs")
    page.click(f'a[href="/runs/{run_id}"]')
    form = page.locator("section.waiting form.decide")
    form.wait_for()
    assert "irreversible" in page.inner_text("section.waiting .reason")
    form.locator("textarea[name=payload]").fill('{"note": "checked with the owner"}')
    form.locator("input[name=token]").fill(token)
    screenshot(page, tmp_path, "approve")
    form.locator("button[value=approve]").click()
    page.wait_for_selector("p.notice >> text=approve journaled")
    page.wait_for_selector("tr.k-human_input")
    page.wait_for_selector("section.answered .d-approve")
    assert page.locator("section.waiting").count() == 0  # answered: no form any more

    proc = resume(server.db, run_id)
    page.wait_for_selector("#run-status .s-succeeded")
    page.wait_for_selector("body[data-stream=ended]")
    assert finished(proc) == 0
    assert status_of(server.db, run_id) is RunStatus.SUCCEEDED

    page.click('svg.graph a.node[data-task="act:3.1"]')
    page.wait_for_selector("table.effects")
    assert "irreversible" in page.inner_text("table.effects")
    assert "checked with the owner" in page.inner_text("#task-human")
    screenshot(page, tmp_path, "task")


XSS_PAYLOAD = "<script>alert('payload')</script><img src=x onerror=alert('img')>"


def test_run_values_are_text_never_markup(server: Served, page: Any, tmp_path: Path) -> None:
    run_id, token = make_run(server.db, "lk_testapps:gate")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{server.url}/runs/{run_id}")
    form = page.locator("section.waiting form.decide")
    form.locator("textarea[name=payload]").fill(json.dumps({"by": XSS_PAYLOAD}))
    form.locator("input[name=token]").fill(token)
    form.locator("button[value=approve]").click()
    page.wait_for_selector("tr.k-human_input")

    # The gate task's result repeats the payload; it arrives through the live stream.
    proc = resume(server.db, run_id)
    page.wait_for_selector("body[data-stream=ended]")
    assert finished(proc) == 0
    assert XSS_PAYLOAD in page.inner_text("#task-gate td.data")  # the result, as text
    assert XSS_PAYLOAD in page.inner_text("tr.k-human_input td.data")  # the payload, as text
    for path in (f"/runs/{run_id}", f"/runs/{run_id}/tasks/gate"):
        page.goto(server.url + path)
        assert XSS_PAYLOAD in page.inner_text("main")
        assert page.locator("img").count() == 0
        assert page.eval_on_selector_all("script", "s => s.map(e => e.src)") == [
            f"{server.url}/static/live.js"
        ]
    assert XSS_PAYLOAD in page.inner_text("#task-result")
    assert XSS_PAYLOAD in page.inner_text("#task-human")
    assert dialogs == []


def test_a_wrong_token_is_refused_and_nothing_is_journaled(
    server: Served, page: Any, tmp_path: Path
) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")
    page.goto(f"{server.url}/runs/{run_id}")
    before = page.inner_text("#event-count")
    form = page.locator("section.waiting form.decide")
    form.locator("input[name=token]").fill("not-the-token")
    with page.expect_navigation() as nav:
        form.locator("button[value=approve]").click()
    assert nav.value.status == 403
    assert "refused" in page.inner_text("p.error")
    screenshot(page, tmp_path, "refused")
    page.goto(f"{server.url}/runs/{run_id}")
    assert page.inner_text("#event-count") == before
    assert page.locator("section.waiting").count() == 1
    assert status_of(server.db, run_id) is RunStatus.WAITING


def test_the_page_resumes_after_the_server_restarts(
    server: Served, page: Any, tmp_path: Path
) -> None:
    """The server goes away while the run moves on; the browser reconnects by itself with
    ``Last-Event-ID`` and gets exactly the entries it missed. The page's stream URL says
    ``after=2`` (what the page was rendered with) and the page has seen seq 3 live, so a
    reconnect that ignored ``Last-Event-ID`` would send seq 3 twice (the page warns)."""
    run_id, token = make_run(server.db, "lk_testapps:gate")
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    page.goto(f"{server.url}/runs/{run_id}")
    assert "events?after=2" in page.get_attribute("#run", "data-live")
    page.wait_for_selector("#live-dot:not([hidden])", state="attached")
    approve = [*LOOPKERNEL, "--db", server.db, "approve", run_id, "gate", "--token", token]
    assert subprocess.run(approve, env=cli_env(), capture_output=True).returncode == 0
    page.wait_for_selector("#ev-3.k-human_input")  # arrived live
    port = server.url.rsplit(":", 1)[1]
    assert stop_server(server) == 0
    page.wait_for_selector("#live-dot[hidden]", state="attached")  # the stream broke

    assert finished(resume(server.db, run_id)) == 0  # the run finishes while nobody serves
    again = start_server(server.db, tmp_path, "--port", port)
    try:
        page.wait_for_selector("body[data-stream=ended]")
        last = int(page.inner_text("#event-count"))
        rows = page.eval_on_selector_all("#journal tr", "rows => rows.map(r => r.id)")
        assert last > 3 and rows == [f"ev-{n}" for n in range(1, last + 1)]
        assert [w for w in warnings if "duplicate" in w] == []
        assert page.inner_text("#run-status") == "succeeded"
    finally:
        stop_server(again)
