"""SRE investigator at size: one fault in a large generated dump, CPU and peak memory.

``python bench/sre_scale.py [--pods 2000 --events 20000 --log-pods 50 --log-lines 5000]``
writes a ``kubectl cluster-info dump`` directory with that many pods (healthy Deployments'
replicas, ``Normal`` events and old restarts as noise), one Deployment whose pods are
OOMKilled, and investigates it end to end as ``bench/sre.py`` does (a real stdio MCP tools
server). Prints wall time, CPU seconds (this process and the tools server), peak RSS of
each, and whether the report verified the fault; writes ``bench/results/sre_scale.json``.

``--smoke`` runs a smaller dump (400 pods, 5,000 events: the size at which the quadratic
detectors of 2026-12-02 took seconds) and exits 1 when the CPU exceeds a generous bound
(``SMOKE_CPU_S``), so the quadratic case cannot come back unseen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import write_results  # noqa: E402
from bench.sre import one  # noqa: E402

SMOKE_CPU_S = 60.0
"""The smoke size's bound: generous (the loaded 2-core machine), far below a quadratic pass."""
NS = "shop"
T0 = "2026-12-01T10:00:00Z"
NOW = "2026-12-01T12:00:00Z"


def _pod(name: str, app: str, rs_hash: str, *, oom: bool, old_restart: bool) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": app,
        "image": f"registry.example.com/{app}:1.4.2",
        "ready": not oom,
        "restartCount": 7 if oom else (1 if old_restart else 0),
        "state": {"waiting": {"reason": "CrashLoopBackOff"}}
        if oom
        else {"running": {"startedAt": T0}},
    }
    if oom:
        status["lastState"] = {
            "terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": NOW}
        }
    elif old_restart:
        status["lastState"] = {
            "terminated": {"reason": "Error", "exitCode": 1, "finishedAt": "2026-11-28T03:00:00Z"}
        }
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "creationTimestamp": T0,
            "labels": {"app": app, "pod-template-hash": rs_hash},
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": f"{app}-{rs_hash}", "controller": True}
            ],
        },
        "spec": {
            "nodeName": f"node-{hash(name) % 20}",
            "containers": [
                {
                    "name": app,
                    "image": status["image"],
                    "resources": {"limits": {"memory": "256Mi"}},
                }
            ],
        },
        "status": {"phase": "Running", "containerStatuses": [status]},
    }


def generate(root: Path, *, pods: int, events: int, log_pods: int, log_lines: int) -> None:
    apps = max(1, pods // 20)
    items, rs, deps, evs = [], [], [], []
    for a in range(apps):
        app = "payments" if a == 0 else f"svc-{a:03d}"
        h = f"{a:05x}"[-5:]
        deps.append(
            {
                "metadata": {"name": app, "namespace": NS, "uid": f"dep-{app}"},
                "spec": {"replicas": 20},
                "status": {"readyReplicas": 20},
            }
        )
        rs.append(
            {
                "metadata": {
                    "name": f"{app}-{h}",
                    "namespace": NS,
                    "ownerReferences": [{"kind": "Deployment", "name": app, "controller": True}],
                }
            }
        )
        for i in range(20):
            name = f"{app}-{h}-p{i:03d}"
            items.append(_pod(name, app, h, oom=a == 0 and i < 2, old_restart=i % 7 == 3))
    items = items[:pods]
    for n in range(events):
        pod = items[n % len(items)]["metadata"]
        evs.append(
            {
                "metadata": {"name": f"ev-{n}", "namespace": NS},
                "involvedObject": {"kind": "Pod", "name": pod["name"], "uid": pod["uid"]},
                "reason": "Pulled",
                "type": "Normal",
                "count": 1,
                "lastTimestamp": T0,
                "message": f'Container image "{pod["name"]}" already present on machine',
            }
        )
    d = root / NS
    d.mkdir(parents=True)
    for stem, objs in (
        ("pods", items),
        ("events", evs),
        ("deployments", deps),
        ("replicasets", rs),
        ("services", []),
        ("daemonsets", []),
        ("replication-controllers", []),
    ):
        (d / f"{stem}.json").write_text(json.dumps({"kind": "List", "items": objs}))
    nodes = [
        {
            "metadata": {"name": f"node-{i}"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "capacity": {"memory": "64Gi"},
            },
        }
        for i in range(20)
    ]
    (root / "nodes.json").write_text(json.dumps({"kind": "List", "items": nodes}))
    for p in items[:log_pods]:
        name, c = p["metadata"]["name"], p["spec"]["containers"][0]["name"]
        lines = "\n".join(
            f'{{"level":"info","msg":"request served","path":"/api/{k}","status":200}}'
            for k in range(log_lines)
        )
        pd = d / name
        pd.mkdir()
        (pd / "logs.txt").write_text(
            f"==== START logs for container {c} of pod {NS}/{name} ====\n{lines}\n"
            f"==== END logs for container {c} of pod {NS}/{name} ====\n"
        )


def _cpu() -> tuple[float, float, int, int]:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return (me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, me.ru_maxrss, kids.ru_maxrss)


def run(*, pods: int, events: int, log_pods: int, log_lines: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        t0 = time.perf_counter()
        generate(dump, pods=pods, events=events, log_pods=log_pods, log_lines=log_lines)
        gen_s = time.perf_counter() - t0
        before = _cpu()
        params = {
            "question": "Why is the payments deployment restarting?",
            "dump": str(dump),
            "namespace": NS,
        }
        wall, report = asyncio.run(one(Path(tmp) / "runs.db", params))
        after = _cpu()
    top = report["verified_causes"][0] if report["verified_causes"] else {}
    return {
        "pods": pods,
        "events": events,
        "log_pods": log_pods,
        "log_lines": log_lines,
        "generate_s": round(gen_s, 2),
        "wall_s": round(wall, 2),
        "cpu_self_s": round(after[0] - before[0], 2),
        "cpu_tools_s": round(after[1] - before[1], 2),
        "peak_rss_self_mib": round(after[2] / 1024, 1),
        "peak_rss_tools_mib": round(after[3] / 1024, 1),
        "verified": top.get("detector"),
        "entity": top.get("entity"),
        "complete": report["coverage"].get("complete"),
        "summary": report["summary"][:160],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--log-pods", type=int, default=50)
    parser.add_argument("--log-lines", type=int, default=5000)
    parser.add_argument("--smoke", action="store_true", help="400 pods, 5,000 events; bound CPU")
    args = parser.parse_args()
    if args.smoke:
        args.pods, args.events, args.log_pods, args.log_lines = 400, 5000, 10, 1000
    row = run(pods=args.pods, events=args.events, log_pods=args.log_pods, log_lines=args.log_lines)
    cpu = row["cpu_self_s"] + row["cpu_tools_s"]
    print(
        f"{'pods':>6} {'events':>7} {'logs':>9} {'wall s':>7} {'cpu s':>6} "
        f"{'rss MiB (run/tools)':>20}  verified"
    )
    print(
        f"{row['pods']:>6} {row['events']:>7} {row['log_pods']}x{row['log_lines']:<5} "
        f"{row['wall_s']:>7} {cpu:>6.2f} "
        f"{row['peak_rss_self_mib']:>9}/{row['peak_rss_tools_mib']:<9}"
        f"  {row['verified']} {row['entity']}"
    )
    print(row["summary"])
    if args.smoke:
        ok = cpu < SMOKE_CPU_S and row["verified"] == "oomkilled"
        print(
            f"smoke: cpu {cpu:.1f} s (bound {SMOKE_CPU_S} s), verified {row['verified']}: "
            f"{'ok' if ok else 'FAILED'}"
        )
        return 0 if ok else 1
    write_results("sre_scale", {"run": row})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
