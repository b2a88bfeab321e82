"""One reader per run, many viewers: twenty streams of one run cost one journal read and
one render per change, get the same bytes, and a stream that fell behind the hub's
window catches up from its last seq, losing and doubling nothing."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from lk_web import make_run, run_async
from loopkernel.client import Client
from loopkernel.graph import EventKind
from loopkernel.ids import RunId
from loopkernel.store import NewEvent
from loopkernel.web import _live
from loopkernel.web._live import Renderers, Watcher, stream
from loopkernel.web._stream import tag

VIEWERS = 20


def _counted(client: Client, calls: Counter[str]) -> None:
    """Count the client's journal reads (the real ones run underneath)."""
    for name in ("events", "event_times", "patches"):
        real = getattr(client, name)

        async def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return await _real(*args, **kw)

        setattr(client, name, counted)


async def _append(client: Client, run_id: str, n: int) -> int:
    news = [NewEvent(kind=EventKind.TOOL_RESTARTED, data={"n": i}) for i in range(n)]
    return (await client.store.append_events(RunId(run_id), news))[-1].seq


async def _follow(messages: Any, until: int, writes: list[int] | None = None) -> list[str]:
    """The journal messages of one stream until the one of seq ``until`` (a stream sends
    what one wake-up brought as one chunk of messages)."""
    got: list[str] = []
    async for chunk in messages:
        if writes is not None and "event: journal" in chunk:
            writes.append(1)
        for message in chunk.split("\n\n"):
            if "event: journal" in message:
                got.append(message)
                if message.startswith(f"id: {until}\n"):
                    return got
    raise AssertionError("the stream ended early")


def _renderers(renders: Counter[str]) -> Renderers:
    def row(ev: Any, p: Any, times: Any) -> str:
        renders["row"] += 1
        return f"<tr id='ev-{ev.seq}'><td>{ev.kind.value}</td></tr>"

    return Renderers(row=row, patch=lambda seq, p: "", state=lambda snap, sent: {})


def test_many_viewers_of_one_run_cost_one_read_per_change(db_path: Path) -> None:
    run_id, _ = make_run(db_path, "lk_testapps:gate")  # waiting: nobody else writes

    async def go() -> None:
        async with Client(str(db_path)) as client:
            last = (await client.info(run_id)).last_seq
            calls: Counter[str] = Counter()
            renders: Counter[str] = Counter()
            _counted(client, calls)
            watcher = Watcher(client=client, poll_seconds=0.05, max_streams=VIEWERS)
            streams = [
                stream(client, watcher, run_id, last, _renderers(renders), keepalive_seconds=30)
                for _ in range(VIEWERS)
            ]
            for s in streams:  # each opens: the retry line, then the state it starts from
                assert (await anext(s)).startswith("retry:")
                while "event: state" not in await anext(s):
                    pass  # the patches of the events before ``after``, sent again
            calls.clear()
            writes: list[int] = []
            end = await _append(client, run_id, 5)
            try:
                async with asyncio.timeout(30):
                    seen = await asyncio.gather(*(_follow(s, end, writes) for s in streams))
            finally:
                for s in streams:
                    await s.aclose()
                await watcher.stop()
            assert all(len(one) == 5 for one in seen)
            assert all(one == seen[0] for one in seen)  # the same bytes to every viewer
            assert [m.split("\n", 1)[0] for m in seen[0]] == [
                f"id: {s}" for s in range(last + 1, end + 1)
            ]
            assert renders["row"] == 5, renders  # each row rendered once, not once a viewer
            # The hub's reads, however many viewers: a few rounds, never one per stream.
            assert calls["events"] <= 3 and calls["event_times"] <= 3, calls
            # And one write per stream per change: the five rows in a chunk, not five.
            assert len(writes) <= 3 * VIEWERS, len(writes)

    run_async(go())


def test_a_viewer_behind_the_window_catches_up_from_its_last_seq(
    db_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(_live, "RING", 4)
    run_id, _ = make_run(db_path, "lk_testapps:gate")

    async def go() -> None:
        async with Client(str(db_path)) as client:
            first = (await client.info(run_id)).last_seq
            renders: Counter[str] = Counter()
            watcher = Watcher(client=client, poll_seconds=0.05, max_streams=2)
            ahead = stream(client, watcher, run_id, first, _renderers(renders))
            assert (await anext(ahead)).startswith("retry:")
            middle = await _append(client, run_id, 12)  # past 2 * RING, but needed by one
            behind = stream(client, watcher, run_id, first, _renderers(renders))
            try:
                async with asyncio.timeout(30):
                    await _follow(ahead, middle)
                    hub = watcher.hubs[run_id]
                    assert hub.since(first) is not None  # kept while a stream needed them
                    end = await _append(client, run_id, 12)  # sent by every stream: dropped
                    await _follow(ahead, end)
                    assert hub.floor > first  # the first events left the window
                    got = await _follow(behind, end)
            finally:
                await ahead.aclose()
                await behind.aclose()
                await watcher.stop()
            seqs = [int(m.split("\n", 1)[0][4:]) for m in got]
            assert seqs == list(range(first + 1, end + 1))  # none lost, none doubled

    run_async(go())


def test_the_shared_stream_tags_every_message_of_a_chunk() -> None:
    """A view's stream sends what one wake-up brought as one chunk; the shared stream
    (``/live``) tags each message in it with the view's id, drops ids and comments."""
    chunk = (
        'id: 7\nevent: journal\ndata: {"seq":7,"html":"<tr>"}\n\n'
        'event: patch\ndata: {"seq":6,"html":"<td>"}\n\n'
        "event: state\ndata: {}\n\n"
    )
    assert tag("v{1}", chunk) == (
        'event: journal\ndata: {"sub":"v{1}","seq":7,"html":"<tr>"}\n\n'
        'event: patch\ndata: {"sub":"v{1}","seq":6,"html":"<td>"}\n\n'
        'event: state\ndata: {"sub":"v{1}"}\n\n'
    )
    assert tag("v", "retry: 1000\n\n: keepalive every 15 s\n\n") is None


def test_a_burst_goes_out_in_bounded_chunks(db_path: Path, monkeypatch: Any) -> None:
    """A burst of events is written in chunks of at most ``CHUNK_EVENTS`` rows, in order,
    none lost, none doubled: a viewer's memory stays bounded however fast the run goes."""
    monkeypatch.setattr(_live, "CHUNK_EVENTS", 4)
    run_id, _ = make_run(db_path, "lk_testapps:gate")

    async def go() -> tuple[list[int], list[int], list[int]]:
        async with Client(str(db_path)) as client:
            first = (await client.info(run_id)).last_seq
            end = await _append(client, run_id, 10)  # journaled before the stream reads
            watcher = Watcher(client=client, poll_seconds=0.05, max_streams=1)
            s = stream(client, watcher, run_id, first, _renderers(Counter()))
            sizes: list[int] = []
            seqs: list[int] = []
            try:
                async with asyncio.timeout(30):
                    async for chunk in s:
                        rows = [m for m in chunk.split("\n\n") if "event: journal" in m]
                        if rows:
                            sizes.append(len(rows))
                            seqs += [int(m.split("\n", 1)[0][4:]) for m in rows]
                        if seqs and seqs[-1] == end:
                            break
            finally:
                await s.aclose()
                await watcher.stop()
            return sizes, seqs, list(range(first + 1, end + 1))

    sizes, seqs, expected = run_async(go())
    assert seqs == expected  # none lost, none doubled, in order
    assert max(sizes) <= 4 and len(sizes) >= 3, sizes


def _seqs(messages: list[str], kind: str = "journal") -> list[int]:
    return [int(m.split("\n", 1)[0][4:]) for m in messages if f"event: {kind}" in m]


def _catchups(messages: list[str]) -> list[dict[str, int]]:
    return [json.loads(m.split("data: ", 1)[1]) for m in messages if "event: catchup" in m]


async def _messages_until(messages: Any, until: int) -> list[str]:
    """Every message of one stream until the journal row of seq ``until``."""
    got: list[str] = []
    async for chunk in messages:
        for message in chunk.split("\n\n"):
            got.append(message)
            if "event: journal" in message and message.startswith(f"id: {until}\n"):
                return got
    raise AssertionError("the stream ended early")


def test_a_viewer_that_does_not_read_is_moved_to_catch_up(db_path: Path, monkeypatch: Any) -> None:
    """A stream nobody reads (its generator not iterated: what a full send buffer does to
    it) holds nobody back: the other viewer gets every event; once it reads again it is
    sent a ``catchup`` marker naming exactly the events it skips, then the live window."""
    monkeypatch.setattr(_live, "CATCHUP_EVENTS", 20)
    monkeypatch.setattr(_live, "CATCHUP_TAIL", 5)
    run_id, _ = make_run(db_path, "lk_testapps:gate")

    async def go() -> None:
        async with Client(str(db_path)) as client:
            first = (await client.info(run_id)).last_seq
            watcher = Watcher(client=client, poll_seconds=0.05, max_streams=2)
            fast = stream(client, watcher, run_id, first, _renderers(Counter()))
            slow = stream(client, watcher, run_id, first, _renderers(Counter()))
            try:
                async with asyncio.timeout(30):
                    assert (await anext(fast)).startswith("retry:")
                    assert (await anext(slow)).startswith("retry:")
                    mid = await _append(client, run_id, 3)
                    early = await _messages_until(slow, mid)  # it reads, then stops
                    got = await _follow(fast, mid)
                    end = first
                    for _ in range(5):  # 50 events while the slow one reads nothing
                        end = await _append(client, run_id, 10)
                        got += await _follow(fast, end)
                    later = await _messages_until(slow, end)
            finally:
                await fast.aclose()
                await slow.aclose()
                await watcher.stop()
            # The fast viewer: every event, in order, no marker.
            assert _seqs(got) == list(range(first + 1, end + 1))
            # The slow one: the marker's counts are exact, and nothing else is missing.
            assert _seqs(early) == list(range(first + 1, mid + 1))
            (marker,) = _catchups(later)
            assert marker == {"skipped": end - 5 - mid, "from": mid + 1, "to": end - 5}
            assert later[[m.startswith("id:") for m in later].index(True)].startswith(
                f"id: {end - 5}\nevent: catchup"
            )  # its id: a reconnect goes on from there
            assert _seqs(later) == list(range(end - 4, end + 1))  # the live window

    run_async(go())


def test_a_reconnect_from_long_ago_resyncs_bounded(db_path: Path, monkeypatch: Any) -> None:
    """A stream opened with ``Last-Event-ID`` far behind the head re-syncs from that
    seq bounded the same way: a marker for what it skips, then the live window; one
    within the window gets every event after its seq."""
    monkeypatch.setattr(_live, "CATCHUP_EVENTS", 20)
    monkeypatch.setattr(_live, "CATCHUP_TAIL", 5)
    run_id, _ = make_run(db_path, "lk_testapps:gate")

    async def go() -> tuple[int, int, list[str], list[str]]:
        async with Client(str(db_path)) as client:
            first = (await client.info(run_id)).last_seq
            end = await _append(client, run_id, 40)
            watcher = Watcher(client=client, poll_seconds=0.05, max_streams=2)
            far = stream(client, watcher, run_id, first, _renderers(Counter()))
            near = stream(client, watcher, run_id, end - 15, _renderers(Counter()))
            try:
                async with asyncio.timeout(30):
                    return (
                        first,
                        end,
                        await _messages_until(far, end),
                        await _messages_until(near, end),
                    )
            finally:
                await far.aclose()
                await near.aclose()
                await watcher.stop()

    first, end, far, near = run_async(go())
    assert _catchups(far) == [{"skipped": end - 5 - first, "from": first + 1, "to": end - 5}]
    assert _seqs(far) == list(range(end - 4, end + 1))
    assert _catchups(near) == [] and _seqs(near) == list(range(end - 14, end + 1))
