"""A real local HTTP server that speaks the part of the Kubernetes API the fix server uses.

The official ``kubernetes`` client talks to it as to a cluster: ``GET``/``PATCH``
(``application/merge-patch+json``, RFC 7386) of deployments and their ``scale``
subresource, ``GET``/``DELETE`` of pods. Each object has a ``resourceVersion`` that every
write moves on; a patch naming an older one is ``409 Conflict``, a namespace outside
``allowed`` is ``403 Forbidden``, an unknown object ``404 NotFound``, replicas outside
0..``max_replicas``, an empty image, a resource quantity that is not one (``256Mi``,
``500m``) or a probe's timing below its minimum ``422 Invalid`` (each a ``Status`` object,
as the API server answers). Every write that changed something is counted in ``writes``
(and in ``log``, a file when given, so that a test can count writes across the processes
it killed).

``load(dump)`` fills it with an incident's objects (a ``kubectl cluster-info dump`` folder):
then it also answers what ``sre collect``'s client reads, the nodes, the namespaces, each
namespaced list (``GET /api/v1/namespaces/NS/pods``, ``/apis/apps/v1/namespaces/NS/
deployments`` ...) and the pods' logs (``/log?container=C&previous=true``; a previous
instance the dump lacks is ``400``, as the API server answers for a container that never
restarted).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

_DEPLOY = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)(/scale)?$")
_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")
_LIST = re.compile(r"^/apis?/(?:[a-z.]+/)?v[0-9a-z]+/namespaces/([^/]+)/([a-z]+)$")
_LOG = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def deployment(ns: str, name: str, image: str, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": "1", "generation": 1,
                     "uid": f"uid-{name}", "annotations": {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {}},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "observedGeneration": 1},
    }  # fmt: skip


def pod(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": "1", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "app", "image": "x"}]},
        "status": {"phase": "Running"},
    }


class KubeAPI:
    """The cluster's objects and the server; ``with KubeAPI(...) as api: api.url``."""

    def __init__(self, *, allowed: tuple[str, ...] = ("prod",), log: Path | None = None) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.nodes: list[dict[str, Any]] = []
        self.logs: dict[tuple[str, str, str, bool], str] = {}
        """``(namespace, pod, container, previous)``: the log's text."""
        self.allowed = allowed
        self.writes: list[tuple[str, str, str]] = []
        self.log = log
        self.max_replicas = 50
        """More is ``422`` (as a quota's admission would refuse it)."""
        self.conflict_next = 0
        """Answer this many next patches ``409`` (another writer got there first)."""
        self.hold: threading.Event | None = None
        """When set, a write waits for this event before it is answered (a slow cluster)."""
        self._rv = 1
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, obj: dict[str, Any], kind: str | None = None) -> None:
        meta = obj["metadata"]
        self.objects[(kind or obj["kind"], meta["namespace"], meta["name"])] = obj

    def load(self, dump: str | Path) -> None:
        """Every object, node and log of a dump folder, as its lists hold them."""
        from loopkernel_apps.sre._dump import load_dump

        root = Path(dump)
        self.nodes = json.loads((root / "nodes.json").read_text()).get("items", [])
        for ns_dir in sorted(d for d in root.iterdir() if d.is_dir()):
            for path in sorted(ns_dir.glob("*.json")):
                doc = json.loads(path.read_text())
                for item in doc.get("items", []):
                    self.add(copy.deepcopy(item), doc["kind"].removesuffix("List"))
            logs = load_dump(root).namespace(ns_dir.name).logs
            for (pod, container, previous), text in logs.items():
                self.logs[(ns_dir.name, pod, container, previous)] = text

    def reset(self, *objs: dict[str, Any]) -> None:
        """The server as new (same URL): these objects only, versions and writes from 0."""
        with self._lock:
            self.objects.clear()
            self.writes.clear()
            self._rv = 1
            self.conflict_next = 0
            for obj in objs:
                self.add(copy.deepcopy(obj))

    def get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, ns, name))

    def __enter__(self) -> KubeAPI:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the API ---------------------------------------------------------------------------

    def _wrote(self, verb: str, kind: str, name: str) -> None:
        self.writes.append((verb, kind, name))
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(json.dumps([verb, kind, name]) + "\n")

    def _bump(self, obj: dict[str, Any]) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv + 100)

    def answer(
        self, method: str, path: str, body: Any, ctype: str, query: str = ""
    ) -> tuple[int, Any]:
        """``(status, body)``: a JSON document, or a ``str`` (a log, sent as text)."""
        if method == "GET" and (read := self._read(path, parse_qs(query))) is not None:
            return read
        m, p = _DEPLOY.match(path), _POD.match(path)
        if not (m or p):
            return 404, _status(404, "NotFound", f"no route {path}")
        ns, name = (m or p).group(1), (m or p).group(2)  # type: ignore[union-attr]
        if ns not in self.allowed:
            return 403, _status(403, "Forbidden", f"namespace {ns} is forbidden to this user")
        kind = "Deployment" if m else "Pod"
        if method != "GET" and self.hold is not None:
            self.hold.wait(timeout=60)
        with self._lock:
            obj = self.get(kind, ns, name)
            if obj is None:
                return 404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found')
            if method == "GET":
                return 200, _scale(obj) if m and m.group(3) else obj
            if method == "DELETE" and p:
                del self.objects[(kind, ns, name)]
                self._wrote("delete", kind, name)
                return 200, obj
            if method == "PATCH" and m:
                return self._patch(obj, body, ctype, scale=bool(m.group(3)))
        return 405, _status(405, "MethodNotAllowed", method)

    def _read(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any] | None:
        """The reads ``sre collect`` makes (None: not one of them)."""
        if path == "/api/v1/nodes":
            return 200, {"kind": "NodeList", "apiVersion": "v1", "items": self.nodes}
        if path == "/api/v1/namespaces":
            names = sorted({ns for _, ns, _ in self.objects})
            items = [{"metadata": {"name": n}} for n in names]
            return 200, {"kind": "NamespaceList", "apiVersion": "v1", "items": items}
        log, listed = _LOG.match(path), _LIST.match(path)
        if not (log or listed):
            return None
        ns = (log or listed).group(1)  # type: ignore[union-attr]
        if ns not in self.allowed:
            return 403, _status(403, "Forbidden", f"namespace {ns} is forbidden to this user")
        if log:
            container = (query.get("container") or [""])[0]
            previous = query.get("previous") == ["true"]
            text = self.logs.get((ns, log.group(2), container, previous))
            if text is None and previous:
                msg = f'previous terminated container "{container}" not found'
                return 400, _status(400, "BadRequest", msg)
            return 200, text or ""
        plural = listed.group(2)  # type: ignore[union-attr]
        with self._lock:
            items = [o for (k, n, _), o in self.objects.items() if n == ns and _plural(k) == plural]
        kind = next((k for k, _, _ in self.objects if _plural(k) == plural), "")
        return 200, {"kind": f"{kind}List", "apiVersion": "v1", "items": items}

    def _patch(self, obj: dict[str, Any], body: Any, ctype: str, *, scale: bool) -> tuple[int, Any]:
        if ctype != "application/merge-patch+json":
            return 415, _status(415, "UnsupportedMediaType", ctype)
        if self.conflict_next:
            self.conflict_next -= 1
            self._bump(obj)
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != obj["metadata"]["resourceVersion"]:
            msg = "the object has been modified; please apply your changes to the latest version"
            return 409, _status(409, "Conflict", msg)
        patch = {"spec": {"replicas": body["spec"]["replicas"]}} if scale else body
        new = merge_patch(obj, patch)
        new["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
        if not 0 <= int(new["spec"].get("replicas", 0)) <= self.max_replicas or any(
            _invalid(c) for c in new["spec"]["template"]["spec"]["containers"]
        ):
            return 422, _status(422, "Invalid", "spec: Invalid value")
        if new["spec"] != obj["spec"]:
            new["metadata"]["generation"] = int(obj["metadata"]["generation"]) + 1
            new["status"]["observedGeneration"] = new["metadata"]["generation"]
            new["status"]["replicas"] = new["spec"]["replicas"]
            new["status"]["readyReplicas"] = new["spec"]["replicas"]
        if new != obj:
            self._bump(new)
            obj.clear()
            obj.update(new)
            self._wrote(
                "patch" + ("/scale" if scale else ""), "Deployment", obj["metadata"]["name"]
            )
        return 200, _scale(obj) if scale else obj

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                ctype = (self.headers.get("Content-Type") or "").split(";")[0]
                path, _, query = self.path.partition("?")
                code, out = api.answer(self.command, path, body, ctype, query)
                text = isinstance(out, str)
                data = out.encode() if text else json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain" if text else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_DELETE = _do

        return Handler


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_PROBE_MIN = {"initialDelaySeconds": 0, "timeoutSeconds": 1, "periodSeconds": 1,
              "failureThreshold": 1}  # fmt: skip


def _invalid(c: dict[str, Any]) -> bool:
    """What the API server's validation refuses in a container (a part of it)."""
    if not c.get("image"):
        return True
    for part in (c.get("resources") or {}).values():
        if any(not _QUANTITY.match(str(v)) for v in (part or {}).values()):
            return True
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        for k, least in _PROBE_MIN.items():
            v = (c.get(kind) or {}).get(k)
            if v is not None and (not isinstance(v, int) or v < least):
                return True
    return False


def _plural(kind: str) -> str:
    """``Pod`` -> ``pods``, ``Endpoints`` -> ``endpoints`` (the resource in the URL)."""
    return kind.lower() if kind.endswith("s") else kind.lower() + "s"


def _scale(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion")},
        "spec": {"replicas": obj["spec"]["replicas"]},
        "status": {"replicas": obj["status"]["replicas"]},
    }


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
