"""The inspector says what a waiting task waits for: a run asleep on a timer shows a timer
card with its wake-up time, not a card asking a human."""

from __future__ import annotations

import time

import httpx

from lk_web import Served, run_async
from loopkernel.client import Client


def test_a_sleeping_task_is_shown_as_a_timer_with_its_wake_up_time(server: Served) -> None:
    async def go() -> float:
        async with Client(server.db) as client:
            _, started = await client.start(
                "lk_timerapps:nap", overrides={"seconds": 3600.0}, run_id="n1"
            )
            outcome = await client.execute(started.run_id)
            assert outcome.status.value == "waiting"
            (task,) = await client.waiting("n1")
            assert task.wake_at is not None
            return task.wake_at

    wake = run_async(go())
    with server.client() as http:
        page: httpx.Response = http.get("/runs/n1")
    assert page.status_code == 200
    card = page.text.split('<section class="card waiting timer">', 1)[1].split("</section>")[0]
    assert "Waiting for a timer" in card and "Waiting for a human" not in card
    shown = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(wake)) + " UTC"
    assert f"Wakes at <time>{shown}</time>" in card, card
