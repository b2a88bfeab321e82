"""A viewer that stops reading, over a real socket against a real ``loopkernel serve``:
its socket has a tiny receive buffer and is not read while the run journals thousands
of events. The other viewer gets every one of them meanwhile; when the slow one reads
again, its stream says exactly what it skipped (``catchup``) and goes on from the head."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

from lk_web import Served, make_run, run_async, sse
from loopkernel.graph import EventKind
from loopkernel.ids import RunId
from loopkernel.store import NewEvent, open_store
from loopkernel.web._live import CATCHUP_EVENTS, CATCHUP_TAIL

BATCHES, PER_BATCH = 6, 500
PAD = "x" * 4000
"""Rows of ~4 KB: 12 MB in all, more than the socket buffers hold (4 MB at most here)."""


def _append(db: str, run_id: str, n: int) -> int:
    async def go() -> int:
        store = open_store(db)
        await store.open()
        try:
            news = [
                NewEvent(kind=EventKind.TOOL_RESTARTED, data={"n": i, "pad": PAD}) for i in range(n)
            ]
            return (await store.append_events(RunId(run_id), news))[-1].seq
        finally:
            await store.close()

    return run_async(go())


def _journal_seqs(messages: list[dict[str, str]]) -> list[int]:
    return [json.loads(m["data"])["seq"] for m in messages if m["event"] == "journal"]


def _has_row(text: str, seq: int) -> bool:
    """Whether ``text`` holds the whole journal message of ``seq``."""
    at = text.find(f'"seq":{seq},')
    return at >= 0 and "\n\n" in text[at:]


def _read_until_seq(chunks: Iterator[str], text: str, seq: int) -> str:
    while not _has_row(text, seq):
        text += next(chunks)
    return text


def test_a_viewer_that_does_not_read_holds_nobody_back(server: Served) -> None:
    run_id, _ = make_run(server.db, "lk_testapps:gate")  # waiting: nobody else writes
    url = urlsplit(server.url)
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    slow.settimeout(30)
    slow.connect((url.hostname, url.port))
    with server.client() as http, http.stream("GET", f"/runs/{run_id}/events") as fast:
        assert fast.status_code == 200
        chunks = fast.iter_text()
        text = next(chunks)
        slow.sendall(f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += slow.recv(1024)
        assert head.startswith(b"HTTP/1.1 200")
        # The slow viewer reads nothing from here while the run journals 3,000 events.
        end = 0
        for _ in range(BATCHES):
            end = _append(server.db, run_id, PER_BATCH)
            text = _read_until_seq(chunks, text, end)
        seqs = _journal_seqs(sse(text))
        assert seqs == list(range(seqs[0], end + 1)) and len(seqs) >= BATCHES * PER_BATCH
        # The slow one reads again: what its buffers held, then the marker, then the head.
        rest = head.split(b"\r\n\r\n", 1)[1]
        while b"event: catchup" not in rest or not _has_row(rest.decode(errors="replace"), end):
            got = slow.recv(65536)
            assert got, "the stream closed"
            assert b"event: keepalive" not in got, "caught up with no marker: buffers too big"
            rest += got
    slow.close()
    body = rest.decode(errors="replace")
    messages = sse("\n".join(line for line in body.split("\r\n") if not _is_size(line)))
    before = [m for m in messages[: _index(messages, "catchup")] if m["event"] == "journal"]
    (marker,) = [json.loads(m["data"]) for m in messages if m["event"] == "catchup"]
    after = _journal_seqs(messages[_index(messages, "catchup") :])
    got = _journal_seqs(before)
    # Exact: the rows before the marker, the ones it names, the rows after it: every
    # event once, in order; it skipped more than the window and was sent the tail.
    assert marker["from"] == got[-1] + 1 and marker["skipped"] == marker["to"] - got[-1]
    assert after == list(range(marker["to"] + 1, end + 1)) and len(after) <= CATCHUP_TAIL
    assert marker["skipped"] > CATCHUP_EVENTS - CATCHUP_TAIL


def _is_size(line: str) -> bool:
    """A chunk-size line of the chunked body."""
    return bool(line) and all(c in "0123456789abcdef" for c in line)


def _index(messages: list[dict[str, str]], event: str) -> int:
    return [m["event"] for m in messages].index(event)
