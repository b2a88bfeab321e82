"""Detectors that look one object past the crashing container.

Each keys on structure: a status field, an event reason on the right object, a selector
against labels, a node condition, an autoscaler's condition; log text is used only for
general shapes (a connection refused to the address a Service holds). Inputs as in
``_detect``, plus ``context``: what the workload tools returned, ``{tool: [{"ref", "data"}]}``.

::

    init_container        an init container that exits non-zero (its decisive log line)
    create_config_error   CreateContainerConfigError: the ConfigMap/Secret (and key) it names
    pvc_unbound           a Pending pod whose claim is unbound (claim events, scheduler message)
    taint_untolerated     FailedScheduling on taints the pod does not tolerate
    evicted               status.reason Evicted, with the node condition behind it
    node_not_ready        an unready pod on a node whose Ready condition is not True
    service_no_endpoints  a Service whose selector matches no pod, which a client is refused by
    upstream_unavailable  a dependency the unhealthy container's requests fail against, again
                          and again (refused, timed out, 502/503/504)
    job_deadline          a Job failed with DeadlineExceeded
    hpa_at_max            an autoscaler at maxReplicas that wants more (ScalingLimited)
    failed_create         a controller's FailedCreate: quota, admission, service account
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from loopkernel_apps.sre._detect_logs import _log_lines, decisive_line
from loopkernel_apps.sre._detect_nodes import _evicted, _node_not_ready, stale_evictions
from loopkernel_apps.sre._finding import EXEC_NOT_FOUND, Finding, _meta, _refs, _same, _unhealthy
from loopkernel_apps.sre._logs import ErrorKind, LogReading, read_log
from loopkernel_apps.sre._preempt import preempted
from loopkernel_apps.sre._sched import ClauseKind, decisive
from loopkernel_apps.sre._vocab import fill, match
from loopkernel_apps.sre._vocab_rows import rows_for

__all__ = ["AUTH", "FAILURE", "HOST", "workload_findings"]

FAILURE = re.compile(
    r"(?i)(connection refused|ECONNREFUSED|no route to host|EHOSTUNREACH|connection reset"
    r"|ECONNRESET|timed? ?out|ETIMEDOUT|deadline exceeded|\b50[234]\b|Service Unavailable"
    r"|Bad Gateway|Gateway Timeout|no response|not responding|did not respond|unreachable"
    r"|(?:could ?n[o']t|unable to|failed to) connect)"
)
"""How a request to a dependency fails, in any program's words."""

HOST = re.compile(
    r"(?:https?://|dial tcp |connect (?:ECONNREFUSED|ETIMEDOUT) |connect to |upstream "
    r"|host[= ]\"?|\bto |\bfrom |\bat )\[?([A-Za-z0-9][\w.-]*\]?:\d{2,5}|[a-z][\w-]*(?:\.[\w-]+)+)"
    r"|([a-z][\w-]*) port (\d{2,5})"
    r"|(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3}:\d{2,5})"
)
"""A dependency's address: host:port, a URL's host, ``nc``'s "HOST port N"."""

AUTH = re.compile(
    r"(?i)(authentication failed|auth(?:entication)? error|invalid (?:password|credentials)"
    r"|access denied for user|login failed|unauthori[sz]ed|\b401\b|\b403\b|forbidden"
    r"|permission denied for|SASL authentication|wrong password|bad credentials)"
)
"""A dependency that answered and refused the credentials: never "upstream unavailable"."""

MIN_FAILURES = 3
"""A dependency is blamed only when it failed this often in one instance's log."""


def _specs(pod: dict[str, Any], init: bool | None = None) -> dict[str, dict[str, Any]]:
    spec = pod.get("spec", {})
    keys = {None: ("containers", "initContainers"), True: ("initContainers",),
            False: ("containers",)}[init]  # fmt: skip
    return {c.get("name", ""): c for k in keys for c in spec.get(k, []) or []}


def _data(context: dict[str, list[dict[str, Any]]], tool: str) -> list[dict[str, Any]]:
    return context.get(tool, [])


# -- pod-level ----------------------------------------------------------------------------------


def _init_container(
    item: dict[str, Any], logs: dict[tuple[str, str, bool], dict[str, Any]]
) -> Iterator[Finding]:
    pod, ref = item["pod"], item["ref"]
    name = _meta(pod).get("name", "")
    for cs in pod.get("status", {}).get("initContainerStatuses", []) or []:
        c = cs.get("name", "")
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        term = state.get("terminated") or {}
        if term and int(term.get("exitCode", 0)) == 0:
            continue  # it completed; an earlier failure is history
        if not term:
            term = last.get("terminated") or {}
        if not term or int(term.get("exitCode", 0)) == 0:
            continue
        if term.get("reason") == "OOMKilled" or EXEC_NOT_FOUND.search(str(term.get("message"))):
            continue  # oomkilled / command_not_found state these
        code = int(term.get("exitCode", 0))
        restarts = int(cs.get("restartCount", 0))
        log = logs.get((name, c, True)) if restarts else None
        log = log or logs.get((name, c, False))
        found = decisive_line(_log_lines(str(log["text"]))) if log else None
        line, frame = found if found else (None, None)
        quote = line or f"exit code {code}"
        text = (
            f"Init container {c} of pod {name} exits with exit code {code} "
            f"({term.get('reason', 'Error')}, {restarts} restarts), so the pod's containers "
            "never start"
            + (f"; its decisive log line: {line!r}" if line else "; its log is not in the dump")
            + (f" at {frame.removeprefix('at ')}" if frame else "")
        )
        yield Finding(
            detector="init_container",
            pod=name,
            container=c,
            text=text,
            quote=quote,
            identifiers=(name, c, f"exit code {code}"),
            refs=_refs(log["ref"] if log and line else None, ref),
            weight=restarts,
            extra={"exit_code": code, "init": True, "log_loaded": bool(line)},
        )


_CONFIG_REF = [
    re.compile(r"couldn't find key (\S+) in (ConfigMap|Secret) ([\w.-]+)/([\w.-]+)"),
    re.compile(r"(configmap|secret) \"([\w.-]+)\" not found", re.IGNORECASE),
]


def _config_remedy(message: str, container: str) -> str | None:
    """The vocabulary row's own remedy for a CreateContainerConfigError message, if any."""
    for row in rows_for("create_config_error"):
        if row.remedy and match(row, message) is not None:
            return fill(row.remedy, {"container": container})
    return None


def _create_config_error(item: dict[str, Any], events: list[dict[str, Any]]) -> Iterator[Finding]:
    pod, ref = item["pod"], item["ref"]
    name = _meta(pod).get("name", "")
    for cs in (pod.get("status", {}).get("containerStatuses") or []) + (
        pod.get("status", {}).get("initContainerStatuses") or []
    ):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") != "CreateContainerConfigError":
            continue
        message = str(waiting.get("message") or "")
        key = kind = obj = None
        m = _CONFIG_REF[0].search(message)
        if m:
            key, kind, obj = m.group(1), m.group(2), m.group(4)
        elif (m := _CONFIG_REF[1].search(message)) is not None:
            kind = "ConfigMap" if m.group(1).lower() == "configmap" else "Secret"
            obj = m.group(2)
        c = cs.get("name", "")
        what = (
            f"{kind} {obj} has no key {key}"
            if key
            else f"{kind} {obj} does not exist"
            if obj
            else message or "no message"
        )
        text = (
            f"Container {c} of pod {name} cannot be created (CreateContainerConfigError): "
            f"{what}; the pod spec references it."
        )
        yield Finding(
            detector="create_config_error",
            pod=name,
            container=c,
            text=text,
            quote=message or "CreateContainerConfigError",
            identifiers=(name, c, "CreateContainerConfigError"),
            refs=_refs(ref, *_same(events, {"message": f"Error: {message}"})),
            weight=sum(
                int(e["event"].get("count") or 1)
                for e in events
                if message and message in str(e["event"].get("message"))
            ),
            extra={"kind": kind, "object": obj, "key": key, "reason": "CreateContainerConfigError",
                   "remedy": _config_remedy(message, c)},
        )  # fmt: skip


def _claims(pod: dict[str, Any]) -> list[str]:
    return [
        str(v["persistentVolumeClaim"].get("claimName"))
        for v in pod.get("spec", {}).get("volumes", []) or []
        if isinstance(v, dict) and v.get("persistentVolumeClaim")
    ]


_PVC_SCHED = re.compile(
    r"(?i)(pod has unbound immediate PersistentVolumeClaims|persistentvolumeclaim \"[\w.-]+\" "
    r"not found)"
)


_CLAIM_REASONS = ("FailedBinding", "ProvisioningFailed")
"""Claim events that say it does not bind whatever their type (``FailedBinding`` is Normal)."""


def claim_warnings(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The ``Warning`` events of each PersistentVolumeClaim, by claim name (one pass)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        obj = e["event"].get("involvedObject", {})
        failing = e["event"].get("type") == "Warning" or e["event"].get("reason") in _CLAIM_REASONS
        if obj.get("kind") == "PersistentVolumeClaim" and failing:
            out.setdefault(str(obj.get("name")), []).append(e)
    return out


def _pvc_unbound(
    item: dict[str, Any],
    mine: list[dict[str, Any]],
    events: list[dict[str, Any]],
    of_claim: dict[str, list[dict[str, Any]]],
) -> Iterator[Finding]:
    pod, ref = item["pod"], item["ref"]
    if pod.get("status", {}).get("phase") != "Pending":
        return
    name = _meta(pod).get("name", "")
    claims = _claims(pod)
    sched = next(
        (e for e in mine if e["event"].get("reason") == "FailedScheduling"
         and _PVC_SCHED.search(str(e["event"].get("message")))), None,
    )  # fmt: skip
    for claim in claims:
        claim_events = of_claim.get(claim, [])
        if not claim_events and sched is None:
            continue
        src = claim_events[-1] if claim_events else sched
        assert src is not None
        msg = str(src["event"].get("message") or "")
        why = f"{src['event'].get('reason')}: {msg}"
        text = (
            f"Pod {name} is Pending because PersistentVolumeClaim {claim} is not bound "
            f"({why}); no node can help until the claim binds."
        )
        refs = _refs(src["ref"], *_same(events, src["event"]), sched["ref"] if sched else None)
        yield Finding(
            detector="pvc_unbound",
            pod=name,
            container=None,
            text=text,
            quote=msg[:160],
            identifiers=(claim,),
            refs=refs,
            weight=int(src["event"].get("count") or 1),
            extra={"claim": claim, "reason": src["event"].get("reason"),
                   "no_storage_class": "storage class" in msg.lower(), "pod_ref": ref},
        )  # fmt: skip
        return


def _taint_untolerated(
    item: dict[str, Any], mine: list[dict[str, Any]], nodes: list[dict[str, Any]]
) -> Iterator[Finding]:
    pod, ref = item["pod"], item["ref"]
    name = _meta(pod).get("name", "")
    if pod.get("spec", {}).get("nodeName"):
        return  # scheduled since: the FailedScheduling is history
    for e in reversed(mine):
        ev = e["event"]
        msg = str(ev.get("message") or "")
        if ev.get("reason") != "FailedScheduling":
            continue
        best, _ = decisive(msg, pod)
        if best is None or best.kind is not ClauseKind.TAINT:
            return
        count, taint, key = best.count, best.subject, best.taint_key
        on, node_refs = [], []
        for n in nodes:
            for node in n["data"].get("nodes", []):
                if any(t.get("key") == key for t in node.get("taints", []) or []):
                    on.append(str(node.get("name")))
                    node_refs.append(n["ref"])
        where = f" ({', '.join(sorted(set(on)))})" if on else ""
        text = (
            f"Pod {name} cannot be scheduled: {count} node(s){where} carry taint {{{taint}}} "
            f"and the pod has no toleration for {key}."
        )
        yield Finding(
            detector="taint_untolerated",
            pod=name,
            container=None,
            text=text,
            quote=f"{{{taint}}}",
            identifiers=(key,),
            refs=_refs(e["ref"], *_same(mine, ev), ref, *node_refs),
            weight=int(ev.get("count") or 1),
            extra={"taint": taint, "key": key, "nodes": sorted(set(on)),
                   "reason": "FailedScheduling"},
        )  # fmt: skip
        return


# -- log shapes ------------------------------------------------------------------------------


def _failing_hosts(text: str) -> dict[str, list[str]]:
    """``{address: [lines]}``: the lines where a request to that address failed."""
    out: dict[str, list[str]] = {}
    for line in _log_lines(text):
        if not FAILURE.search(line) or AUTH.search(line):
            continue  # a refused credential is the client's configuration, not a down upstream
        m = HOST.search(line)
        if m is None:
            continue
        host = m.group(1) or m.group(4) or f"{m.group(2)}:{m.group(3)}"
        out.setdefault(host.strip("[]"), []).append(line.strip())
    return out


def _structured_failures(text: str, reading: LogReading) -> dict[str, list[str]]:
    """``{upstream: [lines]}`` from the structured log's runs of 5xx answers."""
    lines = text.splitlines()
    out: dict[str, list[str]] = {}
    for run in reading.upstream_failures:
        if run.count >= MIN_FAILURES and 0 < run.first_line <= len(lines):
            first = lines[run.first_line - 1].strip()
            out[run.upstream] = [first] + [first] * (run.count - 1)
    return out


def _upstream(log: dict[str, Any], pod: dict[str, Any], pod_ref: str | None) -> Iterator[Finding]:
    if not _unhealthy(pod):
        return
    text = str(log.get("text") or "")
    reading = read_log(text, container=str(log.get("container")))
    if reading.kind in (ErrorKind.AUTHENTICATION, ErrorKind.AUTHORIZATION):
        return  # the dependency answered and refused the credentials: not unavailable
    hosts = _failing_hosts(text) or _structured_failures(text, reading)
    if not hosts:
        return
    host, lines = max(hosts.items(), key=lambda kv: (len(kv[1]), kv[0]))
    if len(lines) < MIN_FAILURES:
        return
    name, c = log["pod"], log["container"]
    init = c in _specs(pod, init=True)
    token = FAILURE.search(lines[0])
    which = "previous" if log.get("previous") else "current"
    text = (
        f"{'Init container' if init else 'Container'} {c} of pod {name}: requests to {host} "
        f"fail ({token.group(1) if token else 'error'}, {len(lines)} times in its {which} log)"
        + ("; the pod's containers wait for it" if init else "")
        + f". First: {lines[0]!r}"
    )
    yield Finding(
        detector="upstream_unavailable",
        pod=name,
        container=c,
        text=text,
        quote=lines[0],
        identifiers=(host,),
        refs=_refs(log["ref"]),
        weight=len(lines),
        extra={"host": host, "count": len(lines), "init": init, "log": which, "client": name},
    )


def _intended(svc: dict[str, Any], near: dict[str, Any]) -> bool:
    """A pod that shares part of a Service's selector and is plainly meant for it: named
    after the Service, or carrying all of a selector of two labels or more but one."""
    if str(near.get("pod", "")).startswith(f"{svc.get('name')}-"):
        return True
    sel = svc.get("selector") or {}
    have = set(str(near.get("labels", "")).split(","))
    shared = sum(1 for k, v in sel.items() if f"{k}={v}" in have)
    return len(sel) >= 2 and shared >= len(sel) - 1


def _selector_mismatch(
    item: dict[str, Any], svc: dict[str, Any], near: list[dict[str, Any]]
) -> Finding:
    """A Service whose selector matches no pod while pods carry part of it: the selector (or
    the pods' labels) changed, and the Service has no endpoints, client or not."""
    name = str(svc.get("name"))
    sel = ",".join(f"{k}={v}" for k, v in sorted(svc["selector"].items()))
    pods = ", ".join(str(p["pod"]) for p in near[:3])
    text = (
        f"Service {name} selects {sel}, but no pod in the namespace carries these labels, so it "
        f"has no endpoints; pods {pods} carry part of it ({near[0]['labels']}): the selector "
        "and the pods' labels disagree."
    )
    return Finding(
        detector="service_no_endpoints",
        pod=name,
        container=None,
        text=text,
        quote="matches NO pod in the namespace (no endpoints)",
        identifiers=(name,),
        refs=_refs(item["ref"]),
        extra={"service": name, "selector": sel, "clusterIP": svc.get("clusterIP"),
               "client": None, "reason": "selector"},
    )  # fmt: skip


def _service_no_endpoints(
    logs: list[dict[str, Any]], by_name: dict[str, dict[str, Any]], services: list[dict[str, Any]]
) -> Iterator[Finding]:
    for item in services:
        for svc in item["data"].get("services", []):
            if not svc.get("selector") or svc.get("matching"):
                continue
            name, ip = str(svc.get("name")), str(svc.get("clusterIP") or "")
            addr = re.compile(
                rf"(?<![\w.-]){re.escape(name)}(?:\.[\w-]+)?(?:\.svc(?:\.cluster\.local)?)?"
                rf"(?::\d+|\s+port\s+\d+)"
                + (rf"|(?<![\d.]){re.escape(ip)}(?![\d])" if ip and ip != "None" else "")
            )
            near = svc.get("nearest") or []
            found = False
            for log in logs:
                owner = by_name.get(log["pod"])
                if owner is None or not _unhealthy(owner["pod"]):
                    continue
                hit = next((ln.strip() for ln in _log_lines(str(log.get("text") or ""))
                            if addr.search(ln) and FAILURE.search(ln)), None)  # fmt: skip
                if hit is None:
                    continue
                sel = ",".join(f"{k}={v}" for k, v in sorted(svc["selector"].items()))
                near = svc.get("nearest") or []
                also = (
                    f"; pods {', '.join(p['pod'] for p in near[:3])} carry {near[0]['labels']}"
                    if near
                    else ""
                )
                token = FAILURE.search(hit)
                text = (
                    f"Service {name} ({ip}) selects {sel}, but no pod in the namespace carries "
                    f"these labels, so it has no endpoints{also}; container {log['container']} "
                    f"of pod {log['pod']} gets {token.group(1) if token else 'errors'} from it: "
                    f"{hit!r}"
                )
                ident = ip if ip and ip in hit else name
                yield Finding(
                    detector="service_no_endpoints",
                    pod=log["pod"],
                    container=log["container"],
                    text=text,
                    quote=hit,
                    identifiers=(ident,),
                    refs=_refs(log["ref"], item["ref"]),
                    extra={"service": name, "selector": sel, "clusterIP": ip,
                           "client": log["pod"]},
                )  # fmt: skip
                found = True
            intended = [p for p in near if _intended(svc, p)]
            if not found and intended:
                yield _selector_mismatch(item, svc, intended)


# -- workload-level ----------------------------------------------------------------------------

_SCALED = re.compile(r"Scaled down replica set ([\w.-]+) (?:to|from \d+ to) 0\b")


def _scaled_to_zero(
    services: list[dict[str, Any]], events: list[dict[str, Any]]
) -> Iterator[Finding]:
    """A Service with no endpoints because the workload it selects is scaled to 0, with the
    ``ScalingReplicaSet`` event that did it when the dump still holds it."""
    for item in services:
        for svc in item["data"].get("services", []):
            for z in svc.get("at_zero") or []:
                name = str(z["name"])
                ev = next(
                    (
                        e
                        for e in reversed(events)
                        if e["event"].get("involvedObject", {}).get("name") == name
                        and e["event"].get("reason") == "ScalingReplicaSet"
                        and _SCALED.search(str(e["event"].get("message")))
                    ),
                    None,
                )
                said = f" ({ev['event'].get('message')})" if ev else ""
                text = (
                    f"{z['kind']} {name} is scaled to 0 replicas{said}, so Service "
                    f"{svc.get('name')} has no endpoints: nothing serves its traffic."
                )
                yield Finding(
                    detector="scaled_to_zero",
                    pod=name,
                    container=None,
                    text=text,
                    quote=f"{z['kind']} {name} (spec.replicas: 0)",
                    identifiers=(name,),
                    refs=_refs(item["ref"], ev["ref"] if ev else None),
                    extra={"kind": z["kind"], "object": name, "service": svc.get("name"),
                           "reason": "ScalingReplicaSet"},
                )  # fmt: skip


def _job_deadline(workloads: list[dict[str, Any]]) -> Iterator[Finding]:
    for item in workloads:
        d = item["data"]
        if d.get("kind") != "job":
            continue
        for cond in d.get("status", {}).get("conditions", []) or []:
            if cond.get("type") != "Failed" or cond.get("reason") != "DeadlineExceeded":
                continue
            deadline = d.get("spec", {}).get("activeDeadlineSeconds")
            msg = str(cond.get("message") or "DeadlineExceeded")
            text = (
                f"Job {d['name']} was stopped at its deadline: {msg}"
                + (f" (activeDeadlineSeconds {deadline})" if deadline else "")
                + "; its running pods were killed, not crashed."
            )
            yield Finding(
                detector="job_deadline",
                pod=str(d["name"]),
                container=None,
                text=text,
                quote=msg,
                identifiers=(str(d["name"]),),
                refs=_refs(item["ref"]),
                extra={"job": d["name"], "deadline": deadline,
                       "workload_pods": list(d.get("pods", []))},
            )  # fmt: skip


def _hpa_at_max(autoscalers: list[dict[str, Any]]) -> Iterator[Finding]:
    for item in autoscalers:
        for h in item["data"].get("autoscalers", []):
            current, top = h.get("current"), h.get("max")
            limited = next(
                (c for c in h.get("conditions", []) or []
                 if c.get("type") == "ScalingLimited" and c.get("status") == "True"), None,
            )  # fmt: skip
            if current is None or top is None or int(current) < int(top) or limited is None:
                continue
            msg = str(limited.get("message") or limited.get("reason") or "")
            metrics = "; ".join(h.get("metrics", []))
            text = (
                f"HorizontalPodAutoscaler {h['name']} holds {h['target']} at its maximum of "
                f"{top} replicas and wants more ({limited.get('reason')}: {msg})"
                + (f"; metrics: {metrics}" if metrics else "")
                + "."
            )
            yield Finding(
                detector="hpa_at_max",
                pod=str(h["target"]).split("/")[-1],
                container=None,
                text=text,
                quote=msg,
                identifiers=(str(h["name"]),),
                refs=_refs(item["ref"]),
                extra={"hpa": h["name"], "max": top, "target": h["target"],
                       "workload_pods": list(h.get("pods", []))},
            )  # fmt: skip


_CREATE_KIND = {
    "exceeded quota": "quota",
    "admission webhook": "webhook",
    "violates PodSecurity": "pod_security",
    "serviceaccount": "service_account",
}


_CREATE_QUOTE = re.compile(
    r"(exceeded quota: [^,]+(?:, requested: [^,]+)?"
    r"|admission webhook \"[^\"]+\" denied the request[^\n]*"
    r"|violates PodSecurity \"[^\"]+\"[^\n]*"
    r"|serviceaccount \"[^\"]+\" not found)"
)


def _failed_create(events: list[dict[str, Any]]) -> Iterator[Finding]:
    seen: set[str] = set()
    for e in reversed(events):
        ev = e["event"]
        obj = ev.get("involvedObject", {})
        if ev.get("reason") != "FailedCreate" or ev.get("type") != "Warning":
            continue
        if obj.get("kind") not in ("ReplicaSet", "Job", "StatefulSet", "DaemonSet"):
            continue
        name = str(obj.get("name"))
        if name in seen:
            continue
        seen.add(name)
        msg = str(ev.get("message") or "")
        why = next((v for k, v in _CREATE_KIND.items() if k.lower() in msg.lower()), "other")
        m = _CREATE_QUOTE.search(msg)
        quote = m.group(1) if m else msg[:160]
        text = (
            f"{obj.get('kind')} {name} cannot create its pods ({ev.get('count', 1)} times): {msg}"
        )
        yield Finding(
            detector="failed_create",
            pod=name,
            container=None,
            text=text,
            quote=quote,
            identifiers=(name,),
            refs=_refs(e["ref"], *_same(events, ev)),
            weight=int(ev.get("count") or 1),
            extra={"kind": obj.get("kind"), "why": why, "object": name,
                   "when": ev.get("lastTimestamp") or ev.get("eventTime")},
        )


def workload_findings(
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    logs: list[dict[str, Any]],
    context: dict[str, list[dict[str, Any]]],
    of_pod: dict[str, list[dict[str, Any]]],
) -> list[Finding]:
    """The findings of this module's detectors (``events``: the fresh ones only;
    ``of_pod``: the same events of each pod, by pod name)."""
    by_name = {_meta(p["pod"]).get("name", ""): p for p in pods}
    by_log = {(lg["pod"], lg["container"], bool(lg.get("previous"))): lg for lg in logs}
    nodes = _data(context, "node_capacity")
    stale = stale_evictions(pods, events)
    out: list[Finding] = []
    with_claims = events + _claim_events(context)
    of_claim = claim_warnings(with_claims)
    for item in pods:
        mine = of_pod.get(_meta(item["pod"]).get("name", ""), [])
        out += _init_container(item, by_log)
        out += _create_config_error(item, mine)
        out += _pvc_unbound(item, mine, with_claims, of_claim)
        out += _taint_untolerated(item, mine, nodes)
        out += _evicted(item, nodes, stale)
        out += _node_not_ready(item, mine, nodes)
    for log in logs:
        owner = by_name.get(log["pod"])
        if owner is not None:
            out += _upstream(log, owner["pod"], owner["ref"])
    out += _service_no_endpoints(logs, by_name, _data(context, "services"))
    out += _job_deadline(_data(context, "workload_status"))
    out += _hpa_at_max(_data(context, "autoscalers"))
    out += _failed_create(events)
    out += _scaled_to_zero(_data(context, "services"), events)
    out += preempted(_data(context, "triage"))
    return out


def _claim_events(context: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        {"ref": item["ref"], "event": ev}
        for item in _data(context, "claims")
        for ev in item["data"].get("events", [])
    ]
