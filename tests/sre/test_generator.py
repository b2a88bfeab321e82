"""The incident generator and scorer of ``bench/sre_gen.py`` (issue 35, sections 5-6): the
generator is deterministic per seed, its objects hang together (owners, uids, the ground
truth's entities), its dumps are read by the investigator through the real runtime, the
scorer marks reports the ITBench-AA way, and the scale smoke case stays fast and right."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench/ lives in the checkout, not the package

from bench.sre_gen_lib._compose import CLASSES, FAULTS, compose, generate  # noqa: E402
from bench.sre_gen_lib._faults_unfollowed import UNFOLLOWED  # noqa: E402
from bench.sre_gen_lib._model import Entity, Truth  # noqa: E402
from bench.sre_gen_lib._run import investigate  # noqa: E402
from bench.sre_gen_lib._scale import SMOKE, run_scale  # noqa: E402
from bench.sre_gen_lib._score import World, score  # noqa: E402


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_the_same_seed_writes_the_same_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    for run in ("a", "b"):
        for inc in generate(7, 6):
            inc.write(tmp_path / run / inc.name)
    for inc in generate(8, 6):
        inc.write(tmp_path / "c" / inc.name)
    a, b, c = (_digest(tmp_path / r) for r in "abc")
    assert a == b
    assert len(a) > 50
    assert a != c


def _load(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["items"])


@pytest.mark.parametrize("fault", sorted(CLASSES))
def test_every_class_hangs_together(tmp_path: Path, fault: str) -> None:
    """Owner references name live objects by uid (pods -> ReplicaSets -> Deployments), the
    truth's root causes exist in the dump, and a healthy control has none."""
    inc = compose(20261203, 0, fault)
    out = inc.write(tmp_path / "inc")
    dump = out / "dump" / inc.namespace
    objs = {f.stem: _load(f) for f in dump.glob("*.json")}
    uids = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["uid"]
        for items in objs.values()
        for o in items
    }
    for items in objs.values():
        for o in items:
            for ref in o["metadata"].get("ownerReferences", []):
                assert uids.get((ref["kind"], ref["name"])) == ref["uid"], (
                    o["metadata"]["name"],
                    ref,
                )
    truth = Truth.from_json(json.loads((out / "truth.json").read_text()))
    assert truth.fault == fault
    assert truth.healthy == (fault == "healthy")
    nodes = {n["metadata"]["name"] for n in _load(out / "dump" / "nodes.json")}
    for r in truth.root_causes:
        e = r.entity
        assert (e.name in nodes) if e.kind == "Node" else (e.kind, e.name) in uids, e
    assert truth.healthy or truth.reasons
    assert truth.distractors
    assert (out / "question.txt").read_text().strip()
    for pod in objs["pods"]:  # every pod has its logs.txt, as kubectl writes it
        assert (dump / pod["metadata"]["name"] / "logs.txt").is_file()


def _world(tmp_path: Path, fault: str) -> tuple[Truth, World, dict[str, Any]]:
    inc = compose(3, 1, fault)
    out = inc.write(tmp_path / fault)
    world = World.read(out / "dump", inc.namespace)
    pods = _load(out / "dump" / inc.namespace / "pods.json")
    return inc.truth, world, {"ns": inc.namespace, "pods": pods}


def _cause(kind: str, ns: str, name: str, reason: str) -> dict[str, Any]:
    return {
        "entity": {"kind": kind, "namespace": ns, "name": name},
        "reason": reason,
        "text": reason,
    }


def test_the_scorer_resolves_owners_and_counts_false_verified_causes(tmp_path: Path) -> None:
    truth, world, d = _world(tmp_path, "oomkilled")
    ns, dep = d["ns"], truth.root_causes[0].entity.name
    pod = next(
        p["metadata"]["name"] for p in d["pods"] if p["metadata"]["name"].startswith(dep + "-")
    )
    other = next(
        p["metadata"]["name"] for p in d["pods"] if not p["metadata"]["name"].startswith(dep + "-")
    )

    right = score({"verified_causes": [_cause("Pod", ns, pod, "OOMKilled")]}, truth, world)
    assert (right.recall, right.reason, right.score, right.fallback) == (True, True, 1.0, False)

    wrong_reason = score(
        {"verified_causes": [_cause("Deployment", ns, dep, "Error")]}, truth, world
    )
    assert wrong_reason.recall and not wrong_reason.reason

    both = [_cause("Deployment", ns, dep, "OOMKilled"), _cause("Pod", ns, other, "OOMKilled")]
    noisy = score({"verified_causes": both}, truth, world)
    assert noisy.score == 0.5
    assert len(noisy.false_verified) == 1

    via_symptom = [
        _cause("Deployment", ns, dep, "OOMKilled"),
        _cause("Service", ns, dep, "no endpoints"),
    ]
    symptomatic = score({"suspected_causes": via_symptom}, truth, world)
    assert symptomatic.symptom_causes == 1 and symptomatic.score == 0.5

    missed = score({"suspected_causes": [_cause("Pod", ns, other, "OOMKilled")]}, truth, world)
    assert missed.score == 0.0 and not missed.recall and not missed.false_verified

    legacy = {"detector": "oomkilled", "pod": pod, "text": f"Container of pod {pod} was OOMKilled"}
    text_only = score({"verified_causes": [legacy]}, truth, world)
    assert text_only.fallback and text_only.recall and text_only.reason


def test_a_healthy_control_with_a_verified_cause_is_a_false_verified(tmp_path: Path) -> None:
    truth, world, d = _world(tmp_path, "healthy")
    pod = d["pods"][0]["metadata"]["name"]
    assert score({}, truth, world).score == 1.0
    bad = score({"verified_causes": [_cause("Pod", d["ns"], pod, "Error")]}, truth, world)
    assert bad.score == 0.0 and len(bad.false_verified) == 1


def test_aliases_count_as_the_root_cause(tmp_path: Path) -> None:
    truth, world, _ = _world(tmp_path, "pvc_unbound")
    claim = truth.root_causes[0].entity
    assert claim.kind == "PersistentVolumeClaim"
    dep = truth.root_causes[0].aliases[0]
    for e in (claim, dep):
        s = score(
            {"verified_causes": [_cause(e.kind, e.namespace, e.name, "FailedBinding")]},
            truth,
            world,
        )
        assert s.score == 1.0, e


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["oomkilled", "healthy"])
def test_generated_dumps_are_read_by_the_investigator(tmp_path: Path, fault: str) -> None:
    """Through the real runtime (Client, a stdio MCP tools server): the run succeeds, every
    tool answered, and the evidence names the pods the dump holds."""
    inc = compose(11, 2, fault)
    out = inc.write(tmp_path / "inc")
    report = investigate(out)
    assert "error" not in report, report.get("error")
    assert report["coverage"]["failed_tools"] == []
    evidence = json.dumps(report["evidence"])
    subject = json.loads((out / "truth.json").read_text())
    named = [e["name"] for e in subject["root_causes"]] or [
        p["metadata"]["name"] for p in inc.cluster.items("pods")
    ]
    assert any(n in evidence for n in named)
    assert isinstance(Entity.of({"kind": "Pod", "name": "x"}), Entity)


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(UNFOLLOWED))
def test_an_unfollowed_cause_is_in_the_dump_and_the_rules_miss_it(
    tmp_path: Path, fault: str
) -> None:
    """The family the model bench needs (issue 28): the evidence of the root is in the dump,
    on the root object itself, but no detector follows it, so the rules score 0; and it is
    out of the default rotation, so a seed's incidents stay what they were."""
    assert fault not in FAULTS and not any(i.truth.fault == fault for i in generate(5, 60))
    inc = compose(7, 0, fault)
    out = inc.write(tmp_path / "inc")
    (cause,) = inc.truth.root_causes
    events = _load(out / "dump" / inc.namespace / "events.json")
    about = (cause.entity.kind, cause.entity.name)
    own = [
        e
        for e in events
        if (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == about
        and e["type"] == "Warning"
    ]
    assert own and any(r in own[0]["message"] or r == own[0]["reason"] for r in inc.truth.reasons)
    report = investigate(out)
    assert "error" not in report, report.get("error")
    got = score(report, inc.truth, World.read(out / "dump", inc.namespace))
    assert not got.recall and got.score == 0.0, got


@pytest.mark.slow
def test_scale_smoke_is_fast_and_right(tmp_path: Path) -> None:
    """``bench/sre_gen.py --scale --smoke``: 400 pods, 5,000 events, ten 2,000-line logs, one
    OOMKilled Deployment: the right cause, nothing false verified, CPU under the bound."""
    r = run_scale(SMOKE, 20261203, tmp_path)
    assert r["pods"] == SMOKE.pods and r["events"] >= SMOKE.events
    assert r["right_cause"], r["summary"]
    assert r["false_verified"] == 0
    assert r["cpu_s"] < SMOKE.cpu_bound_s


def test_write_lays_incidents_out_as_the_examples_and_rescore_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--write DIR``: dump/, question.txt, namespace.txt, truth.json per incident;
    ``--rescore DIR`` scores the reports kept there (one stands in for a run's)."""
    import importlib

    cli = importlib.import_module("bench.sre_gen")
    assert cli.main(["--seed", "5", "--count", "3", "--write", str(tmp_path)]) == 0
    dirs = sorted(tmp_path.iterdir())
    assert len(dirs) == 3
    for d in dirs:
        assert {p.name for p in d.iterdir()} == {
            "dump",
            "question.txt",
            "namespace.txt",
            "truth.json",
        }
    (dirs[0] / "report.json").write_text(json.dumps({"verified_causes": []}))
    assert cli.main(["--rescore", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 kept reports" in out and "TOTAL" in out
