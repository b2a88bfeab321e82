"""An irreversible call in flight when its server (or the whole runtime) dies is never
sent again by the layer: an unknown outcome, for a human (issue 25, section 1).

The tool is real: ``charge`` on the fault server (MCP over stdio) ignores idempotency
keys and appends one line to a ledger file per request that reaches it, before it holds
the call open; the test kills it with SIGKILL while the call is in flight. The ledger is
the effect counted at the tool's side.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import NeedsApproval, TaskContext
from loopkernel._effects import OUTCOME_UNKNOWN
from loopkernel.store import SQLiteStore
from loopkernel.testing import run_cli
from loopkernel.tools import ToolLayer, allow_all
from loopkernel.tools.testkit import faults_source

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MakeCtx = Callable[..., TaskContext]
KEY = "run-1/t1/0"


def charged(ledger: Path) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


def pid_in(hold: Path, *, alive: Callable[[], bool] = lambda: True) -> int:
    """The pid the server wrote once the call was in flight (it writes it after acting)."""
    deadline = time.monotonic() + 120  # a bound for a hung test, not a measurement
    while not (hold.exists() and hold.read_text()):
        assert alive(), "the process ended before the call was in flight"
        assert time.monotonic() < deadline, "the call never reached the server"
        time.sleep(0.02)
    return int(hold.read_text())


def effects(store: SQLiteStore) -> list[tuple[str, str]]:
    return [(e.key, e.status) for e in asyncio.run(store.effects("run-1"))]  # type: ignore[arg-type]


def call(store: SQLiteStore, ctx: Callable[[Any], TaskContext], args: dict[str, Any],
         *, tool: str = "charge", kill: Path | None = None) -> Any:  # fmt: skip
    """One ``call_tool`` through a fresh layer; with ``kill``, SIGKILL the server whose pid
    appears in that file while the call is in flight. Returns the value or the error."""

    async def go() -> Any:
        async with ToolLayer(store, [faults_source()], policy_hook=allow_all) as tools:
            task = asyncio.ensure_future(ctx(tools).call_tool(tool, args))
            if kill is not None:
                pid = await asyncio.to_thread(pid_in, kill, alive=lambda: not task.done())
                os.kill(pid, signal.SIGKILL)
            try:
                return await task
            except Exception as exc:
                return exc

    return asyncio.run(go())


def test_a_server_killed_with_an_irreversible_call_in_flight_parks_it_unsent(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    ledger, hold = tmp_path / "ledger", tmp_path / "hold"
    args = {"ledger": str(ledger), "hold": str(hold)}
    err = call(store, make_ctx, args, kill=hold)
    assert isinstance(err, NeedsApproval), err
    assert err.reason.startswith(f"{OUTCOME_UNKNOWN}: call {KEY} to 'charge'"), err.reason
    assert charged(ledger) == 1  # it acted once, and the layer did not send it again
    assert effects(store) == [(KEY, "intended")]

    # The task runs again without an answer (a resume): asked again, nothing sent.
    again = call(store, make_ctx, args)
    assert isinstance(again, NeedsApproval) and again.reason.startswith(OUTCOME_UNKNOWN)
    assert charged(ledger) == 1

    # A human saw it happen: approved with the result, journaled done; nothing sent.
    def approved(tools: Any) -> TaskContext:
        answer = {"resend": False, "result": {"charged": 1}}
        return make_ctx(tools, wait_epoch=1, wait_reason=err.reason, human_input=answer)

    assert call(store, approved, args) == {"charged": 1}
    assert effects(store) == [(KEY, "done")]
    assert call(store, make_ctx, args) == {"charged": 1}  # replayed, whoever asks
    assert charged(ledger) == 1


def test_an_approval_to_resend_is_journaled_once_and_sends_once(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    ledger, hold = tmp_path / "ledger", tmp_path / "hold"
    args = {"ledger": str(ledger), "hold": str(hold)}
    err = call(store, make_ctx, args, kill=hold)
    assert isinstance(err, NeedsApproval) and charged(ledger) == 1

    def approved(tools: Any) -> TaskContext:
        return make_ctx(tools, wait_epoch=1, wait_reason=err.reason, human_input={"by": "ops"})

    assert call(store, approved, args) == {"charged": 2}  # the one re-send a human approved
    assert effects(store) == [(KEY, "failed"), (f"{KEY}/resend/1", "done")]
    decision = asyncio.run(store.get_effect("run-1", KEY))  # type: ignore[arg-type]
    assert decision is not None and decision.error["resent_as"] == f"{KEY}/resend/1"  # type: ignore[index,call-overload]
    # The same approval seen again (a resumed task keeps its last wait reason): replayed.
    assert call(store, approved, args) == {"charged": 2}
    assert charged(ledger) == 2


def test_a_declined_resend_fails_the_call_once(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    ledger, hold = tmp_path / "ledger", tmp_path / "hold"
    args = {"ledger": str(ledger), "hold": str(hold)}
    err = call(store, make_ctx, args, kill=hold)
    assert isinstance(err, NeedsApproval)

    def declined(tools: Any) -> TaskContext:
        answer = {"resend": False}
        return make_ctx(tools, wait_epoch=1, wait_reason=err.reason, human_input=answer)

    failed = call(store, declined, args)
    assert type(failed).__name__ == "ToolUnavailable" and failed.attrs["kind"] == "outcome_unknown"
    assert effects(store) == [(KEY, "failed")]
    again = call(store, make_ctx, args)
    assert type(again).__name__ == "ToolUnavailable" and again.attrs["kind"] == "outcome_unknown"
    assert charged(ledger) == 1


def test_a_tool_that_dedupes_by_key_is_resent_after_its_server_died(
    store: SQLiteStore, make_ctx: MakeCtx, tmp_path: Path
) -> None:
    ledger, hold = tmp_path / "ledger", tmp_path / "hold"
    args = {"ledger": str(ledger), "hold": str(hold)}
    got = call(store, make_ctx, args, tool="charge_deduped", kill=hold)
    assert got == {"charged": 1}  # restarted, re-sent under the same key, answered once
    assert ledger.read_text().splitlines() == [KEY]
    assert effects(store) == [(KEY, "done")]


# -- whole runs through the CLI ---------------------------------------------------------


def start(db: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LOOPKERNEL, "--db", str(db), *args],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def inspect(db: Path) -> dict[str, Any]:
    out = run_cli(["inspect", "r", "--json"], db=db, env=cli_env())
    assert out.stdout, out.stderr  # its exit code is the run's status
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def reasons(db: Path) -> list[str]:
    """Why the task parked, each time (the journal's approval_required events)."""
    data = inspect(db)
    task = next(t for t in data["tasks"] if t["task_id"] == "call")
    assert task["state"] == "waiting", task
    return [e["data"]["reason"] for e in data["journal"] if e["kind"] == "approval_required"]


@pytest.mark.parametrize("kill", ["tool_server", "runtime"])
def test_a_run_ends_waiting_with_the_effect_done_once(tmp_path: Path, kill: str) -> None:
    db, ledger, hold = tmp_path / "runs.db", tmp_path / "ledger", tmp_path / "hold"
    sets = ["--set", f"ledger={ledger}", "--set", f"hold={hold}"]
    proc = start(db, "run", "lk_testapps:charge", "--run-id", "r", "--quiet", *sets)
    server = pid_in(hold, alive=lambda: proc.poll() is None)
    if kill == "runtime":
        proc.send_signal(signal.SIGKILL)  # the whole runtime, with the call in flight
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        os.kill(server, signal.SIGKILL)  # its orphaned server too (it never answers)
        resumed = run_cli(["resume", "r", "--quiet"], db=db, env=cli_env())
        assert resumed.returncode == 3, resumed.stderr  # waiting
    else:
        os.kill(server, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 3, stderr  # waiting
    assert charged(ledger) == 1
    (reason,) = reasons(db)
    assert reason.startswith(f"{OUTCOME_UNKNOWN}: call r/call/0 to 'charge'"), reason
    again = run_cli(["resume", "r", "--quiet"], db=db, env=cli_env())
    assert again.returncode == 3, again.stderr  # still a question for a human; not sent
    assert charged(ledger) == 1 and reasons(db) == [reason]  # asked once

    # The human saw the charge go through: approve with its result; nothing is sent.
    answer = json.dumps({"resend": False, "result": {"charged": 1}})
    ok = run_cli(["approve", "r", "call", "--payload", answer], db=db, env=cli_env())
    assert ok.returncode == 0, ok.stderr
    done = run_cli(["resume", "r", "--quiet"], db=db, env=cli_env())
    assert done.returncode == 0, done.stderr
    assert inspect(db)["verdict"] == {"charged": 1}
    assert charged(ledger) == 1
    approvals = [e for e in inspect(db)["journal"] if e["kind"] == "human_input"]
    assert len(approvals) == 1  # the decision, journaled once
