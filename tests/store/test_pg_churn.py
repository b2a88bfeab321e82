"""Progress under PostgreSQL connection churn (issue 32, item 4): every connection of the
run's database is killed every 3 s (``pg_terminate_backend`` from an admin connection)
while a run's one task works for 6 s. The run finishes, and the task ran once: a lost
connection is replaced, the work in flight is not thrown away."""

from __future__ import annotations

import json
import subprocess
import threading
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

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
            [*LOOPKERNEL, "--db", url, "run", "lk_doorapps:slow", "--run-id", "churn",
             "--json", "--store-retry", "60"],
            env=cli_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert killer.killed >= 2
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "succeeded"
    (attempts,) = pg_backend.sql("SELECT attempts FROM tasks WHERE run_id = 'churn'")[0]
    assert attempts == 1  # never restarted
