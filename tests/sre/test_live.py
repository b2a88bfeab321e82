"""Live mode against a local HTTP server speaking the few Kubernetes API endpoints it uses.

No Kubernetes API server can run on this machine, so a real one is out of reach; this
server answers the same paths with the same JSON (taken from an example incident's dump)
and checks the bearer token from the kubeconfig, and the official ``kubernetes`` client
talks to it over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from lk_kubeapi import KubeAPI
from lk_service import ALICE, BOB
from lk_sre import INCIDENTS, incident, investigate
from lk_web import csrf_of, start_server, stop_server
from loopkernel.client import Client
from loopkernel.testing import run_cli
from loopkernel_apps.sre._cli import report_of
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


def _kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters:\n- name: local\n  cluster:\n    server: {url}\n"
        "contexts:\n- name: test\n  context:\n    cluster: local\n    user: me\n"
        f"users:\n- name: me\n  user:\n    token: {TOKEN}\n"
    )
    return path


def live_table(tmp: Path, url: str) -> Path:
    """alice may read ``prod`` on the live cluster ``eu`` (the API server at ``url``); bob
    may read ``prod`` of no cluster."""
    table = {
        "users": {
            "alice": {"token": ALICE, "namespaces": ["prod"], "clusters": ["eu"]},
            "bob": {"token": BOB, "namespaces": ["prod"]},
        },
        "clusters": {"eu": {"kubeconfig": str(_kubeconfig(tmp / "eu.yaml", url))}},
        "uploads": str(tmp / "uploads"),
    }
    (tmp / "service.json").write_text(json.dumps(table))
    return tmp / "service.json"


def report_of_run(db: Path, run_id: str) -> dict[str, Any]:
    """A queued run executed here (as a worker would); its report task's result."""

    async def go() -> dict[str, Any]:
        async with Client(str(db)) as client:
            assert (await client.execute(run_id)).status.value == "succeeded"
            return dict(await report_of(client, run_id))

    return asyncio.run(go())


@pytest.fixture(scope="module")
def dumped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The example incident investigated from its dump."""
    return investigate(tmp_path_factory.mktemp("dumped") / "runs.db", "oom-payments")


def test_a_question_on_the_live_cluster_reports_as_on_its_dump(
    tmp_path: Path, dumped: dict[str, Any]
) -> None:
    """``investigate --submit --cluster`` against the local Kubernetes API server loaded
    with the incident: the same report as the same incident read from its dump."""
    case = incident("oom-payments")
    with KubeAPI(allowed=("prod",)) as api:
        api.load(case["dump"])
        table = live_table(tmp_path, api.url)
        args = ["investigate", case["question"], "--cluster", "eu", "--namespace", "prod"]
        args += ["--submit", "--people", str(table)]
        db = tmp_path / "runs.db"
        refused = run_cli([*args, "--user", "bob"], db=db)
        assert refused.returncode == 2 and "bob may not read cluster eu" in refused.stderr
        assert not (tmp_path / "uploads").exists()  # refused before the cluster is read
        done = run_cli([*args, "--user", "alice"], db=db)
        assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    live = report_of_run(db, run_id)
    (collected,) = (tmp_path / "uploads").iterdir()
    assert load_dump(collected).namespace("prod").items("pods") == load_dump(
        case["dump"]
    ).namespace("prod").items("pods")
    assert same_report_but_endpoints(live["report"], dumped["report"])
    assert live["report"]["verified_causes"][0]["detector"] == "oomkilled"


def same_report_but_endpoints(live: dict[str, Any], dumped: dict[str, Any]) -> bool:
    """Equal, but for what live mode reads beyond a dump: the Endpoints (here none), so the
    dump's "derived from selectors" note and its missing-evidence line are not in ``live``."""
    note = "Endpoints: not in a kubectl cluster-info dump"
    missing = [m for m in dumped["missing_evidence"] if not m.startswith(note)]
    assert len(missing) == len(dumped["missing_evidence"]) - 1
    assert live["missing_evidence"] == missing
    differ = [
        (a, b) for a, b in zip(live["evidence"], dumped["evidence"], strict=True) if a != b
    ]
    assert [(a["content"], b["content"].split(";")[0]) for a, b in differ] == [
        ("<no services>", "Endpoints: not in a kubectl cluster-info dump")
    ]
    keep = {"evidence", "missing_evidence"}
    assert {k: v for k, v in live.items() if k not in keep} == {
        k: v for k, v in dumped.items() if k not in keep
    }
    return True


def test_the_pages_live_source_reports_as_on_its_dump(
    tmp_path: Path, dumped: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Investigations form of ``loopkernel serve`` with the source "the live cluster
    eu" (over HTTP): the run reads the API server through ``sre collect``'s client, is
    journaled as a live question of alice, and reports as the dump does."""
    case = incident("oom-payments")
    with KubeAPI(allowed=("prod",)) as api:
        api.load(case["dump"])
        monkeypatch.setenv("LOOPKERNEL_SRE_SERVICE", str(live_table(tmp_path, api.url)))
        served = start_server(str(tmp_path / "runs.db"), tmp_path)
        try:
            with served.client() as http:
                form = {"question": case["question"], "namespace": "prod", "source": "live:eu"}
                form["csrf"] = csrf_of(http, "/investigations")
                refused = http.post("/investigations", data={**form, "token": BOB})
                assert refused.status_code == 403 and "bob may not read cluster eu" in refused.text
                asked = http.post("/investigations", data={**form, "token": ALICE})
                assert asked.status_code == 303, asked.text
                run_id = asked.headers["location"].rsplit("/", 1)[1]
                live = report_of_run(Path(served.db), run_id)
                page = http.get(f"/investigations/{run_id}")
        finally:
            stop_server(served)
    assert same_report_but_endpoints(live["report"], dumped["report"])
    assert page.status_code == 200 and "OOMKilled" in page.text
    runs = asyncio.run(_params(Path(served.db), run_id))
    assert runs["service"]["asked_by"] == "alice" and runs["service"]["source"] == "live"


async def _params(db: Path, run_id: str) -> Any:
    async with Client(str(db)) as client:
        return (await client.info(run_id)).params
