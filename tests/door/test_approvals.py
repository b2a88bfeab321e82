"""Approvals that need the run's token even from a caller with database access: per run
(``--require-token``) or per deployment (``LOOPKERNEL_REQUIRE_TOKEN=1``), on the real
PostgreSQL server (issue 8, section 4)."""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

import pytest

from lk_helpers import LOOPKERNEL, cli_env

if TYPE_CHECKING:
    from lk_stores import Backend

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(**env), capture_output=True, text=True, timeout=60
    )


def gate(url: str, run_id: str, *flags: str) -> str:
    out = cli("--db", url, "run", "lk_testapps:gate", "--run-id", run_id, "--json", *flags)
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    assert data["waiting"] == [
        {"task_id": "gate", "reason": "ship it?", "kind": "human", "until": None}
    ]
    return str(data["token"])


def test_a_run_started_with_require_token_needs_it_even_with_database_access(
    pg_backend: Backend,
) -> None:
    url = pg_backend.url
    token = gate(url, "strict", "--require-token")
    out = cli("--db", url, "approve", "strict", "gate")
    assert out.returncode == 2
    assert "needs the run's approval token (--token): the run was started with --require-token" in (
        out.stderr
    )
    assert cli("--db", url, "approve", "strict", "gate", "--token", "wrong").returncode == 2
    ok = cli("--db", url, "approve", "strict", "gate", "--token", token)
    assert ok.returncode == 0, ok.stderr
    assert cli("--db", url, "resume", "strict", "--quiet").returncode == 0


def test_a_deployment_can_require_the_token_for_every_run(pg_backend: Backend) -> None:
    url = pg_backend.url
    token = gate(url, "plain")
    out = cli("--db", url, "approve", "plain", "gate", LOOPKERNEL_REQUIRE_TOKEN="1")
    assert out.returncode == 2 and "LOOPKERNEL_REQUIRE_TOKEN" in out.stderr
    ok = cli(
        "--db", url, "approve", "plain", "gate", "--token", token, LOOPKERNEL_REQUIRE_TOKEN="1"
    )
    assert ok.returncode == 0, ok.stderr


def test_by_default_database_access_is_the_authority(pg_backend: Backend) -> None:
    url = pg_backend.url
    gate(url, "open")
    ok = cli("--db", url, "approve", "open", "gate")
    assert ok.returncode == 0, ok.stderr


def test_a_run_id_of_10000_characters_never_reaches_postgresql(pg_backend: Backend) -> None:
    url = pg_backend.url
    assert cli("--db", url, "submit", "speculation", "--scenario", "fast").returncode == 0
    before = pg_backend.sql("SELECT run_id, status FROM runs")
    for args in (["submit", "speculation"], ["run", "speculation"]):
        out = cli("--db", url, *args, "--run-id", "x" * 10_000)
        assert out.returncode == 2 and "10000 characters long" in out.stderr
        assert "x" * 100 not in out.stderr  # the id is not echoed back whole
    assert cli("--db", url, "wait", "y" * 10_000).returncode == 2
    assert pg_backend.sql("SELECT run_id, status FROM runs") == before
