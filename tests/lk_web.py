"""Runs for the web tests, made through the public client API."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import signal
import subprocess
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel.client import Client
from loopkernel.graph import EventKind, RunStatus

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` in a thread of its own: Playwright's sync API keeps an event loop
    running in the test's thread."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def make_run(
    db: Path | str, app: str, scenario: str | None = None, execute: bool = True
) -> tuple[str, str]:
    """Start (and execute) a run; its id and approval token."""

    async def go() -> tuple[str, str]:
        async with Client(str(db)) as client:
            _, started = await client.start(app, scenario=scenario)
            if execute:
                await client.execute(started.run_id)
            return started.run_id, started.token

    return run_async(go())


def status_of(db: Path | str, run_id: str) -> RunStatus:
    async def go() -> RunStatus:
        async with Client(str(db)) as client:
            return (await client.info(run_id)).status

    return run_async(go())


def csrf_of(http: httpx.Client, path: str) -> str:
    """Load a page (which sets the CSRF cookie) and return the token its forms carry."""
    page = http.get(path)
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, "the page has no form"
    return found.group(1)


def sse(text: str) -> list[dict[str, str]]:
    """Parse a text/event-stream body into messages (comments dropped)."""
    out = []
    for block in text.split("\n\n"):
        msg: dict[str, str] = {}
        for line in block.splitlines():
            if not line or line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            msg[key] = value[1:] if value.startswith(" ") else value
        if msg and "event" in msg:
            out.append(msg)
    return out


OPERATOR_TOKEN = "operator-token-for-the-web-tests"
SHOTS = os.environ.get("LOOPKERNEL_SCREENSHOTS")
"""Also save the screenshots there (``docs/img`` when refreshing the docs)."""


@dataclass
class Served:
    """A running ``loopkernel serve``."""

    url: str
    token: str
    proc: subprocess.Popen[str]
    db: str

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kw)


def ensure_database(db: str) -> None:
    """An empty LoopKernel database at ``db`` if nothing is there: ``serve`` reads an
    existing one and never creates it (a mistyped ``--db`` exits 9, docs/cli.md)."""
    from loopkernel.store import open_store

    async def create() -> None:
        store = open_store(db)
        await store.open()
        await store.close()

    if "://" not in db and not Path(db).exists():
        # on a thread of its own: the browser tests call this with Playwright's loop running
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(lambda: asyncio.run(create())).result()


def start_server(db: str, tmp_path: Path, *extra: str) -> Served:
    ensure_database(db)
    token_file = tmp_path / "operator-token"
    token_file.write_text(OPERATOR_TOKEN + "\n")
    proc = subprocess.Popen(
        [*LOOPKERNEL, "--db", db, "serve", "--port", "0", "--token-file", str(token_file), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(),
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    found = re.search(r"(http://\S+/)", first)
    if found is None:
        proc.kill()
        rest = proc.stdout.read()
        proc.stdout.close()
        proc.wait()
        raise AssertionError(f"serve did not start: {first}{rest}")
    return Served(url=found.group(1).rstrip("/"), token=OPERATOR_TOKEN, proc=proc, db=db)


def stop_server(served: Served) -> int:
    """Ctrl-C the server; its exit code."""
    served.proc.send_signal(signal.SIGINT)
    try:
        served.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait()
    if served.proc.stdout is not None:
        served.proc.stdout.close()
    return served.proc.returncode


def screenshot(page: Any, tmp_path: Path, name: str) -> Path:
    """Save a full-page screenshot in the test's directory (and in ``$LOOPKERNEL_SCREENSHOTS``)."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)
    return path


def big_run(db: Path | str, run_id: str, tasks: int, *, shape: str = "fan") -> None:
    """A running run of ``tasks`` tasks written through the store: ``fan`` (one ``plan``
    then ``tasks - 1`` workers ``w0 ...`` side by side) or ``chain`` (``s0 → s1 → ...``);
    the first half succeeded, each with a small result."""
    from loopkernel.graph import Delta, GraphPatch, TaskSpec, TaskState, validate
    from loopkernel.ids import RunId
    from loopkernel.store import NewRun, PatchRecord, open_store

    async def go() -> None:
        store = open_store(str(db))
        await store.open()
        try:
            rid = RunId(run_id)
            await store.create_run(
                NewRun(run_id=rid, app="bench", params={}, max_events=10**7, token_hash="h")
            )
            first = (await store.events(rid))[-1]  # run_started, journaled with the run
            patch = GraphPatch()
            if shape == "fan":
                patch = patch.add(TaskSpec(task_id="plan", skill="plan"))
                for i in range(tasks - 1):
                    patch = patch.add(TaskSpec(task_id=f"w{i}", skill="work"), after=["plan"])
            else:
                for i in range(tasks):
                    after = [f"s{i - 1}"] if i else []
                    patch = patch.add(TaskSpec(task_id=f"s{i}", skill="step"), after=after)
            state = (await store.load_run(rid)).state
            delta = validate(state, patch, {"plan", "work", "step"})
            ops: Any = patch.to_json()
            await store.commit_patches(rid, [PatchRecord(event_seq=first.seq, ops=ops)], delta)
            done = [
                t.evolve(state=TaskState.SUCCEEDED, result={"n": i})
                for i, t in enumerate(delta.tasks)
                if i < tasks // 2
            ]
            await store.commit_patches(rid, [], Delta(tasks=tuple(done)))
        finally:
            await store.close()

    run_async(go())


def append_event(db: Path | str, run_id: str, data: Any = None) -> int:
    """Append one ``tool_restarted`` event (no planner answers it); its seq."""
    from loopkernel.ids import RunId
    from loopkernel.store import NewEvent, open_store

    async def go() -> int:
        store = open_store(str(db))
        await store.open()
        try:
            kind = EventKind.TOOL_RESTARTED
            (ev,) = await store.append_events(RunId(run_id), [NewEvent(kind=kind, data=data)])
            return ev.seq
        finally:
            await store.close()

    return run_async(go())


async def churn_streams(url: str, run_id: str, db: Path | str, clients: int = 60) -> int:
    """``clients`` live streams connecting and dropping at random (each four times)
    while the run moves by 20 events; the seq of the last one."""
    import random

    rng = random.Random(7)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:

        async def one() -> None:
            for _ in range(4):
                async with http.stream("GET", f"/runs/{run_id}/events") as r:
                    if r.status_code == 200:
                        async for _chunk in r.aiter_text():
                            if rng.random() < 0.5:
                                break
                await asyncio.sleep(rng.random() * 0.05)

        async def writer() -> int:
            last = 0
            for i in range(20):
                last = await asyncio.to_thread(append_event, db, run_id, {"i": i})
                await asyncio.sleep(0.01)
            return last

        last, *_ = await asyncio.gather(writer(), *(one() for _ in range(clients)))
        return int(last)
