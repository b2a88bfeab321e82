"""A failed task shows its traceback on the run page and on its task page (in Chromium):
the executor keeps the failure's traceback, redacted and bounded, in the task's
``task_failed`` event (not in the task's error, so the run's digest holds no paths or
line numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lk_web import Served, make_run, run_async, screenshot
from loopkernel.client import Client
from loopkernel.executor._outcomes import TRACEBACK_CHARS, traceback_of
from loopkernel.graph import EventKind

SECRET = "sk-live-abcdefghijklmnopqrstuvwx"


def _failure(db: str, run_id: str) -> tuple[Any, Any]:
    async def go() -> tuple[Any, Any]:
        async with Client(db) as client:
            (ev,) = [e for e in await client.events(run_id) if e.kind is EventKind.TASK_FAILED]
            return ev.data, (await client.graph(run_id)).tasks["parse"].error

    return run_async(go())


def test_the_failed_event_keeps_the_traceback_redacted_and_the_error_without_it(
    db_path: Path,
) -> None:
    run_id, _ = make_run(db_path, "lk_webapps:broken")
    data, error = _failure(str(db_path), run_id)
    trace = data["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert "in read_config_line" in trace and "in parse_config" in trace
    assert 'int(line.split("=", 1)[1])' in trace  # the line that raised
    assert trace.rstrip().splitlines()[-1].startswith("ValueError: invalid literal")
    assert SECRET not in trace and "[redacted:" in trace
    assert error["type"] == "ValueError" and "traceback" not in error


def test_a_traceback_is_bounded_to_its_end() -> None:
    try:
        raise RuntimeError("x" * 20_000 + " at the bottom")
    except RuntimeError as exc:
        text = traceback_of(exc)
    assert len(text) <= TRACEBACK_CHARS + 4
    assert text.startswith("...\n") and text.rstrip().endswith("x at the bottom")


@pytest.mark.browser
def test_a_failed_task_shows_its_traceback_on_the_run_page(
    server: Served, page: Any, tmp_path: Path
) -> None:
    run_id, _ = make_run(server.db, "lk_webapps:broken")
    page.goto(f"{server.url}/runs/{run_id}")
    card = page.locator("#failures")
    card.wait_for()
    failure = card.locator(".failure[data-task=parse]")
    assert "ValueError" in failure.inner_text()
    trace = failure.locator("pre.traceback")
    assert trace.is_visible()
    text = trace.inner_text()
    assert "read_config_line" in text and "invalid literal for int()" in text
    assert SECRET not in page.content()
    page.click("#failures a:has-text('parse')")
    page.wait_for_selector("#task-traceback")
    assert "read_config_line" in page.inner_text("#task-traceback")
    screenshot(page, tmp_path, "traceback")
