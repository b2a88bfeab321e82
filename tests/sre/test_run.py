"""The investigation run: redaction down to the database file's bytes, a prompt injection in
a log that changes nothing, bounds that end the run with a named exit, calls answered
"already collected", and the two commands (investigate, run sre)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lk_sre import INCIDENTS, incident, investigate
from loopkernel.testing import run_cli

pytestmark = pytest.mark.slow

SECRET = "hunter2-Zq8pX4vL9"
OTHER_SECRETS = ("AKIAIOSFODNN7EXAMPLE", "eyJhbGciOiJIUzI1NiJ9")


@pytest.mark.parametrize("name", ["dns-redis", "missing-env"])
def test_a_known_secret_never_reaches_the_report_the_evidence_or_the_db(
    tmp_path: Path, name: str
) -> None:
    dump = Path(incident(name)["dump"])
    raw = b"".join(p.read_bytes() for p in dump.rglob("*") if p.is_file())
    assert SECRET.encode() in raw  # the dump holds it, in the pod spec (and the log)
    db = tmp_path / "runs.db"
    result = investigate(db, name)
    assert result["report"]["verified_causes"], result["report"]["summary"]
    text = json.dumps(result)
    for secret in (SECRET, *OTHER_SECRETS):
        assert secret not in text
    assert "[redacted:" in text and "[REDACTED]" not in text  # one marker: the project's
    files = [p for p in tmp_path.iterdir() if p.name.startswith("runs.db")]
    for f in files:  # the .db and any sidecar left behind
        data = f.read_bytes()
        for secret in (SECRET, *OTHER_SECRETS):
            assert secret.encode() not in data, f"{secret} in {f.name}"


def _calls_and_causes(report: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    calls = [(e["tool"], e["args"]) for e in report["evidence"]]
    causes = [(c["detector"], c["text"]) for c in report["verified_causes"]]
    return calls, causes


def test_instructions_in_a_log_change_nothing(tmp_path: Path) -> None:
    case = incident("prompt-injection")
    dump = Path(case["dump"])
    injected = next(dump.rglob("logs-notifier-previous.txt")).read_text()
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in injected
    clean = tmp_path / "clean"
    shutil.copytree(dump, clean)
    target = next(clean.rglob("logs-notifier-previous.txt"))
    target.write_text("".join(ln for ln in injected.splitlines(True) if "INSTRUCTIONS" not in ln))

    attacked = investigate(tmp_path / "a.db", "prompt-injection")["report"]
    control = investigate(tmp_path / "b.db", "prompt-injection", dump=str(clean))["report"]
    assert _calls_and_causes(attacked) == _calls_and_causes(control)
    assert attacked["coverage"]["refused_requests"] == []
    assert attacked["verified_causes"][0]["detector"] == "missing_env"
    told = json.dumps(
        [
            attacked[k]
            for k in (
                "summary",
                "verified_causes",
                "suspected_causes",
                "proposed_remediation",
                "next_steps",
            )
        ]
    )
    assert "disk" not in told and "delete" not in told.lower() and "etcd" not in told


def test_two_playbooks_asking_the_same_thing_cost_one_call(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    report = investigate(db, "oom-payments")["report"]
    cov = report["coverage"]
    assert cov["already_collected"] >= 1
    with sqlite3.connect(db) as conn:
        (effects,) = conn.execute("SELECT count(*) FROM effects").fetchone()
    assert effects == cov["tool_calls"] == len(report["evidence"])


@pytest.mark.parametrize(
    ("bound", "value", "exit"),
    [
        ("max_tool_calls", 3, "max_tool_calls"),
        ("max_rounds", 1, "max_rounds"),
        ("max_evidence_chars", 2000, "max_evidence_chars"),
        ("max_wall_s", 1e-9, "max_wall_s"),
    ],
)
def test_each_bound_ends_the_run_with_its_exit_and_reason(
    tmp_path: Path, bound: str, value: float, exit: str
) -> None:
    report = investigate(tmp_path / "runs.db", "scope-refusal", **{bound: value})["report"]
    cov = report["coverage"]
    assert cov["exit"] == exit and cov["budget_exhausted"] == exit
    assert bound in cov["exit_reason"] or "budget" in cov["exit_reason"]
    assert bound in report["summary"] or cov["exit"] in render(report)
    if bound == "max_tool_calls":
        assert cov["tool_calls"] == 3
        assert any("not collected: max_tool_calls" in m for m in report["missing_evidence"])
    if bound == "max_evidence_chars":
        assert sum(len(e["content"]) for e in report["evidence"]) <= 2000 + 200


def render(report: dict[str, Any]) -> str:
    from loopkernel_apps.sre import render_markdown

    return render_markdown(report)


def test_investigate_prints_the_report_and_exits_with_the_run_status(tmp_path: Path) -> None:
    case = incident("image-pull")
    db = tmp_path / "runs.db"
    args = ["investigate", case["question"], "--dump", case["dump"], "--namespace", "prod"]
    done = run_cli([*args, "--json"], db=db)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verified_causes"][0]["detector"] == "image_pull"
    assert "task_completed" in done.stderr and "report digest" in done.stderr  # progress
    md = run_cli(args, db=db)
    assert md.returncode == 0
    assert md.stdout.startswith("# Investigation: Why is the web rollout stuck?")
    # --model with no gateway configured: one line, exit 2 (tests/sre/test_model.py)
    no_gw = run_cli([*args, "--model"], db=db, env={"LOOPKERNEL_GATEWAY": ""})
    assert no_gw.returncode == 2 and "--model needs a model gateway" in no_gw.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dump", "/nonexistent", "--namespace", "prod"], "no dump at /nonexistent"),
        (["--namespace", "staging"], "has no namespace 'staging'"),
        (["--namespace", "prod", "--set", "max_rounds=0"], "max_rounds must be a positive"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, args: list[str], message: str
) -> None:
    dump = ["--dump", str(INCIDENTS / "healthy" / "dump")] if "--dump" not in args else []
    db = tmp_path / "runs.db"
    done = run_cli(["investigate", "why?", *dump, *args], db=db)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not db.exists() or _runs(db) == 0


def _runs(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def test_run_sre_with_set(tmp_path: Path) -> None:
    case = incident("command-typo")
    sets = [f"question={case['question']}", f"dump={case['dump']}", "namespace=prod"]
    args = ["run", "sre", "--quiet", "--run-id", "r1"]
    for s in sets:
        args += ["--set", s]
    done = run_cli(args, db=tmp_path / "runs.db")
    assert done.returncode == 0, done.stderr
    assert "Verified (command_not_found)" in done.stdout
    missing = run_cli(["run", "sre", "--quiet"], db=tmp_path / "runs.db")
    assert missing.returncode == 2 and "sre needs a question" in missing.stderr


def test_the_wall_clock_of_one_run_does_not_leak_into_the_next(tmp_path: Path) -> None:
    first = investigate(tmp_path / "a.db", "oom-payments", run_id="same", max_wall_s=1e-9)
    assert first["report"]["coverage"]["exit"] == "max_wall_s"
    second = investigate(tmp_path / "b.db", "oom-payments", run_id="same")
    assert second["report"]["coverage"]["exit"] == "complete"
