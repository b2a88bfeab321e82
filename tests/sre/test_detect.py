"""Detector edge cases: what is *not* verified matters as much as what is."""

from __future__ import annotations

from typing import Any

from loopkernel_apps.sre._detect import detect, edit_distance, rank


def pod(
    name: str = "api-1",
    *,
    restarts: int = 3,
    env: list[Any] | None = None,
    env_from: bool = False,
    last: dict[str, Any] | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "api", "image": "reg/api:1", "env": env or []}
    if env_from:
        c["envFrom"] = [{"configMapRef": {"name": "api-config"}}]
    status = {
        "name": "api",
        "restartCount": restarts,
        "ready": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": last or {"reason": "Error", "exitCode": 1}},
    }
    return {"ref": "E1", "pod": {
        "metadata": {"name": name, "uid": "u-new", "creationTimestamp": "2026-11-30T09:00:00Z"},
        "spec": {"containers": [c]}, "status": {"phase": "Running", "containerStatuses": [status]},
    }}  # fmt: skip


def log(text: str, previous: bool = True) -> dict[str, Any]:
    return {"ref": "E2", "pod": "api-1", "container": "api", "previous": previous, "text": text}


def event(
    reason: str, message: str, *, uid: str = "u-new", when: str = "2026-11-30T09:10:00Z"
) -> dict[str, Any]:
    return {"ref": "E3", "event": {
        "involvedObject": {"kind": "Pod", "name": "api-1", "uid": uid}, "reason": reason,
        "message": message, "type": "Warning", "count": 4, "lastTimestamp": when}}  # fmt: skip


def detectors(pods: list[Any], events: list[Any], logs: list[Any]) -> list[str]:
    found, _ = detect(pods, events, logs)
    return [f.detector for f, _, _ in rank(found, set())]


def test_missing_env_is_verified_only_when_the_spec_lacks_the_variable() -> None:
    line = "ERROR environment variable DATABASE_URL is not set"
    assert detectors([pod()], [], [log(line)])[0] == "missing_env"
    defined = [{"name": "DATABASE_URL", "value": "postgres://db"}]
    assert "missing_env" not in detectors([pod(env=defined)], [], [log(line)])
    assert "missing_env" not in detectors([pod(env_from=True)], [], [log(line)])


def test_stale_events_by_uid_or_age_are_set_aside() -> None:
    pull = 'Failed to pull image "reg/api:0": not found'
    _, stale = detect([pod()], [event("Failed", pull, uid="u-old")], [])
    assert [why for _, why in stale] == [
        "it belongs to an earlier pod api-1 (uid u-old, now u-new)"
    ]
    old = event("Unhealthy", "Liveness probe failed: timeout", when="2026-11-30T08:00:00Z")
    assert "probe_failure" not in detectors([pod()], [old], [])
    fresh = event("Unhealthy", "Liveness probe failed: timeout")
    assert "probe_failure" in detectors([pod()], [fresh], [])


def test_the_crash_reason_comes_from_the_previous_log_after_a_restart() -> None:
    current = log("INFO starting\nERROR boom", previous=False)
    assert "crash_log_reason" not in detectors([pod()], [], [current])
    assert "crash_log_reason" in detectors([pod()], [], [log("INFO starting\nERROR boom")])
    oom = pod(last={"reason": "OOMKilled", "exitCode": 137})
    assert detectors([oom], [], [log("ERROR boom")]) == ["oomkilled"]


def test_a_config_line_in_a_healthy_container_is_not_a_cause() -> None:
    line = "WARN invalid config key 'color' ignored"
    assert "config_invalid" not in detectors([pod(restarts=0, last={})], [], [log(line, False)])
    assert "config_invalid" in detectors([pod()], [], [log(line)])


def test_edit_distance() -> None:
    assert edit_distance("pyhton", "python") == 1  # one swap
    assert edit_distance("wgte", "wget") == 1
    assert edit_distance("pyhon", "python") == 1
    assert edit_distance("", "abc") == 3
    assert edit_distance("node", "node") == 0
