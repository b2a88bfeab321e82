"""Secrets a tool returns never reach the journal: redacted at the tool layer's result
boundary, before anything is written (issue 8, section 4)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_leaky import AWS_KEY, PUBLIC, SECRET
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
