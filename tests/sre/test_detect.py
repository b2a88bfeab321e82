"""Detector edge cases: what is *not* verified matters as much as what is."""

from __future__ import annotations

from typing import Any

from loopkernel_apps.sre._detect import decisive_line, detect, edit_distance, rank, split_symptoms


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


def test_a_log_request_error_is_never_the_crash_reason() -> None:
    text = (
        "Request log error: container api is terminated\nunable to retrieve container logs for x\n"
    )
    assert detectors([pod()], [], [log(text)]) == []


def test_the_decisive_line_is_the_first_panic_with_its_frame_not_the_wrapper_after_it() -> None:
    text = (
        "INFO starting\npanic: assignment to entry in nil map\n\ngoroutine 1 [running]:\n"
        "main.load()\n\t/app/rules.go:57 +0x65\n"
        'level=error msg="service stopped" error="exit status 2"\n'
    )
    found, _ = detect([pod()], [], [log(text)])
    crash = next(f for f in found if f.detector == "crash_log_reason")
    assert crash.quote == "panic: assignment to entry in nil map"
    assert crash.extra["frame"] == "/app/rules.go:57 +0x65"
    lines = ["Traceback (most recent call last):", '  File "a.py", line 3, in f', "ValueError: bad"]
    frame = 'File "a.py", line 3, in f'
    assert decisive_line([*lines, "ERROR exiting"]) == ("ValueError: bad", frame)


def test_a_probe_failure_of_an_oomkilled_container_is_a_symptom_not_a_cause() -> None:
    oom = pod(last={"reason": "OOMKilled", "exitCode": 137})
    unhealthy = event("Unhealthy", "Readiness probe failed: connect: connection refused")
    found, _ = detect([oom], [unhealthy], [])
    causes, symptoms = split_symptoms(found)
    assert [f.detector for f in causes] == ["oomkilled"]
    assert [(s.detector, c.detector) for s, c in symptoms] == [("probe_failure", "oomkilled")]


def test_a_dependency_is_blamed_only_when_it_failed_again_and_again() -> None:
    line = "ERROR GET http://pricing:8443/v1: 503 Service Unavailable"
    assert "upstream_unavailable" not in detectors([pod()], [], [log(line + "\n" + line)])
    assert detectors([pod()], [], [log("\n".join([line] * 3))])[0] == "upstream_unavailable"


def test_a_selector_that_matches_no_pod_is_verified_only_with_a_client_refused() -> None:
    services = {"services": [{"ref": "E9", "data": {"services": [
        {"name": "catalog", "clusterIP": "10.96.4.7", "selector": {"app": "catalog"},
         "matching": [], "nearest": []}]}}]}  # fmt: skip
    refused = "dial tcp 10.96.4.7:8080: connect: connection refused"
    found, _ = detect([pod()], [], [log(refused)], services)
    assert "service_no_endpoints" in [f.detector for f in found]
    found, _ = detect([pod()], [], [log("INFO all good")], services)
    assert "service_no_endpoints" not in [f.detector for f in found]


def test_config_error_pvc_taint_and_eviction_key_on_status_and_events() -> None:
    p = pod()
    p["pod"]["status"]["containerStatuses"][0]["state"] = {"waiting": {
        "reason": "CreateContainerConfigError",
        "message": "couldn't find key DB_HOST in ConfigMap prod/orders-config"}}  # fmt: skip
    found, _ = detect([p], [], [])
    cfg = next(f for f in found if f.detector == "create_config_error")
    assert (cfg.extra["kind"], cfg.extra["object"], cfg.extra["key"]) == (
        "ConfigMap",
        "orders-config",
        "DB_HOST",
    )
    pending = pod(restarts=0)
    pending["pod"]["status"] = {"phase": "Pending"}
    pending["pod"]["spec"]["volumes"] = [
        {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}
    ]
    obj = {"kind": "PersistentVolumeClaim", "name": "data"}
    ev = {"involvedObject": obj, "reason": "FailedBinding", "type": "Warning",
          "message": "no storage class is set"}  # fmt: skip
    claim = {"ref": "E4", "event": ev}
    assert detectors([pending], [claim], [])[0] == "pvc_unbound"
    taint = event(
        "FailedScheduling",
        "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}.",
    )
    pending["pod"]["spec"].pop("volumes")
    assert detectors([pending], [taint], []) == ["taint_untolerated"]
    pending["pod"]["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    assert "taint_untolerated" not in detectors([pending], [taint], [])
    gone = pod(restarts=0)
    gone["pod"]["status"] = {"phase": "Failed", "reason": "Evicted",
                             "message": "The node was low on resource: memory. "}  # fmt: skip
    assert detectors([gone], [], []) == ["evicted"]


def test_a_container_killed_by_a_signal_is_not_explained_by_an_incidental_error_line() -> None:
    killed = pod(last={"reason": "Error", "exitCode": 137})
    assert detectors([killed], [], [log("ERROR cache miss storm\nINFO warming\n")]) == []
    assert detectors([killed], [], [log("panic: nil map\n")]) == ["crash_log_reason"]


def test_without_a_fatal_line_the_last_causal_error_wins_over_the_wrapper() -> None:
    text = "ERROR optional plugin x not loaded\nERROR db write failed: disk quota\nERROR exiting\n"
    found, _ = detect([pod()], [], [log(text)])
    assert found[0].quote == "ERROR db write failed: disk quota"


def test_a_segfault_exit_is_a_signal_and_prose_with_the_word_error_is_no_error_line() -> None:
    segv = pod(last={"reason": "Error", "exitCode": 139})
    prose = "decoder: no error handler registered for image/heic, using default\n"
    assert detectors([segv], [], [log("ERROR cache miss storm\n" + prose)]) == []
    assert detectors([pod()], [], [log(prose + 'level=warn msg="slow" error="canceled"\n')]) == []
    assert detectors([pod()], [], [log('{"level":"error","msg":"db write failed"}\n')]) == [
        "crash_log_reason"
    ]


def test_a_jvm_exception_is_explained_by_its_innermost_caused_by() -> None:
    text = (
        "ERROR c.z.h.p.HikariPool : Exception during pool initialization.\n"
        "com.acme.db.CommunicationsException: Communications link failure\n"
        "\tat com.acme.db.Pool.<init>(Pool.java:115)\n"
        "Caused by: java.io.IOException: handshake failed\n"
        "\t... 12 common frames omitted\n"
        "Caused by: java.lang.IllegalStateException: keystore is empty\n"
        "\tat com.acme.tls.Keys.load(Keys.java:40)\n"
        "ERROR o.s.boot.SpringApplication : Application run failed\n"
    )
    line, frame = decisive_line(text.splitlines()) or ("", None)
    assert line == "Caused by: java.lang.IllegalStateException: keystore is empty"
    assert frame == "at com.acme.tls.Keys.load(Keys.java:40)"


def test_known_shapes_of_a_missing_variable_and_an_unknown_host() -> None:
    found, _ = detect([pod()], [], [log("panic: required key REDIS_HOST missing value\n")])
    assert next(f.detector for f, _, _ in rank(found, set())) == "missing_env"
    java = "Caused by: java.net.UnknownHostException: db.internal: Name or service not known\n"
    found, _ = detect([pod()], [], [log(java)])
    dns = next(f for f in found if f.detector == "dns_resolution")
    assert dns.extra["host"] == "db.internal"


def test_an_eviction_replaced_by_a_pod_failing_on_its_own_is_history() -> None:
    owner = [{"kind": "ReplicaSet", "name": "api-7f", "uid": "rs-1", "controller": True}]
    gone = pod("api-7f-old", restarts=0)
    gone["pod"]["metadata"].update(ownerReferences=owner, creationTimestamp="2026-11-28T03:00:00Z")
    target = {"type": "DisruptionTarget", "status": "True",
              "lastTransitionTime": "2026-11-28T21:44:00Z"}  # fmt: skip
    gone["pod"]["status"] = {"phase": "Failed", "reason": "Evicted", "conditions": [target],
                             "message": "The node was low on resource: memory. "}  # fmt: skip
    now = pod("api-7f-new")
    now["pod"]["metadata"]["ownerReferences"] = owner
    found, stale = detect([gone, now], [], [log("panic: boom\n")])
    assert "evicted" not in [f.detector for f in found]
    assert [(i["event"]["reason"], i["ref"]) for i, _ in stale] == [("Evicted", "E1")]
    alone = pod("api-7f-old", restarts=0)
    alone["pod"]["status"] = dict(gone["pod"]["status"])
    assert detectors([alone], [], []) == ["evicted"]  # nothing newer: the eviction is the story
