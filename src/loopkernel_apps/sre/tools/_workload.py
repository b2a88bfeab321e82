"""The tools that read one object past the pod: services, claims, autoscalers, revisions.

A ``kubectl cluster-info dump`` holds no Endpoints, PersistentVolumeClaims, StorageClasses,
ConfigMaps, Secrets or HorizontalPodAutoscalers. Each tool reads the list when the dump has
it (``sre collect`` writes claims, autoscalers, cron jobs and stateful sets; any extra
``NS/KIND.json`` is read), says in ``data.absent`` which kinds it could not see, and works
from what is there: a Service's endpoints from its selector against the pods' labels, a
claim's state from the events on it.
"""

from __future__ import annotations

import json
from typing import Any

from loopkernel_apps.sre._dump import Namespace

__all__ = ["ABSENT_NOTE", "autoscalers", "claims", "config_refs", "services", "template_changes"]

ABSENT_NOTE = "not in a kubectl cluster-info dump; read it in live mode (loopkernel sre collect)"


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata", {}) or {}


def config_refs(pod: dict[str, Any]) -> dict[str, set[str]]:
    """The ConfigMaps and Secrets a pod references: env, envFrom, volumes."""
    out: dict[str, set[str]] = {"configmaps": set(), "secrets": set()}
    spec = pod.get("spec", {})
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for e in c.get("env", []) or []:
            src = e.get("valueFrom") or {}
            if src.get("configMapKeyRef"):
                out["configmaps"].add(str(src["configMapKeyRef"].get("name")))
            if src.get("secretKeyRef"):
                out["secrets"].add(str(src["secretKeyRef"].get("name")))
        for e in c.get("envFrom", []) or []:
            if e.get("configMapRef"):
                out["configmaps"].add(str(e["configMapRef"].get("name")))
            if e.get("secretRef"):
                out["secrets"].add(str(e["secretRef"].get("name")))
    for v in spec.get("volumes", []) or []:
        if v.get("configMap"):
            out["configmaps"].add(str(v["configMap"].get("name")))
        if v.get("secret"):
            out["secrets"].add(str(v["secret"].get("secretName")))
    return out


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _workloads_at_zero(ns: Namespace, sel: dict[str, Any]) -> list[dict[str, Any]]:
    """The Deployments and StatefulSets scaled to 0 whose pod template the selector matches."""
    out = []
    for kind, plural in (("Deployment", "deployments"), ("StatefulSet", "statefulsets")):
        for w in ns.items(plural):
            spec = w.get("spec", {})
            labels = (spec.get("template", {}).get("metadata", {}) or {}).get("labels") or {}
            if spec.get("replicas") == 0 and labels and _matches(sel, labels):
                out.append({"kind": kind, "name": str(_meta(w).get("name"))})
    return out


def services(ns: Namespace) -> tuple[str, dict[str, Any]]:
    """Every Service: type, ClusterIP, ports, selector, and the pods the selector matches."""
    pods = ns.items("pods")
    endpoints = {
        str(_meta(e).get("name")): sum(
            len(s.get("addresses", []) or []) for s in e.get("subsets", []) or []
        )
        for e in ns.items("endpoints")
    }
    lines, out = [], []
    for svc in ns.items("services"):
        name = _meta(svc).get("name")
        spec = svc.get("spec", {})
        sel = spec.get("selector") or {}
        ports = ",".join(
            f"{p.get('port')}->{p.get('targetPort', p.get('port'))}/{p.get('protocol', 'TCP')}"
            for p in spec.get("ports", []) or []
        )
        matching, nearest = [], []
        for p in pods:
            labels = _meta(p).get("labels", {}) or {}
            pname = str(_meta(p).get("name"))
            if sel and _matches(sel, labels):
                matching.append(pname)
            elif sel and (
                any(labels.get(k) == v for k, v in sel.items()) or pname.startswith(f"{name}-")
            ):
                nearest.append({"pod": pname, "labels": _labels(labels)})
        sel_text = _labels(sel) if sel else "<none>"
        eps = endpoints.get(str(name))
        line = (
            f"service {name} type={spec.get('type', 'ClusterIP')} "
            f"clusterIP={spec.get('clusterIP')} ports={ports or '-'} selector={sel_text}: "
        )
        if eps is not None:
            line += f"Endpoints object lists {eps} ready address(es); "
        if not sel:
            line += "no selector (endpoints managed by hand)"
        elif matching:
            line += f"matches {len(matching)} pod(s): {', '.join(matching)}"
        else:
            line += "matches NO pod in the namespace (no endpoints)"
            zero = _workloads_at_zero(ns, sel)
            if zero:
                line += "; it selects the pods of " + ", ".join(
                    f"{z['kind']} {z['name']} (spec.replicas: 0)" for z in zero
                )
            if nearest:
                line += "; pods sharing part of the selector: " + "; ".join(
                    f"{n['pod']} ({n['labels']})" for n in nearest[:4]
                )
        lines.append(line)
        out.append(
            {
                "name": name,
                "clusterIP": spec.get("clusterIP"),
                "selector": sel,
                "matching": matching,
                "nearest": nearest[:4],
                "at_zero": [] if matching or not sel else _workloads_at_zero(ns, sel),
            }
        )
    absent = [] if "endpoints" in ns.lists else ["endpoints"]
    if absent:
        lines.append(f"Endpoints: {ABSENT_NOTE}; derived here from selectors and pod labels.")
    return "\n".join(lines) or "<no services>", {"services": out, "absent": absent}


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def claims(ns: Namespace, pod: str | None) -> tuple[str, dict[str, Any]]:
    """The PersistentVolumeClaims the pods mount, the claims' objects when present, their events."""
    wanted: dict[str, list[str]] = {}
    for p in ns.items("pods"):
        pname = str(_meta(p).get("name"))
        if pod is not None and pname != pod:
            continue
        for v in p.get("spec", {}).get("volumes", []) or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                wanted.setdefault(str(claim), []).append(pname)
    objects = {str(_meta(c).get("name")): c for c in ns.items("persistentvolumeclaims")}
    lines, events = [], []
    for claim, users in sorted(wanted.items()):
        obj = objects.get(claim)
        if obj is not None:
            spec, st = obj.get("spec", {}), obj.get("status", {})
            state = (
                f"phase={st.get('phase')} storageClassName="
                f"{spec.get('storageClassName') or '<none>'} "
                f"volumeName={spec.get('volumeName') or '<none>'}"
            )
        else:
            state = "object not in the dump"
        lines.append(f"claim {claim} (mounted by {', '.join(users)}): {state}")
        for e in ns.items("events"):
            obj_ref = e.get("involvedObject", {})
            if obj_ref.get("kind") == "PersistentVolumeClaim" and obj_ref.get("name") == claim:
                events.append(e)
                lines.append(
                    f"  {e.get('lastTimestamp') or e.get('eventTime')} {e.get('type')} "
                    f"{e.get('reason')} x{e.get('count', 1)}: {e.get('message')}"
                )
    absent = ["storageclasses", "persistentvolumes"]
    if "persistentvolumeclaims" not in ns.lists:
        absent.insert(0, "persistentvolumeclaims")
    lines.append("PersistentVolumeClaims, PersistentVolumes, StorageClasses: " + ABSENT_NOTE)
    data = {"claims": sorted(wanted), "events": events, "absent": absent}
    return "\n".join(lines), data


def autoscalers(ns: Namespace) -> tuple[str, dict[str, Any]]:
    """Every HorizontalPodAutoscaler: target, min/max, current/desired, metrics, conditions."""
    if "horizontalpodautoscalers" not in ns.lists:
        text = f"HorizontalPodAutoscalers: {ABSENT_NOTE}"
        return text, {"autoscalers": [], "absent": ["horizontalpodautoscalers"]}
    lines, out = [], []
    for h in ns.items("horizontalpodautoscalers"):
        spec, st = h.get("spec", {}), h.get("status", {})
        ref = spec.get("scaleTargetRef", {})
        target = f"{ref.get('kind', '?')}/{ref.get('name', '?')}"
        metrics = [
            _metric(m, spec.get("metrics", []) or []) for m in st.get("currentMetrics", []) or []
        ]
        entry = {
            "name": _meta(h).get("name"),
            "target": target,
            "min": spec.get("minReplicas", 1),
            "max": spec.get("maxReplicas"),
            "current": st.get("currentReplicas"),
            "desired": st.get("desiredReplicas"),
            "conditions": st.get("conditions", []) or [],
            "metrics": metrics,
        }
        out.append(entry)
        lines.append(
            f"hpa {entry['name']} -> {target}: replicas {entry['current']} (desired "
            f"{entry['desired']}, min {entry['min']}, max {entry['max']}); metrics "
            f"{'; '.join(metrics) or '-'}"
        )
        for c in entry["conditions"]:
            lines.append(
                f"  condition {c.get('type')}={c.get('status')} {c.get('reason', '')}: "
                f"{c.get('message', '')}"
            )
    return "\n".join(lines) or "<no autoscalers>", {"autoscalers": out, "absent": []}


def _metric(current: dict[str, Any], targets: list[dict[str, Any]]) -> str:
    res = current.get("resource") or {}
    name = res.get("name", current.get("type", "?"))
    value = (res.get("current") or {}).get("averageUtilization")
    goal = next(
        ((t.get("resource") or {}).get("target", {}).get("averageUtilization")
         for t in targets if (t.get("resource") or {}).get("name") == name), None,
    )  # fmt: skip
    return f"{name} {value}% (target {goal}%)" if value is not None else json.dumps(current)


# -- what changed between revisions -------------------------------------------------------------


def _probe(p: dict[str, Any] | None) -> str | None:
    if not p:
        return None
    if "httpGet" in p:
        how = f"GET {p['httpGet'].get('path', '/')}:{p['httpGet'].get('port')}"
    elif "tcpSocket" in p:
        how = f"tcp {p['tcpSocket'].get('port')}"
    elif "exec" in p:
        how = "exec " + " ".join(p["exec"].get("command", []))
    else:
        how = "?"
    timing = ",".join(
        f"{k}={p[k]}"
        for k in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "failureThreshold")
        if k in p
    )
    return f"{how} {timing}".strip()


def _env(c: dict[str, Any]) -> dict[str, str]:
    out = {}
    for e in c.get("env", []) or []:
        if "valueFrom" in e:
            src = e["valueFrom"]
            ref = src.get("configMapKeyRef") or src.get("secretKeyRef") or {}
            kind = "configMap" if "configMapKeyRef" in src else "secret"
            out[str(e.get("name"))] = f"<{kind} {ref.get('name')}/{ref.get('key')}>"
        else:
            out[str(e.get("name"))] = str(e.get("value", ""))
    return out


def template_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What a pod template's containers changed from ``old`` to ``new``: image, command,
    environment (names; a changed value is said, not shown), probes, resources."""
    out: list[str] = []
    olds = {c.get("name"): c for c in old.get("spec", {}).get("containers", []) or []}
    for c in new.get("spec", {}).get("containers", []) or []:
        name = c.get("name")
        o = olds.get(name)
        if o is None:
            out.append(f"container {name} added")
            continue
        if o.get("image") != c.get("image"):
            out.append(f"container {name}: image {o.get('image')} -> {c.get('image')}")
        for key in ("command", "args"):
            if o.get(key) != c.get(key):
                out.append(f"container {name}: {key} {o.get(key)} -> {c.get(key)}")
        oe, ne = _env(o), _env(c)
        for var in sorted(set(oe) - set(ne)):
            out.append(f"container {name}: env {var} removed")
        for var in sorted(set(ne) - set(oe)):
            out.append(f"container {name}: env {var} added")
        for var in sorted(set(oe) & set(ne)):
            if oe[var] != ne[var]:
                out.append(f"container {name}: env {var} changed")
        if o.get("envFrom") != c.get("envFrom"):
            out.append(f"container {name}: envFrom {o.get('envFrom')} -> {c.get('envFrom')}")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            a, b = _probe(o.get(probe)), _probe(c.get(probe))
            if a != b:
                out.append(f"container {name}: {probe} {a or '<none>'} -> {b or '<none>'}")
        if o.get("resources") != c.get("resources"):
            a = (o.get("resources") or {}).get("limits")
            b = (c.get("resources") or {}).get("limits")
            out.append(f"container {name}: resources limits {a} -> {b}")
    return out
