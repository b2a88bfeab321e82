"""The records: an entity, an incident's ground truth, a generated incident."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.sre_gen_lib._cluster import Cluster


@dataclass(frozen=True, kw_only=True, slots=True)
class Entity:
    """A Kubernetes object by kind, namespace and name (namespace "" for a Node)."""

    kind: str
    namespace: str
    name: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name}

    @classmethod
    def of(cls, data: Any) -> Entity | None:
        if not isinstance(data, dict):
            return None
        kind, name = data.get("kind"), data.get("name")
        if not isinstance(kind, str) or not isinstance(name, str):
            return None
        ns = data.get("namespace")
        return cls(kind=kind, namespace=ns if isinstance(ns, str) else "", name=name)


@dataclass(frozen=True, kw_only=True, slots=True)
class RootCause:
    """One root-cause entity; ``aliases`` are other objects naming the same cause (the
    Deployment that mounts an unbound claim, for the claim)."""

    entity: Entity
    aliases: tuple[Entity, ...] = ()

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = self.entity.as_json()
        if self.aliases:
            out["aliases"] = [a.as_json() for a in self.aliases]
        return out


class Flavour(StrEnum):
    """The cloud a cluster looks like: node names, labels, providerIDs, registries."""

    GKE = "gke"
    EKS = "eks"
    AKS = "aks"
    KIND = "kind"


class Runtime(StrEnum):
    """The language runtime whose stack traces and error shapes a workload logs."""

    PYTHON = "python"
    GO = "go"
    JAVA = "java"
    NODE = "node"
    DOTNET = "dotnet"
    RUST = "rust"


class LogFormat(StrEnum):
    """How each log line is written."""

    PLAIN = "plain"
    JSON = "json"
    LOGFMT = "logfmt"


@dataclass(frozen=True, kw_only=True, slots=True)
class Truth:
    """An incident's ground truth, as ITBench writes it."""

    fault: str
    """The fault class (``oomkilled``, ``pvc_unbound`` …; ``healthy`` for a control)."""
    root_causes: tuple[RootCause, ...]
    """Every entity a correct report must name as a cause (empty for a healthy control)."""
    reasons: tuple[str, ...]
    """Accepted reason tokens (Kubernetes reason strings, error classes); any one suffices."""
    symptoms: tuple[Entity, ...] = ()
    """Entities allowed in an ``explains`` chain: affected, not causes."""
    flavour: Flavour
    runtime: Runtime
    log_format: LogFormat
    distractors: tuple[str, ...] = ()
    """The distractors mixed in, by name."""

    @property
    def healthy(self) -> bool:
        return not self.root_causes

    def as_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "healthy": self.healthy,
            "root_causes": [r.as_json() for r in self.root_causes],
            "reasons": list(self.reasons),
            "symptoms": [s.as_json() for s in self.symptoms],
            "flavour": self.flavour.value,
            "runtime": self.runtime.value,
            "log_format": self.log_format.value,
            "distractors": list(self.distractors),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Truth:
        def ent(d: Any) -> Entity:
            e = Entity.of(d)
            assert e is not None, d
            return e

        roots = tuple(
            RootCause(entity=ent(r), aliases=tuple(ent(a) for a in r.get("aliases", [])))
            for r in data["root_causes"]
        )
        return cls(
            fault=data["fault"],
            root_causes=roots,
            reasons=tuple(data["reasons"]),
            symptoms=tuple(ent(s) for s in data.get("symptoms", [])),
            flavour=Flavour(data["flavour"]),
            runtime=Runtime(data["runtime"]),
            log_format=LogFormat(data["log_format"]),
            distractors=tuple(data.get("distractors", [])),
        )


@dataclass(kw_only=True, slots=True)
class Incident:
    """A generated incident: its cluster, the question asked, its ground truth."""

    name: str
    namespace: str
    question: str
    truth: Truth
    cluster: Cluster = field(repr=False)

    def write(self, out: Path) -> Path:
        """The layout of ``examples/incidents/``: dump/, question.txt, namespace.txt,
        truth.json."""
        out.mkdir(parents=True, exist_ok=True)
        self.cluster.write_dir(out / "dump")
        (out / "question.txt").write_text(self.question + "\n")
        (out / "namespace.txt").write_text(self.namespace + "\n")
        (out / "truth.json").write_text(json.dumps(self.truth.as_json(), indent=2) + "\n")
        return out
