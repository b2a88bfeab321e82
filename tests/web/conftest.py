"""Fixtures for the web inspector: a real ``loopkernel serve`` subprocess, and the system
Chromium driven by Playwright.

No browser is a failure, not a skip: the browser tests are the only check that the pages
work in a browser. ``LOOPKERNEL_TEST_BROWSER=skip`` skips them on purpose (said in red in
the summary); ``.ci/start-browser`` installs Chromium.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lk_web import Served, start_server, stop_server

_skipped: list[str] = []
CHROMIUM = os.environ.get("LOOPKERNEL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def server(db_path: Path, tmp_path: Path) -> Iterator[Served]:
    served = start_server(str(db_path), tmp_path)
    try:
        yield served
    finally:
        stop_server(served)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The system Chromium under Playwright (never a downloaded browser). Module-scoped:
    Playwright's sync API keeps an event loop running in the test thread while it is open,
    which ``asyncio.run`` in later tests could not live with."""
    if os.environ.get("LOOPKERNEL_TEST_BROWSER") == "skip":
        reason = "LOOPKERNEL_TEST_BROWSER=skip: the browser tests were SKIPPED on purpose"
        _skipped.append(reason)
        pytest.skip(reason)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: run .ci/start-browser (apt-get install chromium), "
            "set LOOPKERNEL_CHROMIUM, or LOOPKERNEL_TEST_BROWSER=skip to skip on purpose",
            pytrace=False,
        )
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        context.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _skipped:
        terminalreporter.write_sep("!", "browser tests were SKIPPED", red=True, bold=True)
        terminalreporter.write_line(_skipped[0], red=True)
