"""What a reader can ask for is bounded: a bad ``planned`` or ``Last-Event-ID`` is a 400
that holds no stream slot, a run as of one event comes in pages (rebuilt once per
``(run, seq)``), and the favicon a browser asks for on its own is there."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from lk_web import Served, big_run, make_run, start_server, stop_server


def test_a_bad_planned_value_is_400_and_holds_no_stream_slot(db_path: Path, tmp_path: Path) -> None:
    """``'²'.isdigit()`` is true and ``int('²')`` raises: each such GET once took a slot
    and never gave it back. Against ``--max-streams 2``, twenty bad GETs later both slots
    are still free."""
    run_id, _ = make_run(db_path, "lk_testapps:gate")  # waiting: a stream stays open
    served = start_server(str(db_path), tmp_path, "--max-streams", "2")
    try:
        with served.client() as http:
            for _ in range(2):
                for raw in ("²", "١٢", "1e3", "x", "-", "\uff19", "1" * 30):
                    bad = http.get(f"/runs/{run_id}/events", params={"planned": raw})
                    assert bad.status_code == 400, raw
                    assert "Traceback" not in bad.text
                for raw in ("²", "٣"):
                    bad = http.get(f"/runs/{run_id}/events", params={"after": raw})
                    assert bad.status_code == 400, raw
                header = {"Last-Event-ID": "²".encode()}  # UTF-8 bytes, as a browser may
                bad = http.get(f"/runs/{run_id}/events", headers=header)
                assert bad.status_code == 400
            url = f"/runs/{run_id}/events"
            with (
                http.stream("GET", url, params={"planned": "1"}) as one,
                http.stream("GET", url, params={"planned": "0"}) as two,
            ):
                assert (one.status_code, two.status_code) == (200, 200)
                chunks = two.iter_text()  # held: a dropped iterator would close the stream
                assert next(chunks).startswith("retry:")
                third = httpx.get(served.url + url, timeout=10)
                assert third.status_code == 503  # the cap is still exact
    finally:
        stop_server(served)


def test_the_run_as_of_an_event_comes_in_pages(server: Served) -> None:
    """450 tasks as of event #1: three pages of at most 200 rows; a page past the end, or
    not a number, is a 400; the same page twice is the same page (cached per run and
    seq)."""
    big_run(server.db, "wide", 450)
    with server.client() as http:
        seen: list[str] = []
        for page, rows in ((1, 200), (2, 200), (3, 50)):
            got = http.get("/runs/wide/at/1", params={"page": str(page)})
            assert got.status_code == 200, got.text
            body = got.text.split('id="at-tasks"', 1)[1].split("</table>", 1)[0]
            ids = re.findall(r'<td class="mono">([^<]+)</td>', body)
            assert len(ids) == rows, page
            seen += ids
        assert len(set(seen)) == 450 and "plan" in seen and "w448" in seen
        assert 'href="?page=2"' in http.get("/runs/wide/at/1").text
        for bad in ("0", "4", "²", "x"):
            assert http.get("/runs/wide/at/1", params={"page": bad}).status_code == 400, bad
        again = http.get("/runs/wide/at/1", params={"page": "3"})
        assert again.status_code == 200
        assert re.findall(r'<td class="mono">([^<]+)</td>', again.text) == seen[400:]


def test_the_favicon_is_served(server: Served) -> None:
    make_run(server.db, "speculation", "fast")
    with server.client() as http:
        icon = http.get("/favicon.ico")
        assert icon.status_code == 200
        assert icon.headers["content-type"].startswith("image/svg+xml")
        assert icon.text.startswith("<svg")
        assert '<link rel="icon" href="/static/favicon.svg"' in http.get("/").text
        assert http.get("/static/favicon.svg").status_code == 200
