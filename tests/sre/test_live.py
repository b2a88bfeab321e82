"""Live mode against a local HTTP server speaking the few Kubernetes API endpoints it uses.

No Kubernetes API server can run on this machine, so a real one is out of reach; this
server answers the same paths with the same JSON (taken from an example incident's dump)
and checks the bearer token from the kubeconfig, and the official ``kubernetes`` client
talks to it over real HTTP.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from lk_sre import INCIDENTS, investigate
from loopkernel.testing import run_cli
from loopkernel_apps.sre._dump import load_dump

SOURCE = INCIDENTS / "oom-payments" / "dump"
TOKEN = "test-token-7f3a"
STEMS = {"replicationcontrollers": "replication-controllers"}


class _Api(BaseHTTPRequestHandler):
    seen: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._send(401, b'{"kind":"Status","code":401,"reason":"Unauthorized"}')
            return
        url = urlparse(self.path)
        parts = url.path.strip("/").split("/")
        self.seen.append(url.path + ("?" + url.query if url.query else ""))
        if parts == ["api", "v1", "nodes"]:
            self._send(200, (SOURCE / "nodes.json").read_bytes())
        elif parts == ["api", "v1", "namespaces"]:
            names = sorted(d.name for d in SOURCE.iterdir() if d.is_dir())
            items = [{"metadata": {"name": n}} for n in names]
            self._send(200, json.dumps({"kind": "NamespaceList", "items": items}).encode())
        elif len(parts) == 7 and parts[-1] == "log":
            ns, pod = parts[3], parts[5]
            q = parse_qs(url.query)
            container = q["container"][0]
            if q.get("previous") == ["true"]:
                path = SOURCE / ns / pod / f"logs-{container}-previous.txt"
                if not path.exists():
                    self._send(400, b'{"kind":"Status","code":400,"reason":"BadRequest"}')
                    return
                self._send(200, path.read_bytes(), "text/plain")
                return
            blocks = load_dump(SOURCE).namespace(ns).logs
            self._send(200, blocks.get((pod, container, False), "").encode(), "text/plain")
        elif "namespaces" in parts:
            ns, stem = parts[parts.index("namespaces") + 1], parts[-1]
            path = SOURCE / ns / f"{STEMS.get(stem, stem)}.json"
            body = path.read_bytes() if path.exists() else b'{"kind":"List","items":[]}'
            self._send(200, body)
        else:
            self._send(404, b'{"kind":"Status","code":404}')


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[Path]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    _Api.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters:\n- name: local\n  cluster:\n    server: http://127.0.0.1:{server.server_port}\n"
        "contexts:\n- name: test\n  context:\n    cluster: local\n    user: me\n"
        f"users:\n- name: me\n  user:\n    token: {TOKEN}\n"
    )
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_collect_writes_the_dump_the_reader_reads(tmp_path: Path, api_server: Path) -> None:
    from loopkernel_apps.sre._live import collect

    out = tmp_path / "dump"
    summary = collect(out, namespaces=["prod"], kubeconfig=str(api_server))
    assert "1 previous" in summary
    got, want = load_dump(out), load_dump(SOURCE)
    assert got.nodes == want.nodes
    for kind in ("pods", "events", "deployments", "replicasets"):
        assert got.namespace("prod").items(kind) == want.namespace("prod").items(kind)
    assert got.namespace("prod").logs == want.namespace("prod").logs
    previous = [k for k in got.namespace("prod").logs if k[2]]
    assert len(previous) == 1 and previous[0][0].startswith("payments-")
    assert any("previous=true" in p for p in _Api.seen)


@pytest.mark.slow
def test_sre_collect_then_investigate(tmp_path: Path, api_server: Path) -> None:
    out = tmp_path / "dump"
    args = ["sre", "collect", "--out", str(out), "--namespace", "prod"]
    done = run_cli([*args, "--kubeconfig", str(api_server)], db=tmp_path / "unused.db")
    assert done.returncode == 0, done.stderr
    assert "namespace prod" in done.stderr
    again = run_cli([*args, "--kubeconfig", str(api_server)], db=tmp_path / "unused.db")
    assert again.returncode == 2 and "exists" in again.stderr
    report = investigate(tmp_path / "runs.db", "oom-payments", dump=str(out))["report"]
    assert report["verified_causes"][0]["detector"] == "oomkilled"


def test_a_wrong_token_is_one_line_and_exit_2(tmp_path: Path, api_server: Path) -> None:
    bad = tmp_path / "bad-kubeconfig"
    bad.write_text(api_server.read_text().replace(TOKEN, "wrong"))
    done = run_cli(
        ["sre", "collect", "--out", str(tmp_path / "d"), "--kubeconfig", str(bad)],
        db=tmp_path / "unused.db",
    )
    assert done.returncode == 2
    assert "401" in done.stderr and len(done.stderr.strip().splitlines()) == 1
