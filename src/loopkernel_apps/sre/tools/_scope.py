"""One run's view of a dump: its namespace, the secret literals to scrub, the caps."""

from __future__ import annotations

from typing import Any

from loopkernel import JSON, ToolError
from loopkernel_apps.sre._detect import stale_events
from loopkernel_apps.sre._dump import Dump, Namespace
from loopkernel_apps.sre._redact import redact, secret_values

__all__ = ["ITEM_CAP", "Scope"]

ITEM_CAP = 3500
"""Characters of ``content`` per result."""


class Scope:
    """One run's view of a dump: its namespace, the secret literals to scrub, the caps."""

    def __init__(self, dump: Dump, namespace: str) -> None:
        self.dump = dump
        self.name = namespace
        self.ns: Namespace = dump.namespace(namespace)
        self.secrets = secret_values(
            pod for ns in dump.namespaces.values() for pod in ns.items("pods")
        )

    def result(
        self, source: str, content: str, data: dict[str, Any], *, tail: bool = False
    ) -> dict[str, JSON]:
        content = redact(content, self.secrets)
        data = redact(data, self.secrets)
        truncated = len(content) > ITEM_CAP
        if truncated:
            note = f"[truncated: {ITEM_CAP} of {len(content)} characters kept]"
            content = (
                note + "\n" + content[-ITEM_CAP:] if tail else content[:ITEM_CAP] + "\n" + note
            )
        return {
            "source": source,
            "content": content,
            "truncated": truncated,
            "data": data,
            "refused": None,
        }

    def refuse(self, tool: str, asked: str) -> dict[str, JSON]:
        why = (
            f"namespace {asked!r} is outside this investigation's scope "
            f"(namespace {self.name!r}); {tool} was not run"
        )
        return {
            "source": f"{tool} {asked}",
            "content": why,
            "truncated": False,
            "data": {},
            "refused": why,
        }

    def pod(self, name: str) -> dict[str, Any]:
        pod = self.ns.pod(name)
        if pod is None:
            raise ToolError(f"no pod {name!r} in namespace {self.name!r}", tool="describe_pod")
        return pod

    def events_of(self, name: str | None = None) -> list[dict[str, Any]]:
        evs = [
            e
            for e in self.ns.items("events")
            if name is None or e.get("involvedObject", {}).get("name") == name
        ]
        return sorted(evs, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def stale_map(self, events: list[dict[str, Any]]) -> dict[int, str]:
        pods = [{"ref": None, "pod": p} for p in self.ns.items("pods")]
        items = [{"ref": None, "event": e} for e in events]
        return {id(item["event"]): why for item, why in stale_events(items, pods)}
