"""Generated incidents measure the SRE investigator (issue 35, sections 5 and 6).

``python bench/sre_gen.py --seed 20261203 --count 300 [--fresh] [--jobs 2] [--out DIR]
[--keep] [--classes a,b]`` composes incidents (a fault class x a cloud flavour x a runtime
log style x one to three distractors, deterministic for the seed), runs each through the
real runtime (``Client.start("sre")`` then ``execute``, a fresh SQLite file per run, the
tools server a real stdio MCP process), scores each report against the incident's ground
truth the ITBench-AA way and prints per class: incidents, recall (every root-cause entity
named), reason accuracy, right entity and reason, precision, score and false verified
causes; then totals. Writes ``bench/results/sre_gen.json`` (a full run of the default
classes only). ``--fresh`` draws a random seed and prints it.

Each incident's ``truth.json``: ``fault`` (the class), ``healthy``, ``root_causes`` (each
``{"kind", "namespace", "name"}``, workload-level where a pod has an owner, with
``aliases``: other objects naming the same cause, e.g. the Deployment that mounts an unbound
claim), ``reasons`` (accepted tokens, any one suffices, matched case-insensitively in a
cause's ``reason``, detector, text or quote), ``symptoms`` (affected objects, allowed in
an ``explains`` chain), ``flavour``, ``runtime``, ``log_format``, ``distractors``. A report
cause names its entity with ``"entity": {"kind", "namespace", "name"}``; without it the
scorer reads names from the cause's fields and text and counts the incident as
``fallback``. Entities match through the dump's owner references (a Pod of the truth's
Deployment is that Deployment).

``--rescore DIR`` scores the reports kept by ``--out DIR`` (or ``--keep``) again, without
running anything (a whole set is recorded in ``bench/results/sre_gen.json``, under the
``--seed`` given).

``--write DIR`` only writes the incidents (dump/, question.txt, namespace.txt, truth.json,
the layout of ``examples/incidents/``) for people to read.

``--scale`` investigates one dump of 2,000 pods, 20,000 events and 50 pods with 5,000-line
logs holding one fault, and prints CPU seconds (the investigation and its tools server)
and peak memory (goal: under 15 s of CPU); ``--scale --smoke`` a smaller dump (400 pods,
5,000 events) with a generous bound, as the test runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import write_results  # noqa: E402
from bench.sre_gen_lib._compose import FAULTS, generate  # noqa: E402
from bench.sre_gen_lib._run import judge, run_all, table  # noqa: E402
from bench.sre_gen_lib._scale import scale_main  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--fresh", action="store_true", help="a random seed, printed")
    parser.add_argument("--jobs", type=int, default=2, help="investigations at once (default 2)")
    parser.add_argument(
        "--out", type=Path, help="where the incidents and reports go (default: a temp dir)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temp dir of incidents and reports"
    )
    parser.add_argument("--classes", default="", help="only these fault classes, comma-separated")
    parser.add_argument("--write", type=Path, metavar="DIR", help="only write the incidents to DIR")
    parser.add_argument(
        "--rescore", type=Path, metavar="DIR", help="score the kept reports in DIR again"
    )
    parser.add_argument("--scale", action="store_true", help="the 2,000-pod dump's CPU and memory")
    parser.add_argument("--smoke", action="store_true", help="with --scale: the smaller dump")
    args = parser.parse_args(argv)
    if args.scale:
        return scale_main(smoke=args.smoke, seed=args.seed)
    if args.rescore:
        kept = sorted(p for p in args.rescore.iterdir() if (p / "report.json").is_file())
        outcomes = [judge(p, json.loads((p / "report.json").read_text())) for p in kept]
        text, rows = table(outcomes)
        print(f"{len(outcomes)} kept reports in {args.rescore} scored again\n{text}")
        if {o.truth.fault for o in outcomes} == set(FAULTS):  # a whole set: record it
            payload = {"seed": args.seed, "count": len(outcomes), "rescored": True, "classes": rows}
            payload["incidents"] = [o.as_json() for o in outcomes]
            write_results("sre_gen", payload, load_average=os.getloadavg())
        return 0
    seed = random.SystemRandom().randrange(1, 2**31) if args.fresh else args.seed
    classes = [c for c in args.classes.split(",") if c] or None
    unknown = sorted(set(classes or []) - set(FAULTS))
    if unknown:
        parser.error(f"unknown classes {unknown}; known: {', '.join(sorted(FAULTS))}")
    incidents = generate(seed, args.count, classes=classes)
    print(
        f"seed {seed}: {len(incidents)} incidents over {len(classes or FAULTS)} classes", flush=True
    )
    if args.write:
        for inc in incidents:
            inc.write(args.write / inc.name)
        print(f"wrote {len(incidents)} incidents to {args.write}")
        return 0
    tmp = None
    out = args.out
    if out is None:
        tmp = tempfile.mkdtemp(prefix="sre-gen-")
        out = Path(tmp)
    paths = [inc.write(out / inc.name) for inc in incidents]
    outcomes = run_all(paths, args.jobs)
    text, rows = table(outcomes)
    print(f"\nseed {seed}, {len(outcomes)} incidents, --jobs {args.jobs}\n{text}")
    if tmp and not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    elif tmp:
        print(f"incidents and reports kept in {tmp}")
    if classes is None:
        payload = {"seed": seed, "count": len(outcomes), "fresh": args.fresh, "classes": rows}
        payload["incidents"] = [o.as_json() for o in outcomes]
        write_results("sre_gen", payload, load_average=os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
