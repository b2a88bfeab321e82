"""A model call across SIGKILL: the runtime is killed at a named point around a model call
(a real subprocess), resumed in a new process, and the provider behind the gateway sees
exactly one call; the resumed run digests like an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lk_helpers import ROOT
from loopkernel.testing import GatewayProcess, ScriptedProvider, run_cli, was_killed

ANSWER = "a journaled answer"


def _digest(db: Path, env: dict[str, str]) -> tuple[str, str]:
    done = run_cli(["inspect", "c1", "--json"], db=db, env=env)
    data = json.loads(done.stdout)
    return data["status"], data["digest"]


def _uninterrupted(tmp_path: Path) -> tuple[str, str]:
    base = tmp_path / "clean"
    base.mkdir()
    with (
        ScriptedProvider([ANSWER]).running() as p,
        GatewayProcess(
            ["--provider", "openai", "--base-url", p.base_url, "--model", "scripted-model"],
            ledger=base / "ledger.db",
        ) as gw,
    ):
        env = {"PYTHONPATH": str(ROOT / "tests"), **gw.runtime_env()}
        ran = run_cli(
            ["run", "lk_modelapps:one_ask", "--run-id", "c1"], db=base / "runs.db", env=env
        )
        assert ran.returncode == 0, ran.stderr
        return _digest(base / "runs.db", env)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "gateway_replays"),
    [
        ("model_sent", 0),  # journaled intended, never sent: the resume sends it once
        ("model_returned", 1),  # the gateway answered, the runtime died before journaling
        ("task_returned", 0),  # the answer was journaled: the resume never asks the gateway
    ],
)
def test_a_model_call_killed_around_the_provider_is_made_once(
    tmp_path: Path, point: str, gateway_replays: int
) -> None:
    db = tmp_path / "runs.db"
    with (
        ScriptedProvider([ANSWER]).running() as p,
        GatewayProcess(
            ["--provider", "openai", "--base-url", p.base_url, "--model", "scripted-model"],
            ledger=tmp_path / "ledger.db",
        ) as gw,
    ):
        env = {"PYTHONPATH": str(ROOT / "tests"), **gw.runtime_env()}
        killed = run_cli(
            ["run", "lk_modelapps:one_ask", "--run-id", "c1"], db=db, env=env, crash_at=point
        )
        assert was_killed(killed), killed.stderr
        assert p.calls == (0 if point == "model_sent" else 1)
        resumed = run_cli(["resume", "c1"], db=db, env=env)
        assert resumed.returncode == 0, resumed.stderr
        status, digest = _digest(db, env)
        log = gw.log
    assert p.calls == 1  # the provider saw one call, whatever the crash
    assert log.count("gateway: replayed key=c1/ask/model/0") == gateway_replays
    assert log.count("gateway: answered key=c1/ask/model/0") == 1
    assert (status, digest) == _uninterrupted(tmp_path)
