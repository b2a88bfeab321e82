"""The dump reader: directory form, stdout form, previous logs, extra lists, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lk_sre import INCIDENTS
from loopkernel import UsageError
from loopkernel_apps.sre._dump import load_dump, parse_log_blocks, parse_stdout


def test_the_directory_form_with_previous_logs_and_extra_lists() -> None:
    dump = load_dump(INCIDENTS / "cert-expired" / "dump")
    assert [n["metadata"]["name"] for n in dump.nodes] == ["node-1", "node-2", "node-3"]
    ns = dump.namespace("prod")
    assert {"pods", "events", "deployments", "replicasets", "jobs"} <= set(ns.lists)
    assert ns.items("jobs")[0]["status"]["failed"] == 3  # jobs.json is read when present
    assert all("kind" not in p for p in ns.items("pods"))
    crash = load_dump(INCIDENTS / "oom-payments" / "dump").namespace("prod")
    previous = {k: v for k, v in crash.logs.items() if k[2]}
    assert len(previous) == 1
    ((pod, container, _),) = previous
    assert pod.startswith("payments-") and container == "payments"
    assert "WARN heap usage 251MiB of 256MiB" in previous[(pod, container, True)]


def test_the_stdout_form_reads_the_same_objects_as_the_directory_form(tmp_path: Path) -> None:
    src = load_dump(INCIDENTS / "missing-env" / "dump")
    docs = [json.dumps({"kind": "NodeList", "items": src.nodes})]
    ns = src.namespace("prod")
    kinds = {
        "pods": "PodList",
        "events": "EventList",
        "deployments": "DeploymentList",
        "replicasets": "ReplicaSetList",
        "services": "ServiceList",
    }
    for stem, kind in kinds.items():
        docs.append(json.dumps({"kind": kind, "items": ns.items(stem)}, indent=3))
    blocks = "".join(
        f"==== START logs for container {c} of pod prod/{p} ====\n{text}"
        f"==== END logs for container {c} of pod prod/{p} ====\n"
        for (p, c, prev), text in sorted(ns.logs.items())
        if not prev
    )
    path = tmp_path / "dump.txt"
    path.write_text("\n".join(docs) + "\n" + blocks)
    got = load_dump(path)
    assert got.nodes == src.nodes
    for stem in kinds:
        assert got.namespace("prod").items(stem) == ns.items(stem)
    assert got.namespace("prod").logs == {k: v for k, v in ns.logs.items() if not k[2]}


def test_log_blocks_keep_each_container_apart() -> None:
    text = (
        "==== START logs for container a of pod ns/p ====\nline 1\nline 2\n"
        "==== END logs for container a of pod ns/p ====\n"
        "==== START logs for container b of pod ns/p ====\nonly b\n"
        "==== END logs for container b of pod ns/p ====\n"
    )
    assert parse_log_blocks(text) == {
        ("ns", "p", "a"): "line 1\nline 2\n",
        ("ns", "p", "b"): "only b\n",
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "holds no 'kubectl cluster-info dump' output"),
        ('{"kind": "PodList", "items": [', "is broken"),
    ],
)
def test_bad_stdout_input_is_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "dump.txt"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        load_dump(path)
    with pytest.raises(UsageError, match="no dump at"):
        load_dump(tmp_path / "missing")
    with pytest.raises(UsageError, match="has no namespace 'nope'"):
        load_dump(INCIDENTS / "healthy" / "dump").namespace("nope")


def test_a_list_file_that_is_not_a_list_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "prod").mkdir()
    (tmp_path / "prod" / "pods.json").write_text('{"kind": "Pod"}')
    with pytest.raises(UsageError, match=r"pods\.json is not a Kubernetes list object"):
        load_dump(tmp_path)
    assert parse_stdout('{"kind":"NodeList","items":[{"metadata":{"name":"n"}}]}').nodes
