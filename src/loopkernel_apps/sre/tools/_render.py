"""How the tools render what they read: kubectl-describe-like text, and the data subsets."""

from __future__ import annotations

from typing import Any

__all__ = ["describe"]


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata", {}) or {}


def _owner(obj: dict[str, Any]) -> tuple[str, str] | None:
    for ref in _meta(obj).get("ownerReferences", []) or []:
        if ref.get("controller", True):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def _state(state: dict[str, Any] | None) -> str:
    if not state:
        return "-"
    for kind, d in state.items():
        d = d or {}
        parts = [kind.capitalize()]
        if d.get("reason"):
            parts.append(f"({d['reason']})")
        if "exitCode" in d:
            parts.append(f"exit code {d['exitCode']}")
        if d.get("startedAt"):
            parts.append(f"started {d['startedAt']}")
        if d.get("finishedAt"):
            parts.append(f"finished {d['finishedAt']}")
        line = " ".join(parts)
        if d.get("message"):
            line += f"\n        Message: {d['message']}"
        return line
    return "-"


def _probe(p: dict[str, Any]) -> str:
    if "httpGet" in p:
        how = f"http-get {p['httpGet'].get('path', '/')} on port {p['httpGet'].get('port')}"
    elif "tcpSocket" in p:
        how = f"tcp-socket port {p['tcpSocket'].get('port')}"
    elif "exec" in p:
        how = "exec " + " ".join(p["exec"].get("command", []))
    else:
        how = "?"
    return (
        f"{how} delay={p.get('initialDelaySeconds', 0)}s timeout={p.get('timeoutSeconds', 1)}s "
        f"period={p.get('periodSeconds', 10)}s #failure={p.get('failureThreshold', 3)}"
    )


def _pod_subset(pod: dict[str, Any]) -> dict[str, Any]:
    m = _meta(pod)
    spec = pod.get("spec", {})
    keep = [
        "name",
        "image",
        "command",
        "args",
        "env",
        "envFrom",
        "resources",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
    ]
    containers = [{k: c[k] for k in keep if k in c} for c in spec.get("containers", [])]
    inits = [{k: c[k] for k in keep if k in c} for c in spec.get("initContainers", []) or []]
    status = pod.get("status", {})
    return {
        "metadata": {
            k: m[k]
            for k in ("name", "namespace", "uid", "creationTimestamp", "ownerReferences", "labels")
            if k in m
        },
        "spec": {
            "containers": containers,
            "initContainers": inits,
            "nodeName": spec.get("nodeName"),
            "volumes": spec.get("volumes", []),
            "tolerations": spec.get("tolerations", []),
            "nodeSelector": spec.get("nodeSelector", {}),
        },
        "status": {
            k: status[k]
            for k in (
                "phase",
                "conditions",
                "containerStatuses",
                "initContainerStatuses",
                "startTime",
                "reason",
                "message",
            )
            if k in status
        },
    }


def _event_subset(ev: dict[str, Any]) -> dict[str, Any]:
    keep = "involvedObject reason message type count firstTimestamp lastTimestamp eventTime"
    return {k: ev[k] for k in keep.split() if k in ev}


def _event_line(ev: dict[str, Any], stale: str | None = None) -> str:
    obj = ev.get("involvedObject", {})
    when = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or "?"
    line = (
        f"{when} {ev.get('type', '?')} {ev.get('reason', '?')} x{ev.get('count', 1)} "
        f"{obj.get('kind', '?')}/{obj.get('name', '?')}: {ev.get('message', '')}"
    )
    return line + (f"  [STALE: {stale}]" if stale else "")


def describe(pod: dict[str, Any], events: list[dict[str, Any]], stale: dict[int, str]) -> str:
    m, spec, status = _meta(pod), pod.get("spec", {}), pod.get("status", {})
    owner = _owner(pod)
    lines = [
        f"Name:          {m.get('name')}",
        f"Namespace:     {m.get('namespace')}",
        f"UID:           {m.get('uid')}",
        f"Created:       {m.get('creationTimestamp')}",
        f"Node:          {spec.get('nodeName') or '<none>'}",
        f"Controlled By: {owner[0] + '/' + owner[1] if owner else '<none>'}",
        f"Status:        {status.get('phase')}",
    ]
    if status.get("reason"):
        lines.append(f"Reason:        {status['reason']}")
    if status.get("message"):
        lines.append(f"Message:       {status['message']}")
    if spec.get("nodeSelector"):
        sel = ",".join(f"{k}={v}" for k, v in sorted(spec["nodeSelector"].items()))
        lines.append(f"Node-Selectors: {sel}")
    tolerations = [
        f"{t.get('key', '*')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect', '*')}"
        for t in spec.get("tolerations", []) or []
    ]
    lines.append(f"Tolerations:   {', '.join(tolerations) or '<none>'}")
    lines.append("Conditions:")
    for c in status.get("conditions", []) or []:
        extra = f" ({c['reason']}: {c.get('message', '')})" if c.get("reason") else ""
        lines.append(f"  {c.get('type')}={c.get('status')}{extra}")
    statuses = {
        s.get("name"): s
        for s in (status.get("containerStatuses") or [])
        + (status.get("initContainerStatuses") or [])
    }
    sections = [("Init Containers:", spec.get("initContainers") or []),
                ("Containers:", spec.get("containers", []))]  # fmt: skip
    for title, containers in sections:
        if containers:
            lines.append(title)
        lines += _describe_containers(containers, statuses)
    volumes = [_volume(v) for v in spec.get("volumes", []) or []]
    if any(volumes):
        lines.append("Volumes:")
        lines += [f"  {v}" for v in volumes if v]
    lines.append("Events:")
    for ev in events:
        lines.append("  " + _event_line(ev, stale.get(id(ev))))
    if not events:
        lines.append("  <none>")
    return "\n".join(lines)


def _volume(v: dict[str, Any]) -> str | None:
    for key, what in (("persistentVolumeClaim", "claimName"), ("configMap", "name"),
                      ("secret", "secretName")):  # fmt: skip
        if v.get(key):
            return f"{v.get('name')}: {key} {v[key].get(what)}"
    return None


def _describe_containers(
    containers: list[dict[str, Any]], statuses: dict[Any, dict[str, Any]]
) -> list[str]:
    lines: list[str] = []
    for c in containers:
        s = statuses.get(c.get("name"), {})
        lines.append(f"  {c.get('name')}:")
        lines.append(f"    Image:         {c.get('image')}")
        if c.get("command"):
            lines.append(f"    Command:       {' '.join(c['command'])}")
        lines.append(f"    State:         {_state(s.get('state'))}")
        if s.get("lastState"):
            lines.append(f"    Last State:    {_state(s.get('lastState'))}")
        lines.append(f"    Ready:         {s.get('ready', False)}")
        lines.append(f"    Restart Count: {s.get('restartCount', 0)}")
        res = c.get("resources", {})
        for key in ("limits", "requests"):
            if res.get(key):
                vals = " ".join(f"{k}={v}" for k, v in sorted(res[key].items()))
                lines.append(f"    {key.capitalize() + ':':<15}{vals}")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if c.get(probe):
                lines.append(f"    {probe[:-5].capitalize() + ':':<15}{_probe(c[probe])}")
        env = ", ".join(f"{e.get('name')}={e.get('value', _ref_of(e))}" for e in c.get("env", []))
        lines.append(f"    Environment:   {env or '<none>'}")
        if c.get("envFrom"):
            lines.append(f"    EnvFrom:       {c['envFrom']}")
    return lines


def _ref_of(env: dict[str, Any]) -> str:
    src = env.get("valueFrom") or {}
    for key, kind in (("configMapKeyRef", "configmap"), ("secretKeyRef", "secret")):
        if src.get(key):
            return f"<{kind} {src[key].get('name')} key {src[key].get('key')}>"
    return "<from ref>"
