"""Tool servers started before the run that uses them (``StartedServers``, issue 12 goal 6).

Real processes throughout: a server that appends its pid to a file as soon as it runs
(``lk_startup``), a ``loopkernel run`` subprocess that is interrupted or fails early, and
``/proc`` to check that the server is gone afterwards.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_startup import source
from loopkernel.errors import ToolUnavailable
from loopkernel.store import SQLiteStore
from loopkernel.tools import StartedServers, ToolLayer, ToolSource, allow_all

pytestmark = pytest.mark.slow

APP = "lk_startup:app"


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone_soon(pid: int, seconds: float = 5.0) -> bool:
    """The process is gone, or a zombie, within ``seconds`` (its reaper may lag a moment:
    the parent that killed it has exited and init reaps it)."""
    deadline = time.monotonic() + seconds
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def with_marker(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def pids_in(path: Path, timeout: float = 60.0) -> list[int]:
    """The pids the server wrote, waiting up to ``timeout`` for the first."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return [int(x) for x in text.split()]
        if time.monotonic() > deadline:
            raise AssertionError(f"no server wrote {path} within {timeout} s")
        time.sleep(0.02)


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LOOPKERNEL, *args],
        env=cli_env(**env),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_app(tmp_path: Path, db: Path, pidfile: Path, *sets: str) -> list[str]:
    return ["--db", str(db), "run", APP, "--set", f"pidfile={pidfile}", *sets]


# -- the CLI ----------------------------------------------------------------------------------


def test_run_uses_the_server_it_started_early(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pids"
    db = tmp_path / "runs.db"
    proc = cli(tmp_path, *run_app(tmp_path, db, pidfile), "--json")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert '"text": "hi"' in out
    # one server for the whole run: the one started before the store was opened
    pids = pids_in(pidfile)
    assert len(pids) == 1
    assert gone_soon(pids[0])


def test_ctrl_c_while_the_server_starts_leaves_no_server(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pids"
    proc = cli(tmp_path, *run_app(tmp_path, tmp_path / "runs.db", pidfile, "--set", "mode=hang"))
    try:
        [pid] = pids_in(pidfile)
        assert running(pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert gone_soon(pid), f"server {pid} outlived the interrupted run"
    assert with_marker(str(pidfile)) == []


def test_a_store_that_cannot_be_opened_leaves_no_server(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteStore(db)
    store.open_sync()
    asyncio.run(store.close())
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # the store waits out its busy timeout, then gives up
    pidfile = tmp_path / "server.pids"
    try:
        proc = cli(
            tmp_path,
            *run_app(tmp_path, db, pidfile, "--set", "mode=hang"),
            LOOPKERNEL_SQLITE_LOCK_WAIT_S="5",
        )
        [pid] = pids_in(pidfile)  # started while the store waited for its lock
        _, err = proc.communicate(timeout=120)
    finally:
        holder.close()
    assert proc.returncode == 8, err
    assert "store unavailable" in err
    assert gone_soon(pid), f"server {pid} outlived a store that could not be opened"


def test_a_run_that_fails_before_its_first_call_leaves_no_server(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pids"
    db = tmp_path / "runs.db"
    proc = cli(
        tmp_path, *run_app(tmp_path, db, pidfile, "--set", "fail_plan=true", "--set", "mode=hang")
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert with_marker(str(pidfile)) == []
    for pid in pidfile.read_text().split() if pidfile.exists() else []:
        assert gone_soon(int(pid))


def test_a_refused_run_id_leaves_no_server(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pids"
    db = tmp_path / "runs.db"
    first = cli(tmp_path, *run_app(tmp_path, db, pidfile), "--run-id", "r1", "--quiet")
    first.communicate(timeout=120)
    assert first.returncode == 0
    again = cli(tmp_path, *run_app(tmp_path, db, pidfile, "--set", "mode=hang"), "--run-id", "r1")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 2, err
    assert "r1" in err
    assert with_marker(str(pidfile)) == []


def test_a_server_that_cannot_start_fails_the_run_as_before(tmp_path: Path) -> None:
    """The spawn fails when the run starts; the run still fails at its first call, with
    the verdict a server started on that call gives (``cannot_start``), and exit 1."""
    db = tmp_path / "runs.db"
    pidfile = tmp_path / "server.pids"
    proc = cli(tmp_path, *run_app(tmp_path, db, pidfile, "--set", "mode=missing"), "--json")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "ToolUnavailable" in out and "cannot_start" in out
    assert "command not found" in out


# -- in process -------------------------------------------------------------------------------


def test_leaving_the_block_stops_the_servers_not_handed_over(tmp_path: Path) -> None:
    async def body() -> None:
        pidfile = tmp_path / "server.pids"
        with pytest.raises(RuntimeError, match="early"):
            async with StartedServers([source(pidfile, "hang")]) as servers:
                await servers.spawned()
                started = servers.pids
                assert len(started) == 1 and running(started[0])
                raise RuntimeError("the run failed early")
        assert not running(started[0])

    asyncio.run(body())


def test_a_session_is_handed_over_once_and_only_for_its_source(tmp_path: Path) -> None:
    async def body() -> None:
        mine = source(tmp_path / "a.pids")
        other = source(tmp_path / "b.pids")
        async with StartedServers([mine]) as servers:
            await servers.spawned()
            [pid] = servers.pids
            assert servers.take(other) is None  # another command line: not this server
            session = servers.take(source(tmp_path / "a.pids"))  # an equal source
            assert session is not None and session.pid == pid
            assert servers.take(mine) is None  # never to a second layer
            try:
                await session.wait_ready()
                assert "echo" in session.tools
            finally:
                await session.close()
        assert not running(pid)

    asyncio.run(body())


def test_a_layer_serves_its_calls_on_the_adopted_server(
    tmp_path: Path, store: SQLiteStore, make_ctx: object
) -> None:
    async def body() -> None:
        pidfile = tmp_path / "server.pids"
        src = source(pidfile)
        async with StartedServers([src]) as servers:
            await servers.spawned()
            [pid] = servers.pids
            async with ToolLayer(store, [src], policy_hook=allow_all) as layer:
                layer.adopt(servers)
                ctx = make_ctx(layer)  # type: ignore[operator]
                assert await layer.call(ctx, 0, "echo", {"text": "a"}) == {"text": "a"}
                assert layer.spawns == 1
                assert servers.pids == []  # handed over
            assert not running(pid)  # the layer closed it
        assert pids_in(pidfile) == [pid]  # no second server was spawned

    asyncio.run(body())


def test_an_adopted_failure_is_the_failure_the_layer_would_raise(
    store: SQLiteStore, make_ctx: object
) -> None:
    async def body() -> None:
        missing = ToolSource(name="gone", command=("/nonexistent/tool-server",))

        async def failure(adopt: bool) -> ToolUnavailable:
            async with StartedServers([missing]) as servers:
                await servers.spawned()
                async with ToolLayer(store, [missing], policy_hook=allow_all) as layer:
                    if adopt:
                        layer.adopt(servers)
                    with pytest.raises(ToolUnavailable) as caught:
                        await layer.list_tools()
                    return caught.value

        early, late = await failure(True), await failure(False)
        assert early.message == late.message and early.attrs == late.attrs
        assert early.attrs["kind"] == "cannot_start"

    asyncio.run(body())


def test_a_cancelled_start_leaves_no_server(tmp_path: Path) -> None:
    async def body() -> None:
        pidfile = tmp_path / "server.pids"

        async def start_then_hang() -> None:
            async with StartedServers([source(pidfile, "hang")]) as servers:
                await servers.spawned()
                await asyncio.sleep(3600)

        task = asyncio.ensure_future(start_then_hang())
        [pid] = await asyncio.to_thread(pids_in, pidfile)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not running(pid)

    asyncio.run(body())


def test_the_server_is_spawned_before_the_sdk_is_imported(tmp_path: Path) -> None:
    """What makes the overlap: the process exists before this one imports ``mcp``. A
    finder on ``sys.meta_path`` notes the spawned servers when the first ``mcp.``
    submodule is looked for (``require_mcp`` only looks ``mcp`` itself up)."""
    code = f"""
import asyncio, sys
sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
from lk_startup import source
from loopkernel.tools import StartedServers

servers = StartedServers([source({str(tmp_path / "p")!r}, "hang")])
seen = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("mcp.") and not seen:
            seen.append(list(servers.pids))
        return None

sys.meta_path.insert(0, Watch())

async def main():
    async with servers:
        await servers.spawned()
        for _ in range(3000):  # the session imports the SDK on its own, after the spawn
            if seen:
                break
            await asyncio.sleep(0.01)
        print(len(seen[0]), len(servers.pids))

asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1"]
