"""The live stream over HTTP, against a real ``loopkernel serve``: keepalives when nothing
changes, deltas when something does, and streams that stay independent while dozens of
others come and go."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path

import httpx

from lk_web import (
    OPERATOR_TOKEN,
    append_event,
    big_run,
    make_run,
    run_async,
    sse,
    start_server,
    stop_server,
)
from loopkernel.client import Client
from loopkernel.graph import Delta, TaskState
from loopkernel.ids import RunId, TaskId

_chunks: dict[int, Iterator[str]] = {}


def read_until(live: httpx.Response, text: str, done: object) -> tuple[str, list[dict[str, str]]]:
    """Read the stream until ``done(messages)`` holds; all text read and the messages."""
    chunks = _chunks.setdefault(id(live), live.iter_text())
    while True:
        messages = sse(text)
        if done(messages):  # type: ignore[operator]
            return text, messages
        text += next(chunks)


def test_keepalives_are_sent_when_nothing_changes(db_path: Path, tmp_path: Path) -> None:
    """A waiting run's stream: one state, then keepalives only (the version does not move
    when nothing changed, so the stream reads nothing and sends no state again)."""
    run_id, _ = make_run(db_path, "lk_testapps:gate")
    served = start_server(str(db_path), tmp_path, "--keepalive-seconds", "0.2")
    try:
        with served.client() as http, http.stream("GET", f"/runs/{run_id}/events") as live:

            def kinds(ms: list[dict[str, str]]) -> list[str]:
                return [m["event"] for m in ms]

            text, messages = read_until(live, "", lambda ms: kinds(ms).count("keepalive") >= 4)
            seen = kinds(messages)
            assert seen.count("state") == 1 and seen.index("state") < seen.index("keepalive")
            assert seen[-4:] == ["keepalive"] * 4
            # something changes: the next message is about it, not another keepalive
            seq = append_event(db_path, run_id, {"note": "moved"})
            _, messages = read_until(
                live, text, lambda ms: any(m.get("id") == str(seq) for m in ms)
            )
            states = [m for m in messages if m["event"] == "state"]
            assert len(states) <= 2
    finally:
        stop_server(served)


def test_a_live_update_is_a_delta_not_the_whole_run(db_path: Path, tmp_path: Path) -> None:
    """A 2,000-task run: the page's stream starts with nothing to catch up, and one task
    finishing sends that task's row and its box, not the graph and the table again."""
    big_run(db_path, "fan", 2000)
    served = start_server(str(db_path), tmp_path)
    try:
        with served.client() as http:
            page = http.get("/runs/fan").text
            live_url = page.split('data-live="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
            with http.stream("GET", live_url) as live:
                text, messages = read_until(live, "", lambda ms: len(ms) >= 1)
                (first,) = messages  # the page is current: an empty state, nothing else
                assert first["event"] == "state" and set(json.loads(first["data"])) == {"status"}

                async def finish_one() -> None:
                    async with Client(str(db_path)) as client:
                        task = (await client.graph("fan")).tasks[TaskId("w1500")]
                        done = task.evolve(state=TaskState.SUCCEEDED, result={"n": "late"})
                        await client.store.commit_patches(RunId("fan"), [], Delta(tasks=(done,)))

                run_async(finish_one())
                _, messages = read_until(
                    live, text, lambda ms: [m["event"] for m in ms].count("state") == 2
                )
        state = [json.loads(m["data"]) for m in messages if m["event"] == "state"][-1]
        assert "graph" not in state  # the shape did not change
        assert set(state.get("tasks", {})) <= {"w1500"}  # at most the one row
        assert len(json.dumps(state)) < 8_000  # the whole run's graph and table are MBs
        assert "head" in state and "999 succeeded" not in state["head"]
        assert "1001 succeeded" in state["head"]
    finally:
        stop_server(served)


def test_streams_stay_independent_while_sixty_others_churn(db_path: Path, tmp_path: Path) -> None:
    """Sixty clients connect and drop at random while the run moves; afterwards a fresh
    stream and one that stayed open the whole time both get the next event."""
    run_id, _ = make_run(db_path, "lk_testapps:gate")
    served = start_server(str(db_path), tmp_path)

    async def churn() -> tuple[int, int]:
        rng = random.Random(7)
        opened = 0
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:

            async def one() -> int:
                n = 0
                for _ in range(4):
                    async with http.stream("GET", f"/runs/{run_id}/events") as r:
                        if r.status_code == 200:
                            n += 1
                            async for _chunk in r.aiter_text():
                                if rng.random() < 0.5:
                                    break
                    await asyncio.sleep(rng.random() * 0.05)
                return n

            async def writer() -> int:
                last = 0
                for i in range(20):
                    last = await asyncio.to_thread(append_event, db_path, run_id, {"i": i})
                    await asyncio.sleep(0.01)
                return last

            results = await asyncio.gather(writer(), *(one() for _ in range(60)))
            opened = sum(results[1:])
            return results[0], opened

    try:
        with served.client() as http, http.stream("GET", f"/runs/{run_id}/events") as steady:
            text, _ = read_until(steady, "", lambda ms: any(m["event"] == "state" for m in ms))
            last, opened = run_async(churn())
            assert opened > 60
            with (
                served.client() as fresh_http,
                fresh_http.stream("GET", f"/runs/{run_id}/events?after={last}") as fresh,
            ):
                ftext, _ = read_until(fresh, "", lambda ms: any(m["event"] == "state" for m in ms))
                seq = append_event(db_path, run_id, {"after": "churn"})
                read_until(fresh, ftext, lambda ms: any(m.get("id") == str(seq) for m in ms))
            _, messages = read_until(
                steady, text, lambda ms: any(m.get("id") == str(seq) for m in ms)
            )
            ids = [int(m["id"]) for m in messages if m["event"] == "journal"]
            assert ids == list(range(1, seq + 1))  # the steady stream: every event, once
        assert http_ok(served.url)
    finally:
        stop_server(served)


def http_ok(url: str) -> bool:
    page = httpx.get(url + "/", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    return page.status_code == 200
