"""Reading ``kubectl cluster-info dump``: the directory form and the stdout form.

Directory form (``--output-directory=DIR``)::

    DIR/nodes.json                              a list object (items carry no kind)
    DIR/NS/{events,pods,deployments,replicasets,services,daemonsets,
            replication-controllers}.json      per namespace, list objects
    DIR/NS/jobs.json ...                        extra list files, read when present
    DIR/NS/POD/logs.txt                         ==== START logs for container C of pod NS/POD ====
                                                ...
                                                ==== END logs for container C of pod NS/POD ====
    DIR/NS/POD/logs-C-previous.txt              the previous instance (kubectl logs --previous)

Stdout form: the same lists as concatenated JSON documents (each names its ``kind``, such
as ``PodList``; items name their namespace), then the log blocks.

A dump that cannot be read raises ``UsageError`` with one line naming the file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopkernel import UsageError

__all__ = ["LIST_FILES", "Dump", "LogKey", "load_dump", "parse_log_blocks"]

LIST_FILES = (
    "events",
    "pods",
    "deployments",
    "replicasets",
    "services",
    "daemonsets",
    "replication-controllers",
)
"""The per-namespace lists ``kubectl cluster-info dump`` always writes."""

_KIND_TO_LIST = {
    "EventList": "events",
    "PodList": "pods",
    "DeploymentList": "deployments",
    "ReplicaSetList": "replicasets",
    "ServiceList": "services",
    "DaemonSetList": "daemonsets",
    "ReplicationControllerList": "replication-controllers",
    "JobList": "jobs",
    "CronJobList": "cronjobs",
    "StatefulSetList": "statefulsets",
    "ConfigMapList": "configmaps",
}

_BLOCK = re.compile(
    r"^==== (START|END) logs for container (\S+) of pod ([^/\s]+)/(\S+) ====$", re.MULTILINE
)
_PREVIOUS = re.compile(r"^logs-(.+)-previous\.txt$")

LogKey = tuple[str, str, bool]
"""``(pod, container, previous)``."""


@dataclass(kw_only=True, slots=True)
class Namespace:
    """One namespace of a dump: its lists by file stem, and its pods' logs."""

    name: str
    lists: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    logs: dict[LogKey, str] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Indexes built once from the lists (the dump does not change once read)."""

    def items(self, kind: str) -> list[dict[str, Any]]:
        return self.lists.get(kind, [])

    def pod(self, name: str) -> dict[str, Any] | None:
        for pod in self.items("pods"):
            if pod.get("metadata", {}).get("name") == name:
                return pod
        return None


@dataclass(kw_only=True, slots=True)
class Dump:
    """A whole dump: nodes and namespaces."""

    origin: str
    nodes: list[dict[str, Any]] = field(default_factory=list)
    namespaces: dict[str, Namespace] = field(default_factory=dict)

    def namespace(self, name: str) -> Namespace:
        if name not in self.namespaces:
            known = ", ".join(sorted(self.namespaces)) or "none"
            raise UsageError(f"dump {self.origin} has no namespace {name!r} (found: {known})")
        return self.namespaces[name]

    def _ns(self, name: str) -> Namespace:
        return self.namespaces.setdefault(name, Namespace(name=name))


def load_dump(path: str | Path) -> Dump:
    """Read a dump directory, or a file holding the stdout form."""
    p = Path(path)
    if p.is_dir():
        return _load_dir(p)
    if p.is_file():
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot read dump {p}: {exc.strerror or exc}") from None
        return parse_stdout(text, origin=str(p))
    raise UsageError(f"no dump at {p}: give a 'kubectl cluster-info dump' directory or file")


def _read_list(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    except UnicodeDecodeError as exc:  # binary bytes where a JSON file should be
        raise UsageError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except RecursionError:
        raise UsageError(f"{path} is nested too deeply to be a Kubernetes list") from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UsageError(f"{path} is not a Kubernetes list object (no 'items' array)")
    return [i for i in items if isinstance(i, dict)]


def _load_dir(root: Path) -> Dump:
    dump = Dump(origin=str(root))
    if (root / "nodes.json").is_file():
        dump.nodes = _read_list(root / "nodes.json")
    for ns_dir in sorted(d for d in root.iterdir() if d.is_dir()):
        lists = sorted(ns_dir.glob("*.json"))
        if not lists:
            continue
        ns = dump._ns(ns_dir.name)
        for f in lists:
            ns.lists[f.stem] = _read_list(f)
        for pod_dir in sorted(d for d in ns_dir.iterdir() if d.is_dir()):
            logs = pod_dir / "logs.txt"
            if logs.is_file():
                text = logs.read_text(encoding="utf-8", errors="replace")
                for (namespace, pod, container), body in parse_log_blocks(text).items():
                    dump._ns(namespace).logs[(pod, container, False)] = body
            for f in sorted(pod_dir.iterdir()):
                m = _PREVIOUS.match(f.name)
                if m and f.is_file():
                    body = f.read_text(encoding="utf-8", errors="replace")
                    ns.logs[(pod_dir.name, m.group(1), True)] = body
    if not dump.nodes and not dump.namespaces:
        raise UsageError(
            f"{root} does not look like a 'kubectl cluster-info dump' directory "
            "(no nodes.json, no NS/pods.json)"
        )
    return dump


def parse_log_blocks(text: str) -> dict[tuple[str, str, str], str]:
    """``{(namespace, pod, container): log}`` from START/END blocks."""
    out: dict[tuple[str, str, str], str] = {}
    start: tuple[str, str, str, int] | None = None
    for m in _BLOCK.finditer(text):
        kind, container, namespace, pod = m.groups()
        if kind == "START":
            start = (namespace, pod, container, m.end() + 1)
        elif start is not None and start[:3] == (namespace, pod, container):
            out[start[:3]] = text[start[3] : m.start()]
            start = None
    if start is not None:  # a block cut short: keep what is there
        out[start[:3]] = text[start[3] :]
    return out


def parse_stdout(text: str, *, origin: str = "<stdout>") -> Dump:
    """The stdout form: JSON documents one after another, then the log blocks."""
    dump = Dump(origin=origin)
    decoder = json.JSONDecoder()
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n or text[pos] != "{":
            break
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{origin}: a JSON document is broken: {exc}") from None
        kind = doc.get("kind", "") if isinstance(doc, dict) else ""
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            continue
        if kind == "NodeList":
            dump.nodes.extend(i for i in items if isinstance(i, dict))
            continue
        stem = _KIND_TO_LIST.get(kind) or (kind[:-4].lower() + "s" if kind.endswith("List") else "")
        if not stem:
            continue
        for item in items:
            if isinstance(item, dict):
                ns = item.get("metadata", {}).get("namespace") or "default"
                dump._ns(ns).lists.setdefault(stem, []).append(item)
    for (namespace, pod, container), body in parse_log_blocks(text[pos:]).items():
        dump._ns(namespace).logs[(pod, container, False)] = body
    if not dump.nodes and not dump.namespaces:
        raise UsageError(f"{origin} holds no 'kubectl cluster-info dump' output")
    return dump
