"""The vocabulary table: a test per row, a coverage test, and the scheduler's clauses."""

from __future__ import annotations

from typing import Any

import pytest

from loopkernel_apps.sre._detect import DETECTORS, detect, rank
from loopkernel_apps.sre._remedy import NEXT, REMEDY
from loopkernel_apps.sre._sched import ClauseKind, decisive, parse
from loopkernel_apps.sre._vocab import Row, Source, fill, match, slots
from loopkernel_apps.sre._vocab_rows import ROWS, default_reason


def _id(row: Row) -> str:
    return f"{row.reason}-{row.detector}-{ROWS.index(row)}"


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_row_reads_its_documented_message(row: Row) -> None:
    assert row.detector in DETECTORS
    found = match(row, row.example)
    assert found is not None, f"{row.reason}: no shape reads {row.example!r}"
    if row.shapes:
        assert found["quote"] in row.example
        # every variable the fact names comes from the shape, the pod or the container
        known = set(found) | {"container", "pod"}
        assert set(slots(row.fact)) <= known, row.fact
    if row.remedy:
        assert fill(row.remedy, {**found, "container": "api", "image": "reg/api:1"}) is not None


def test_coverage_every_detector_has_a_row_and_every_row_a_detector() -> None:
    fed = {r.detector for r in ROWS}
    assert fed == set(DETECTORS), set(DETECTORS) ^ fed
    assert all(r.example for r in ROWS)
    for d in DETECTORS:
        assert d in NEXT and d in REMEDY, d
    sources = {r.source for r in ROWS}
    assert sources == set(Source)
    events = [r for r in ROWS if r.source is Source.EVENT]
    assert {"Normal", "Warning"} <= {r.event_type for r in events}


def test_a_template_with_an_empty_slot_is_not_offered() -> None:
    assert fill("Create {kind} {name}", {"kind": "Secret", "name": ""}) is None
    assert fill("Create {kind} {name}", {"kind": "Secret", "name": "?"}) is None
    assert fill("Create {kind} {name}", {"kind": "Secret", "name": "tls"}) == "Create Secret tls"


def test_default_reason_comes_from_the_table() -> None:
    assert default_reason("oomkilled") == "OOMKilled"
    assert default_reason("failed_mount") == "ContainerCreating"
    assert default_reason("multi_attach") == "FailedAttachVolume"


# -- the scheduler's clauses ---------------------------------------------------------------

MIXED = (
    "0/3 nodes are available: 1 node(s) had untolerated taint "
    "{node-role.kubernetes.io/control-plane: }, 2 node(s) didn't match pod anti-affinity rules. "
    "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
    "2 No preemption victims found for incoming pod."
)


def test_every_clause_of_a_multi_reason_message_is_parsed() -> None:
    total, clauses = parse(MIXED)
    assert total == 3
    assert [(c.count, c.kind) for c in clauses] == [
        (1, ClauseKind.TAINT),
        (2, ClauseKind.ANTI_AFFINITY),
    ]
    assert clauses[0].taint_key == "node-role.kubernetes.io/control-plane"
    old = (
        "0/4 nodes are available: 1 node(s) had taint {node-role.kubernetes.io/master: }, "
        "that the pod didn't tolerate, 3 Insufficient cpu."
    )
    _, clauses = parse(old)
    assert [(c.count, c.kind, c.subject) for c in clauses] == [
        (1, ClauseKind.TAINT, "node-role.kubernetes.io/master:"),
        (3, ClauseKind.INSUFFICIENT, "cpu"),
    ]


def test_a_control_plane_taint_is_never_the_cause_for_an_application() -> None:
    app: dict[str, Any] = {"spec": {"tolerations": []}}
    best, aside = decisive(MIXED, app)
    assert best is not None and best.kind is ClauseKind.ANTI_AFFINITY
    assert [c.kind for c in aside] == [ClauseKind.TAINT]
    only_cp = (
        "0/1 nodes are available: 1 node(s) had untolerated taint "
        "{node-role.kubernetes.io/control-plane: }."
    )
    assert decisive(only_cp, app)[0] is None
    tolerant = {"spec": {"tolerations": [{"key": "workload", "operator": "Exists"}]}}
    batch = "0/3 nodes are available: 3 node(s) had untolerated taint {workload: batch}."
    assert decisive(batch, tolerant)[0] is None
    got = decisive(batch, app)[0]
    assert got is not None and got.kind is ClauseKind.TAINT and got.taint_key == "workload"


def _pending(name: str = "web-1", **spec: Any) -> dict[str, Any]:
    return {
        "ref": "E1",
        "pod": {
            "metadata": {"name": name, "uid": "u1", "creationTimestamp": "2026-11-30T09:00:00Z"},
            "spec": {"containers": [{"name": "web", "image": "reg/web:1"}], **spec},
            "status": {"phase": "Pending"},
        },
    }


def _event(reason: str, message: str, *, kind: str = "Pod", name: str = "web-1") -> dict[str, Any]:
    return {
        "ref": "E2",
        "event": {
            "involvedObject": {"kind": kind, "name": name, "uid": "u1"},
            "reason": reason,
            "message": message,
            "type": "Warning",
            "count": 3,
            "lastTimestamp": "2026-11-30T09:10:00Z",
        },
    }


def _found(pods: list[Any], events: list[Any], logs: list[Any] | None = None) -> list[Any]:
    findings, _ = detect(pods, events, logs or [])
    return [f for f, _, _ in rank(findings, set())]


def test_anti_affinity_is_stated_not_the_control_plane_taint() -> None:
    found = _found([_pending()], [_event("FailedScheduling", MIXED)])
    assert [f.detector for f in found] == ["unschedulable"]
    assert "anti-affinity" in found[0].text
    assert found[0].extra["clause"] == "pod_anti_affinity"
    remedy = REMEDY["unschedulable"]
    assert "{schedule_fix}" in remedy


def test_failed_mount_of_a_missing_secret_is_verified_on_the_current_pod() -> None:
    msg = 'MountVolume.SetUp failed for volume "tls" : secret "api-tls" not found'
    pod = _pending()
    pod["pod"]["status"]["containerStatuses"] = [
        {"name": "web", "state": {"waiting": {"reason": "ContainerCreating"}}, "restartCount": 0}
    ]
    found = _found([pod], [_event("FailedMount", msg)])
    assert [f.detector for f in found] == ["failed_mount"]
    f = found[0]
    assert f.extra["kind"] == "Secret" and f.extra["name"] == "api-tls"
    assert f.extra["remedy"].startswith("Create Secret api-tls")
    # started since: the event is history
    pod["pod"]["status"] = {
        "phase": "Running",
        "containerStatuses": [{"name": "web", "state": {"running": {}}, "ready": True}],
    }
    assert not _found([pod], [_event("FailedMount", msg)])


def test_multi_attach_names_the_volume() -> None:
    msg = 'Multi-Attach error for volume "pvc-9f1" Volume is already used by pod(s) db-7c9-abc'
    found = _found([_pending()], [_event("FailedAttachVolume", msg)])
    assert [f.detector for f in found] == ["multi_attach"]
    assert found[0].extra["volume"] == "pvc-9f1"
    assert "ReadWriteOnce" in found[0].extra["remedy"]


def _looping(last: dict[str, Any], owner: str = "ReplicaSet") -> dict[str, Any]:
    return {
        "ref": "E1",
        "pod": {
            "metadata": {
                "name": "worker-1",
                "uid": "u1",
                "ownerReferences": [{"kind": owner, "name": "worker-5d", "controller": True}],
            },
            "spec": {"containers": [{"name": "worker", "image": "reg/worker:1"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "worker",
                        "image": "reg/worker:1",
                        "restartCount": 6,
                        "ready": False,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": last},
                    }
                ],
            },
        },
    }


def test_exit_zero_in_a_restart_loop_is_a_one_shot_command() -> None:
    done = {"reason": "Completed", "exitCode": 0}
    found = _found([_looping(done)], [])
    assert [f.detector for f in found] == ["exit_completed"]
    assert "Job" in found[0].extra["remedy"]
    assert not _found([_looping(done, owner="Job")], [])


def test_exec_format_error_in_the_log_is_another_architecture() -> None:
    log = {
        "ref": "E3",
        "pod": "worker-1",
        "container": "worker",
        "previous": True,
        "text": "exec /usr/local/bin/worker: exec format error\n",
    }
    found = _found([_looping({"reason": "Error", "exitCode": 1})], [], [log])
    assert found[0].detector == "exec_format_error"
    assert "/usr/local/bin/worker" in found[0].text
    assert "reg/worker:1" in found[0].extra["remedy"]


def test_a_deployment_scaled_to_zero_explains_the_service_without_endpoints() -> None:
    from loopkernel_apps.sre._cause import cause_entity, explains

    services = {
        "ref": "E4",
        "data": {
            "services": [
                {
                    "name": "shop",
                    "selector": {"app": "shop"},
                    "matching": [],
                    "at_zero": [{"kind": "Deployment", "name": "shop"}],
                }
            ]
        },
    }
    scaled = _event(
        "ScalingReplicaSet",
        "Scaled down replica set shop-7d9f8 to 0 from 3",
        kind="Deployment",
        name="shop",
    )
    scaled["event"]["type"] = "Normal"
    findings, _ = detect([], [scaled], [], {"services": [services]})
    assert [f.detector for f in findings] == ["scaled_to_zero"]
    f = findings[0]
    assert f.refs == ("E4", "E2")
    entity = cause_entity(f, {}, "prod")
    assert entity.to_json() == {"kind": "Deployment", "namespace": "prod", "name": "shop"}
    assert [e.name for e in explains(f, entity, [], {}, "prod")] == ["shop"]
    # a Service whose selector matches running pods has endpoints: nothing to say
    services["data"]["services"][0]["at_zero"] = []
    assert not detect([], [scaled], [], {"services": [services]})[0]


def test_a_restart_long_ago_of_a_container_ready_since_is_history() -> None:
    from loopkernel_apps.sre._time import recovered, recovered_pod

    now = "2026-11-30T12:00:00Z"
    old = {
        "name": "api",
        "state": "running",
        "ready": True,
        "restarts": 1,
        "started": "2026-11-27T08:00:00Z",
        "last_reason": "OOMKilled",
    }
    fresh = {**old, "started": "2026-11-30T11:55:00Z"}
    assert recovered(old, now) and not recovered(fresh, now)
    assert recovered_pod({"phase": "Running", "containers": [old]}, now)
    assert not recovered_pod({"phase": "Running", "containers": [old, fresh]}, now)
    assert not recovered({**old, "ready": False}, now)


def _rs_pod(name: str, rs: str, h: str, phase: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "labels": {"pod-template-hash": h},
            "ownerReferences": [{"kind": "ReplicaSet", "name": rs, "controller": True}],
        },
        "spec": {"priorityClassName": "high" if "train" in name else None},
        "status": {"phase": phase},
    }


def test_preempted_events_of_gone_pods_name_the_preemptor() -> None:
    from loopkernel_apps.sre._preempt import preempted, preemptions

    pods = [
        _rs_pod("train-7d9f8-x2k4q", "train-7d9f8", "7d9f8", "Running", "u-train"),
        _rs_pod("web-5c6b7-aaaaa", "web-5c6b7", "5c6b7", "Pending", "u-web2"),
    ]
    gone = {"kind": "Pod", "name": "web-5c6b7-zzzzz", "uid": "u-web1"}
    events = [
        {
            "involvedObject": gone,
            "reason": "Preempted",
            "type": "Normal",
            "message": "Preempted by prod/train-7d9f8-x2k4q on node n1",
        },
        {
            "involvedObject": {**gone, "name": "web-5c6b7-yyyyy"},
            "reason": "Preempted",
            "type": "Normal",
            "message": "Preempted by pod u-train on node n1",
        },
    ]
    rows = preemptions(pods, events, "prod")
    assert [(r["preemptor_workload"], r["victim_workload"], r["current"]) for r in rows] == [
        ("train", "web", True),
        ("train", "web", True),
    ]
    (f,) = preempted([{"ref": "E1", "data": {"preemptions": rows}}])
    assert f.pod == "train" and f.weight == 2 and "priorityClassName high" in f.text
    # the victims run again: history
    pods[1]["status"]["phase"] = "Running"
    rows = preemptions(pods, events, "prod")
    assert not list(preempted([{"ref": "E1", "data": {"preemptions": rows}}]))


def test_run_as_non_root_gets_its_own_remedy_never_create_configmap() -> None:
    from loopkernel_apps.sre._remedy import fmt

    pod = _looping({"reason": "Error", "exitCode": 1})
    st = pod["pod"]["status"]["containerStatuses"][0]
    st["state"] = {
        "waiting": {
            "reason": "CreateContainerConfigError",
            "message": "container has runAsNonRoot and image will run as root",
        }
    }
    (f,) = [x for x in _found([pod], []) if x.detector == "create_config_error"]
    assert fmt(REMEDY[f.detector], f.to_json(), "worker") is None  # no ConfigMap to name
    assert f.extra["remedy"].startswith("Run container worker as a non-root user")


def test_a_normal_failed_binding_on_the_claim_is_read() -> None:
    pod = _pending()
    pod["pod"]["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    ev = _event(
        "FailedBinding",
        "no persistent volumes available for this claim and no storage class is set",
        kind="PersistentVolumeClaim",
        name="data",
    )
    ev["event"]["type"] = "Normal"
    found = _found([pod], [ev])
    assert [f.detector for f in found] == ["pvc_unbound"]
    assert "no storage class is set" in found[0].text


def test_the_taint_on_the_selected_pool_beats_the_nodes_the_selector_excludes() -> None:
    msg = (
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: render}, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
    best, aside = decisive(msg, {"spec": {}})
    assert best is not None and best.kind is ClauseKind.TAINT and best.taint_key == "dedicated"
    assert [c.kind for c in aside] == [ClauseKind.NODE_SELECTOR]
