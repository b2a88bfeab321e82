"""Runs for the web tests, made through the public client API."""

from __future__ import annotations

import asyncio
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
from loopkernel.graph import RunStatus

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
        asyncio.run(create())


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
