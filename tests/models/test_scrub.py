"""Which variables the runtime refuses to hold, and that it says so once."""

from __future__ import annotations

import pytest

from loopkernel.cli import main
from loopkernel.models._scrub import credential_names, scrub


def test_credential_names_are_api_keys_and_secret_keys_but_not_the_gateway_token() -> None:
    env = {
        "OPENAI_API_KEY": "x",
        "ANTHROPIC_API_KEY": "x",
        "API_KEY": "x",
        "GEMINI_APIKEY": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "DJANGO_SECRET_KEY": "x",
        "LOOPKERNEL_GATEWAY_TOKEN": "x",
        "LOOPKERNEL_GATEWAY": "x",
        "PATH": "x",
        "KEYBOARD": "x",
    }
    assert credential_names(env) == [
        "ANTHROPIC_API_KEY",
        "API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DJANGO_SECRET_KEY",
        "GEMINI_APIKEY",
        "OPENAI_API_KEY",
    ]


def test_scrub_removes_them_and_warns_once_without_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"OPENAI_API_KEY": "sk-value-123", "PATH": "/bin"}
    assert scrub(env) == ["OPENAI_API_KEY"]
    assert scrub(env) == []
    assert env == {"PATH": "/bin"}
    err = capsys.readouterr().err
    assert err.count("removed OPENAI_API_KEY") == 1 and "sk-value-123" not in err


def test_the_cli_called_in_process_cleans_os_environ(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    import os

    monkeypatch.setenv("OPENAI_API_KEY", "sk-value-456")
    assert main(["--db", f"{tmp_path}/runs.db", "runs"]) == 9  # no database there: still scrubbed
    assert "OPENAI_API_KEY" not in os.environ
    assert "removed OPENAI_API_KEY" in capsys.readouterr().err
