"""In Chromium: a page whose stream starts more than the catch-up window behind the head
(its request held while 600 events are journaled: what a page back from long away
sends) shows "skipped N events — load them" with the exact count, then the live rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lk_web import big_run, run_async, screenshot, start_server, stop_server
from loopkernel.graph import EventKind
from loopkernel.ids import RunId
from loopkernel.store import NewEvent, open_store
from loopkernel.web._live import CATCHUP_TAIL

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


def test_the_page_shows_what_its_stream_skipped(
    chromium: Any, db_path: Path, tmp_path: Path
) -> None:
    big_run(str(db_path), "far", 2)
    served = start_server(str(db_path), tmp_path)
    context = chromium.new_context(viewport={"width": 1000, "height": 700})
    context.add_init_script("delete window.SharedWorker;")  # the page's own EventSource
    ends: list[int] = []

    def hold(route: Any) -> None:  # the page is rendered; 600 events before its stream
        if not ends:
            ends.append(_append(served.db, "far", 600))
        route.continue_()

    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.route("**/runs/far/events*", hold)
        page.goto(f"{served.url}/runs/far")
        last = int(page.get_attribute("[data-live]", "data-live").split("after=")[1].split("&")[0])
        marker = page.wait_for_selector("#journal > tr.catchup", state="attached")
        end = ends[0]
        page.wait_for_selector(f"#ev-{end}", state="attached")
        skipped = end - CATCHUP_TAIL - last
        assert marker.get_attribute("id") == f"skip-{last + 1}-{end - CATCHUP_TAIL}"
        assert f"skipped {skipped} events" in marker.inner_text()
        link = marker.query_selector("a")
        assert link is not None and link.inner_text() == "load them"
        assert link.get_attribute("href") == f"/runs/far?journal=all#ev-{last + 1}"
        assert page.get_attribute("body", "data-skipped") == str(skipped)
        rows = page.eval_on_selector_all("#journal > tr[id^=ev-]", "rs => rs.map(r => r.id)")
        assert rows[-CATCHUP_TAIL:] == [f"ev-{n}" for n in range(end - CATCHUP_TAIL + 1, end + 1)]
        screenshot(page, tmp_path, "catchup")
    finally:
        context.close()
        stop_server(served)
