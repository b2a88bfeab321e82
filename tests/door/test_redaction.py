"""Secrets never reach the journal: redacted at its boundary, before anything is written
(issue 8, section 4; issue 25, section 2): what a tool is sent and returns, what a worker
returns or raises, patches and verdicts, run parameters, approval payloads, evidence."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, ROOT, cli_env
from lk_leaky import AWS_KEY, PUBLIC, SECRET
from lk_secrets import AWS_KEY as PLANTED_KEY
from lk_secrets import BEARER, PASSWORD, PEM, SECRETS
from loopkernel.evidence import is_secret_key, marker, redact, redact_text

pytestmark = pytest.mark.slow


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(), capture_output=True, text=True, timeout=120
    )


def test_a_secret_from_a_tool_never_reaches_the_database_file_nor_inspect(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    out = cli("--db", str(db), "run", "lk_leaky:app", "--run-id", "r1", "--json")
    assert out.returncode == 1, out.stderr  # login fails, quoting the password
    for path in tmp_path.iterdir():  # runs.db, and any -wal or -shm left
        data = path.read_bytes()
        assert SECRET.encode() not in data and AWS_KEY.encode() not in data, path.name
    shown = cli("--db", str(db), "inspect", "r1", "--journal", "--json").stdout
    shown += cli("--db", str(db), "inspect", "r1", "--journal").stdout + out.stdout
    assert SECRET not in shown and AWS_KEY not in shown
    data = json.loads(cli("--db", str(db), "inspect", "r1", "--json").stdout)
    who = next(t for t in data["tasks"] if t["task_id"] == "who")["result"]
    assert who["password"] == marker(SECRET)  # equal secrets, equal markers
    assert who["headers"]["Authorization"] == marker(f"Bearer {SECRET}")  # a secret key: whole
    assert marker(SECRET) in who["log"] and marker(AWS_KEY) in who["log"]
    assert who["shown"] == {"api_key": PUBLIC}  # the tool opted out for this field
    assert who["input_tokens"] == 12 and who["user"] == "ada"
    assert marker(SECRET) in json.dumps(data["verdict"])


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
        ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----",
            "b3Blbn",
        ),
        ("db url ?user=a&password=pa55word&x=1", "pa55word"),
        ('{"api_key": "k-123456"}', "k-123456"),
        ("token: ghp_" + "a" * 36, "ghp_" + "a" * 36),
        ("openai sk-proj-" + "b" * 30, "sk-proj-" + "b" * 30),
        ("jwt eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl"),
    ],
)
def test_credential_patterns_in_text(text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out and "[redacted:" in out
    assert redact_text(out) == out  # redacting twice changes nothing


def test_keys_that_look_like_secrets() -> None:
    for key in ["password", "DB_PASSWORD", "api_key", "apiKey", "X-Auth-Token", "client_secret",
                "Authorization", "private_key", "sessionId", "auth"]:  # fmt: skip
        assert is_secret_key(key), key
    for key in ["input_tokens", "max_tokens", "author", "user", "tokenizer", "passes"]:
        assert not is_secret_key(key), key
    value = {"creds": {"password": "x1", "list": ["y"]}, "api_key": ["a", {"b": "c"}], "n": 3}
    out = redact(value)
    assert out == {
        "creds": {"password": marker("x1"), "list": ["y"]},
        "api_key": [marker("a"), {"b": marker("c")}],
        "n": 3,
    }
    assert redact(value, keep=["creds.password"])["creds"]["password"] == "x1"  # type: ignore[index,call-overload]


# -- secrets nowhere: every door of the journal, every app, every file (issue 25 §2) -----


def scan(folder: Path) -> list[tuple[str, str]]:
    """``(file, secret)`` for each planted secret found in any file under ``folder``."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [(str(path.relative_to(folder)), s) for s in SECRETS if s.encode() in data]
    return found


def logged(folder: Path, name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``loopkernel ARGS``, its stdout and stderr kept as files in ``folder`` (the logs)."""
    out = subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(**env), capture_output=True, text=True, timeout=300
    )
    (folder / f"{name}.stdout").write_text(out.stdout)
    (folder / f"{name}.stderr").write_text(out.stderr)
    return out


APPROVAL = json.dumps({"by": "ops", "token": BEARER, "note": f"password={PASSWORD}", "pem": PEM})


def run_secrets_app(folder: Path, *, crash_at: str | None = None) -> dict[str, object]:
    db = str(folder / "runs.db")
    start = ["--db", db, "run", "lk_secrets:app", "--run-id", "r", "--quiet"]
    start += ["--set", f"note=password={PASSWORD} key {PLANTED_KEY}"]
    if crash_at is not None:
        killed = logged(folder, "crashed", *start, LOOPKERNEL_CRASH_AT=crash_at)
        assert killed.returncode == -9, killed.stderr
        first = logged(folder, "resumed", "--db", db, "resume", "r", "--quiet")
    else:
        first = logged(folder, "run", *start)
    assert first.returncode == 3, first.stderr  # waiting at the gate
    ok = logged(folder, "approve", "--db", db, "approve", "r", "gate", "--payload", APPROVAL)
    assert ok.returncode == 0, ok.stderr
    done = logged(folder, "resume", "--db", db, "resume", "r")
    assert done.returncode == 0, done.stderr
    for flags in (["--json"], ["--journal"], ["--journal", "--json"]):
        logged(folder, "inspect" + "".join(flags), "--db", db, "inspect", "r", *flags)
    exported = logged(folder, "export", "--db", db, "export", "r", "--to", str(folder / "copy.db"))
    assert exported.returncode == 0, exported.stderr
    return json.loads((folder / "inspect--json.stdout").read_text())  # type: ignore[no-any-return]


def test_secrets_planted_at_every_door_reach_no_file_the_run_wrote(tmp_path: Path) -> None:
    data = run_secrets_app(tmp_path)
    assert data["status"] == "succeeded"
    assert scan(tmp_path) == []
    verdict = data["verdict"]
    assert isinstance(verdict, dict)
    plant = verdict["plant"]
    # redacted, not dropped: each secret is a marker where it was
    assert marker(PASSWORD) in plant["log"] and marker(PLANTED_KEY) in plant["log"]
    assert marker(PASSWORD) in plant["echoed"]["text"] and marker(BEARER) in plant["echoed"]["text"]
    assert plant["input"] == {"db": f"password={marker(PASSWORD)}"}  # a planner's task input
    assert plant["param"] == f"password={marker(PASSWORD)} key {marker(PLANTED_KEY)}"  # --set
    assert verdict["gate"]["approved"]["token"] == marker(BEARER)  # approval payload
    assert marker(PASSWORD) in verdict["error"]["message"]  # a worker's error
    # The effect journal keeps the arguments redacted and the raw ones' digest.
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        args, digest = conn.execute("SELECT arguments, arguments_digest FROM effects").fetchone()
    raw = {"text": f"login password={PASSWORD} with Authorization: Bearer {BEARER}"}
    assert marker(PASSWORD) in args
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    assert digest == hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.parametrize("crash_at", ["tool_returned:1", "task_returned:1"])
def test_redaction_keeps_a_resumed_run_byte_identical(tmp_path: Path, crash_at: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole = run_secrets_app(tmp_path / "a")
    resumed = run_secrets_app(tmp_path / "b", crash_at=crash_at)
    assert resumed["digest"] == whole["digest"]
    assert scan(tmp_path) == []


def test_each_shipped_app_writes_no_planted_secret(tmp_path: Path) -> None:
    db, lab = str(tmp_path / "runs.db"), str(tmp_path / "lab")
    out = logged(tmp_path, "speculation", "--db", db, "run", "speculation", "--run-id", "s")
    assert out.returncode == 0, out.stderr
    for scenario in ("baseline", "irreversible", "overspend", "verify_stuck"):
        args = ["--db", db, "run", "looplab", "--scenario", scenario, "--run-id", scenario]
        out = logged(tmp_path, scenario, *args, LOOPLAB_DIR=lab)
        assert out.returncode in (0, 3, 4), out.stderr  # succeeded, waiting, escalated
    approve = ["--db", db, "approve", "irreversible", "act:3.1", "--payload", APPROVAL]
    assert logged(tmp_path, "approve", *approve, LOOPLAB_DIR=lab).returncode == 0
    resume = ["--db", db, "resume", "irreversible", "--quiet"]
    assert logged(tmp_path, "lab-resume", *resume, LOOPLAB_DIR=lab).returncode == 0
    incident = ROOT / "examples" / "incidents" / "oom-payments"
    question = f"Why is payments restarting? our password={PASSWORD}, Bearer {BEARER}"
    sre = ["--db", db, "run", "sre", "--run-id", "i", "--set", f"dump={incident / 'dump'}"]
    sre += ["--set", f"question={question}", "--set", "namespace=prod"]
    out = logged(tmp_path, "sre", *sre)
    assert out.returncode == 0, out.stderr
    for run in ("s", "irreversible", "i"):
        inspect = logged(tmp_path, f"inspect-{run}", "--db", db, "inspect", run, "--journal")
        assert inspect.stdout, inspect.stderr
        copy = str(tmp_path / f"{run}.db")
        exported = logged(tmp_path, f"export-{run}", "--db", db, "export", run, "--to", copy)
        assert exported.returncode == 0, exported.stderr
    assert sorted(p.name for p in (tmp_path / "lab").iterdir())  # looplab wrote its files
    assert scan(tmp_path) == []
    answered = json.loads(logged(tmp_path, "i-json", "--db", db, "inspect", "i", "--json").stdout)
    assert marker(PASSWORD) in json.dumps(answered)  # the question is kept, its secret not
