"""In Chromium: a resume from the page answers at once (the run goes on in the server's
background executor, not inside the request) and the page follows the run to its end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lk_web import OPERATOR_TOKEN, Served, make_run, screenshot, status_of
from loopkernel.graph import RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_resume_from_the_page_answers_at_once_and_the_page_follows_the_run(
    server: Served, page: Any, tmp_path: Path
) -> None:
    run_id, _ = make_run(server.db, "lk_webapps:chain", execute=False)  # 30 steps of 0.1 s
    page.goto(f"{server.url}/login?next=/runs/{run_id}")
    page.fill("input[name=token]", OPERATOR_TOKEN)
    page.click("button[type=submit]")
    page.wait_for_selector("#live-dot:not([hidden])", state="attached")  # stream open
    page.click("details.operator summary")
    page.click("button:has-text('Resume here')")
    notice = page.locator("p.notice[role=status]")
    notice.wait_for()
    # Answered while the run still runs: before, the answer came after its last step.
    assert status_of(server.db, run_id) is RunStatus.RUNNING
    assert "resumed: the run goes on here" in notice.inner_text()
    page.wait_for_selector("body[data-stream=ended]", timeout=120_000)
    assert page.inner_text("#run-status") == "succeeded"
    assert page.locator("#task-s29").count() == 1
    last = int(page.inner_text("#event-count"))
    rows = page.eval_on_selector_all("#journal > tr", "rows => rows.map(r => r.id)")
    assert rows == [f"ev-{n}" for n in range(1, last + 1)]  # none lost, none doubled
    screenshot(page, tmp_path, "resumed")
