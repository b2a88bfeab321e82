"""In Chromium, as an operator watches a run fail: the runs list's status chips count it
live (no reload), and the run page's failure card appears on its own, naming the failed
task, the error's type and message, with a link to the task's traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lk_web import Served, make_run, run_async, screenshot
from loopkernel.client import Client

pytestmark = [pytest.mark.browser]


def _execute(db: str, run_id: str) -> str:
    async def go() -> str:
        async with Client(db) as client:
            return (await client.execute(run_id)).status.value

    return run_async(go())


def _count(page: Any, status: str) -> str:
    return str(page.text_content(f".chips [data-count={status}]"))


def test_a_run_that_fails_while_watched_shows_in_the_chips_and_its_failure_card(
    server: Served, page: Any, tmp_path: Path
) -> None:
    done, _ = make_run(server.db, "lk_testapps:gate")  # one other run, waiting
    run_id, _ = make_run(server.db, "lk_webapps:broken", execute=False)  # started, not run
    page.goto(f"{server.url}/")
    assert (_count(page, "failed"), _count(page, "all")) == ("0", "2")
    before = {s: _count(page, s) for s in ("running", "waiting")}
    watch = page.context.new_page()
    watch.goto(f"{server.url}/runs/{run_id}")
    watch.wait_for_selector("#live-dot:not([hidden])", state="attached")  # stream open
    assert watch.locator("#failures").count() == 0

    assert _execute(server.db, run_id) == "failed"

    # The run page: the card comes by the stream, the page never reloaded.
    card = watch.locator("#failures .failure[data-task=parse]")
    card.wait_for()
    assert card.locator(".etype").inner_text() == "ValueError"
    assert "invalid literal for int()" in card.locator(".err").inner_text()
    link = card.locator("a.tb-link")
    assert link.get_attribute("href") == f"/runs/{run_id}/tasks/parse#task-traceback"
    assert "read_config_line" in card.locator("pre.traceback").inner_text()
    screenshot(watch, tmp_path, "failure-card")
    # The runs list: its chips count the failure, its row says failed, no reload.
    page.wait_for_function(
        "() => document.querySelector('.chips [data-count=failed]').textContent === '1'"
    )
    assert _count(page, "all") == "2"
    moved = {s: _count(page, s) for s in ("running", "waiting")}
    assert sum(map(int, moved.values())) == sum(map(int, before.values())) - 1
    assert "failed" in page.inner_text(f"tr[data-run='{run_id}']")
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    # The link leads to the traceback.
    link.click()
    watch.wait_for_selector("#task-traceback")
    assert "read_config_line" in watch.inner_text("#task-traceback")
    assert done
