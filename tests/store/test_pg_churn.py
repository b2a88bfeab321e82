"""Progress under PostgreSQL connection churn (issue 32, item 4): every connection of the
run's database is killed every 3 s (``pg_terminate_backend`` from an admin connection)
while a run's one task works for 8 s. The run finishes, and the task ran once: a lost
connection is replaced, the work in flight is not thrown away."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest

from lk_helpers import LOOPKERNEL, cli_env

if TYPE_CHECKING:
    from lk_stores import Backend

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


class Killer:
    """Terminates every other backend of one database every ``every`` seconds."""

    def __init__(self, url: str, every: float) -> None:
        import psycopg

        self.dbname = urlsplit(url).path.lstrip("/")
        self.admin = psycopg.connect(url, autocommit=True)
        self.every = every
        self.killed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            rows = self.admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.dbname,),
            ).fetchall()
            self.killed += sum(1 for (ok,) in rows if ok)

    def __enter__(self) -> Killer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.admin.close()


def test_a_run_finishes_while_its_connections_are_killed_every_3_seconds(
    pg_backend: Backend,
) -> None:
    url = pg_backend.url
    with Killer(url, 3.0) as killer:
        out = subprocess.run(
            [*LOOPKERNEL, "--db", url, "run", "lk_doorapps:slow", "--set", "seconds=8",
             "--run-id", "churn", "--json", "--store-retry", "60"],
            env=cli_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert killer.killed >= 1  # at least one kill fell inside the 8 s of work
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "succeeded"
    (attempts,) = pg_backend.sql("SELECT attempts FROM tasks WHERE run_id = 'churn'")[0]
    assert attempts == 1  # never restarted


class Proxy:
    """A TCP forwarder to PostgreSQL on 127.0.0.1 that can be cut: ``stop`` closes its
    port and every connection through it (the server, seen from the run, is gone)."""

    def __init__(self, host: str, port: int) -> None:
        import socket

        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            if self.stopped:
                down.close()
                return
            up = socket.create_connection(self.upstream)
            with self.lock:
                self.sockets += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: object, b: object) -> None:
        import socket

        assert isinstance(a, socket.socket) and isinstance(b, socket.socket)
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        import socket

        self.stopped = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.close()


def test_store_retry_bounds_the_whole_wait_for_a_server_that_went_away(
    pg_backend: Backend,
) -> None:
    """The server goes away (its proxy is cut) while a run's task works and does not come
    back: ``--store-retry 8`` gives up about 8 s after the first failure, exit 8."""
    parts = urlsplit(pg_backend.url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))
    proc = subprocess.Popen(
        [*LOOPKERNEL, "--db", url, "run", "lk_doorapps:slow", "--set", "seconds=4",
         "--run-id", "away", "--store-retry", "8"],
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    running: list[tuple[object, ...]] = []
    while not running and proc.poll() is None:  # the task is working: its row says so
        time.sleep(0.05)
        with contextlib.suppress(Exception):  # no tables yet: the run is creating them
            running = pg_backend.sql(
                "SELECT 1 FROM tasks WHERE task_id = 'slow' AND state = 'running'"
            )
    assert running, proc.communicate()
    cut = time.monotonic()
    proxy.stop()
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - cut
    print(f"server away: gave up {took:.1f} s after it went, --store-retry 8")
    assert proc.returncode == 8, err
    assert "gave up after 8 s of retries" in err
    assert len(err.strip().splitlines()) == 1, err  # not the pool's reconnect warnings too
    assert took < 4 + 8 + 5  # the task's 4 s, the retries' 8 s, slack for a loaded machine
