"""Secrets nowhere (issue 32, item 3): the exits the journal's redaction did not cover.
A worker's exception goes to a real OTLP/HTTP receiver (this test's, on 127.0.0.1,
decoding the protobuf) redacted, in span events, attributes and status; a PostgreSQL
URL's password is never printed by ``run``, ``runs``, ``inspect`` or a store error."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from lk_helpers import LOOPKERNEL, ROOT, cli_env
from lk_secrets import AWS_KEY, PASSWORD, SECRETS
from loopkernel.cli import shown_url

if TYPE_CHECKING:
    from lk_stores import Backend

pytestmark = pytest.mark.slow


class Receiver:
    """An OTLP/HTTP trace receiver keeping every request's bytes and every text in it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.texts: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.bodies.append(body)
                request = ExportTraceServiceRequest.FromString(body)
                for rs in request.resource_spans:
                    for ss in rs.scope_spans:
                        for span in ss.spans:
                            receiver.texts.extend(_texts(span))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


def _texts(span: Any) -> list[str]:
    found = [span.name, span.status.message]
    for attrs in [span.attributes, *(e.attributes for e in span.events)]:
        found.extend(a.value.string_value for a in attrs if a.value.HasField("string_value"))
    found.extend(e.name for e in span.events)
    return found


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(**env), capture_output=True, text=True, timeout=120
    )


def test_a_workers_exception_reaches_the_span_exporter_redacted(
    tmp_path: Path, receiver: Receiver
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    db = str(tmp_path / "runs.db")
    note = f"password={PASSWORD} key {AWS_KEY}"
    first = cli(
        "--db", db, "run", "lk_secrets:app", "--run-id", "r", "--set", f"note={note}", **env
    )
    assert first.returncode == 3, first.stderr
    assert cli("--db", db, "approve", "r", "gate", **env).returncode == 0
    done = cli("--db", db, "resume", "r", "--quiet", **env)
    assert done.returncode == 0, done.stderr
    assert receiver.bodies, "no span was exported"
    # the worker's RuntimeError is there, as an exception event, without its secrets
    messages = [t for t in receiver.texts if "db login failed" in t]
    assert messages, receiver.texts
    assert any("RuntimeError" in t for t in receiver.texts)
    for secret in SECRETS:
        assert not [t for t in receiver.texts if secret in t], secret
        assert not [b for b in receiver.bodies if secret.encode() in b], secret


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    user = parts.username or "postgres"
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{parts.hostname}{port}"))


def test_no_command_prints_a_postgresql_urls_password(pg_backend: Backend) -> None:
    secret = "Zq8-s3cret-Pw"  # trust authentication: the server ignores it
    url = with_password(pg_backend.url, secret)
    outs = [cli("--db", url, "run", "lk_testapps:gate", "--run-id", "g")]
    assert outs[0].returncode == 3, outs[0].stderr
    assert "PASSWORD@" in outs[0].stdout  # the resume hint keeps its place
    outs.append(cli("--db", url, "runs"))
    outs.append(cli("--db", url, "inspect", "g"))
    outs.append(cli("--db", url, "wait", "g", "--timeout", "0"))
    dump = ROOT / "examples/incidents/oom-payments/dump"
    outs.append(cli("--db", url, "investigate", "why?", "--dump", str(dump), "--namespace", "prod"))
    assert outs[-1].returncode == 0, outs[-1].stderr
    assert "started in postgresql://postgres:PASSWORD@" in outs[-1].stderr  # named, masked
    down = with_password("postgresql://postgres@127.0.0.1:1/nothing", secret)
    outs.append(cli("--db", down, "runs"))
    assert outs[-1].returncode == 8, outs[-1].stderr
    for out in outs:
        assert secret not in out.stdout + out.stderr, out.args


def test_shown_url_masks_the_password_wherever_it_is() -> None:
    assert shown_url("runs.db") == "runs.db"
    assert shown_url("sqlite:///runs.db") == "sqlite:///runs.db"
    assert shown_url("postgresql://u:pw@h:5/db") == "postgresql://u:PASSWORD@h:5/db"
    assert shown_url("postgresql://u@h/db?password=pw&sslmode=require") == (
        "postgresql://u@h/db?password=PASSWORD&sslmode=require"
    )
    assert "pw" not in shown_url("postgresql://u:pw@h:notaport/db")


def test_a_model_reply_holding_secrets_is_kept_redacted_everywhere(tmp_path: Path) -> None:
    """The reply reaches the run's journal (``effects``), its export, ``inspect`` and the
    gateway's ledger redacted, as a tool's result does; the task saw the same text."""
    from lk_helpers import ROOT
    from loopkernel.testing import GatewayProcess, ScriptedProvider, run_cli

    reply = f"connect with password={PASSWORD} and key {AWS_KEY}"
    db, ledger = tmp_path / "runs.db", tmp_path / "ledger.db"
    with (
        ScriptedProvider([reply]).running() as p,
        GatewayProcess(
            ["--provider", "openai", "--base-url", p.base_url, "--model", "scripted-model"],
            ledger=ledger,
        ) as gw,
    ):
        env = {"PYTHONPATH": str(ROOT / "tests"), **gw.runtime_env()}
        ran = run_cli(["run", "lk_modelapps:one_ask", "--run-id", "m"], db=db, env=env)
        assert ran.returncode == 0, ran.stderr
        shown = run_cli(["inspect", "m", "--json", "--journal"], db=db, env=env)
        copy = tmp_path / "copy.db"
        assert run_cli(["export", "m", "--to", str(copy)], db=db, env=env).returncode == 0
    verdict = json.loads(run_cli(["inspect", "m", "--json"], db=db).stdout)["verdict"]
    assert "connect with password=[redacted:" in verdict["text"]
    for secret in (PASSWORD, AWS_KEY):
        assert secret not in ran.stdout + ran.stderr + shown.stdout
        for f in tmp_path.iterdir():
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), (secret, f.name)
