"""The chaos suite: random ``kill -9`` across every shipped app, each run resumed until it
ends and compared by state digest with an uninterrupted run of its own run id.

``bash scripts/chaos [--seed S] [--kills N] [--max-seconds T] [--jobs J]`` (``--quick``: a
small setting, the one ``tests/crash/test_chaos.py`` runs). Every case drives one run
with the ``loopkernel`` command line, as a user would, and injects one fault:

::

    point    LOOPKERNEL_CRASH_AT=<point>:<n>: the process SIGKILLs itself at the n-th pass
             through a named crash point (the n-th step's event commit, tool send, ...)
    trace    SIGKILL from outside once the execution trace (LOOPKERNEL_TRACE) holds n lines
    time     SIGKILL from outside t seconds after start, t uniform over the run's duration
    tool     SIGKILL of the run's MCP tool server (a stdio child) at a random moment
    double   a crash point, then two ``resume`` processes started at once: one must refuse
             (exit 7) or come after the end; nothing is doubled
    disk     the database and the tool's files on a small tmpfs filled up mid-run, freed,
             resumed (needs root for ``mount``; skipped with a printed reason otherwise)
    worker   runs submitted to PostgreSQL (``--pg URL``), executed by ``loopkernel worker``
             processes that are SIGKILLed at random moments and started again

After the fault the run is resumed (``loopkernel resume``; ``approve`` where it waits for a
human, as the uninterrupted run was approved), and each resume may be killed again at
random ("repeatedly if it crashed again"), up to ``--max-resumes``. The run is then:

* **exact**: its digest (``loopkernel inspect RUN --json``) is the uninterrupted run's,
  and the tool saw each effect once;
* **lost**: it never reached the uninterrupted run's status, or an effect the
  uninterrupted run applied never reached the tool;
* **doubled**: an effect reached the tool's durable record twice (looplab's tool server
  keeps ``RUN.world.jsonl`` and ``RUN.record.jsonl``, each line one applied effect);
* **divergent**: any other digest.

It also counts action requests that reached the tool server more than once (``resent``:
absorbed by the tool's key check, so not doubled; ``resent_irreversible`` when the
request was an irreversible ``publish``, which docs/durability.md says is never re-sent).

``--batch``: many runs in one process sharing their commits (SQLite group commit), killed
at the group's crash points and resumed (``bench/chaos_batch.py``).

``--pg-kill-every SECONDS`` (with ``--pg``): the PostgreSQL workers' connections are
terminated every SECONDS while they execute the runs (``bench/chaos_churn.py``).

``--load sqlite``: 200 runs at once on one SQLite file, executed by several
``loopkernel worker`` processes; ``--load postgres``: 1,000 runs over 4 workers on
PostgreSQL. Both report throughput and 0 lost (each run's digest is its reference's).

Writes ``bench/results/chaos.json`` (``--quick``: the temporary directory of
``bench/_results.py``; ``--out`` anywhere). Exit 0 when nothing was lost, doubled or
divergent, 1 otherwise, 2 on a setup problem.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import write_results  # noqa: E402

INCIDENTS = ROOT / "examples" / "incidents"
PAYLOAD = '{"by": "chaos"}'
"""The approval every waiting task gets, in the reference run and in every chaos run."""
KERNEL_POINTS = ("task_returned", "event_committed", "before_patch", "patch_committed")
TOOL_POINTS = ("tool_sent", "tool_returned")
FULL_KILLS = 1000
CASE_TIMEOUT = 240.0
"""Seconds one process of a case may take before it counts as hung (a hang is lost)."""


# -- what runs -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Config:
    """One app configuration: the ``loopkernel run`` arguments after the app name."""

    name: str
    """``app/scenario`` as printed."""
    app: str
    args: tuple[str, ...] = ()
    tools: bool = False
    """It has an MCP stdio tool server (a child process to kill)."""
    lab: bool = False
    """looplab: effects are counted at the tool server's durable record."""

    @property
    def slug(self) -> str:
        return self.name.replace("/", "-")


def sre_config(incident: str) -> Config:
    base = INCIDENTS / incident
    question = (base / "question.txt").read_text().strip()
    namespace = (base / "namespace.txt").read_text().strip()
    return Config(
        name=f"sre/{incident}",
        app="sre",
        args=(
            "--set",
            f"question={question}",
            "--set",
            f"dump={base / 'dump'}",
            "--set",
            f"namespace={namespace}",
        ),
        tools=True,
    )


def looplab(scenario: str, *extra: str) -> Config:
    suffix = "-slow" if extra else ""
    return Config(
        name=f"looplab/{scenario}{suffix}",
        app="looplab",
        args=("--scenario", scenario, *extra),
        tools=True,
        lab=True,
    )


SPECULATION = Config(name="speculation", app="speculation")
LOOPLAB = [looplab(s) for s in ("baseline", "irreversible", "overspend", "verify_stuck")]
# the deploy (publish) of step 3 takes 1 s: a tool-server kill lands while it is in flight
LOOPLAB_SLOW = looplab("irreversible", "--set", "act_delay=1.0", "--set", "slow_step=3")
SRE_INCIDENTS = ("oom-payments", "dns-redis", "crash-orders-panic")


def configs(quick: bool) -> list[Config]:
    sre = [sre_config(i) for i in (SRE_INCIDENTS[:1] if quick else SRE_INCIDENTS)]
    return [SPECULATION, *LOOPLAB, *sre]


# -- processes -------------------------------------------------------------------------------


def base_env(lab: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPKERNEL_")}
    env["PYTHONUNBUFFERED"] = "1"
    if lab is not None:
        env["LOOPLAB_DIR"] = str(lab)
    return env


def lk(db: str | Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "loopkernel", "--db", str(db), *args]


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (scanning /proc: no dependency)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after it
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def reap_group(proc: subprocess.Popen[str], grace: float = 3.0) -> None:
    """Let what the process left (tool servers reading a closed stdin) exit, then SIGKILL
    whatever of its session is still there, so nothing outlives its case."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@dataclass
class Outcome:
    code: int
    stderr: str
    killed: bool = False
    """An executor SIGKILL landed (the process died of it)."""
    tool_killed: bool = False
    """A tool server was SIGKILLed while its executor lived."""


@dataclass(frozen=True, kw_only=True)
class Trigger:
    kind: str
    point: str = ""
    n: int = 0
    delay: float = 0.0
    watch: str = ""
    """``toolcall``: the tool's request log; the server is killed once ``point`` is in it."""

    def label(self) -> str:
        if self.kind in ("point", "double"):
            return f"{self.kind} {self.point}:{self.n}"
        if self.kind == "toolcall":
            return f"toolcall {self.point} in flight"
        if self.kind == "trace":
            return f"trace {self.n} lines"
        if self.kind in ("time", "tool", "disk"):
            return f"{self.kind} {self.delay:.2f}s"
        return self.kind


def launch(cmd: list[str], env: dict[str, str], trig: Trigger | None, trace: Path) -> Outcome:
    """Run one ``loopkernel`` process with the trigger armed; its outcome."""
    env = dict(env)
    env["LOOPKERNEL_TRACE"] = str(trace)
    if trig is not None and trig.kind in ("point", "double"):
        env["LOOPKERNEL_CRASH_AT"] = f"{trig.point}:{trig.n}"
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    at_start = _lines(trace)  # the trace file is the run's, across its processes
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else ""))
    reader.start()
    killed = tool_killed = False
    try:
        if trig is not None and trig.kind == "time":
            try:
                proc.wait(timeout=trig.delay)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
        elif trig is not None and trig.kind == "trace":
            while proc.poll() is None:
                if _lines(trace) - at_start >= trig.n:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
                time.sleep(0.005)
        elif trig is not None and trig.kind == "tool":
            tool_killed = _kill_tool_server(proc, trig.delay)
        elif trig is not None and trig.kind == "toolcall":
            tool_killed = _kill_tool_server_at(proc, trig.point, Path(trig.watch))
        proc.wait(timeout=CASE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join()
        return Outcome(code=-1, stderr=f"hung: killed after {CASE_TIMEOUT:.0f} s")
    finally:
        reap_group(proc)
        reader.join()
        if proc.stderr is not None:
            proc.stderr.close()
    killed = proc.returncode == -signal.SIGKILL
    return Outcome(
        code=proc.returncode, stderr="".join(err), killed=killed, tool_killed=tool_killed
    )


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def _kill_tool_server_at(proc: subprocess.Popen[str], tool: str, requests: Path) -> bool:
    """SIGKILL the executor's tool server once a request for ``tool`` reached it (the call
    is in flight: looplab's server logs a request before it acts)."""
    while proc.poll() is None:
        if any(r.get("tool") == tool for r in _jsonl(requests)):
            server = next((c for c in children(proc.pid) if ".tools" in cmdline(c)), None)
            if server is None:
                return False
            os.kill(server, signal.SIGKILL)
            return proc.poll() is None
        time.sleep(0.005)
    return False


def _written(pid: int) -> int:
    """Bytes the process wrote (``wchar`` of /proc/PID/io), -1 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return -1


def _kill_tool_server(proc: subprocess.Popen[str], delay: float) -> bool:
    """SIGKILL the executor's tool server ``delay`` seconds after it answered its first
    request (it has written something: the MCP handshake is over; a server killed in its
    handshake is another case, see ``tests/crash/test_chaos.py``)."""
    server = None
    while proc.poll() is None:
        server = next((c for c in children(proc.pid) if ".tools" in cmdline(c)), None)
        if server is not None and _written(server) > 0:
            break
        time.sleep(0.005)
    if server is None or proc.poll() is not None:
        return False
    try:
        proc.wait(timeout=delay)
        return False  # the run ended first
    except subprocess.TimeoutExpired:
        pass
    server = next((c for c in children(proc.pid) if ".tools" in cmdline(c)), None)
    if server is None:
        return False
    try:
        os.kill(server, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return proc.poll() is None


# -- one run, driven to its end --------------------------------------------------------------


@dataclass
class Drive:
    """What driving a run to its end took and where it ended."""

    status: str = ""
    digest: str = ""
    kills: int = 0
    tool_kills: int = 0
    refused: int = 0
    processes: int = 0
    seconds: float = 0.0
    trace_lines: int = 0
    tasks: int = 0
    verdict: Any = None
    """The run's own verdict (why it stopped), from ``inspect``."""
    problems: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)


def inspect(db: str | Path, run_id: str, env: dict[str, str]) -> dict[str, Any] | None:
    """What ``loopkernel inspect RUN --json`` prints (the same ``Client.inspect``, in this
    process: a process start per case saved), or None when there is no such run (or no
    database yet). A store that cannot be read (``StoreUnavailable``: a full disk, a held
    lock) raises: that is not an absent run, and judging it as one called a whole run
    lost (issue 25: a run read on a disk still full after ``run`` exited 0)."""
    from loopkernel.client import Client
    from loopkernel.errors import NotADatabase, RunNotFound

    async def go() -> dict[str, Any]:
        async with Client(str(db), create=False) as client:
            return (await client.inspect(run_id)).to_json()

    try:
        return asyncio.run(go())
    except (RunNotFound, NotADatabase):
        return None


def approve_waiting(db: str | Path, run_id: str, env: dict[str, str]) -> list[str]:
    from loopkernel import LoopKernelError

    try:
        got = inspect(db, run_id, env) or {}
    except LoopKernelError as exc:
        raise RuntimeError(f"approve {run_id}: cannot read the run: {exc}") from None
    waiting = [t["task_id"] for t in got.get("tasks", []) if t["state"] == "waiting"]
    for task in waiting:
        out = subprocess.run(
            lk(db, "approve", run_id, task, "--payload", PAYLOAD),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode != 0:
            raise RuntimeError(f"approve {run_id} {task}: exit {out.returncode}: {out.stderr}")
    return waiting


def drive(
    cfg: Config,
    *,
    db: str | Path,
    lab: Path | None,
    run_id: str,
    first: Trigger | None,
    again: Any = None,
    max_resumes: int = 8,
    extra: Sequence[str] = (),
    after_approval: Trigger | None = None,
    after_first: Any = None,
) -> Drive:
    """Start the run (with ``first`` armed), then resume it until it ends; ``again`` (a
    callable) may arm a trigger on each resume. Approves every task that waits, once.
    ``after_first()`` is called once the first process has ended, whatever its exit, before
    anything reads the store (the full-disk case frees the disk there)."""
    env = base_env(lab)
    start = lk(db, "run", cfg.app, *cfg.args, "--run-id", run_id, "--quiet", *extra)
    resume = lk(db, "resume", run_id, "--quiet", *extra)
    trace = Path(str(db)).parent / f"{run_id}.trace"
    got = Drive()
    t0 = time.monotonic()
    cmd, trig, approved = start, first, False
    for round_ in range(max_resumes + 1):
        if trig is not None and trig.kind == "double" and cmd is resume:
            outs = _two_at_once(resume, env, trace)
            got.processes += 2
            codes = sorted(o.code for o in outs)
            got.steps.append(f"two resumes at once: exits {codes}")
            got.refused += codes.count(7)
            if 7 in codes and codes != [7, 7]:
                out = next(o for o in outs if o.code != 7)
            elif codes[0] == codes[1]:
                out = outs[0]  # the second came after the end: both report the status
            else:
                got.problems.append(f"two resumes at once exited {codes}")
                out = outs[0]
            trig = None
        else:
            out = launch(cmd, env, trig, trace)
            got.processes += 1
            got.steps.append(
                f"{'run' if cmd is start else 'resume'}"
                f"{' [' + trig.label() + ']' if trig else ''}: exit {out.code}"
            )
        if after_first is not None and round_ == 0:
            after_first()
        got.kills += out.killed
        got.tool_kills += out.tool_killed
        # a double trigger that landed starts the two resumes next; any other is spent
        trig = trig if trig is not None and trig.kind == "double" and out.killed else None
        code = out.code
        if out.killed or code in (6, 8):
            cmd = resume  # a fault that passes: resume
        elif code == 7:
            time.sleep(0.5)  # another executor holds it (a leftover): try again
            cmd = resume
        elif code in (2, 9) and cmd is resume and _not_created(out.stderr):
            cmd = start  # killed before the run was written: start it again, as a user would
        elif code == 3 and not approved:
            got.steps.append(f"approved {approve_waiting(db, run_id, env)}")
            approved = True
            cmd = resume
            if after_approval is not None:
                trig = after_approval
                continue
        elif code == -1:
            got.problems.append(out.stderr)
            break
        else:
            break
        if again is not None and trig is None:
            trig = again(round_ + 1)
    else:
        got.problems.append(f"still not ended after {max_resumes} resumes")
    got.seconds = time.monotonic() - t0
    got.trace_lines = _lines(trace)
    from loopkernel import LoopKernelError

    try:
        final = inspect(db, run_id, env)
    except LoopKernelError as exc:
        got.problems.append(f"cannot read the run: {type(exc).__name__}: {exc}")
        final = None
    if final is None:
        if not got.problems or not got.problems[-1].startswith("cannot read"):
            got.problems.append("the run is not in the database")
    else:
        got.status, got.digest, got.tasks = final["status"], final["digest"], len(final["tasks"])
        got.verdict = final.get("verdict")
    return got


def _not_created(stderr: str) -> bool:
    return "no run " in stderr or "no LoopKernel database" in stderr


def _two_at_once(cmd: list[str], env: dict[str, str], trace: Path) -> list[Outcome]:
    env = {**env, "LOOPKERNEL_TRACE": str(trace)}
    procs = [
        subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=CASE_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            outs.append(Outcome(code=-1, stderr="hung"))
            continue
        finally:
            reap_group(p)
        outs.append(Outcome(code=p.returncode, stderr=err, killed=p.returncode == -9))
    return outs


# -- effects at the tool's side ----------------------------------------------------------------


@dataclass(frozen=True)
class Effects:
    applied: tuple[str, ...]
    """``RUN.world.jsonl`` and ``RUN.record.jsonl`` keys, in order (one line per applied effect)."""
    requests: tuple[tuple[str, str], ...]
    """``(tool, key)`` of every action request that reached the server."""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def effects(lab: Path | None, run_id: str) -> Effects:
    if lab is None:
        return Effects((), ())
    from loopkernel_apps.looplab.tools import calls_path, record_path, world_path

    keys = [
        f"{kind}:{e.get('key')}"
        for kind, path in (("world", world_path(lab, run_id)), ("record", record_path(lab, run_id)))
        for e in _jsonl(path)
    ]
    requests = [(str(c.get("tool")), str(c.get("key"))) for c in _jsonl(calls_path(lab, run_id))]
    return Effects(tuple(keys), tuple(requests))


# -- references and cases ------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    status: str
    digest: str
    effects: Effects
    seconds: float
    trace_lines: int
    tasks: int


def reference(cfg: Config, work: Path, run_id: str) -> Reference:
    where = work / "ref" / f"{cfg.slug}-{run_id}"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    lab = where / "lab" if cfg.lab else None
    got = drive(cfg, db=where / "runs.db", lab=lab, run_id=run_id, first=None, max_resumes=2)
    if got.problems or got.kills or not got.digest:
        raise RuntimeError(f"the uninterrupted {cfg.name} run failed: {got}")
    return Reference(
        status=got.status,
        digest=got.digest,
        effects=effects(lab, run_id),
        seconds=got.seconds,
        trace_lines=got.trace_lines,
        tasks=got.tasks,
    )


@dataclass
class Result:
    app: str
    trigger: str
    verdict: str
    """``exact``, ``lost``, ``doubled`` or ``divergent`` (the first that applies)."""
    kills: int
    tool_kills: int
    refused: int
    resent: int
    resent_irreversible: int
    seconds: float
    steps: list[str]
    problems: list[str]
    seed: int
    case: int


def judge(cfg: Config, ref: Reference, got: Drive, eff: Effects) -> tuple[str, list[str]]:
    why = list(got.problems)
    have, want = Counter(eff.applied), Counter(ref.effects.applied)
    twice = sorted(k for k, n in have.items() if n > 1)
    missing = sorted((want - have).elements())
    if got.status != ref.status or missing or got.problems:
        if got.status != ref.status:
            why.append(f"status {got.status or 'none'}, uninterrupted {ref.status}")
            why.append(f"its verdict: {json.dumps(got.verdict)}")
        if missing:
            why.append(f"effects that never reached the tool: {missing}")
        return "lost", why
    if twice or have != want:
        why.append(f"effects twice: {twice}; extra: {sorted((have - want).elements())}")
        return "doubled", why
    if got.digest != ref.digest:
        why.append(f"digest {got.digest[:12]}, uninterrupted {ref.digest[:12]}")
        return "divergent", why
    return "exact", why


def resent(eff: Effects) -> tuple[int, int]:
    counts = Counter(eff.requests)
    again = sum(n - 1 for n in counts.values())
    irreversible = sum(n - 1 for (tool, _), n in counts.items() if tool == "publish")
    return again, irreversible


class Planner:
    """Draws cases from the seed: which app, which trigger, which kills on resume."""

    def __init__(self, seed: int, cfgs: list[Config], refs: dict[str, Reference]) -> None:
        self.rng = random.Random(seed)
        self.cfgs, self.refs = cfgs, refs
        self.drawn = 0

    def trigger(self, cfg: Config, rng: random.Random, kinds: Sequence[str]) -> Trigger:
        ref = self.refs[cfg.name]
        kinds = [k for k in kinds if k != "trace" or ref.trace_lines > 0]
        kind = rng.choice(kinds)
        if kind in ("point", "double"):
            points = list(KERNEL_POINTS) + (list(TOOL_POINTS) if cfg.tools else [])
            point = rng.choice([*points, "run_returned"] if kind == "point" else points)
            most = 1 if point == "run_returned" else max(2, ref.tasks + (ref.tasks // 2))
            return Trigger(kind=kind, point=point, n=rng.randint(1, most))
        if kind == "trace":
            return Trigger(kind=kind, n=rng.randint(1, max(1, ref.trace_lines)))
        if kind == "tool":
            return Trigger(kind=kind, delay=rng.uniform(0.0, max(0.3, ref.seconds * 0.8)))
        return Trigger(kind=kind, delay=rng.uniform(0.05, max(0.5, ref.seconds * 1.05)))

    def case(self, index: int) -> tuple[Config, Trigger, random.Random]:
        """A case: every configuration once first, then drawn at random."""
        self.drawn += 1
        cfg = (
            self.cfgs[self.drawn - 1]
            if self.drawn <= len(self.cfgs)
            else self.rng.choice(self.cfgs)
        )
        rng = random.Random(self.rng.getrandbits(64))
        kinds = ["point", "point", "trace", "time", "double"]
        if cfg.tools:
            kinds.append("tool")
        return cfg, self.trigger(cfg, rng, kinds), rng


def run_case(
    cfg: Config,
    ref: Reference,
    trig: Trigger,
    rng: random.Random,
    *,
    planner: Planner,
    work: Path,
    index: int,
    seed: int,
    again_p: float,
    max_resumes: int,
    db_dir: Path | None = None,
    extra: Sequence[str] = (),
    after_approval: str = "",
) -> Result:
    where = (db_dir or work) / f"case{index:05d}"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    lab = where / "lab" if cfg.lab else None
    run_id = run_id_of(cfg)

    def again(round_: int) -> Trigger | None:
        if round_ < max_resumes - 1 and rng.random() < again_p:
            return planner.trigger(cfg, rng, ["point", "trace", "time"])
        return None

    got = drive(
        cfg,
        db=where / "runs.db",
        lab=lab,
        run_id=run_id,
        first=trig,
        again=again,
        max_resumes=max_resumes,
        extra=extra,
        after_approval=_in_flight(after_approval, lab, run_id),
    )
    eff = effects(lab, run_id)
    verdict, why = judge(cfg, ref, got, eff)
    again_n, irr = resent(eff)
    result = Result(
        app=cfg.name,
        trigger=trig.label(),
        verdict=verdict,
        kills=got.kills,
        tool_kills=got.tool_kills,
        refused=got.refused,
        resent=again_n,
        resent_irreversible=irr,
        seconds=round(got.seconds, 2),
        steps=got.steps,
        problems=why,
        seed=seed,
        case=index,
    )
    if verdict == "exact" and db_dir is None:
        shutil.rmtree(where, ignore_errors=True)  # keep only what needs looking at
    return result


def _in_flight(tool: str, lab: Path | None, run_id: str) -> Trigger | None:
    if not tool or lab is None:
        return None
    from loopkernel_apps.looplab.tools import calls_path

    return Trigger(kind="toolcall", point=tool, watch=str(calls_path(lab, run_id)))


def run_id_of(cfg: Config) -> str:
    return f"chaos-{cfg.slug}"


# -- a full disk ---------------------------------------------------------------------------


def disk_case(
    cfg: Config, ref: Reference, rng: random.Random, *, work: Path, index: int, seed: int
) -> Result | str:
    """The run's database and tool files on a 3 MiB tmpfs that fills up mid-run."""
    if os.geteuid() != 0:
        return "disk: skipped: not root (mount -t tmpfs needs it)"
    mnt = work / f"disk{index:05d}"
    mnt.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        return f"disk: skipped: mount failed: {mounted.stderr.strip()}"
    try:
        delay = rng.uniform(0.1, max(0.5, ref.seconds))
        trig = Trigger(kind="disk", delay=delay)
        lab = mnt / "lab" if cfg.lab else None
        run_id = run_id_of(cfg)
        filler = mnt / "filler"
        freed = threading.Event()
        full: list[str] = []

        def fill() -> None:
            time.sleep(delay)
            with contextlib.suppress(OSError), filler.open("wb") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            full.append(f"the disk full {time.monotonic() - t0:.2f} s in")
            # full until the first process of the run has ended: drive() frees it then
            freed.wait(timeout=CASE_TIMEOUT)
            filler.unlink(missing_ok=True)

        t0 = time.monotonic()
        filling = threading.Thread(target=fill)
        filling.start()

        def free() -> None:
            # The first process has ended, whatever its exit: free the disk before anything
            # reads the store. A run that ended (exit 0, its database closed cleanly) just
            # before the disk filled cannot even be read until then (SQLite must make its
            # -shm file): judged on the full disk it was called lost (issue 25, seed
            # 20261201 case 1, 2.26 s), though it was whole.
            freed.set()
            filling.join()

        got = drive(
            cfg,
            db=mnt / "runs.db",
            lab=lab,
            run_id=run_id,
            first=None,
            after_first=free,
            extra=("--store-retry", "1"),
        )
        freed.set()
        filling.join()
        eff = effects(lab, run_id)
        verdict, why = judge(cfg, ref, got, eff)
        again_n, irr = resent(eff)
        return Result(
            app=cfg.name,
            trigger=trig.label(),
            verdict=verdict,
            kills=0,
            tool_kills=0,
            refused=0,
            resent=again_n,
            resent_irreversible=irr,
            seconds=round(time.monotonic() - t0, 2),
            steps=[*full, *got.steps],
            problems=why,
            seed=seed,
            case=index,
        )
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)


# -- PostgreSQL workers ------------------------------------------------------------------------


def fresh_schema(url: str, name: str) -> str:
    """An empty schema ``name`` in the database of ``url`` (dropped first if there); the
    URL of a store that lives in it. A schema, not a database: the suite shares the
    server, and the database, with whoever gave it the URL (the test suite's own)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={name}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


def drop_schema(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


WORKER_RUNS = [SPECULATION, LOOPLAB[0], LOOPLAB[1], SPECULATION, LOOPLAB[0]]


def worker_run_ids(quick: bool) -> list[tuple[Config, str]]:
    """The runs of a worker case (with ``--quick``: a speculation and an approval)."""
    runs = [WORKER_RUNS[0], WORKER_RUNS[2]] if quick else WORKER_RUNS
    return [(cfg, f"chaos-w{i}-{cfg.slug}") for i, cfg in enumerate(runs)]


def start_worker(
    url: str, tag: str, lab: Path, log: Path, concurrency: int = 4, lease: float = 2.0
) -> subprocess.Popen[str]:
    """``loopkernel worker`` in a session of its own; a short lease by default, so that a
    killed worker's runs are taken over within seconds."""
    args = ["worker", "--id", tag, "--lease", str(lease), "--poll", "0.2"]
    with log.open("a") as out:
        return subprocess.Popen(
            lk(url, *args, "--concurrency", str(concurrency)),
            env=base_env(lab),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reap_group(proc, grace=1.0)


async def _submit(url: str, runs: list[tuple[Config, str]]) -> None:
    from loopkernel.client import Client

    async with Client(url) as client:
        for cfg, run_id in runs:
            overrides, scenario = _params(cfg)
            _, started = await client.start(
                cfg.app, scenario=scenario, overrides=overrides, run_id=run_id
            )
            await client.store.enqueue(started.run_id)


def _params(cfg: Config) -> tuple[dict[str, Any], str | None]:
    overrides: dict[str, Any] = {}
    scenario = None
    args = list(cfg.args)
    while args:
        flag, value = args.pop(0), args.pop(0)
        if flag == "--scenario":
            scenario = value
        else:
            key, _, raw = value.partition("=")
            try:
                overrides[key] = json.loads(raw)
            except json.JSONDecodeError:
                overrides[key] = raw
    return overrides, scenario


async def _statuses(url: str, run_ids: list[str]) -> dict[str, str]:
    from loopkernel.client import Client

    async with Client(url, create=False) as client:
        return {r: (await client.info(r)).status.value for r in run_ids}


def worker_case(
    url: str,
    refs: dict[str, Reference],
    rng: random.Random,
    *,
    work: Path,
    index: int,
    seed: int,
    kills: int,
    quick: bool,
) -> list[Result]:
    """Five runs (two: ``quick``) on two PostgreSQL workers; ``kills`` SIGKILLs of a
    random worker, each replaced by a new one; every run compared with its own
    uninterrupted reference."""
    where = work / f"workers{index:05d}"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    lab = where / "lab"
    runs = worker_run_ids(quick)
    ids = [r for _, r in runs]
    schema = f"chaos_{os.getpid()}_{index}"
    base, url = url, fresh_schema(url, schema)
    asyncio.run(_submit(url, runs))
    t0 = time.monotonic()
    procs = [start_worker(url, f"w{k}", lab, where / "workers.log") for k in range(2)]
    landed, approved, steps = 0, set(), []
    env = base_env(lab)
    problems: list[str] = []
    try:
        deadline = time.monotonic() + CASE_TIMEOUT
        while True:
            status = asyncio.run(_statuses(url, ids))
            for run_id, st in status.items():
                if st == "waiting" and run_id not in approved:
                    steps.append(f"approved {run_id} {approve_waiting(url, run_id, env)}")
                    approved.add(run_id)
            if all(s in ("succeeded", "failed", "escalated", "cancelled") for s in status.values()):
                break
            if time.monotonic() > deadline:
                problems.append(f"runs did not end: {status}")
                break
            if landed < kills and rng.random() < 0.3:
                victim = rng.randrange(len(procs))
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].wait()
                reap_group(procs[victim], grace=1.0)
                landed += 1
                steps.append(f"SIGKILL worker {victim} at {time.monotonic() - t0:.2f}s")
                procs[victim] = start_worker(url, f"w{victim}-{landed}", lab, where / "workers.log")
            time.sleep(rng.uniform(0.1, 0.6))
    finally:
        for p in procs:
            stop(p)
    seconds = time.monotonic() - t0
    results = []
    for cfg, run_id in runs:
        ref = refs[f"{cfg.name}@{run_id}"]
        final = inspect(url, run_id, env) or {}
        got = Drive(status=final.get("status", ""), digest=final.get("digest", ""))
        got.problems = list(problems)
        eff = effects(lab if cfg.lab else None, run_id)
        verdict, why = judge(cfg, ref, got, eff)
        again_n, irr = resent(eff)
        results.append(
            Result(
                app=f"workers:{cfg.name}",
                trigger=f"worker kills {landed}",
                verdict=verdict,
                kills=0,
                tool_kills=0,
                refused=0,
                resent=again_n,
                resent_irreversible=irr,
                seconds=round(seconds, 2),
                steps=steps,
                problems=why,
                seed=seed,
                case=index,
            )
        )
    results[0].kills = landed  # the worker kills, counted once per case
    if all(r.verdict == "exact" for r in results):
        shutil.rmtree(where, ignore_errors=True)
        drop_schema(base, schema)
    return results


# -- the report ------------------------------------------------------------------------------

VERDICTS = ("exact", "lost", "doubled", "divergent")


def table(results: list[Result]) -> dict[str, dict[str, int]]:
    rows: dict[str, dict[str, int]] = {}
    for r in results:
        for key in (r.app, "total"):
            row = rows.setdefault(
                key,
                {
                    "tried": 0,
                    **dict.fromkeys(VERDICTS, 0),
                    "kills": 0,
                    "tool_kills": 0,
                    "refused": 0,
                    "resent": 0,
                    "resent_irreversible": 0,
                },
            )
            row["tried"] += 1
            row[r.verdict] += 1
            row["kills"] += r.kills
            row["tool_kills"] += r.tool_kills
            row["refused"] += r.refused
            row["resent"] += r.resent
            row["resent_irreversible"] += r.resent_irreversible
    return dict(sorted(rows.items(), key=lambda kv: (kv[0] == "total", kv[0])))


def print_table(rows: dict[str, dict[str, int]]) -> None:
    cols = ["tried", *VERDICTS, "kills", "tool_kills", "refused", "resent", "resent_irreversible"]
    width = max(len(k) for k in rows) + 2
    print(f"{'app':<{width}}" + "".join(f"{c:>10}" if len(c) < 10 else f" {c}" for c in cols))
    for name, row in rows.items():
        print(
            f"{name:<{width}}"
            + "".join(f"{row[c]:>10}" if len(c) < 10 else f" {row[c]:>{len(c)}}" for c in cols)
        )


# -- load ------------------------------------------------------------------------------------


LOAD_SPEC = {"delays": [0.05, 0.1, 2.0], "distill_delay": 0.05}


async def _reference_digest(db: Path) -> str:
    from loopkernel.client import Client

    async with Client(str(db)) as client:
        await client.start("speculation", overrides=LOAD_SPEC, run_id="load-ref")
        await client.execute("load-ref")
        return (await client.inspect("load-ref")).digest


async def _load_submit(url: str, n: int) -> list[str]:
    from loopkernel.client import Client

    ids: list[str] = []
    async with Client(url) as client:
        for i in range(n):
            _, started = await client.start(
                "speculation", overrides=LOAD_SPEC, run_id=f"load{i:05d}"
            )
            await client.store.enqueue(started.run_id)
            ids.append(started.run_id)
    return ids


async def _load_digests(url: str, ids: list[str]) -> dict[str, tuple[str, str]]:
    from loopkernel.client import Client
    from loopkernel.ids import RunId
    from loopkernel.store import digest_of

    async with Client(url, create=False) as client:
        out = {}
        for r in ids:
            info = await client.info(r)
            out[r] = (info.status.value, digest_of(await client.store.dump(RunId(r))))
        return out


def load(kind: str, args: argparse.Namespace, work: Path) -> int:
    """``runs`` speculation runs submitted at once, executed by ``workers`` worker processes;
    each must end with the digest of a reference run (its digest minus the run id: the
    reference is read through the same dump)."""
    runs = args.runs or (200 if kind == "sqlite" else 1000)
    workers = args.workers or 4
    if kind == "sqlite":
        url = str(work / "load.db")
        Path(url).unlink(missing_ok=True)
    else:
        url = fresh_schema(args.pg, f"chaos_load_{os.getpid()}")
    ref_db = work / "load-ref.db"
    ref_db.unlink(missing_ok=True)
    expected = asyncio.run(_reference_digest(ref_db))
    t_sub = time.monotonic()
    ids = asyncio.run(_load_submit(url, runs))
    submitted = time.monotonic() - t_sub
    concurrency = max(1, -(-runs // workers)) if kind == "sqlite" else 16
    t0 = time.monotonic()
    procs = [
        start_worker(url, f"load{k}", work / "lab", work / "load-workers.log", concurrency, 10.0)
        for k in range(workers)
    ]
    try:
        while True:
            time.sleep(1.0)
            st = asyncio.run(_statuses(url, ids))
            done = sum(s in ("succeeded", "failed", "escalated", "cancelled") for s in st.values())
            if done == runs:
                break
            if time.monotonic() - t0 > args.max_seconds:
                break
        elapsed = time.monotonic() - t0
    finally:
        for p in procs:
            stop(p)
    final = asyncio.run(_load_digests(url, ids))
    if kind == "postgres":
        drop_schema(args.pg, f"chaos_load_{os.getpid()}")
    # the digest leaves the run id out: every run must have the reference's
    exact = sum(1 for s, d in final.values() if s == "succeeded" and d == expected)
    lost = sum(1 for s, _ in final.values() if s != "succeeded")
    divergent = runs - exact - lost
    payload = {
        "load": kind,
        "runs": runs,
        "workers": workers,
        "concurrency_per_worker": concurrency,
        "submit_seconds": round(submitted, 2),
        "seconds": round(elapsed, 2),
        "runs_per_second": round(exact / elapsed, 2) if elapsed else None,
        "exact": exact,
        "lost": lost,
        "divergent": divergent,
        "distinct_digests": len({d for _, d in final.values()}),
        "reference_digest": expected,
        "command": " ".join(["bash scripts/chaos", *sys.argv[1:]]),
    }
    print(json.dumps(payload, indent=2))
    write_results(f"chaos_load_{kind}", payload, quick=args.quick, load=os.getloadavg())
    return 0 if exact == runs else 1


# -- main ----------------------------------------------------------------------------------


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=None, help="the seed (default: from the clock)")
    p.add_argument("--kills", type=int, default=None, help=f"kills to land (default {FULL_KILLS})")
    p.add_argument("--max-seconds", type=float, default=None, help="stop starting cases after this")
    p.add_argument("--quick", action="store_true", help="the small setting (the test suite's)")
    p.add_argument("--jobs", type=int, default=2, help="cases at once (default 2)")
    p.add_argument("--again", type=float, default=0.3, help="chance that a resume is killed too")
    p.add_argument("--max-resumes", type=int, default=8)
    p.add_argument(
        "--pg",
        default=os.environ.get("LOOPKERNEL_CHAOS_PG"),
        help="a PostgreSQL database: worker cases and --load postgres, each in a fresh schema",
    )
    p.add_argument("--worker-every", type=int, default=25, help="one worker case per N cases")
    p.add_argument("--work", type=Path, default=None, help="where cases run (default: a temp dir)")
    p.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    p.add_argument("--load", choices=("sqlite", "postgres"), help="the load test instead")
    p.add_argument(
        "--batch",
        action="store_true",
        help="many runs per process sharing their commits, killed and resumed instead "
        "(bench/chaos_batch.py; --quick, --seed, --work, --out apply)",
    )
    p.add_argument(
        "--pg-kill-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --pg: kill the PostgreSQL workers' connections every SECONDS instead "
        "(bench/chaos_churn.py; --quick, --kills, --max-seconds, --out apply)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=None,
        help="--load: runs (200 / 1000); --pg-kill-every: the first N of a worker case's",
    )
    p.add_argument("--workers", type=int, default=None, help="--load: worker processes (4)")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time()) % 100000
    if args.kills is None:
        args.kills = 12 if args.quick else FULL_KILLS
    if args.max_seconds is None:  # after the references; the kills bound it first
        args.max_seconds = 240.0 if args.quick else 3 * 3600.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="lk-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.batch:
        from bench.chaos_batch import main as batch_main

        batch = ["--seed", str(args.seed), "--work", str(work)] + (["--quick"] * args.quick)
        return batch_main(batch + (["--out", str(args.out)] if args.out else []))
    if args.pg_kill_every is not None:
        if not args.pg:
            print("chaos: --pg-kill-every needs --pg URL", file=sys.stderr)
            return 2
        from bench.chaos_churn import main as churn_main

        return churn_main(args, work)
    if args.load:
        if args.load == "postgres" and not args.pg:
            print("chaos: --load postgres needs --pg URL", file=sys.stderr)
            return 2
        return load(args.load, args, work)
    t_start = time.monotonic()
    print(
        f"chaos: seed {args.seed}, up to {args.kills} kills or {args.max_seconds:.0f} s, "
        f"{args.jobs} at once, in {work}",
        flush=True,
    )
    cfgs = configs(args.quick)
    wanted = [(c.name, c, run_id_of(c)) for c in [*cfgs, LOOPLAB_SLOW]]
    if args.pg:
        wanted += [(f"{c.name}@{r}", c, r) for c, r in worker_run_ids(args.quick)]
    with ThreadPoolExecutor(args.jobs) as pool:
        refs = dict(
            zip(
                [name for name, _, _ in wanted],
                pool.map(lambda w: reference(w[1], work, w[2]), wanted),
                strict=True,
            )
        )
    for name, ref in refs.items():
        print(f"  reference {name}: {ref.status}, {ref.seconds:.1f} s, digest {ref.digest[:12]}")
    t_cases = time.monotonic()  # the budget is for the cases, not the references
    skipped: list[str] = []
    if not args.pg:
        skipped.append("workers: skipped: no --pg URL (or LOOPKERNEL_CHAOS_PG) given")
    planner = Planner(args.seed, cfgs, refs)
    results: list[Result] = []
    landed = 0
    index = 0
    lock = threading.Lock()

    def budget_left() -> bool:
        return bool(landed < args.kills and time.monotonic() - t_cases < args.max_seconds)

    def submit(pool: ThreadPoolExecutor) -> Future[Any] | None:
        nonlocal index
        i = index
        index += 1
        rng = random.Random(planner.rng.getrandbits(64))
        if i % 100 == 1:  # a full disk: the second case, then one in a hundred
            cfg = LOOPLAB[0]
            return pool.submit(
                disk_case, cfg, refs[cfg.name], rng, work=work, index=i, seed=args.seed
            )
        if args.pg and i % args.worker_every == 2:
            return pool.submit(
                worker_case,
                args.pg,
                refs,
                rng,
                work=work,
                index=i,
                seed=args.seed,
                kills=rng.randint(1, 3),
                quick=args.quick,
            )
        after = ""
        if i % 10 == 5:  # the irreversible publish in flight when its server dies
            cfg, after = LOOPLAB_SLOW, "publish"
            trig = planner.trigger(cfg, rng, ["point", "time", "trace"])
        elif i == 3:  # at least one double resume in every suite
            cfg = LOOPLAB[0]
            trig = planner.trigger(cfg, rng, ["double"])
        else:
            cfg, trig, rng = planner.case(i)
        return pool.submit(
            run_case,
            cfg,
            refs[cfg.name],
            trig,
            rng,
            planner=planner,
            work=work,
            index=i,
            seed=args.seed,
            again_p=args.again,
            max_resumes=args.max_resumes,
            after_approval=after,
        )

    pending: set[Future[Any]] = set()
    with ThreadPoolExecutor(args.jobs) as pool:
        while budget_left() or pending:
            while budget_left() and len(pending) < args.jobs:
                fut = submit(pool)
                if fut is not None:
                    pending.add(fut)
            if not pending:
                break
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                got = fut.result()
                batch = got if isinstance(got, list) else [got]
                for r in batch:
                    if isinstance(r, str):
                        skipped.append(r)
                        print(f"  {r}", flush=True)
                        continue
                    with lock:
                        results.append(r)
                        landed += r.kills + r.tool_kills
                    mark = "" if r.verdict == "exact" else f"  <-- {r.verdict}: {r.problems}"
                    print(
                        f"  [{landed:>4}] case {r.case:>4} {r.app:<28} {r.trigger:<28} "
                        f"{r.verdict}{mark}",
                        flush=True,
                    )
    rows = table(results)
    print()
    print_table(rows)
    for line in skipped:
        print(line)
    total = rows.get("total", {})
    bad = sum(total.get(k, 0) for k in ("lost", "doubled", "divergent"))
    elapsed = time.monotonic() - t_start
    print(
        f"\n{landed} kills landed in {len(results)} runs, {elapsed:.0f} s; "
        f"{'nothing lost, doubled or divergent' if not bad else f'{bad} runs NOT exact'}"
    )
    payload = {
        "command": " ".join(["bash scripts/chaos", *(argv if argv is not None else sys.argv[1:])]),
        "seed": args.seed,
        "kills": landed,
        "runs": len(results),
        "seconds": round(elapsed, 1),
        "table": rows,
        "skipped": skipped,
        "references": {
            n: {"status": r.status, "digest": r.digest, "seconds": round(r.seconds, 2)}
            for n, r in refs.items()
        },
        "not_exact": [vars(r) for r in results if r.verdict != "exact"],
        "cases": [vars(r) for r in results],
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")
    else:
        write_results("chaos", payload, quick=args.quick, load=os.getloadavg())
    if args.work is None and not bad:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
