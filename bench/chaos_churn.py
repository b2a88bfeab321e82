"""The chaos suite's connection churn (``bash scripts/chaos --pg URL --pg-kill-every S``):
runs executed by ``loopkernel worker`` processes on PostgreSQL while every connection
those workers hold -- the pool's, the ``LISTEN`` ones, whatever statement is in flight --
is terminated every ``S`` seconds (``pg_terminate_backend`` from a side connection). The
workers' URL carries an ``application_name`` of the case's own, and only backends with
that name are terminated: the server, and the database, stay shared with whoever else uses
them.

Each run is compared by digest with an uninterrupted run of its own run id, and judged
like every chaos case (``bench/chaos.py``: exact, lost, doubled or divergent). With
``--quick``: one case of two runs (a speculation and looplab's approval; ``--runs N``: the
first N of the five, the test suite's is a speculation and looplab's baseline); otherwise cases
of five runs until ``--kills`` connection kills have landed or ``--max-seconds`` passed.
Writes ``bench/results/chaos_pg_churn.json`` (``--quick``: the temporary results
directory; ``--out`` anywhere). Exit 0 when every run is exact, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from bench import chaos
from bench._results import write_results

TERMINATE = (
    "SELECT pid, state, pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE application_name = %s AND pid <> pg_backend_pid()"
)


COUNT = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"


class Killer:
    """Terminates every backend named ``name`` once the first is connected, then every
    ``every`` seconds, from a connection of its own; counts the kills, and how many hit a
    backend inside a statement or a transaction (``active``, ``idle in transaction``)."""

    def __init__(self, url: str, name: str, every: float) -> None:
        self.url = url
        self.name = name
        self.every = every
        self.kills = 0
        self.mid_statement = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as admin:
            # The first kill as soon as a worker is connected, then every ``every`` s: short
            # runs on a quiet machine (two end in ~5 s) would otherwise end before the
            # first tick found a worker connected, churned by nothing.
            while not self.stop.wait(0.1):
                if admin.execute(COUNT, (self.name,)).fetchone()[0]:
                    break
            while not self.stop.is_set():
                rows = admin.execute(TERMINATE, (self.name,)).fetchall()
                self.kills += sum(1 for _, _, ok in rows if ok)
                self.mid_statement += sum(1 for _, st, ok in rows if ok and st != "idle")
                if self.stop.wait(self.every):
                    break

    def __enter__(self) -> Killer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def named(url: str, name: str) -> str:
    """``url`` with ``application_name=name``: the backends the killer terminates."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "application_name"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("application_name", name)])))


def _drive(url: str, churned: str, ids: list[str], env: dict[str, str]) -> list[str]:
    """Until every run ended (approving each waiting one once, as its reference was), at
    most ``CASE_TIMEOUT``; the problems, if any. The harness reads on ``url``, the
    approvals go on ``churned``: a user's ``approve`` meets the churn too."""
    approved: set[str] = set()
    deadline = time.monotonic() + chaos.CASE_TIMEOUT
    while True:
        status = asyncio.run(chaos._statuses(url, ids))
        for run_id, st in status.items():
            if st == "waiting" and run_id not in approved:
                chaos.approve_waiting(churned, run_id, env)
                approved.add(run_id)
        if all(s in ("succeeded", "failed", "escalated", "cancelled") for s in status.values()):
            return []
        if time.monotonic() > deadline:
            return [f"runs did not end: {status}"]
        time.sleep(0.3)


def churn_runs(args: argparse.Namespace) -> list[tuple[chaos.Config, str]]:
    """A worker case's runs, or the first ``--runs`` of them (of five)."""
    if not args.runs:
        return chaos.worker_run_ids(args.quick)
    cfgs = chaos.WORKER_RUNS[: args.runs]
    return [(cfg, f"chaos-w{i}-{cfg.slug}") for i, cfg in enumerate(cfgs)]


def churn_case(
    url: str, refs: dict[str, chaos.Reference], *, work: Path, index: int, args: argparse.Namespace
) -> tuple[list[chaos.Result], Killer]:
    """One case: the runs of a worker case, on two workers whose connections are killed
    every ``args.pg_kill_every`` seconds."""
    where = work / f"churn{index:05d}"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    lab = where / "lab"
    runs = churn_runs(args)
    ids = [r for _, r in runs]
    schema = f"churn_{os.getpid()}_{index}"
    base, url = url, chaos.fresh_schema(url, schema)
    name = f"lkchurn_{os.getpid()}_{index}"
    churned = named(url, name)
    asyncio.run(chaos._submit(url, runs))
    env = chaos.base_env(lab)
    t0 = time.monotonic()
    with Killer(url, name, args.pg_kill_every) as killer:
        procs = [chaos.start_worker(churned, f"w{k}", lab, where / "workers.log") for k in range(2)]
        try:
            problems = _drive(url, churned, ids, env)
        finally:
            for p in procs:
                chaos.stop(p)
    seconds = time.monotonic() - t0
    results = [
        _judge(url, cfg, run_id, refs[f"{cfg.name}@{run_id}"], lab, env, problems)
        for cfg, run_id in runs
    ]
    for r in results:
        r.trigger = f"connections killed every {args.pg_kill_every:g} s"
        r.seconds, r.seed, r.case = round(seconds, 2), args.seed, index
    results[0].kills = killer.kills
    if all(r.verdict == "exact" for r in results):
        shutil.rmtree(where, ignore_errors=True)
        chaos.drop_schema(base, schema)
    return results, killer


def _judge(
    url: str,
    cfg: chaos.Config,
    run_id: str,
    ref: chaos.Reference,
    lab: Path,
    env: dict[str, str],
    problems: list[str],
) -> chaos.Result:
    final = chaos.inspect(url, run_id, env) or {}
    got = chaos.Drive(status=final.get("status", ""), digest=final.get("digest", ""))
    got.problems = list(problems)
    eff = chaos.effects(lab if cfg.lab else None, run_id)
    verdict, why = chaos.judge(cfg, ref, got, eff)
    again, irreversible = chaos.resent(eff)
    return chaos.Result(
        app=f"churn:{cfg.name}",
        trigger="",
        verdict=verdict,
        kills=0,
        tool_kills=0,
        refused=0,
        resent=again,
        resent_irreversible=irreversible,
        seconds=0.0,
        steps=[],
        problems=why,
        seed=0,
        case=0,
    )


def main(args: argparse.Namespace, work: Path) -> int:
    t_start = time.monotonic()
    runs = churn_runs(args)
    print(
        f"chaos churn: seed {args.seed}, PostgreSQL connections killed every "
        f"{args.pg_kill_every:g} s, in {work}",
        flush=True,
    )
    with ThreadPoolExecutor(args.jobs) as pool:
        refs = dict(
            zip(
                [f"{c.name}@{r}" for c, r in runs],
                pool.map(lambda w: chaos.reference(w[0], work, w[1]), runs),
                strict=True,
            )
        )
    for key, ref in refs.items():
        print(f"  reference {key}: {ref.status}, {ref.seconds:.1f} s, digest {ref.digest[:12]}")
    results: list[chaos.Result] = []
    kills = mid = index = 0
    t_cases = time.monotonic()
    while index == 0 or (
        not args.quick and kills < args.kills and time.monotonic() - t_cases < args.max_seconds
    ):
        got, killer = churn_case(args.pg, refs, work=work, index=index, args=args)
        index += 1
        kills, mid = kills + killer.kills, mid + killer.mid_statement
        results += got
        for r in got:
            mark = "" if r.verdict == "exact" else f"  <-- {r.verdict}: {r.problems}"
            print(f"  [{kills:>4}] case {r.case:>3} {r.app:<34} {r.verdict}{mark}", flush=True)
    rows = chaos.table(results)
    print()
    chaos.print_table(rows)
    bad = sum(rows["total"][k] for k in ("lost", "doubled", "divergent"))
    elapsed = time.monotonic() - t_start
    print(
        f"\n{kills} connections killed ({mid} inside a statement or transaction) in "
        f"{len(results)} runs, {elapsed:.0f} s; "
        f"{'nothing lost, doubled or divergent' if not bad else f'{bad} runs NOT exact'}"
    )
    payload: dict[str, Any] = {
        "command": f"bash scripts/chaos --pg URL --pg-kill-every {args.pg_kill_every:g}"
        + (" --quick" if args.quick else "")
        + (f" --runs {args.runs}" if args.runs else ""),
        "seed": args.seed,
        "every": args.pg_kill_every,
        "kills": kills,
        "mid_statement": mid,
        "runs": len(results),
        "seconds": round(elapsed, 1),
        "table": rows,
        "not_exact": [vars(r) for r in results if r.verdict != "exact"],
        "cases": [vars(r) for r in results],
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")
    else:
        write_results("chaos_pg_churn", payload, quick=args.quick, load=os.getloadavg())
    return 1 if bad else 0
