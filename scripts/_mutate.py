"""Hand-written mutations of LoopKernel's durability-critical code, each run against the
tests that should catch it. Run with ``bash scripts/mutate`` (``--list``, ``--only NAME``).

A mutation is a short exact snippet of one source file and its replacement: the change a
regression would make. For each one the file is patched, the named test files run
(``pytest -x``), and the file is restored (also on Ctrl-C). A mutation is *killed* when a
test fails, *survives* when they all pass. A snippet that is no longer found exactly once
makes the mutation *stale*: it is reported loudly and the script exits 2, so that an edit
of the core cannot silently retire a mutation.

Exit status: 0 when every mutation was killed, 1 when one survived, 2 when one is stale.
Outside CI on purpose (minutes of subprocess crashes), like the benchmarks.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
BACKUP = ROOT / ".mutate-backup"
"""The original of the file being mutated, until it is restored: a run killed with -9
leaves it behind, and the next run puts it back first."""


@dataclass(frozen=True, kw_only=True)
class Mutation:
    name: str
    guards: str
    """What the mutated code is there for (the README's promise it would break)."""
    file: str
    """Relative to ``src/``."""
    old: str
    new: str
    tests: tuple[str, ...]
    """The test files (or node ids) to run; ``-k`` expressions go after a ``-k`` item."""


CRASH = "tests/crash/test_crash_recovery.py"
LOOPLAB_CRASH = "tests/looplab/test_crash.py"
EVICT = "tests/executor/test_evict.py"
GROUP = "tests/store/test_group_commit.py"
NOT_THE_KEY_FORMAT = "not its_key_reaches_the_tool"
"""Leave out the test that reads the key's text: a key mutation must be caught by what
it breaks (a duplicate effect, a refused replay), not by its spelling."""

_PATCH_KEY = "created_at  {t.real} NOT NULL,\n            PRIMARY KEY (run_id, event_seq)"
"""The patches table's key, written once for both databases (``_schema``): each store's
mutation is the same text, killed by that store's conformance tests."""
_PATCH_KEY_LOOSE = _PATCH_KEY.replace("event_seq)", "event_seq, created_at)")

MUTATIONS = [
    Mutation(
        name="plan-unplanned-on-resume",
        guards="exactly-once planning: an event journaled before a crash is planned on resume",
        file="loopkernel/executor/_kernel.py",
        old="await self._plan(list(loaded.unplanned))",
        new="await self._plan([])",
        tests=(CRASH,),
    ),
    Mutation(
        name="patch-key-sqlite",
        guards="exactly-once planning: the unique (run_id, event_seq) key of patches (SQLite)",
        file="loopkernel/store/_schema.py",
        old=_PATCH_KEY,
        new=_PATCH_KEY_LOOSE,
        tests=("tests/store/test_conformance.py", "-k", "sqlite"),
    ),
    Mutation(
        name="patch-key-postgres",
        guards="exactly-once planning: the unique (run_id, event_seq) key of patches (PostgreSQL)",
        file="loopkernel/store/_schema.py",
        old=_PATCH_KEY,
        new=_PATCH_KEY_LOOSE,
        tests=("tests/store/test_conformance.py", "-k", "postgres"),
    ),
    Mutation(
        name="recover-cancelled-too",
        guards="recovery: only tasks still running after the recovery patches go back to ready",
        file="loopkernel/executor/_kernel.py",
        old="            if self.state.tasks[tid].state is TaskState.RUNNING\n",
        new="",
        tests=(CRASH,),
    ),
    Mutation(
        name="recover-nothing",
        guards="recovery: a task a crash left running runs again (at-least-once)",
        file="loopkernel/executor/_kernel.py",
        old="await self._recover_running(crashed)",
        new="None",
        tests=(CRASH,),
    ),
    Mutation(
        name="fence-epoch",
        guards="fenced writes: a writer whose lease epoch is over cannot commit",
        file="loopkernel/store/_lease.py",
        old="if current != self.epoch:",
        new="if False:",
        tests=("tests/store/test_leases.py",),
    ),
    Mutation(
        name="fence-sqlite-unchecked",
        guards="fenced writes: every write of a fenced SQLite view checks the epoch",
        file="loopkernel/store/_engine.py",
        old="fence.check_epoch(row[1], row[2])",
        new="pass",
        tests=("tests/store/test_leases.py", "-k", "sqlite"),
    ),
    Mutation(
        name="fence-postgres-unchecked",
        guards="fenced writes: every write of a fenced PostgreSQL view checks the epoch",
        file="loopkernel/store/_engine.py",
        old="fence.check_epoch(row[1], row[2])",
        new="pass",
        tests=("tests/store/test_leases.py", "-k", "postgres"),
    ),
    Mutation(
        name="fence-postgres-step",
        guards="fenced writes: the PostgreSQL step function checks the lease epoch",
        file="loopkernel/store/_schema.py",
        old="IF p_epoch IS NOT NULL AND v_epoch IS DISTINCT FROM p_epoch THEN",
        new="IF false THEN",
        tests=("tests/store/test_step.py", "tests/store/test_leases.py", "-k", "postgres"),
    ),
    Mutation(
        name="step-rebase-postgres",
        guards="exactly-once planning: a PostgreSQL step after another process's events "
        "moves its patches and done_seqs with its events",
        file="loopkernel/store/_schema.py",
        old="v_moved := (v_events -> 0 ->> 'seq')::bigint <> v_top + 1;",
        new="v_moved := false;",
        tests=("tests/store/test_step.py", "-k", "postgres"),
    ),
    Mutation(
        name="tool-replay-done",
        guards="journal replay: a journaled tool result is returned without a call",
        file="loopkernel/_effects.py",
        old='if prior.status == "done":',
        new="if False:",
        tests=("tests/tools/test_journal.py",),
    ),
    Mutation(
        name="tool-replay-failed",
        guards="journal replay: a journaled tool error is raised again without a call",
        file="loopkernel/_effects.py",
        old='if prior.status == "failed":',
        new="if False:",
        tests=("tests/tools/test_journal.py",),
    ),
    Mutation(
        name="idem-key-per-process",
        guards="the idempotency key is the same in every execution (run/task/index)",
        file="loopkernel/tools/_layer.py",
        old='return f"{run_id}/{task_id}/{index}"',
        new="return f\"{run_id}/{task_id}/{index}/{__import__('os').getpid()}\"",
        tests=("tests/tools/test_journal.py", LOOPLAB_CRASH, "-k", NOT_THE_KEY_FORMAT),
    ),
    Mutation(
        name="idem-key-no-index",
        guards="the idempotency key tells a task's calls apart (call index)",
        file="loopkernel/tools/_layer.py",
        old='return f"{run_id}/{task_id}/{index}"',
        new='return f"{run_id}/{task_id}"',
        tests=("tests/tools/test_journal.py", LOOPLAB_CRASH, "-k", NOT_THE_KEY_FORMAT),
    ),
    Mutation(
        name="cycle-self-loops-only",
        guards="the cycle check: a patch that would close a cycle is rejected whole",
        file="loopkernel/graph/_state.py",
        old="if src == dst or reaches(dst, src):",
        new="if src == dst:",
        tests=("tests/graph",),
    ),
    Mutation(
        name="checkpoint-at-waiting",
        guards="quiet-point checkpoint: a waiting run is whole in the .db file alone",
        file="loopkernel/store/_engine.py",
        old="        if status is RunStatus.WAITING:\n            await self._call_quiet()",
        new="        if status is RunStatus.WAITING:\n            pass",
        tests=(CRASH, "-k", "db_file"),
    ),
    Mutation(
        name="checkpoint-at-finish",
        guards="quiet-point checkpoint: a finished run is whole in the .db file alone",
        file="loopkernel/store/_engine.py",
        old="        if delta.finish is not None:\n            await self._call_quiet()",
        new="        if delta.finish is not None:\n            pass",
        tests=(CRASH, "-k", "db_file"),
    ),
    Mutation(
        name="trace-lost",
        guards="the crash tests' witness: a trace that lost its start lines fails them",
        file="loopkernel/testing/_trace.py",
        old='append_line(path, f"{what} {task_id}\\n".encode())',
        new="pass",
        tests=(CRASH,),
    ),
    Mutation(
        name="runaway-off-by-one",
        guards="the runaway guard stops a run at exactly max_events",
        file="loopkernel/executor/_kernel.py",
        old="if event.seq > self.max_events:",
        new="if event.seq > self.max_events + 1:",
        tests=("tests/executor/test_kernel.py", "-k", "runaway"),
    ),
    Mutation(
        name="runaway-off",
        guards="the runaway guard exists",
        file="loopkernel/executor/_kernel.py",
        old="if event.seq > self.max_events:",
        new="if False:",
        # Without the guard the test's run never ends: a short per-test timeout kills it.
        tests=("tests/executor/test_kernel.py", "-k", "runaway", "--timeout", "20"),
    ),
    # The one engine (issue 20): export and delete derive from the schema's table list, a
    # held lock is a fault that passes, never a raw driver error.
    Mutation(
        name="export-skips-a-table",
        guards="export keeps its run's rows alone in every table (evidence included)",
        file="loopkernel/store/_sqlite.py",
        old="for table in TABLES:\n                        dest.execute",
        new="for table in TABLES[:-1]:\n                        dest.execute",
        tests=("tests/store/test_engine.py",),
    ),
    Mutation(
        name="delete-skips-a-table",
        guards="delete_run removes every row of the run, in every table",
        file="loopkernel/store/_engine.py",
        old="for table in TABLES:\n                cur.run(f\"DELETE",
        new="for table in TABLES[:-1]:\n                cur.run(f\"DELETE",
        tests=("tests/store/test_engine.py", "-k", "sqlite"),
    ),
    Mutation(
        name="lock-held-untranslated",
        guards="a held SQLite write lock is StoreUnavailable after an async wait, not a raw error",
        file="loopkernel/store/_sqlite.py",
        old="            return LockHeld(text)",
        new="            return exc",
        tests=("tests/store/test_engine.py", "-k", "stall"),
    ),
    # Group commit (store/_writer.py): many runs' steps in one SQLite transaction.
    Mutation(
        name="group-ack-before-commit",
        guards="group commit: no step of a group is answered before the COMMIT that holds it",
        file="loopkernel/store/_writer.py",
        old='            crashpoint("batch_written")\n            cur.run("COMMIT")',
        new='            self._answer(items, outcomes)\n            crashpoint("batch_written")\n'
        '            cur.run("COMMIT")',
        tests=(GROUP,),
    ),
    Mutation(
        name="group-commit-unsynced",
        guards="group commit: a group of durable writes is fsynced at synchronous=FULL",
        file="loopkernel/store/_writer.py",
        old="sync = any(w.sync for w in writes)",
        new="sync = False",
        tests=(GROUP,),
    ),
    Mutation(
        name="group-failure-kept",
        guards="group commit: a write that fails in a group leaves none of its statements",
        file="loopkernel/store/_writer.py",
        old='        cur.run("ROLLBACK TO lk_write")\n',
        new="",
        tests=(GROUP,),
    ),
    # Kernel(keep_finished=N): what a planner or a worker reads of an evicted task must be
    # what it would read in memory (a wrong snapshot is a wrong plan, journaled for good).
    Mutation(
        name="evict-no-readback",
        guards="an evicted task is read back from the store (TaskTable.get)",
        file="loopkernel/graph/_state.py",
        old="if task is None and self.evicted:",
        new="if False:",
        tests=(EVICT,),
    ),
    Mutation(
        name="evict-no-revive",
        guards="a new edge after an evicted task reads it back first (whole edge lists)",
        file="loopkernel/graph/_state.py",
        old="one = dict.get(tasks, a) or self._revive(a)",
        new="one = dict.get(tasks, a)",
        tests=(EVICT,),
    ),
    Mutation(
        name="evict-ancestors-in-memory",
        guards="a task's ancestors include evicted ones (evidence scope 'ancestors')",
        file="loopkernel/graph/_state.py",
        old="if isinstance(tasks, TaskTable) and tasks.evicted:\n            # Through evicted",
        new="if False:\n            # Through evicted",
        tests=(EVICT,),
    ),
    Mutation(
        name="evict-in-state-resident",
        guards="in_state(SUCCEEDED) counts evicted tasks",
        file="loopkernel/graph/_state.py",
        old="if TaskState.SUCCEEDED not in states:",
        new="if True:",
        tests=(EVICT,),
    ),
]


@dataclass(frozen=True, kw_only=True)
class Result:
    mutation: Mutation
    outcome: str
    """``killed``, ``survived`` or ``stale``."""
    detail: str
    seconds: float


def apply(m: Mutation) -> tuple[Path, str] | str:
    """Patch the file; its original text, or why the mutation no longer applies."""
    path = SRC / m.file
    if not path.exists():
        return f"mutation {m.name} no longer applies: {m.file} does not exist"
    text = path.read_text()
    found = text.count(m.old)
    if found != 1:
        return (
            f"mutation {m.name} no longer applies: its snippet is found {found} times "
            f"in {m.file} (expected once): {m.old.strip()!r}"
        )
    BACKUP.write_text(f"{m.file}\n{text}")
    path.write_text(text.replace(m.old, m.new))
    return path, text


def restore_leftover() -> None:
    if BACKUP.exists():
        name, _, text = BACKUP.read_text().partition("\n")
        (SRC / name).write_text(text)
        BACKUP.unlink()
        print(f"restored {name} from a mutation run that did not finish", file=sys.stderr)


def run_one(m: Mutation, python: str) -> Result:
    t0 = time.monotonic()
    applied = apply(m)
    if isinstance(applied, str):
        return Result(mutation=m, outcome="stale", detail=applied, seconds=0.0)
    path, original = applied
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(
            [python, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *m.tests],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        path.write_text(original)
        BACKUP.unlink()
    seconds = time.monotonic() - t0
    if proc.returncode == 0:
        return Result(mutation=m, outcome="survived", detail="every test passed", seconds=seconds)
    caught = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.MULTILINE)
    if proc.returncode in (1,) and caught:
        return Result(mutation=m, outcome="killed", detail=caught[0], seconds=seconds)
    # 2..5: interrupted, internal error, usage error, no tests collected: not a kill.
    tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
    return Result(
        mutation=m,
        outcome="stale",
        detail=f"pytest exit {proc.returncode}: {tail}",
        seconds=seconds,
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/mutate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--only", action="append", help="run this mutation (repeatable)")
    args = parser.parse_args()

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # the finally in run_one restores the file

    signal.signal(signal.SIGTERM, stop)
    restore_leftover()
    chosen = MUTATIONS
    if args.only:
        names = {m.name for m in MUTATIONS}
        unknown = sorted(set(args.only) - names)
        if unknown:
            print(f"unknown mutation(s): {', '.join(unknown)}", file=sys.stderr)
            return 2
        chosen = [m for m in MUTATIONS if m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name:26} {m.file:26} {m.guards}")
        return 0
    results: list[Result] = []
    for m in chosen:
        print(f"{m.name} ...", end=" ", flush=True)
        r = run_one(m, sys.executable)
        results.append(r)
        print(f"{r.outcome.upper()} ({r.seconds:.0f} s): {r.detail}", flush=True)
    print()
    print("| mutation | guards | tests run | result | caught by |")
    print("|---|---|---|---|---|")
    for r in results:
        m = r.mutation
        by = r.detail if r.outcome == "killed" else ""
        print(f"| `{m.name}` | {m.guards} | `{' '.join(m.tests)}` | {r.outcome} | `{by}` |")
    counts = {o: sum(r.outcome == o for r in results) for o in ("killed", "survived", "stale")}
    total = sum(r.seconds for r in results)
    print(
        f"\n{counts['killed']} killed, {counts['survived']} survived, {counts['stale']} stale "
        f"of {len(results)} mutations in {total:.0f} s"
    )
    for r in results:
        if r.outcome == "stale":
            print(f"STALE: {r.detail}", file=sys.stderr)
    if counts["stale"]:
        return 2
    return 1 if counts["survived"] else 0


if __name__ == "__main__":
    sys.exit(main())
