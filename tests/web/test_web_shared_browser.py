"""In Chromium: one connection per browser. Ten tabs of live run pages and the runs list
all load and update in one browser, their live views carried by one SharedWorker on one
stream: the server allows one stream at a time here (``--max-streams 1``), so a second
connection would be refused (503) and its tab would say its updates stopped. Without
SharedWorker, a page opens a stream of its own and still updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lk_web import append_event, make_run, screenshot, start_server, stop_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TABS = 10


def test_ten_tabs_and_the_runs_list_share_one_stream(
    chromium: Any, db_path: Path, tmp_path: Path
) -> None:
    runs = [make_run(str(db_path), "lk_testapps:gate")[0] for _ in range(TABS)]
    served = start_server(str(db_path), tmp_path, "--max-streams", "1", "--keepalive-seconds", "2")
    context = chromium.new_context(viewport={"width": 1000, "height": 700})
    try:
        tabs = []
        for run_id in runs:
            tab = context.new_page()
            tab.set_default_timeout(60_000)
            tab.goto(f"{served.url}/runs/{run_id}")
            tabs.append(tab)
        listing = context.new_page()
        listing.set_default_timeout(60_000)
        listing.goto(served.url + "/")
        for tab in tabs:
            tab.wait_for_selector("body[data-stream=live]", state="attached")
            assert tab.get_attribute("body", "data-stream-mode") == "shared"
        assert listing.get_attribute("body", "data-stream-mode") == "shared"
        polled = listing.get_attribute("body", "data-runs-polled")
        seqs = [append_event(str(db_path), run_id, {"tab": i}) for i, run_id in enumerate(runs)]
        for tab, seq in zip(tabs, seqs, strict=True):  # every tab got its run's new event
            tab.wait_for_selector(f"#ev-{seq}", state="attached")
        listing.wait_for_function(
            "old => document.body.getAttribute('data-runs-polled') !== old", arg=polled
        )
        for tab in tabs:  # and none was refused a stream of its own
            assert tab.get_attribute("body", "data-stream") == "live"
            assert tab.locator("#stream-lost").is_hidden()
        # A tab that leaves takes its view off the stream; the others go on.
        tabs[0].close()
        seq = append_event(str(db_path), runs[1], {"after": "a tab left"})
        tabs[1].wait_for_selector(f"#ev-{seq}", state="attached")
        screenshot(tabs[1], tmp_path, "shared")
    finally:
        context.close()
        stop_server(served)


def test_without_shared_worker_a_page_opens_a_stream_of_its_own(
    chromium: Any, db_path: Path, tmp_path: Path
) -> None:
    (run_id, _) = make_run(str(db_path), "lk_testapps:gate")
    served = start_server(str(db_path), tmp_path)
    context = chromium.new_context()
    context.add_init_script("delete window.SharedWorker;")
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{served.url}/runs/{run_id}")
        page.wait_for_selector("body[data-stream=live]", state="attached")
        assert page.get_attribute("body", "data-stream-mode") == "own"
        seq = append_event(str(db_path), run_id)
        page.wait_for_selector(f"#ev-{seq}", state="attached")
    finally:
        context.close()
        stop_server(served)
