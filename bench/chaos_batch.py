"""The chaos suite's many-runs-per-process case: ``kill -9`` of a process whose runs share
their commits (SQLite group commit), then resume, and each run compared with a run of its
own id executed one at a time.

    python -m bench.chaos_batch [--quick] [--seed S] [--runs R] [--steps N] [--cases C]
    bash scripts/chaos --batch [--quick] ...        # the same, from the chaos suite

One process executes ``--runs`` chain runs at once on one SQLite file (FULL): their steps
queue behind the writer thread and commit in groups (``store/_writer.py``). Each case
kills it once (and each resume again with chance ``--again``):

::

    batch_written    LOOPKERNEL_CRASH_AT=batch_written:<n>: a group's statements ran, its
                     COMMIT did not (nothing of the group is durable)
    batch_committed  LOOPKERNEL_CRASH_AT=batch_committed:<n>: the group is durable, no run
                     has been answered yet
    patch_committed  the kernel's own point, after a run's step was answered
    time             SIGKILL from outside at a random moment of the run

The runs are then resumed in a new process until every one has ended. A run is *exact* if
its state digest and journal length are those of its reference (the same run id executed
alone, one run after another, so that no commit is ever shared); *lost* if it did not
succeed; *doubled* if its journal is longer than the reference's (a step journaled twice);
*divergent* otherwise. Writes ``bench/results/chaos_batch.json`` (``--quick``: the quick
results directory; ``--out`` anywhere). Exit 0 when every run of every case is exact.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._chains import ChainPlanner, echo  # noqa: E402
from bench._results import write_results  # noqa: E402

POINTS = ("batch_written", "batch_committed", "patch_committed", "time")


def run_ids(runs: int) -> list[str]:
    return [f"batch{i:04d}" for i in range(runs)]


async def execute(db: str, runs: int, steps: int, *, together: bool) -> dict[str, int]:
    """Start the runs not yet in ``db`` and execute (resume) all of them: at once, or one
    after another (the reference). The writer's commit counts."""
    from loopkernel import Kernel, SQLiteStore
    from loopkernel.errors import RunNotFound
    from loopkernel.ids import RunId

    store = SQLiteStore(db)
    await store.open()
    try:
        kernel = Kernel(store, ChainPlanner(steps), {"echo": echo})
        for rid in run_ids(runs):
            try:
                await store.get_run(RunId(rid))
            except RunNotFound:
                await kernel.start(app="chaos-batch", run_id=rid, max_events=4 * steps + 10)
        if together:
            await asyncio.gather(*(kernel.run(rid) for rid in run_ids(runs)))
        else:
            for rid in run_ids(runs):
                await kernel.run(rid)
        stats = store.commit_stats()
        return {"writes": stats.writes, "commits": stats.commits, "grouped": stats.grouped_writes}
    finally:
        await store.close()


async def states(db: str, runs: int) -> dict[str, tuple[str, int, str]]:
    """Each run's status, last seq and state digest."""
    from loopkernel import SQLiteStore
    from loopkernel.errors import RunNotFound
    from loopkernel.ids import RunId
    from loopkernel.store import digest_of

    store = SQLiteStore(db, create=False)
    await store.open()
    out: dict[str, tuple[str, int, str]] = {}
    try:
        for rid in run_ids(runs):
            try:
                info = await store.get_run(RunId(rid))
            except RunNotFound:
                out[rid] = ("missing", 0, "")
                continue
            digest = digest_of(await store.dump(RunId(rid)))
            out[rid] = (info.status.value, info.last_seq, digest)
    finally:
        await store.close()
    return out


def launch(
    db: Path, args: argparse.Namespace, crash_at: str | None, kill_after: float | None
) -> int:
    """One child process executing every run at once; its exit status (-9: killed)."""
    env = {k: v for k, v in os.environ.items() if k != "LOOPKERNEL_CRASH_AT"}
    if crash_at:
        env["LOOPKERNEL_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "bench.chaos_batch", "--child", str(db)]
    cmd += ["--runs", str(args.runs), "--steps", str(args.steps)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.kill()
    return proc.wait(timeout=300)


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    trigger: str
    """What killed the first process (``POINTS``), with its count."""
    kills: int
    """SIGKILLs that landed, the resumes' included."""
    exact: int
    lost: int
    doubled: int
    divergent: int


def crash_spec(
    rng: random.Random, point: str, args: argparse.Namespace
) -> tuple[str | None, float | None]:
    """``LOOPKERNEL_CRASH_AT`` and the outside kill's delay for a ``point``."""
    total = args.runs * args.steps
    if point == "time":
        return None, rng.uniform(0.5, 0.5 + args.seconds)
    if point == "patch_committed":
        return f"{point}:{rng.randint(1, total)}", None
    # A group holds at most one step of each run: at least ``steps`` groups in all.
    return f"{point}:{rng.randint(1, args.steps)}", None


def run_case(
    rng: random.Random,
    point: str,
    args: argparse.Namespace,
    work: Path,
    ref: dict[str, tuple[str, int, str]],
) -> Case:
    db = work / f"case-{len(list(work.glob('case-*.db')))}.db"
    crash_at, after = crash_spec(rng, point, args)
    kills = int(launch(db, args, crash_at, after) == -9)
    for _ in range(args.max_resumes):
        again = rng.random() < args.again
        spec = f"batch_committed:{rng.randint(1, 20)}" if again else None
        status = launch(db, args, spec, None)
        kills += status == -9
        if status == 0:
            break
    got = asyncio.run(states(str(db), args.runs))
    verdicts: Counter[str] = Counter()
    for rid, (status, seq, digest) in got.items():
        want_status, want_seq, want_digest = ref[rid]
        if status != want_status:
            verdicts["lost"] += 1
        elif seq > want_seq:
            verdicts["doubled"] += 1
        elif (seq, digest) != (want_seq, want_digest):
            verdicts["divergent"] += 1
        else:
            verdicts["exact"] += 1
    trigger = crash_at or f"time:{after:.2f}s"
    return Case(
        trigger=trigger,
        kills=kills,
        exact=verdicts["exact"],
        lost=verdicts["lost"],
        doubled=verdicts["doubled"],
        divergent=verdicts["divergent"],
    )


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.chaos_batch", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="16 runs of 20 steps, 8 cases")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--runs", type=int, default=None, help="runs in the process (64; quick 16)")
    p.add_argument("--steps", type=int, default=None, help="steps a run (100; quick 20)")
    p.add_argument("--cases", type=int, default=None, help="cases (24; quick 8)")
    p.add_argument("--again", type=float, default=0.3, help="chance that a resume is killed too")
    p.add_argument("--max-resumes", type=int, default=8)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.runs = args.runs or (16 if args.quick else 64)
    args.steps = args.steps or (20 if args.quick else 100)
    args.cases = args.cases or (8 if args.quick else 24)
    args.seed = args.seed if args.seed is not None else int(time.time()) % 100000
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        asyncio.run(execute(args.child, args.runs, args.steps, together=True))
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="lk-chaos-batch-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    ref_db = work / "reference.db"
    ref_db.unlink(missing_ok=True)
    t0 = time.monotonic()
    ref_stats = asyncio.run(execute(str(ref_db), args.runs, args.steps, together=False))
    args.seconds = time.monotonic() - t0
    ref = asyncio.run(states(str(ref_db), args.runs))
    print(
        f"chaos batch: seed {args.seed}, {args.runs} runs x {args.steps} steps a process, "
        f"{args.cases} cases; reference one run at a time: {ref_stats['grouped']} writes grouped",
        flush=True,
    )
    cases = []
    for i in range(args.cases):
        case = run_case(rng, POINTS[i % len(POINTS)], args, work, ref)
        cases.append(case)
        print(
            f"  {case.trigger:24} kills {case.kills}: exact {case.exact}, lost {case.lost}, "
            f"doubled {case.doubled}, divergent {case.divergent}",
            flush=True,
        )
    totals = {
        k: sum(getattr(c, k) for c in cases)
        for k in ("kills", "exact", "lost", "doubled", "divergent")
    }
    print(f"\ntotal: {json.dumps(totals)}")
    payload = {
        "seed": args.seed,
        "runs_per_process": args.runs,
        "steps": args.steps,
        "reference_grouped_writes": ref_stats["grouped"],
        "totals": totals,
        "cases": [asdict(c) for c in cases],
        "command": " ".join(["python -m bench.chaos_batch", *(argv or sys.argv[1:])]),
    }
    if args.out:
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
    else:
        write_results("chaos_batch", payload, quick=args.quick, load_average=os.getloadavg())
    bad = totals["lost"] + totals["doubled"] + totals["divergent"]
    return 0 if bad == 0 and totals["exact"] == args.runs * args.cases else 1


if __name__ == "__main__":
    sys.exit(main())
