"""The parts of a report that tie the evidence together: the chain from cause to symptom,
facts from the workload tools, what is missing, and the answer to what the question asked.

Every piece is a claim like a fact (``text``, ``evidence``, ``quote`` or ``identifiers``), so
``finalize`` validates it the same way: a citation that does not hold the quote is dropped.
"""

from __future__ import annotations

import re
from typing import Any

from loopkernel_apps.sre._calls import CallRecord, CallStatus
from loopkernel_apps.sre._detect import Finding, log_request_errors

__all__ = ["answer", "chain", "context_facts", "missing", "out_of_scope", "rollout_changes"]

_NAME = re.compile(r"(?<![\w./-])([a-z][a-z0-9]*(?:-[a-z0-9]+)+)(?![\w/-])")
_WORDS = set(
    [
        "crash-loop",
        "crash-looping",
        "crash-loops",
        "start-up",
        "roll-out",
        "roll-back",
        "follow-up",
        "out-of-memory",
        "read-only",
        "re-run",
        "re-deploy",
        "long-running",
        "up-to-date",
        "built-in",
        "health-check",
        "set-up",
        "non-zero",
        "scale-up",
        "scale-out",
        "scale-down",
        "fail-over",
        "rate-limit",
        "time-out",
        "back-off",
        "in-flight",
        "on-call",
        "real-time",
    ]
)


_OBJECT_WORDS = (
    r"\s+(?:service|svc|deployment|deploy|pod|pods|job|cronjob|app|api|workload|controller"
    r"|database|db|cluster|statefulset|daemonset|queue|broker|cache)\b"
)


def out_of_scope(question: str, namespace: str, items: list[dict[str, Any]]) -> list[str]:
    """Object names the question mentions (``ledger-api``) that are nothing of the run's
    namespace: another team's workload named in passing. Not looked at, and said so."""
    known: set[str] = {namespace}
    for item in items:
        d = item["data"]
        if item["tool"] == "triage":
            known |= {str(w.get("name")) for w in d.get("workloads", [])}
            known |= {str(u.get(k)) for u in d.get("unhealthy", []) for k in ("pod", "owner")}
            known |= {str(c.get("name")) for u in d.get("unhealthy", []) for c in u["containers"]}
        known |= {str(s.get("name")) for s in d.get("services", [])}
        known |= {str(n.get("name")) for n in d.get("nodes", [])}
        pods = d.get("pods")
        if isinstance(pods, list):
            known |= {str(p.get("name")) for p in pods if isinstance(p, dict)}
    out = []
    for m in _NAME.finditer(question):
        name = m.group(1)
        if name in _WORDS or any(k == name or k.startswith(name + "-") for k in known):
            continue
        before, after = question[: m.start()].lower(), question[m.end() :].lower()
        named = (
            re.search(r"(?:'s|\bthe|\btheir|\bour)\s+$", before) is not None
            or re.match(_OBJECT_WORDS, after) is not None
            or any(ch.isdigit() for ch in name)
        )
        if named:
            out.append(name)
    return list(dict.fromkeys(out))


_ABSENT = {
    "endpoints": "Endpoints: not in a kubectl cluster-info dump; the Services' endpoints were "
    "derived from their selectors against the pods' labels (live: kubectl get endpoints)",
    "persistentvolumeclaims": "PersistentVolumeClaim objects: not in a kubectl cluster-info "
    "dump; the claims' state comes from the events on them (live: kubectl get pvc)",
    "persistentvolumes": "PersistentVolumes: not in a kubectl cluster-info dump "
    "(live: kubectl get pv)",
    "storageclasses": "StorageClasses: not in a kubectl cluster-info dump "
    "(live: kubectl get storageclass)",
    "horizontalpodautoscalers": "HorizontalPodAutoscalers: not in a kubectl cluster-info dump "
    "(live: kubectl get hpa, or loopkernel sre collect)",
    "configmaps": "ConfigMaps the pod references: not in a kubectl cluster-info dump "
    "(live: kubectl get configmap NAME -o yaml; loopkernel sre collect reads their keys)",
    "secrets": "Secrets the pod references: not in a kubectl cluster-info dump, and never "
    "collected (live: kubectl get secret NAME -o jsonpath='{.data}' | jq keys)",
}


def _by_tool(items: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [i for i in items if i["tool"] == tool]


def rollout_changes(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``{deployment: [what its newest revision changed]}``."""
    out: dict[str, list[str]] = {}
    for item in _by_tool(items, "rollout_history"):
        revisions = item["data"].get("revisions", [])
        if revisions and revisions[-1].get("changes"):
            out[str(item["args"].get("deployment"))] = list(revisions[-1]["changes"])
    return out


def _rollout_line(item: dict[str, Any]) -> str | None:
    revisions = item["data"].get("revisions", [])
    if len(revisions) < 2 or not revisions[-1].get("changes"):
        return None
    return (
        f"revision {revisions[-1]['revision']} against {revisions[-2]['revision']}: "
        + "; ".join(revisions[-1]["changes"])
    )


def _fact(
    text: str, ref: str, quote: str | None = None, ids: list[str] | None = None
) -> dict[str, Any]:
    return {"text": text, "evidence": [ref], "quote": quote, "identifiers": ids or []}


def context_facts(
    items: list[dict[str, Any]], ranked: list[tuple[Finding, int, str]]
) -> list[dict[str, Any]]:
    """Facts from rollout history, workload status, nodes, services and autoscalers, when
    they bear on a cause (or state a failure of their own)."""
    detectors = {f.detector for f, _, _ in ranked}
    facts = []
    for item in _by_tool(items, "rollout_history"):
        line = _rollout_line(item)
        if line:
            dep = item["args"].get("deployment")
            facts.append(_fact(f"Deployment {dep}: {line}.", item["ref"], quote=line))
    for item in _by_tool(items, "workload_status"):
        d = item["data"]
        for c in d.get("status", {}).get("conditions", []) or []:
            bad = (
                c.get("type") in ("Available", "Progressing") and c.get("status") == "False"
            ) or (c.get("type") == "Failed" and c.get("status") == "True")
            if bad:
                quote = f"condition {c.get('type')}={c.get('status')} {c.get('reason', '')}"
                facts.append(
                    _fact(
                        f"{d['kind'].capitalize()} {d['name']}: {c.get('type')}={c.get('status')} "
                        f"({c.get('reason', '')}: {c.get('message', '')}).",
                        item["ref"],
                        quote=quote,
                    )
                )
    wants_nodes = detectors & {"unschedulable", "taint_untolerated", "evicted", "node_not_ready"}
    for item in _by_tool(items, "node_capacity") if wants_nodes else []:
        nodes = item["data"].get("nodes", [])
        for f, _, _ in ranked:
            for res in f.extra.get("resources", []) if f.detector == "unschedulable" else []:
                having = [n for n in nodes if res in (n.get("capacity") or {})]
                names = [str(n["name"]) for n in nodes]
                if not having and nodes:
                    facts.append(_fact(
                        f"No node in the cluster has {res} at all ({', '.join(names)} list none "
                        "in their capacity): no amount of waiting schedules this pod.",
                        item["ref"], ids=names,
                    ))  # fmt: skip
                elif having:
                    best = max(having, key=lambda n: _quantity(str(n["allocatable"].get(res, 0))))
                    value = best["allocatable"].get(res)
                    asked = ", ".join(
                        f"{k} requests {v}" for k, v in f.extra.get("requests", {}).items()
                    )
                    facts.append(_fact(
                        f"The largest allocatable {res} is {value} on node {best['name']}; "
                        f"{asked}.",
                        item["ref"], ids=[str(best["name"]), f"{res}={value}"],
                    ))  # fmt: skip
        for n in nodes:
            for c in n.get("conditions", []) or []:
                nominal = (c.get("type") == "Ready") == (c.get("status") == "True")
                if not nominal:
                    quote = f"condition {c.get('type')}={c.get('status')} {c.get('reason', '')}"
                    facts.append(_fact(
                        f"Node {n['name']}: {c.get('type')}={c.get('status')} "
                        f"({c.get('reason', '')}: {c.get('message', '')}).",
                        item["ref"], quote=quote,
                    ))  # fmt: skip
    for item in _by_tool(items, "services"):
        for svc in item["data"].get("services", []):
            if svc.get("selector") and not svc.get("matching"):
                sel = ",".join(f"{k}={v}" for k, v in sorted(svc["selector"].items()))
                facts.append(_fact(
                    f"Service {svc['name']} selects {sel}, and no pod in the namespace carries "
                    "those labels: it has no endpoints.",
                    item["ref"], ids=[str(svc["name"]), f"selector={sel}", "matches NO pod"],
                ))  # fmt: skip
    for item in _by_tool(items, "autoscalers"):
        for h in item["data"].get("autoscalers", []):
            if h.get("current") is not None and h.get("max") is not None:
                facts.append(_fact(
                    f"Autoscaler {h['name']} runs {h['target']} at {h['current']} replicas "
                    f"(min {h['min']}, max {h['max']}).",
                    item["ref"], ids=[str(h["name"]), f"max {h['max']}"],
                ))  # fmt: skip
    return facts


def _quantity(q: str) -> float:
    m = re.fullmatch(r"([\d.]+)([KMGTP]i?|m)?", q.strip())
    if not m:
        return 0.0
    units = {None: 1, "m": 0.001, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
             "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}  # fmt: skip
    return float(m.group(1)) * float(units.get(m.group(2), 1))


_CHANGE_MATTERS = {
    "missing_env": ("env",),
    "config_invalid": ("image", "env", "command", "args", "envFrom"),
    "crash_log_reason": ("image", "env", "command", "args", "envFrom"),
    "command_not_found": ("command", "args", "image"),
    "image_pull": ("image",),
    "create_config_error": ("env", "envFrom"),
    "probe_failure": ("Probe",),
    "oomkilled": ("resources", "image"),
}


def chain(
    ranked: list[tuple[Finding, int, str]],
    symptoms: list[tuple[Finding, Finding]],
    items: list[dict[str, Any]],
    workloads: dict[str, str | None],
) -> list[dict[str, Any]]:
    """Cause -> symptom for the top cause: the revision change that introduced it (when the
    rollout shows one), the cause, each symptom that follows from it, the workload's state."""
    if not ranked:
        return []
    top = ranked[0][0]
    steps: list[dict[str, Any]] = []
    wl = workloads.get(top.pod)
    node = top.extra.get("node")
    for item in _by_tool(items, "node_capacity") if node else []:
        for n in item["data"].get("nodes", []):
            for c in n.get("conditions", []) if n.get("name") == node else []:
                if (c.get("type") == "Ready") != (c.get("status") == "True"):
                    quote = f"condition {c.get('type')}={c.get('status')} {c.get('reason', '')}"
                    steps.append(_fact(
                        f"Node {node}: {c.get('type')}={c.get('status')} ({c.get('message', '')})",
                        item["ref"], quote=quote,
                    ))  # fmt: skip
    for item in _by_tool(items, "rollout_history"):
        if item["args"].get("deployment") != wl:
            continue
        revisions = item["data"].get("revisions", [])
        kinds = _CHANGE_MATTERS.get(top.detector, ())
        relevant = [
            ch for ch in (revisions[-1].get("changes", []) if revisions else [])
            if any(k in ch for k in kinds)
        ]  # fmt: skip
        if relevant and len(revisions) > 1:
            steps.append(_fact(
                f"Revision {revisions[-1]['revision']} of deployment {wl} changed: "
                + "; ".join(relevant), item["ref"], ids=relevant,
            ))  # fmt: skip
    steps.append(
        {
            "text": f"Cause ({top.detector}): {top.quote}",
            "evidence": list(top.refs),
            "quote": top.quote,
            "identifiers": [],
        }
    )
    for sym, cause in symptoms:
        if cause is top or (cause.pod, cause.detector) == (top.pod, top.detector):
            steps.append(
                {
                    "text": f"Symptom, not a cause ({sym.detector}): {sym.text}",
                    "evidence": list(sym.refs),
                    "quote": sym.quote,
                    "identifiers": [],
                }
            )
    tri = next((i for i in items if i["tool"] == "triage"), None)
    if tri is not None:
        for u in tri["data"].get("unhealthy", []):
            if u["pod"] == top.pod:
                state = ", ".join(
                    f"{c['name']} {c.get('reason') or c['state']} ({c['restarts']} restarts)"
                    for c in u.get("containers", [])
                )
                steps.append(_fact(
                    f"Result: pod {u['pod']} is {u['phase']}" + (f": {state}" if state else ""),
                    tri["ref"], ids=[u["pod"]],
                ))  # fmt: skip
    for item in _by_tool(items, "workload_status"):
        for c in item["data"].get("status", {}).get("conditions", []) or []:
            if c.get("type") == "Failed" and c.get("reason") == "BackoffLimitExceeded":
                steps.append(_fact(
                    f"Consequence: job {item['data']['name']} failed ({c.get('reason')}: "
                    f"{c.get('message', '')}); its pods' failure above is why.",
                    item["ref"], quote=f"condition Failed=True {c.get('reason')}",
                ))  # fmt: skip
    return steps


def missing(
    items: list[dict[str, Any]],
    calls: list[CallRecord],
    ranked: list[tuple[Finding, int, str]],
    triage: dict[str, Any],
) -> list[str]:
    """What the investigation could not see. Never empty: a dump holds no metrics."""
    out = [
        "metrics: CPU, memory, throttling and latency over time (a cluster-info dump holds "
        "none; kubectl top or the monitoring system)"
    ]
    for item in _by_tool(items, "pod_logs"):
        d = item["data"]
        which = "previous" if d.get("previous") else "current"
        if not d.get("available"):
            out.append(item["content"])
            continue
        failed = log_request_errors(item["content"])
        if failed:
            out.append(
                f"the {which} log of container {d['container']} of pod {d['pod']} did not load: "
                f"{failed[0][:160]}"
            )
    for call in calls:
        if call.status is CallStatus.SKIPPED:
            args = ", ".join(f"{k}={v}" for k, v in sorted(call.args.items()))
            out.append(f"{call.tool} ({args}) not collected: {call.note}")
        if call.status is CallStatus.FAILED:
            out.append(f"{call.tool} failed: {call.error}")
    absent: list[str] = []
    for item in items:
        absent += [a for a in item["data"].get("absent", []) or [] if a not in absent]
    out += [_ABSENT[a] for a in absent if a in _ABSENT]
    for f, _, _ in ranked:
        kinds = str(f.extra.get("kind")).lower() + "s"
        if f.detector == "create_config_error" and f.extra.get("object") and kinds in absent:
            out.append(
                f"{f.extra.get('kind')} {f.extra['object']}: ConfigMaps and Secrets are not in a "
                f"kubectl cluster-info dump (live: kubectl get {str(f.extra.get('kind')).lower()} "
                f"{f.extra['object']})"
            )
    if not triage.get("unhealthy"):
        out.append("no unhealthy pod in the namespace: nothing to explain from this dump")
    return list(dict.fromkeys(out))


_CUE = re.compile(
    r"(?i)\b(is it|could it be|can it be|because|due to|caused by|suspect|i think|i saw|saw|"
    r"or is|was it|after|related to|blame|maybe|do we need|should we)\b"
)
_HYPOTHESES: list[tuple[str, re.Pattern[str], tuple[str, ...]]] = [
    ("CPU throttling", re.compile(r"(?i)\bcpu\b|throttl"), ()),
    ("memory", re.compile(r"(?i)\bmemory\b|\boom"), ("oomkilled",)),
    ("the disk", re.compile(r"(?i)\bdisk\b|ephemeral|\bstorage\b|\bvolume"),
     ("evicted", "pvc_unbound")),
    ("DNS", re.compile(r"(?i)\bdns\b|resolv"), ("dns_resolution",)),
    ("the network", re.compile(r"(?i)\bnetwork|connection|connectivity"),
     ("upstream_unavailable", "service_no_endpoints", "dns_resolution")),
    ("the node", re.compile(r"(?i)\bnodes?\b"), ("node_not_ready", "evicted", "taint_untolerated")),
    ("image pull errors", re.compile(r"(?i)\bimage\b|\bpull"), ("image_pull",)),
    ("the probe", re.compile(r"(?i)\bprobes?\b|health ?check"), ("probe_failure",)),
    ("a certificate", re.compile(r"(?i)\bcert|\btls\b|\bssl\b|x509"), ("cert_expired",)),
    ("the Service's selector", re.compile(r"(?i)\bselector|\bendpoints?\b"),
     ("service_no_endpoints",)),
    ("a node crash", re.compile(r"(?i)\bnodes? (?:crash|die|fail|went down|down|lost)"),
     ("node_not_ready",)),
    ("the configuration", re.compile(r"(?i)\bconfig(?:map|uration)?\b|\bsecret\b"),
     ("create_config_error", "config_invalid", "missing_env", "failed_mount")),
    ("scheduling", re.compile(r"(?i)\bschedul|\bpending\b|capacity"),
     ("unschedulable", "taint_untolerated", "pvc_unbound")),
    ("the last deploy", re.compile(r"(?i)\bdeploy\b|\brollout\b|\brelease\b|last deploy"), ()),
]  # fmt: skip
_YES_NO = re.compile(r"(?i)^\s*(?:is|are|did|does|do|was|were|could|can|has|have|should)\b.*\?")


def answer(
    question: str,
    ranked: list[tuple[Finding, int, str]],
    symptoms: list[tuple[Finding, Finding]],
    items: list[dict[str, Any]],
) -> str | None:
    """One sentence per hypothesis the question names ("is it CPU throttling?"): whether the
    evidence shows it. ``None`` when the question names none."""
    if not _CUE.search(question) and not _YES_NO.search(question):
        return None
    causes = {f.detector: f for f, _, _ in ranked}
    top = ranked[0][0] if ranked else None
    sym = {s.detector for s, _ in symptoms}
    changes = rollout_changes(items)
    said = []
    for label, pattern, detectors in _HYPOTHESES:
        if not pattern.search(question):
            continue
        hit = next((causes[d] for d in detectors if d in causes), None)
        if hit is not None:
            said.append(
                f"You asked about {label}: yes, {hit.detector} verified it (`{hit.quote}`)."
            )
        elif label == "the last deploy" and changes:
            dep, what = next(iter(changes.items()))
            said.append(
                f"You asked about the last deploy: the newest revision of {dep} changed "
                f"{'; '.join(what[:3])}."
            )
        elif set(detectors) & sym:
            said.append(f"You asked about {label}: it is a symptom here, not the cause.")
        else:
            why = (
                "a dump holds no CPU metrics, and no container was killed or evicted for CPU"
                if label == "CPU throttling"
                else "no detector observed it"
            )
            stale = any(
                i["tool"] in ("events", "describe_pod")
                and any(s and pattern.search(str(e.get("message")) or "")
                        for e, s in zip(i["data"].get("events", []), i["data"].get("stale", []),
                                        strict=False))
                for i in items
            )  # fmt: skip
            if stale:
                why = "the events that mention it are stale (an earlier pod) and were set aside"
            rest = f"; the verified cause is {top.detector}" if top else ""
            said.append(
                f"You asked about {label}: nothing collected shows it, so no ({why}){rest}."
            )
    return " ".join(said) or None
