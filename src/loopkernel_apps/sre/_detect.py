"""The detectors: pure functions from observed objects to findings.

A finding is *verified* only when a detector saw the thing itself: a container status
that says ``OOMKilled``, an event of the current pod that says ``FailedScheduling``, a
log line that says ``x509: certificate has expired``. Each finding carries the quote that
shows it and the identifiers it names (pod, container, exit code, image, host, variable),
so the report's citation check can tell whether the cited evidence holds them.

Inputs are plain JSON as the tools return it, each item with the ``ref`` of the evidence it
came from (``None`` when the detectors run over the dump for triage)::

    pods    [{"ref", "pod": {metadata, spec, status}}]
    events  [{"ref", "event": {involvedObject, reason, message, count, lastTimestamp ...}}]
    logs    [{"ref", "pod", "container", "previous", "text"}]

Stale events (of another uid than the pod now under that name, or older than the pod)
yield no finding; ``stale_events`` lists them so the report can say what it set aside.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from loopkernel_apps.sre._detect_logs import (
    decisive_line,
    log_detectors,
    log_request_errors,
)
from loopkernel_apps.sre._detect_nodes import stale_evictions
from loopkernel_apps.sre._detect_vocab import vocab_findings
from loopkernel_apps.sre._detect_workload import workload_findings
from loopkernel_apps.sre._finding import (
    EXEC_NOT_FOUND,
    Finding,
    _containers,
    _meta,
    _refs,
    _same,
    _statuses,
)
from loopkernel_apps.sre._logs import read_log
from loopkernel_apps.sre._sched import ClauseKind, decisive, parse

__all__ = [
    "BASE_SCORE",
    "COMMON_BINARIES",
    "DETECTORS",
    "Finding",
    "decisive_line",
    "detect",
    "edit_distance",
    "log_request_errors",
    "rank",
    "split_symptoms",
    "stale_events",
]

DETECTORS = (
    "oomkilled",
    "crash_log_reason",
    "command_not_found",
    "image_pull",
    "unschedulable",
    "missing_env",
    "dns_resolution",
    "cert_expired",
    "probe_failure",
    "config_invalid",
    "init_container",
    "create_config_error",
    "pvc_unbound",
    "taint_untolerated",
    "evicted",
    "node_not_ready",
    "service_no_endpoints",
    "upstream_unavailable",
    "job_deadline",
    "hpa_at_max",
    "failed_create",
    "exit_completed",
    "exec_format_error",
    "failed_mount",
    "multi_attach",
    "scaled_to_zero",
    "preempted",
)

BASE_SCORE = {
    "command_not_found": 95,
    "image_pull": 95,
    "unschedulable": 95,
    "oomkilled": 90,
    "missing_env": 88,
    "config_invalid": 86,
    "cert_expired": 86,
    "dns_resolution": 84,
    "create_config_error": 95,
    "failed_create": 95,
    "pvc_unbound": 95,
    "taint_untolerated": 95,
    "evicted": 93,
    "node_not_ready": 93,
    "service_no_endpoints": 92,
    "job_deadline": 90,
    "init_container": 87,
    "hpa_at_max": 80,
    "upstream_unavailable": 78,
    "probe_failure": 70,
    "crash_log_reason": 60,
    "exit_completed": 90,
    "exec_format_error": 95,
    "failed_mount": 95,
    "multi_attach": 95,
    "scaled_to_zero": 96,
    "preempted": 96,
}
"""How decisive each detector's observation is: a status the kubelet wrote beats a log
line the program wrote, and a specific log line beats the generic last fatal line."""

COMMON_BINARIES = (
    "python",
    "python3",
    "node",
    "java",
    "sh",
    "bash",
    "nginx",
    "gunicorn",
    "uvicorn",
    "npm",
    "yarn",
    "ruby",
    "bundle",
    "rails",
    "php",
    "php-fpm",
    "dotnet",
    "go",
    "perl",
    "redis-server",
    "postgres",
    "mysqld",
    "envoy",
    "celery",
    "supervisord",
    "tini",
    "dumb-init",
    "httpd",
    "caddy",
    "deno",
    "bun",
    "flask",
    "django-admin",
    "pip",
    "wget",
    "curl",
    "nc",
    "psql",
    "mysql",
    "redis-cli",
    "migrate",
    "alembic",
    "kubectl",
    "aws",
    "gsutil",
    "tar",
    "cp",
    "chown",
    "chmod",
    "mkdir",
    "echo",
    "sleep",
    "until",
    "busybox",
)

GENERIC = ("crash_log_reason", "probe_failure", "upstream_unavailable")
"""Detectors that state a symptom when a more specific detector explains the same pod:
the last fatal line, a failing probe, a dependency that answers errors."""


# -- events -----------------------------------------------------------------------------


def _event_time(ev: dict[str, Any]) -> str:
    return str(ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or "")


def _stale_reason(ev: dict[str, Any], pods: dict[str, dict[str, Any]]) -> str | None:
    obj = ev.get("involvedObject", {})
    if obj.get("kind") != "Pod":
        return None
    pod = pods.get(obj.get("name", ""))
    if pod is None:
        return "its pod no longer exists"
    uid = _meta(pod).get("uid")
    if obj.get("uid") and uid and obj["uid"] != uid:
        return f"it belongs to an earlier pod {obj['name']} (uid {obj['uid']}, now {uid})"
    created = str(_meta(pod).get("creationTimestamp") or "")
    when = _event_time(ev)
    if created and when and when < created:
        return f"it is older ({when}) than the current pod ({created})"
    return None


def stale_events(
    events: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]
) -> list[tuple[dict[str, Any], str]]:
    """``[(event item, why it is stale)]`` for the warning events that are stale."""
    by_name = {_meta(p["pod"]).get("name", ""): p["pod"] for p in pods}
    out = []
    for item in events:
        ev = item["event"]
        if ev.get("type") == "Normal":
            continue
        why = _stale_reason(ev, by_name)
        if why is not None and ev.get("involvedObject", {}).get("name") in by_name:
            out.append((item, why))
    return out


# -- status detectors ----------------------------------------------------------------------


def _oomkilled(ref: str | None, pod: dict[str, Any]) -> Iterator[Finding]:
    name = _meta(pod).get("name", "")
    specs = _containers(pod)
    for cs in _statuses(pod):
        for where in ("lastState", "state"):
            term = (cs.get(where) or {}).get("terminated") or {}
            if term.get("reason") != "OOMKilled":
                continue
            c = cs.get("name", "")
            limit = specs.get(c, {}).get("resources", {}).get("limits", {}).get("memory")
            restarts = int(cs.get("restartCount", 0))
            code = term.get("exitCode", 137)
            text = (
                f"Container {c} of pod {name} was OOMKilled (exit code {code}) "
                f"with a memory limit of {limit or 'none set'}; it restarted {restarts} times."
            )
            ids = (name, c, "OOMKilled") + ((str(limit),) if limit else ())
            yield Finding(
                detector="oomkilled",
                pod=name,
                container=c,
                text=text,
                quote="OOMKilled",
                identifiers=ids,
                refs=_refs(ref),
                weight=restarts,
                extra={"memory_limit": limit, "exit_code": code},
            )
            break




def _command_not_found(ref: str | None, pod: dict[str, Any]) -> Iterator[Finding]:
    name = _meta(pod).get("name", "")
    for cs in _statuses(pod):
        for where in ("state", "lastState"):
            state = cs.get(where) or {}
            detail = state.get("waiting") or state.get("terminated") or {}
            message = str(detail.get("message") or "")
            m = EXEC_NOT_FOUND.search(message)
            if m is None:
                continue
            binary = m.group(1)
            base = binary.rsplit("/", 1)[-1]
            guess = _closest(base)
            hint = f"; did you mean {guess!r}?" if guess and guess != base else ""
            c = cs.get("name", "")
            text = (
                f"Container {c} of pod {name} cannot start: {detail.get('reason', 'StartError')}, "
                f"executable {binary!r} not found in $PATH{hint}"
            )
            yield Finding(
                detector="command_not_found",
                pod=name,
                container=c,
                text=text,
                quote=m.group(0),
                identifiers=(name, c, binary),
                refs=_refs(ref),
                weight=int(cs.get("restartCount", 0)),
                extra={"binary": binary, "suggestion": guess},
            )
            return


def edit_distance(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``: insert, delete, substitute, or swap two neighbours
    (``wgte`` -> ``wget`` is one)."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def _closest(word: str) -> str | None:
    best = min(COMMON_BINARIES, key=lambda b: (edit_distance(word, b), b))
    return best if edit_distance(word, best) <= max(1, len(word) // 3) else None


def _image_pull(
    ref: str | None, pod: dict[str, Any], events: list[dict[str, Any]]
) -> Iterator[Finding]:
    name = _meta(pod).get("name", "")
    for cs in _statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            continue
        c = cs.get("name", "")
        image = cs.get("image") or _containers(pod).get(c, {}).get("image", "")
        registry_msg, ev_ref = str(waiting.get("message") or ""), ref
        for item in events:
            msg = str(item["event"].get("message") or "")
            if item["event"].get("reason") == "Failed" and image in msg and "pull" in msg.lower():
                registry_msg, ev_ref = msg, item["ref"] or ref
                break
        quote = registry_msg or waiting["reason"]
        text = (
            f"Container {c} of pod {name} cannot pull image {image} ({waiting['reason']}): "
            f"{registry_msg or 'no message from the registry'}"
        )
        yield Finding(
            detector="image_pull",
            pod=name,
            container=c,
            text=text,
            quote=quote,
            identifiers=(name, image),
            refs=_refs(*_same(events, {"message": registry_msg}), ev_ref, ref),
            extra={"image": image, "reason": waiting["reason"]},
        )




_SCHEDULE_TEXT = {
    ClauseKind.ANTI_AFFINITY: "its pod anti-affinity rules leave no node for it",
    ClauseKind.POD_AFFINITY: "no node runs the pods its pod affinity asks to be next to",
    ClauseKind.TOPOLOGY_SPREAD: "its topology spread constraints leave no node for it",
    ClauseKind.VOLUME_NODE_AFFINITY: "its volume can only be attached in another zone",
    ClauseKind.CORDONED: "the nodes it could run on are cordoned",
    ClauseKind.PORTS: "no node has the host port it asks for free",
    ClauseKind.TOO_MANY_PODS: "the nodes hold their maximum number of pods",
    ClauseKind.VOLUME_LIMIT: "the nodes hold their maximum number of volumes",
}


def _scheduling_message(
    ref: str | None, pod: dict[str, Any], events: list[dict[str, Any]]
) -> tuple[str, str | None, int]:
    """The latest FailedScheduling message (event, else the PodScheduled condition)."""
    message, msg_ref, count = "", ref, 1
    for cond in pod.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            message = str(cond.get("message") or "")
    for item in events:
        if item["event"].get("reason") == "FailedScheduling":
            message = str(item["event"].get("message") or message)
            msg_ref, count = item["ref"] or ref, int(item["event"].get("count") or 1)
    return message, msg_ref, count


def _unschedulable(
    ref: str | None, pod: dict[str, Any], events: list[dict[str, Any]]
) -> Iterator[Finding]:
    name = _meta(pod).get("name", "")
    message, msg_ref, count = _scheduling_message(ref, pod, events)
    if not message or pod.get("spec", {}).get("nodeName"):
        return
    best, aside = decisive(message, pod)
    _, clauses = parse(message)
    if best is None or best.kind in (ClauseKind.TAINT, ClauseKind.OTHER):
        return  # taint_untolerated says which taint; an unknown clause is not verified
    if any(c.kind is ClauseKind.UNBOUND_CLAIM for c in clauses):
        return  # pvc_unbound
    resources = sorted(
        {c.subject for c in clauses if c.kind is ClauseKind.INSUFFICIENT}
        if best.kind is ClauseKind.INSUFFICIENT
        else set()
    )
    requests = {}
    for c in pod.get("spec", {}).get("containers", []):
        for r in resources:
            value = c.get("resources", {}).get("requests", {}).get(r)
            if value is not None:
                requests[f"{c.get('name')}.{r}"] = value
    asked = ", ".join(f"{k} requests {v}" for k, v in sorted(requests.items()))
    short = ", ".join(f"Insufficient {r}" for r in resources) or "no node fits"
    text = f"Pod {name} cannot be scheduled ({short}): {asked or 'no requests found'}."
    quote = f"Insufficient {resources[0]}" if resources else best.text
    if best.kind is ClauseKind.NODE_SELECTOR:
        spec = pod.get("spec", {})
        sel = ",".join(f"{k}={v}" for k, v in sorted((spec.get("nodeSelector") or {}).items()))
        wants = f"node selector {sel}" if sel else "node affinity"
        text = f"Pod {name} cannot be scheduled: no node matches its {wants} ({best.text})."
    elif best.kind in _SCHEDULE_TEXT:
        text = f"Pod {name} cannot be scheduled: {_SCHEDULE_TEXT[best.kind]} ({best.text})."
    if aside:
        text += " Set aside: " + "; ".join(
            f"{c.text} (nodes this pod does not belong on)" for c in aside
        ) + "."
    yield Finding(
        detector="unschedulable",
        pod=name,
        container=None,
        text=text,
        quote=quote,
        identifiers=(name,),
        refs=_refs(msg_ref, *_same(events, {"message": message}), ref),
        weight=count,
        extra={
            "message": message,
            "requests": requests,
            "resources": resources,
            "clause": str(best.kind),
            "affinity": best.kind is ClauseKind.NODE_SELECTOR,
            "reason": "FailedScheduling",
        },
    )


def _probe_failure(
    ref: str | None, pod: dict[str, Any], events: list[dict[str, Any]]
) -> Iterator[Finding]:
    name = _meta(pod).get("name", "")
    specs = _containers(pod)
    seen: set[str] = set()
    for item in events:
        ev = item["event"]
        msg = str(ev.get("message") or "")
        m = re.match(r"(Liveness|Readiness|Startup) probe failed: (.*)", msg)
        if ev.get("reason") != "Unhealthy" or m is None or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        field_path = str(ev.get("involvedObject", {}).get("fieldPath") or "")
        c = re.sub(r"^spec\.(init)?[cC]ontainers\{(.+)\}$", r"\2", field_path) or None
        probe = specs.get(c or "", {}).get(f"{m.group(1).lower()}Probe") or {}
        how = _describe_probe(probe)
        count = int(ev.get("count") or 1)
        text = (
            f"{m.group(1)} probe of container {c} in pod {name} failed {count} times "
            f"({how}): {m.group(2).strip()}"
        )
        yield Finding(
            detector="probe_failure",
            pod=name,
            container=c,
            text=text,
            quote=msg.strip()[:200],
            identifiers=(name,),
            refs=_refs(*_same(events, ev), ref),
            weight=count,
            extra={"probe": m.group(1).lower(), "spec": how},
        )


def _describe_probe(probe: dict[str, Any]) -> str:
    if "httpGet" in probe:
        h = probe["httpGet"]
        return f"HTTP GET {h.get('path', '/')} on port {h.get('port')}"
    if "tcpSocket" in probe:
        return f"TCP port {probe['tcpSocket'].get('port')}"
    if "exec" in probe:
        return "exec " + " ".join(probe["exec"].get("command", []))
    if "grpc" in probe:
        return f"gRPC port {probe['grpc'].get('port')}"
    return "probe spec not found"


# -- all of them ------------------------------------------------------------------------------


def detect(
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    logs: list[dict[str, Any]],
    context: dict[str, list[dict[str, Any]]] | None = None,
) -> tuple[list[Finding], list[tuple[dict[str, Any], str]]]:
    """Every finding, and the stale events that were set aside. ``context`` holds what the
    workload tools returned (``{tool: [{"ref", "data"}]}``: services, node_capacity, claims,
    autoscalers, workload_status, rollout_history), for the detectors that need one object
    more than the pod (``_detect_workload``)."""
    stale = stale_events(events, pods)
    stale_ids = {id(item) for item, _ in stale}
    by_name = {_meta(p["pod"]).get("name", ""): p for p in pods}
    fresh = [e for e in events if id(e) not in stale_ids]
    findings: list[Finding] = []
    of_pod = pod_events(fresh)
    for item in pods:
        pod = item["pod"]
        mine = of_pod.get(_meta(pod).get("name", ""), [])
        findings += _oomkilled(item["ref"], pod)
        findings += _command_not_found(item["ref"], pod)
        findings += _image_pull(item["ref"], pod, mine)
        findings += _unschedulable(item["ref"], pod, mine)
        findings += _probe_failure(item["ref"], pod, mine)
    logs_of: dict[str, list[dict[str, Any]]] = {}
    for log in logs:
        logs_of.setdefault(str(log["pod"]), []).append(log)
    for item in pods:
        name = _meta(item["pod"]).get("name", "")
        findings += vocab_findings(item, of_pod.get(name, []), logs_of.get(name, []))
    for log in logs:
        owner = by_name.get(log["pod"])
        findings += log_detectors(
            log, owner["pod"] if owner else None, owner["ref"] if owner else None
        )
    findings += workload_findings(pods, fresh, logs, context or {}, of_pod)
    return _with_log_kind(_dedupe(findings), logs), stale + _stale_evictions(pods, fresh)


_KIND_FROM_LOG = ("crash_log_reason", "init_container", "upstream_unavailable")
"""Detectors whose reason is the error class the log reader gives the cited log."""


def _with_log_kind(findings: list[Finding], logs: list[dict[str, Any]]) -> list[Finding]:
    """Each log-based finding with ``reason`` = its log's error kind (each log read once)."""
    by_ref = {str(lg["ref"]): lg for lg in logs if lg.get("ref")}
    kinds: dict[str, tuple[str | None, str | None]] = {}
    out = []
    for f in findings:
        ref = next((r for r in f.refs if r in by_ref), None)
        if f.detector not in _KIND_FROM_LOG or ref is None or f.extra.get("reason"):
            out.append(f)
            continue
        if ref not in kinds:
            reading = read_log(str(by_ref[ref].get("text") or ""))
            exc = reading.decisive.entities.exception_type if reading.decisive else None
            kinds[ref] = (reading.kind.value if reading.kind else None, exc)
        kind, exc = kinds[ref]
        if kind is None:
            out.append(f)
            continue
        reason = f"{kind} ({exc})" if exc else kind
        out.append(replace(f, extra={**f.extra, "reason": reason, "exception": exc}))
    return out


def _stale_evictions(
    pods: list[dict[str, Any]], events: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], str]]:
    """An evicted pod that is history, as a stale ``Evicted`` item citing the pod's own
    status (where the kubelet's message is), or its event when the dump still holds it."""
    out = []
    history = stale_evictions(pods, events)
    for item in pods:
        name = _meta(item["pod"]).get("name", "")
        why = history.get(name)
        if why is None:
            continue
        st = item["pod"].get("status", {})
        ev = {"reason": "Evicted", "message": st.get("message") or "Evicted",
              "involvedObject": {"kind": "Pod", "name": name}}  # fmt: skip
        out.append(({"ref": item["ref"], "event": ev}, why))
    return out


def pod_events(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The events whose involved object is a Pod, by pod name, in their order (one pass)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        obj = e["event"].get("involvedObject", {})
        if obj.get("kind") == "Pod":
            out.setdefault(str(obj.get("name", "")), []).append(e)
    return out


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per (detector, pod, container): the one with a quote seen first."""
    out: dict[tuple[str, str, str | None], Finding] = {}
    for f in findings:
        out.setdefault((f.detector, f.pod, f.container), f)
    return list(out.values())


def split_symptoms(findings: list[Finding]) -> tuple[list[Finding], list[tuple[Finding, Finding]]]:
    """``(causes, [(symptom, its cause)])``. A generic finding (``GENERIC``) on a pod that a
    more specific one explains is that cause's symptom, never a cause of its own: a
    readiness warning of an OOM-killed container, the last fatal line of a container whose
    variable is missing, a liveness probe that fails while every request waits on a
    dependency that answers 503."""
    by_pod: dict[str, list[Finding]] = {}
    for f in findings:
        by_pod.setdefault(f.pod, []).append(f)
    victims = [
        (g, str(v["name"]))
        for g in findings
        if g.detector == "preempted"
        for v in g.extra.get("victims", [])
    ]
    causes, symptoms = [], []
    for f in findings:
        by = next((g for g, w in victims if f.detector != "preempted"
                   and (f.pod == w or f.pod.startswith(w + "-"))), None)  # fmt: skip
        if by is not None:
            symptoms.append((f, by))  # a preemption's victim: what it suffers follows from it
            continue
        mine = by_pod[f.pod]
        above = [g for g in mine if g.detector not in GENERIC]
        if not above and f.detector != "upstream_unavailable":
            above = [g for g in mine if g.detector == "upstream_unavailable"]
        if f.detector in GENERIC and above:
            symptoms.append((f, above[0]))
        else:
            causes.append(f)
    return causes, symptoms


def rank(findings: list[Finding], focus: set[str]) -> list[tuple[Finding, int, str]]:
    """``[(cause, score, why)]``, best first; ``focus`` names the pods the question is about.
    Symptoms (``split_symptoms``) are not ranked: they are not causes."""
    causes, _ = split_symptoms(findings)
    scored = []
    for f in causes:
        score, why = BASE_SCORE[f.detector], [f"{f.detector} base {BASE_SCORE[f.detector]}"]
        if f.pod in focus or set(f.extra.get("workload_pods", [])) & focus:
            score += 20
            why.append("+20 the workload the question names")
        if f.weight:
            bonus = min(f.weight, 10)
            score += bonus
            why.append(f"+{bonus} seen {f.weight} times")
        scored.append((f, score, "; ".join(why)))
    scored.sort(key=lambda t: (-t[1], DETECTORS.index(t[0].detector), t[0].pod))
    return scored
