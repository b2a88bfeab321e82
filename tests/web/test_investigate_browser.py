"""In Chromium: the Investigations page of ``loopkernel serve``. A user asks, the page
follows the run live while a worker process runs it, the report renders with facts,
suspected causes and missing evidence apart, a follow-up reuses the evidence (no tool call
sent again) and the conversation shows both; a user outside the namespace and unsafe
uploads are refused with one line, before anything is read or journaled."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lk_service import (
    ALICE,
    BOB,
    dump_archive,
    member,
    people_file,
    start_workers,
    stop_workers,
    tar_with,
)
from lk_web import Served, run_async, screenshot, start_server, stop_server
from loopkernel.client import Client

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def served(db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("LOOPKERNEL_SRE_SERVICE", str(people_file(tmp_path)))
    served = start_server(str(db_path), tmp_path)
    try:
        yield served
    finally:
        stop_server(served)


def _runs(db: str) -> list[Any]:
    async def go() -> list[Any]:
        async with Client(db) as client:
            return await client.list_runs(100)

    return run_async(go())


def _tool_calls(db: str, run_id: str) -> int:
    async def go() -> int:
        async with Client(db) as client:
            return len(await client.effects(run_id))

    return run_async(go())


def _ask(page: Any, url: str, token: str | None, question: str, namespace: str) -> None:
    page.goto(f"{url}/investigations")
    if token is not None:
        page.fill("input[name=token]", token)
    page.fill("input[name=question]", question)
    page.fill("input[name=namespace]", namespace)


def test_ask_watch_read_the_report_and_follow_up(served: Served, page: Any, tmp_path: Path) -> None:
    _ask(page, served.url, ALICE, "why is the payments deployment restarting?", "prod")
    page.click("button:has-text('Investigate')")
    # Queued: no worker runs yet, so the page is following the run through the stream.
    page.wait_for_selector("#following[data-live]")
    page.wait_for_selector("#live-dot:not([hidden])", state="attached")
    screenshot(page, tmp_path, "investigation-live")
    first = page.url.rsplit("/", 1)[1]
    workers = start_workers(served.db)
    try:
        page.wait_for_selector("#report", timeout=180_000)  # the page reloaded at the end
        assert page.locator("#following").count() == 0
        assert "OOMKilled" in page.inner_text("#report .summary")
        headings = page.eval_on_selector_all("#report h3", "hs => hs.map(h => h.textContent)")
        assert "Observed facts" in headings and "Verified causes" in headings
        assert page.locator("#report a.cite").count() > 0
        screenshot(page, tmp_path, "investigation-report")
        made = _tool_calls(served.db, first)
        assert made > 0
        # Follow up, signed in by the cookie now (no token typed again).
        assert "alice" in page.inner_text("#asking-as")
        page.fill("#follow-up input[name=question]", "and what do its logs say?")
        page.click("#follow-up button:has-text('Ask')")
        page.wait_for_selector("#report", timeout=180_000)
    finally:
        stop_workers(workers)
    second = page.url.rsplit("/", 1)[1]
    assert second != first
    turns = page.eval_on_selector_all("#thread li.turn", "ls => ls.map(l => l.dataset.run)")
    assert turns == [first, second]
    assert "why is the payments deployment restarting?" in page.inner_text("#thread")
    assert page.locator("#reused li").count() > 0  # which evidence, how old
    assert "s old at the question" in page.inner_text("#reused")
    assert "untrusted" in page.inner_text("#earlier")
    assert _tool_calls(served.db, second) == 0  # every call answered from the first run
    screenshot(page, tmp_path, "investigation-follow-up")
    page.goto(f"{served.url}/investigations")  # the list: question and answer
    row = page.locator(f"#investigations tr[data-run='{first}']")
    assert "payments" in row.inner_text() and "OOMKilled" in row.inner_text()


def test_a_user_outside_the_namespace_is_refused_with_one_line(served: Served, page: Any) -> None:
    before = len(_runs(served.db))
    _ask(page, served.url, BOB, "why is the payments deployment restarting?", "prod")
    page.click("button:has-text('Investigate')")
    alert = page.locator("p.error[role=alert]")
    assert alert.inner_text() == "refused: bob may not investigate namespace prod"
    # a namespace of theirs, a question naming another: refused too
    _ask(page, served.url, BOB, "is it the same as in namespace prod?", "billing")
    page.click("button:has-text('Investigate')")
    assert "names namespace prod" in page.locator("p.error[role=alert]").inner_text()
    assert len(_runs(served.db)) == before  # nothing journaled


def _upload(page: Any, served: Served, archive: Path) -> str:
    _ask(page, served.url, ALICE, "why is the payments deployment restarting?", "prod")
    page.check("input[name=source][value=upload]")
    page.set_input_files("input[name=archive]", str(archive))
    page.click("button:has-text('Investigate')")
    page.wait_for_load_state()
    alert = page.locator("p.error[role=alert]")
    return alert.inner_text() if alert.count() else ""


def test_unsafe_uploads_are_refused_with_one_line_and_a_safe_one_is_investigated(
    served: Served, page: Any, tmp_path: Path
) -> None:
    cases = {
        "dotdot": (tar_with(tmp_path / "a.tgz", member("dump/../../escape.json")), "'..'"),
        "absolute": (tar_with(tmp_path / "b.tgz", member("/etc/cron.d/x")), "absolute path"),
        "symlink": (
            tar_with(tmp_path / "c.tgz", member("dump/nodes.json", tarfile.SYMTYPE, "/etc/passwd")),
            "symbolic link",
        ),
        "hardlink": (
            tar_with(tmp_path / "d.tgz", member("dump/x", tarfile.LNKTYPE, "/etc/shadow")),
            "hard link",
        ),
        "device": (tar_with(tmp_path / "e.tgz", member("dump/null", tarfile.CHRTYPE)), "device"),
    }
    big = tmp_path / "big.tgz"
    big.write_bytes(b"\0" * (80 * 1024))  # over the table's 64 KiB bound
    cases["over-size"] = (big, "over 65536 bytes")
    before = len(_runs(served.db))
    for name, (archive, words) in cases.items():
        line = _upload(page, served, archive)
        assert words in line and "\n" not in line, (name, line)
    assert len(_runs(served.db)) == before
    uploads = tmp_path / "uploads"
    assert not (tmp_path / "escape.json").exists()
    assert [p.name for p in uploads.iterdir()] == [] if uploads.exists() else True
    assert _upload(page, served, dump_archive(tmp_path / "dump.tgz")) == ""
    page.wait_for_selector("#thread")
    (turn,) = page.eval_on_selector_all("#thread li.turn", "ls => ls.map(l => l.dataset.run)")
    info = next(r for r in _runs(served.db) if r.run_id == turn)
    assert info.params["service"]["source"] == "upload"
    assert info.params["service"]["asked_by"] == "alice"
