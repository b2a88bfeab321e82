"""``--planner llm`` on the shipped apps, end to end through real processes: the CLI (the
runtime), a ``loopkernel gateway`` subprocess, and behind it either the scripted
OpenAI-compatible server (a real local HTTP server) or the bundled SmolLM2 on a real
llama.cpp server.

- Scripted: a valid proposal is applied and the journal says ``llm``; a reply that is not a
  patch is rejected with its named reason and the rules answer (``fallback``).
- The real local model: whatever it says, a run it lets succeed is the work's own (looplab:
  the rules' digest; speculation: the distiller's answer), or it stopped the run early.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lk_looplab import DIGESTS
from loopkernel.testing import GatewayProcess, ScriptedProvider, run_cli, was_killed

pytestmark = pytest.mark.slow

PROVIDER_KEY = "sk-scripted-provider-key-7d2a"


def closed(gateway: GatewayProcess) -> None:
    """``GatewayProcess.stop`` leaves the child's stdout pipe open (a ResourceWarning)."""
    if gateway.proc is not None and gateway.proc.stdout is not None:
        gateway.proc.stdout.close()


# The straggler is far slower than the planner can ever be: the race is decided by the
# quorum, not by how long the model takes to answer.
SPEC = ["--scenario", "fast", "--set", "delays=[0.01, 0.02, 600]"]


def inspect(db: Path, run: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = run_cli(["inspect", run, "--json"], db=db, env=env)
    assert out.returncode in (0, 1, 4), out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_speculation_against_the_scripted_server_applies_valid_proposals(
    tmp_path: Path,
) -> None:
    first = '[{"op": "add", "task_id": "plan", "skill": "plan", "input": {"researchers": 3}}]'
    script = [first, "Sure! First we should plan the research carefully."]
    with (
        ScriptedProvider(script, default="[]", api_key=PROVIDER_KEY).running() as provider,
        GatewayProcess(
            ["--provider", "openai", "--base-url", provider.base_url, "--model", "m"],
            env={"OPENAI_API_KEY": PROVIDER_KEY},
            ledger=tmp_path / "ledger.db",
        ) as gateway,
    ):
        env = gateway.runtime_env()
        db = tmp_path / "runs.db"
        done = run_cli(
            ["run", "speculation", *SPEC, "--planner", "llm", "--run-id", "llm"], db=db, env=env
        )
        assert done.returncode == 0, done.stderr
        calls = provider.calls
        journal = run_cli(["inspect", "llm", "--journal"], db=db, env=env)
    closed(gateway)
    rules = run_cli(["run", "speculation", *SPEC, "--run-id", "rules"], db=tmp_path / "r.db")
    assert rules.returncode == 0, rules.stderr
    got, want = inspect(db, "llm"), inspect(tmp_path / "r.db", "rules")
    assert (got["status"], got["digest"]) == (want["status"], want["digest"])
    patches = {p["event_seq"]: p for p in got["patches"]}
    # one model call per planned event, and one re-ask for the refused prose ("idle", like
    # "disagrees", is not re-asked: the model was shown the rules' answer already)
    assert len(patches) + 1 == calls
    # 1: the scripted reply is exactly the rules' patch -> applied, planned by the model.
    assert patches[1]["planner"] == "llm" and patches[1]["proposal"]["accepted"]
    assert patches[1]["proposal"]["model"] == "scripted-model"  # as the provider names it
    assert patches[1]["proposal"]["raw_sha256"] is not None
    # 2: prose -> rejected with a named reason, re-asked once with it; the second reply
    # ("[]") is refused too, and the rules' patch applied.
    assert patches[2]["planner"] == "fallback"
    assert patches[2]["proposal"]["reason"] == "idle"  # agree is off: "[]" is no plan
    assert "re-asked once after bad_json" in patches[2]["proposal"]["detail"]
    reask = provider.requests[2].body["messages"]
    assert [m["role"] for m in reask] == ["system", "user", "assistant", "user"]
    assert reask[2]["content"] == script[1] and "bad_json" in reask[3]["content"]
    # "[]" (the default reply) is the model's where the rules wait, and refused as idle
    # where they act.
    for p in list(patches.values())[2:]:
        wait = p["ops"] == []
        assert p["planner"] == ("llm" if wait else "fallback"), p
        assert p["proposal"]["reason"] == (None if wait else "idle"), p
    # The prompt fenced the task results and named the allowlist with input schemas.
    second = provider.requests[1].body["messages"]
    assert "research: researches one angle" in second[0]["content"]
    assert '"required": ["angle", "delay"]' in second[0]["content"]
    tag = second[0]["content"].split("<untrusted_data-", 1)[1].split(">", 1)[0]
    assert f"<untrusted_data-{tag}>" in second[1]["content"]
    assert "prior work" in second[1]["content"].split(f"<untrusted_data-{tag}>")[1]
    # inspect --journal shows who planned and what was refused.
    assert journal.returncode == 0, journal.stderr
    assert "[llm scripted-model " in journal.stdout
    assert "[fallback: idle (scripted-model " in journal.stdout
    assert "rejected proposal: (wait)" in journal.stdout


@pytest.mark.parametrize("point", ["before_patch:2", "patch_committed:2"])
def test_a_sigkill_while_planning_asks_the_provider_once_per_event(
    tmp_path: Path, point: str
) -> None:
    """Killed before (or after) the second patch commit, resumed in a new process: every
    event is planned once, and the provider sees one call per event -- an event whose patch
    was lost is asked again with the same key and the gateway's ledger answers it."""
    first = '[{"op": "add", "task_id": "plan", "skill": "plan", "input": {"researchers": 3}}]'
    with (
        ScriptedProvider([first], default="[]", api_key=PROVIDER_KEY).running() as provider,
        GatewayProcess(
            ["--provider", "openai", "--base-url", provider.base_url, "--model", "m"],
            env={"OPENAI_API_KEY": PROVIDER_KEY},
            ledger=tmp_path / "ledger.db",
        ) as gateway,
    ):
        env = gateway.runtime_env()
        db = tmp_path / "runs.db"
        args = ["run", "speculation", *SPEC, "--planner", "llm", "--run-id", "k", "--quiet"]
        killed = run_cli(args, db=db, env=env, crash_at=point)
        assert was_killed(killed), killed.stderr
        asked_before = provider.calls
        resumed = run_cli(["resume", "k", "--quiet"], db=db, env=env)
        assert resumed.returncode == 0, resumed.stderr
        calls = provider.calls
        keys = [r.body["messages"][1]["content"].split("\n", 1)[0] for r in provider.requests]
    closed(gateway)
    rules = run_cli(["run", "speculation", *SPEC, "--run-id", "k"], db=tmp_path / "r.db")
    assert rules.returncode == 0, rules.stderr
    got, want = inspect(db, "k"), inspect(tmp_path / "r.db", "k")
    assert (got["status"], got["digest"]) == (want["status"], want["digest"])
    seqs = [p["event_seq"] for p in got["patches"]]
    assert seqs == sorted(set(seqs))  # one patch per event
    assert asked_before >= 2
    assert calls == len(seqs), (calls, seqs, keys)  # one provider call per event
    assert got["patches"][0]["planner"] == "llm"


def test_llm_without_a_gateway_is_a_usage_error_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    out = run_cli(["run", "speculation", "--planner", "llm"], db=db)
    assert out.returncode == 2
    assert "needs a model gateway" in out.stderr and "LOOPKERNEL_GATEWAY" in out.stderr
    assert not db.exists() or run_cli(["runs"], db=db).stdout.strip() == ""


@pytest.mark.timeout(1800)
def test_the_apps_with_the_real_local_model_end_as_the_rules_end_them(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp", reason="pip install 'loopkernel[local-model]'")
    lab_rules, lab_llm = tmp_path / "lab-rules", tmp_path / "lab-llm"
    with GatewayProcess(["--local", "smollm2"], ledger=tmp_path / "ledger.db") as gateway:
        env = gateway.runtime_env()
        db = tmp_path / "llm.db"
        spec = run_cli(
            ["run", "speculation", *SPEC, "--planner", "llm", "--run-id", "s"],
            db=db,
            env=env,
            timeout=900,
        )
        assert spec.returncode == 0, spec.stderr
        lab = run_cli(
            ["run", "looplab", "--planner", "llm", "--run-id", "lab"],
            db=db,
            env={**env, "LOOPLAB_DIR": str(lab_llm)},
            timeout=900,
        )
        assert lab.returncode == 0, lab.stderr
        log = gateway.log
    closed(gateway)
    rules_db = tmp_path / "rules.db"
    assert run_cli(["run", "speculation", *SPEC, "--run-id", "s"], db=rules_db).returncode == 0
    lab = run_cli(
        ["run", "looplab", "--run-id", "lab"], db=rules_db, env={"LOOPLAB_DIR": str(lab_rules)}
    )
    assert lab.returncode == 0, lab.stderr
    for run in ("s", "lab"):
        got, want = inspect(db, run), inspect(rules_db, run)
        # A model may stop a run early (failed / cancelled: its finish is journaled as
        # llm); a run it lets succeed is the work's own: looplab's path is the rules' (the
        # same digest), speculation's verdict is its distiller's answer (docs/planner-llm.md)
        if got["status"] != want["status"]:
            assert got["status"] in ("failed", "cancelled"), run
            assert got["patches"][-1]["planner"] == "llm", run
        elif run == "lab":
            assert got["digest"] == want["digest"] == DIGESTS["baseline"]
        else:
            distill = next(t for t in got["tasks"] if t["skill"] == "distill")
            assert got["verdict"] == {"answer": distill["result"]["answer"]}
        assert all(p["planner"] in ("llm", "fallback") for p in got["patches"]), run
        # Each answered by the model (its name kept) or refused for a named model error.
        for p in got["patches"]:
            note = p["proposal"]
            assert note["model"] or note["reason"] in (
                "model_timeout",
                "model_unavailable",
                "breaker_open",  # the gateway's breaker after three timeouts in a row
                "provider_fault",
            ), p
    # Every planning call went to the bundled model. On a loaded machine each may pass its
    # 30 s deadline unanswered (a loaded round saw all of them do so): the runs must end as
    # the rules end them all the same. That this model answers at all is
    # tests/models/test_local_model.py's to show.
    planned = [
        line
        for line in log.splitlines()
        if "/plan/" in line and not line.startswith(("gateway: retry ", "gateway: provider fault "))
    ]
    assert planned and all("provider=smollm2" in line for line in planned), log
    reached = ("gateway: answered ", "gateway: replayed ", "gateway: invalid ")
    assert all(
        line.startswith(reached) or "model_timeout" in line or "breaker" in line for line in planned
    ), log
