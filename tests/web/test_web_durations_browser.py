"""In Chromium: a running run's "running for" moves by itself, a waiting run says since
when it waits, and the live journal keeps a window of rows in the DOM however long the
run grows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lk_web import Served, big_run, make_run, run_async, screenshot
from loopkernel.graph import EventKind
from loopkernel.ids import RunId
from loopkernel.store import NewEvent, open_store

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _append(db: str, run_id: str, n: int) -> int:
    async def go() -> int:
        store = open_store(db)
        await store.open()
        try:
            news = [NewEvent(kind=EventKind.TOOL_RESTARTED, data={"n": i}) for i in range(n)]
            return (await store.append_events(RunId(run_id), news))[-1].seq
        finally:
            await store.close()

    return run_async(go())


def test_running_for_moves_while_the_run_runs(server: Served, page: Any, tmp_path: Path) -> None:
    big_run(server.db, "busy", 3)  # running, written through the store; nobody executes it
    page.goto(f"{server.url}/runs/busy")
    assert page.text_content("dl.facts").count("Running for") == 1
    first = page.inner_text("#run-took")
    page.wait_for_function("t => document.getElementById('run-took').textContent !== t", arg=first)
    assert page.inner_text("#run-took") != first
    screenshot(page, tmp_path, "running-for")


def test_a_waiting_run_says_since_when(server: Served, page: Any) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")
    page.goto(f"{server.url}/runs/{run_id}")
    facts = page.text_content("dl.facts")
    assert "Waiting since" in facts and "UTC, for" in facts and "Running for" not in facts
    first = page.inner_text("#run-took")
    page.wait_for_function("t => document.getElementById('run-took').textContent !== t", arg=first)


def test_the_live_journal_keeps_a_window_of_rows(server: Served, page: Any) -> None:
    big_run(server.db, "long", 2)
    last = _append(server.db, "long", 600)
    page.goto(f"{server.url}/runs/long")
    page.wait_for_selector("#live-dot:not([hidden])", state="attached")  # stream open
    assert page.locator("#journal > tr").count() == 500  # the page shows the last 500
    end = _append(server.db, "long", 40)
    page.wait_for_selector(f"#ev-{end}", state="attached")
    ids = page.eval_on_selector_all("#journal > tr", "rows => rows.map(r => r.id)")
    assert len(ids) == 500  # a window: the oldest rows left as new ones came
    assert ids == [f"ev-{n}" for n in range(end - 499, end + 1)]
    assert last < end
