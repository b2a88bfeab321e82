"""Model faults are faults, not failures: a gateway SIGKILLed in the middle of a worker's
``ctx.complete`` leaves the run resumable (exit 6, ``TransientFault``), and one resume
re-sends the call under the same key, with exactly one more provider request, which the
gateway's ledger records beside the lost one. Real processes throughout: the runtime, the
gateway, and the scripted provider (a real local HTTP server)."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from lk_helpers import ROOT
from loopkernel.testing import GatewayProcess, ScriptedProvider, ScriptedReply, run_cli

ANSWER = "the answer after the outage"


def _gateway(p: ScriptedProvider, tmp_path: Path) -> GatewayProcess:
    return GatewayProcess(
        ["--provider", "openai", "--base-url", p.base_url, "--model", "scripted-model"],
        ledger=tmp_path / "ledger.db",
        listen=f"unix:{tmp_path / 'gw.sock'}",
        token="outage-test-token-0123456789",
    )


def _requests(ledger: Path, key: str) -> list[str]:
    with sqlite3.connect(ledger) as db:
        rows = db.execute("SELECT status FROM requests WHERE key = ? ORDER BY id", (key,))
        return [r[0] for r in rows]


@pytest.mark.slow
def test_a_gateway_killed_mid_call_leaves_the_run_resumable_and_one_resume_finishes_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    key = "o1/ask/model/0"
    with ScriptedProvider([ScriptedReply(hang=True), ANSWER]).running() as p:
        gw = _gateway(p, tmp_path).start()
        env = {"PYTHONPATH": str(ROOT / "tests"), **gw.runtime_env()}
        out: list[CompletedProcess[str]] = []
        runner = threading.Thread(
            target=lambda: out.append(
                run_cli(["run", "lk_modelapps:one_ask", "--run-id", "o1"], db=db, env=env)
            )
        )
        runner.start()
        p.wait_for_calls(1)  # the call is at the provider, the gateway holds it
        assert gw.proc is not None
        gw.proc.kill()  # SIGKILL, mid-call
        gw.stop()
        runner.join(timeout=120)
        ran = out[0]
        assert ran.returncode == 6, ran.stderr  # running, resumable: not failed
        assert "TransientFault" in ran.stderr or "fault that may pass" in ran.stderr
        assert "resume o1" in ran.stderr
        shown = json.loads(run_cli(["inspect", "o1", "--json"], db=db, env=env).stdout)
        assert shown["status"] == "running"
        assert p.calls == 1

        with _gateway(p, tmp_path) as again:  # same socket, same ledger
            resumed = run_cli(["resume", "o1"], db=db, env={**env, **again.runtime_env()})
            log = again.log
        assert resumed.returncode == 0, resumed.stderr
    assert p.calls == 2  # exactly one more provider request
    assert log.count(f"gateway: answered key={key}") == 1
    shown = json.loads(run_cli(["inspect", "o1", "--json"], db=db, env=env).stdout)
    assert shown["status"] == "succeeded"
    # the ledger records both provider requests: the one the dead gateway lost, the answer
    assert _requests(tmp_path / "ledger.db", key) == ["lost", "answered"]


@pytest.mark.slow
def test_an_unreachable_gateway_inside_a_worker_is_a_transient_fault(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    env = {
        "PYTHONPATH": str(ROOT / "tests"),
        "LOOPKERNEL_GATEWAY": f"unix:{tmp_path / 'nobody.sock'}",
        "LOOPKERNEL_GATEWAY_TOKEN": "outage-test-token-0123456789",
    }
    ran = run_cli(["run", "lk_modelapps:one_ask", "--run-id", "o2"], db=db, env=env)
    assert ran.returncode == 6, ran.stderr
    assert "sent 3 time(s)" in ran.stderr  # the first try and the client's two re-sends
    with ScriptedProvider([ANSWER]).running() as p, _gateway(p, tmp_path) as gw:
        resumed = run_cli(["resume", "o2"], db=db, env={**env, **gw.runtime_env()})
        assert resumed.returncode == 0, resumed.stderr
        assert p.calls == 1
