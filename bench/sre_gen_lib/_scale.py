"""The scale case (issue 35 section 5): one fault in a big dump; the investigation's CPU
seconds (its own process and the tools server it starts) and peak memory.

Full: 2,000 pods, 20,000 events, 50 pods with 5,000-line logs (goal: under 15 s of CPU).
Smoke: 400 pods, 5,000 events, 10 pods with 2,000-line logs (a size at which a quadratic
detector pass took seconds), with a generous bound."""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.sre_gen_lib._cluster import DAY, Cluster
from bench.sre_gen_lib._faults import oomkilled
from bench.sre_gen_lib._flavour import LogStyle, build_nodes
from bench.sre_gen_lib._kit import Ctx, container, running, started_events, terminated
from bench.sre_gen_lib._model import Flavour, Incident, LogFormat, Runtime, Truth
from bench.sre_gen_lib._score import World, score

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True, slots=True)
class Size:
    """How big the dump is."""

    pods: int
    events: int
    long_logs: int
    log_lines: int
    cpu_bound_s: float
    """The bound the run must stay under (the goal for the full size, generous for smoke)."""


FULL = Size(pods=2000, events=20_000, long_logs=50, log_lines=5000, cpu_bound_s=15.0)
SMOKE = Size(pods=400, events=5000, long_logs=10, log_lines=2000, cpu_bound_s=60.0)


def big_incident(size: Size, seed: int) -> Incident:
    """One OOMKilled Deployment among ``size.pods`` healthy pods in five-replica
    Deployments, each pod with its lifecycle events (and a restart three days ago for some),
    padded with routine ReplicaSet events to ``size.events``."""
    rng = random.Random(f"scale:{seed}:{size.pods}")
    k = Cluster(rng=rng, now=datetime(2026, 12, 3, 9, 30, tzinfo=UTC), namespace="prod")
    style = LogStyle(runtime=Runtime.GO, fmt=LogFormat.JSON)
    ctx = Ctx(k=k, flavour=Flavour.EKS, nodes=build_nodes(k, Flavour.EKS, workers=12), style=style)
    fault = oomkilled(ctx)
    pods_made = len(k.items("pods"))
    long_left = size.long_logs
    i = 0
    while pods_made < size.pods:
        app = f"svc-{i:04d}"
        i += 1
        c = container(ctx, app)
        reps = min(5, size.pods - pods_made)
        w = k.deployment(app, [c], replicas=reps, ready=reps, age=30 * DAY, rollout=10 * DAY)
        for _ in range(reps):
            restarted = rng.random() < 0.1
            status = running(ctx, c, since=3 * DAY if restarted else 10 * DAY, restarts=1 if restarted else 0,
                             last=terminated(ctx, "Error", 1, finished=3 * DAY) if restarted else None)  # fmt: skip
            pod = k.pod(w, [status], node=ctx.node(), age=10 * DAY)
            started_events(ctx, pod, c, seen=(10 * DAY, 10 * DAY))
            if long_left > 0:
                long_left -= 1
                k.log(pod, app, style.noise(k, size.log_lines, start=60, span=6 * 3600))
            else:
                k.log(pod, app, style.noise(k, 5, start=60, span=600))
            pods_made += 1
    events = k.items("events")
    rs_list = k.items("replicasets")
    while len(events) < size.events:
        rs = rng.choice(rs_list)
        k.event(rs, "SuccessfulCreate", f"Created pod: {rs['metadata']['name']}-{k.suffix(5)}", type_="Normal",
                seen=(rng.randint(1, 9) * DAY, rng.randint(1, 9) * DAY), source=("replicaset-controller", ""))  # fmt: skip
    truth = Truth(fault="oomkilled", root_causes=fault.roots, reasons=fault.reasons, symptoms=fault.symptoms,
                  flavour=Flavour.EKS, runtime=style.runtime, log_format=style.fmt)  # fmt: skip
    return Incident(name="scale", namespace="prod", question=f"Why is the {fault.subject} deployment restarting?",
                    truth=truth, cluster=k)  # fmt: skip


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from bench.sre_gen_lib._run import investigate
from pathlib import Path
report = investigate(Path({inc!r}))
Path({out!r}).write_text(json.dumps(report, default=str))
"""


def measure(incident_dir: Path) -> tuple[dict[str, Any], float, float, float]:
    """Investigate in a child process; (report, CPU seconds of it and its tools server,
    peak RSS MiB of the largest of them, wall seconds)."""
    out = incident_dir / "report.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    code = _CHILD.format(root=str(ROOT), inc=str(incident_dir), out=str(out))
    subprocess.run([sys.executable, "-c", code], check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report: dict[str, Any] = json.loads(out.read_text())
    return report, cpu, after.ru_maxrss / 1024, wall


def run_scale(size: Size, seed: int, where: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    inc = big_incident(size, seed)
    path = inc.write(where / "scale")
    gen_s = time.perf_counter() - t0
    report, cpu, rss, wall = measure(path)
    world = World.read(path / "dump", inc.namespace)
    s = score({} if "error" in report else report, inc.truth, world)
    summary = str(report.get("summary", report.get("error", "")))
    return {"pods": len(inc.cluster.items("pods")), "events": len(inc.cluster.items("events")),
            "long_logs": size.long_logs, "log_lines": size.log_lines, "generate_s": round(gen_s, 2),
            "cpu_s": round(cpu, 2), "peak_rss_mib": round(rss, 1), "wall_s": round(wall, 2),
            "cpu_bound_s": size.cpu_bound_s, "right_cause": s.recall and s.reason,
            "false_verified": len(s.false_verified), "summary": summary[:300],
            "coverage_exit": (report.get("coverage") or {}).get("exit")}  # fmt: skip


def scale_main(*, smoke: bool, seed: int) -> int:
    from bench._results import write_results

    size = SMOKE if smoke else FULL
    with tempfile.TemporaryDirectory(prefix="sre-gen-scale-") as tmp:
        r = run_scale(size, seed, Path(tmp))
    print(f"{'pods':>6} {'events':>7} {'long logs':>10} {'CPU s':>7} {'bound':>6} {'peak MiB':>9} "
          f"{'wall s':>7} {'right':>6} {'FALSE':>6}")  # fmt: skip
    print(f"{r['pods']:>6} {r['events']:>7} {r['long_logs']:>4}x{r['log_lines']:<5} {r['cpu_s']:>7.2f} "
          f"{r['cpu_bound_s']:>6.0f} {r['peak_rss_mib']:>9.1f} {r['wall_s']:>7.2f} "
          f"{'yes' if r['right_cause'] else 'NO':>6} {r['false_verified']:>6}")  # fmt: skip
    print(f"coverage exit: {r['coverage_exit']}; summary: {r['summary']}")
    if not smoke:
        write_results("sre_gen_scale", r, load_average=os.getloadavg())
    ok = r["cpu_s"] <= size.cpu_bound_s and r["right_cause"]
    return 0 if ok else 1
