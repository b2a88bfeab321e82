"""The ITBench-AA style scorer.

Per incident: 0 when any root-cause entity is missed, else the precision over the entities
the report names as causes (verified and suspected); the reason right or not; false
verified causes counted apart (a verified cause whose entity is no root cause; on a
healthy control every verified cause is one). Entities match through owners read from the
dump: a Pod owned through a ReplicaSet by the truth's Deployment is that Deployment, and
the reverse. A cause without ``entity`` falls back to the names its text and fields hold
(``fallback`` says so).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.sre_gen_lib._model import Entity, Truth

_KINDS = {
    "deploy": "deployment", "deployments": "deployment", "po": "pod", "pods": "pod",
    "svc": "service", "services": "service", "pvc": "persistentvolumeclaim",
    "hpa": "horizontalpodautoscaler", "rs": "replicaset", "no": "node", "nodes": "node",
    "jobs": "job", "quota": "resourcequota",
}  # fmt: skip

Key = tuple[str, str, str]
"""``(kind lower-case, namespace, name)``."""


def key(e: Entity, default_ns: str) -> Key:
    kind = _KINDS.get(e.kind.lower(), e.kind.lower())
    return (kind, "" if kind == "node" else (e.namespace or default_ns), e.name)


@dataclass(kw_only=True, slots=True)
class World:
    """What the scorer reads of a dump: every object's key and its controller."""

    namespace: str
    owners: dict[Key, Key] = field(default_factory=dict)
    names: dict[str, list[Key]] = field(default_factory=dict)

    @classmethod
    def read(cls, dump: Path, namespace: str) -> World:
        w = cls(namespace=namespace)
        for node in _items(dump / "nodes.json"):
            w._know(("node", "", node["metadata"]["name"]))
        for f in sorted((dump / namespace).glob("*.json")):
            if f.stem in ("events", "endpoints"):
                continue
            for obj in _items(f):
                meta = obj.get("metadata", {})
                kind = str(obj.get("kind") or f.stem.rstrip("s")).lower()
                k: Key = (kind, namespace, meta.get("name", ""))
                w._know(k)
                for ref in meta.get("ownerReferences", []):
                    if ref.get("controller"):
                        w.owners[k] = (str(ref["kind"]).lower(), namespace, ref["name"])
        return w

    def _know(self, k: Key) -> None:
        self.names.setdefault(k[2], []).append(k)

    def top(self, k: Key) -> Key:
        seen = 0
        while k in self.owners and seen < 5:
            k, seen = self.owners[k], seen + 1
        return k

    def named_in(self, text: str) -> list[Key]:
        """Objects whose name appears in ``text`` as a whole word, longest names first."""
        out: list[Key] = []
        for name in sorted(self.names, key=len, reverse=True):
            if name and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text):
                out.extend(self.names[name])
                text = text.replace(name, " ")
        return out


def _items(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    return [i for i in data.get("items", []) if isinstance(i, dict)]


@dataclass(frozen=True, kw_only=True, slots=True)
class Score:
    """One incident's marks."""

    recall: bool
    """Every root-cause entity named as a cause (a healthy control: nothing verified)."""
    reason: bool
    """A cause on a root entity gives an accepted reason (a healthy control: as recall)."""
    precision: float
    """Of the entities named as causes, the share that are root causes (1.0 when none)."""
    score: float
    """ITBench-AA: 0 when a root is missed, else the precision."""
    false_verified: tuple[str, ...]
    """The verified causes whose entity is no root cause, by their text."""
    symptom_causes: int
    """Causes (verified or suspected) naming a symptom of the fault, not its root."""
    fallback: bool
    """Some cause carried no ``entity``: names were read from its text."""
    named: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {"recall": self.recall, "reason": self.reason, "precision": round(self.precision, 3),
                "score": round(self.score, 3), "false_verified": list(self.false_verified),
                "symptom_causes": self.symptom_causes,
                "fallback": self.fallback, "named": list(self.named)}  # fmt: skip


def _cause_text(c: dict[str, Any]) -> str:
    parts = [str(c.get(f, "")) for f in ("reason", "detector", "text", "quote")]
    parts.extend(str(i) for i in c.get("identifiers", []) or [])
    return " ".join(parts)


def _cause_keys(c: dict[str, Any], world: World) -> tuple[list[Key], bool]:
    """The entities a cause names, and whether that came from the fallback."""
    e = Entity.of(c.get("entity"))
    if e is not None:
        return [key(e, world.namespace)], False
    found: list[Key] = []
    pod = c.get("pod")
    if isinstance(pod, str) and pod:
        found.append(("pod", world.namespace, pod))
    found.extend(world.named_in(_cause_text(c)))
    return found, True


def score(report: dict[str, Any], truth: Truth, world: World) -> Score:
    ns = world.namespace
    roots = [{world.top(key(r.entity, ns)), *(world.top(key(a, ns)) for a in r.aliases)}
             for r in truth.root_causes]  # fmt: skip
    accepted = [t.lower() for t in truth.reasons]
    symptoms = {world.top(key(e, ns)) for e in truth.symptoms} | {key(e, ns) for e in truth.symptoms}
    symptom_causes = 0
    verified = list(report.get("verified_causes") or [])
    suspected = list(report.get("suspected_causes") or [])
    hit = [False] * len(roots)
    reason_ok = False
    named: dict[Key, bool] = {}
    fallback = False
    false_verified: list[str] = []
    for is_verified, cause in [(True, c) for c in verified] + [(False, c) for c in suspected]:
        keys, fb = _cause_keys(cause, world)
        fallback |= fb
        tops = [world.top(k) for k in keys]
        matched = [i for i, group in enumerate(roots) if any(t in group for t in tops)]
        for i in matched:
            hit[i] = True
        if matched:
            text = _cause_text(cause).lower()
            reason_ok |= any(tok in text for tok in accepted)
            best = next(t for t in tops if any(t in roots[i] for i in matched))
        else:
            best = tops[0] if tops else ("?", ns, str(cause.get("text", ""))[:60])
        named[best] = named.get(best, False) or bool(matched)
        if not matched and any(k in symptoms for k in (*keys, *tops)):
            symptom_causes += 1
        if is_verified and not matched:
            false_verified.append(str(cause.get("text", ""))[:160])
    if truth.healthy:
        ok = not verified
        return Score(recall=ok, reason=ok, precision=1.0 if ok else 0.0, score=1.0 if ok else 0.0,
                     false_verified=tuple(false_verified), symptom_causes=symptom_causes,
                     fallback=fallback, named=tuple("/".join(k) for k in named))  # fmt: skip
    precision = sum(named.values()) / len(named) if named else 0.0
    recall = all(hit)
    return Score(recall=recall, reason=recall and reason_ok, precision=precision,
                 score=precision if recall else 0.0, false_verified=tuple(false_verified),
                 symptom_causes=symptom_causes, fallback=fallback, named=tuple("/".join(k) for k in named))  # fmt: skip
