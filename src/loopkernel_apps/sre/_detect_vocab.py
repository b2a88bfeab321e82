"""Detectors that read the vocabulary table (``_vocab.ROWS``) rather than a pattern of their own.

Each keys on a structured field first (a terminated reason and exit code, a waiting
reason, an event's reason on the *current* pod) and reads the message with the rows'
shapes, so a new message shape is a new row, not new code:

- ``exit_completed``: an app container of a long-running workload (not a Job) that exits 0
  (``Completed``) and is restarted in a loop (``CrashLoopBackOff`` now);
- ``exec_format_error``: ``exec format error`` in a terminated/waiting message or in the
  log of a container that crashed (a binary built for another CPU);
- ``failed_mount``: a ``FailedMount`` event of the current pod, still waiting to start, that
  names a missing Secret/ConfigMap or key;
- ``multi_attach``: a ``FailedAttachVolume`` ``Multi-Attach error`` of the current pod, still
  waiting to start (a ReadWriteOnce volume attached for another pod on another node).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from loopkernel_apps.sre._finding import Finding, _meta, _refs, _statuses
from loopkernel_apps.sre._vocab import Row, fill, match
from loopkernel_apps.sre._vocab_rows import rows_for

__all__ = ["vocab_findings"]

_KINDS = {"secret": "Secret", "configmap": "ConfigMap"}
_LONG_RUNNING = ("ReplicaSet", "StatefulSet", "DaemonSet", "ReplicationController")


def _read(detector: str, message: str) -> tuple[Row, dict[str, str]] | None:
    for row in rows_for(detector):
        if row.shapes and (found := match(row, message)) is not None:
            return row, found
    return None


def _owner_kind(pod: dict[str, Any]) -> str | None:
    refs = _meta(pod).get("ownerReferences", []) or []
    return next((str(o.get("kind")) for o in refs if o.get("controller")), None)


def _app_statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pod.get("status", {}).get("containerStatuses") or [])


def _exit_completed(ref: str | None, pod: dict[str, Any]) -> Iterator[Finding]:
    if _owner_kind(pod) not in _LONG_RUNNING:
        return  # a Job's or a bare pod's container is meant to finish
    name = _meta(pod).get("name", "")
    for cs in _app_statuses(pod):
        last = (cs.get("lastState") or {}).get("terminated") or {}
        waiting = (cs.get("state") or {}).get("waiting") or {}
        restarts = int(cs.get("restartCount", 0))
        if last.get("reason") != "Completed" or int(last.get("exitCode", -1)) != 0:
            continue
        if waiting.get("reason") != "CrashLoopBackOff" or restarts < 2:
            continue  # current evidence only: looping now
        c = cs.get("name", "")
        row = rows_for("exit_completed")[-1]
        text = (
            f"Container {c} of pod {name} exits 0 (Completed) and is restarted in a loop "
            f"({restarts} restarts, CrashLoopBackOff): its command finishes, but a "
            f"{_owner_kind(pod)} restarts it; a long-running workload needs a process that "
            "stays up."
        )
        yield Finding(
            detector="exit_completed",
            pod=name,
            container=c,
            text=text,
            quote="Completed",
            identifiers=(name, c, "Completed"),
            refs=_refs(ref),
            weight=restarts,
            extra={"reason": "Completed", "exit_code": 0,
                   "remedy": fill(row.remedy, {"container": c})},
        )  # fmt: skip


def _exec_format(
    ref: str | None, pod: dict[str, Any], logs: list[dict[str, Any]]
) -> Iterator[Finding]:
    name = _meta(pod).get("name", "")
    for cs in _statuses(pod):
        c = cs.get("name", "")
        crashed = int(cs.get("restartCount", 0)) > 0 or bool(
            ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
        )
        sources: list[tuple[str, str | None]] = []
        for where in ("state", "lastState"):
            st = cs.get(where) or {}
            detail = st.get("waiting") or st.get("terminated") or {}
            sources.append((str(detail.get("message") or ""), ref))
        if crashed or sources[0][0]:
            sources += [(str(lg["text"]), lg["ref"]) for lg in logs if lg["container"] == c]
        for text_, src in sources:
            found = _read("exec_format_error", text_)
            if found is None:
                continue
            row, var = found
            image = str(cs.get("image") or "")
            text = (
                f"Container {c} of pod {name} cannot run its binary"
                + (f" {var['path']}" if var.get("path") else "")
                + f": exec format error (image {image or 'unknown'} is built for another CPU "
                "architecture than the node's)."
            )
            yield Finding(
                detector="exec_format_error",
                pod=name,
                container=c,
                text=text,
                quote=var["quote"],
                identifiers=(name, c),
                refs=_refs(src, ref),
                weight=int(cs.get("restartCount", 0)),
                extra={"reason": "exec format error", "image": image,
                       "remedy": fill(row.remedy, {"image": image})},
            )  # fmt: skip
            break


def _waiting_to_start(pod: dict[str, Any]) -> bool:
    st = pod.get("status", {})
    if st.get("phase") not in ("Pending", None):
        return False
    for cs in st.get("containerStatuses") or []:
        if (cs.get("state") or {}).get("running"):
            return False
    return True


def _event_rows(
    ref: str | None, pod: dict[str, Any], mine: list[dict[str, Any]], detector: str, reason: str
) -> Iterator[Finding]:
    """The newest event of the current pod with ``reason`` that a row of ``detector`` reads."""
    if not _waiting_to_start(pod):
        return  # started since: the event is history
    name = _meta(pod).get("name", "")
    for e in reversed(mine):
        ev = e["event"]
        if ev.get("reason") != reason:
            continue
        found = _read(detector, str(ev.get("message") or ""))
        if found is None:
            continue
        row, var = found
        if "kind" in var:
            var["kind"] = _KINDS.get(var["kind"].lower(), var["kind"])
        values: dict[str, object] = {**var, "pod": name}
        fact = fill(row.fact, values) or str(ev.get("message"))[:160]
        text = f"Pod {name} cannot start: {fact} ({reason}, {ev.get('count') or 1} times)."
        yield Finding(
            detector=detector,
            pod=name,
            container=None,
            text=text,
            quote=var["quote"],
            identifiers=(name,),
            refs=_refs(e["ref"], ref),
            weight=int(ev.get("count") or 1),
            extra={**var, "reason": reason, "remedy": fill(row.remedy, values)},
        )
        return


def vocab_findings(
    item: dict[str, Any], mine: list[dict[str, Any]], logs: list[dict[str, Any]]
) -> list[Finding]:
    """This module's findings for one pod (``mine``: its fresh events; ``logs``: its logs)."""
    pod, ref = item["pod"], item["ref"]
    out: list[Finding] = []
    out += _exit_completed(ref, pod)
    out += _exec_format(ref, pod, logs)
    out += _event_rows(ref, pod, mine, "failed_mount", "FailedMount")
    out += _event_rows(ref, pod, mine, "multi_attach", "FailedAttachVolume")
    return out
