"""The scoreboard: the looplab loop on LoopKernel, by hand, and on LangGraph, side by side.

    loopkernel bench scoreboard            # or: python -m bench.scoreboard
    python -m bench.scoreboard --quick     # 3 repetitions instead of 7, no virtualenvs

Every implementation runs as real processes over the same MCP tool server and the same
policy module; every measure comes from this one run (speed rows as ratios, since the
machine is noisy). Prints a markdown table and writes ``bench/results/scoreboard.json`` and
``bench/results/scoreboard.md``. Needs the ``bench`` extra (LangGraph):
``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._results import results_dir

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
RUN = "lab"
IMPLS = ("loopkernel", "handrolled", "langgraph")
TITLES = {"loopkernel": "LoopKernel", "handrolled": "hand-rolled", "langgraph": "LangGraph"}
SCENARIOS = ("baseline", "irreversible", "overspend", "verify_stuck")
APPROVER = {"by": "ops"}

LOOP_FILES = {
    "loopkernel": [
        "src/loopkernel_apps/looplab/_loop.py",
        "src/loopkernel_apps/looplab/__init__.py",
    ],
    "handrolled": ["bench/handrolled/loop.py"],
    "langgraph": ["bench/langgraph_loop/loop.py"],
}
IMPORTS = {
    "loopkernel": "import loopkernel.cli, loopkernel_apps.looplab",
    "handrolled": "import bench.handrolled.loop",
    "langgraph": "import bench.langgraph_loop.loop",
}


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- driving one implementation ------------------------------------------------------------


@dataclass
class Work:
    """One run's working directory: its state file(s) and the tool server's files."""

    impl: str
    path: Path
    lab: Path = field(init=False)

    def __post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.lab = self.path / "lab"

    @property
    def state_file(self) -> Path:
        name = {"loopkernel": "runs.db", "handrolled": "state.json", "langgraph": "checkpoints.db"}
        return self.path / name[self.impl]

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("LOOPKERNEL_CRASH_AT", "LOOPLAB_CRASH_AFTER_CALL", "LOOPKERNEL_DB")
        }
        env["LOOPLAB_DIR"] = str(self.lab)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.update(extra)
        return env

    def command(
        self, action: str, scenario: str = "baseline", sets: dict[str, Any] | None = None
    ) -> list[str]:
        """``action``: start, resume or approve (approve also resumes, except on LoopKernel)."""
        pairs = [f"{k}={json.dumps(v)}" for k, v in (sets or {}).items()]
        if self.impl == "loopkernel":
            base = [PY, "-m", "loopkernel", "--db", str(self.state_file)]
            if action == "start":
                lk_sets = {k: v for k, v in (sets or {}).items() if k not in ("keys", "max_steps")}
                cmd = [*base, "run", "looplab", "--scenario", scenario, "--run-id", RUN, "--quiet"]
                for k, v in lk_sets.items():
                    cmd += ["--set", f"{k}={json.dumps(v)}"]
                if "max_steps" in (sets or {}):
                    cmd += ["--max-events", str(sets["max_steps"])]  # type: ignore[index]
                return cmd
            if action == "approve":
                return [*base, "approve", RUN, "act:3.1", "--payload", json.dumps(APPROVER)]
            return [*base, "resume", RUN, "--quiet"]
        module = "bench.handrolled" if self.impl == "handrolled" else "bench.langgraph_loop"
        flag = "--state" if self.impl == "handrolled" else "--db"
        cmd = [PY, "-m", module, flag, str(self.state_file), "--run", RUN]
        if action == "start":
            cmd += ["--scenario", scenario]
            for pair in pairs:
                cmd += ["--set", pair]
        elif action == "approve":
            cmd += ["--approve"]
        return cmd

    def run(
        self,
        action: str,
        scenario: str = "baseline",
        sets: dict[str, Any] | None = None,
        **env: str,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(action, scenario, sets),
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=self.path,
        )

    def crash_env(self, n: int) -> dict[str, str]:
        """Die right after the n-th tool call returned, before anything is persisted."""
        if self.impl == "loopkernel":
            return {"LOOPKERNEL_CRASH_AT": f"tool_returned:{n}"}
        return {"LOOPLAB_CRASH_AFTER_CALL": str(n)}

    def approve(self) -> subprocess.CompletedProcess[str]:
        """Answer the pause from a new process (and, on LoopKernel, resume in another)."""
        answered = self.run("approve")
        if self.impl != "loopkernel" or answered.returncode != 0:
            return answered
        return self.run("resume")

    def show(self) -> dict[str, Any]:
        """The run's state as the scoreboard compares it."""
        if self.impl == "loopkernel":
            out = subprocess.run(
                [PY, "-m", "loopkernel", "--db", str(self.state_file), "inspect", RUN, "--json"],
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            if not out.stdout.strip():
                return {"status": "missing", "error": out.stderr.strip()[-200:]}
            d = json.loads(out.stdout)
            acts = [t for t in d["tasks"] if t["skill"] == "act" and t["state"] == "succeeded"]
            done = [t for t in d["tasks"] if t["skill"] == "record" and t["state"] == "succeeded"]
            verdict = d["verdict"] if isinstance(d["verdict"], dict) else {}
            from loopkernel_apps.looplab.tools import applied, record_entries

            seen = {
                "status": d["status"],
                "verdict": verdict.get("kind"),
                "spent_usd": round(sum(t["result"]["cost_usd"] for t in acts), 6),
                "steps_done": len(done),
                "record": record_entries(self.lab, RUN),
                "applied": applied(self.lab, RUN),
                "why": verdict.get("message") or verdict.get("kind"),
                "error": f"{verdict.get('type')}({verdict.get('kind')})",
                "digest": d["digest"],
            }
            return seen
        cmd = [*self.command("resume")[:7], "--show"]
        out = subprocess.run(
            cmd, env=self.env(), capture_output=True, text=True, timeout=120, cwd=self.path
        )
        if not out.stdout.strip():
            return {"status": "missing", "error": out.stderr.strip()[-200:]}
        seen = json.loads(out.stdout)
        if self.impl == "handrolled":
            state = json.loads(self.state_file.read_text())
            v = state.get("verdict") or {}
            seen["why"] = v.get("message") if isinstance(v, dict) else None
        else:
            seen["why"] = "; ".join(seen.pop("errors", [])) or None
        return seen


COMPARED = ("status", "verdict", "spent_usd", "steps_done", "record", "applied")


def differs(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [k for k in COMPARED if a.get(k) != b.get(k)]


# -- the measures --------------------------------------------------------------------------


class Board:
    def __init__(self, root: Path, reps: int, quick: bool) -> None:
        self.root, self.reps, self.quick = root, reps, quick
        self.rows: list[tuple[str, dict[str, str]]] = []
        self.data: dict[str, Any] = {}
        self.runs: dict[str, dict[str, Work]] = {}
        self.n = 0

    def work(self, impl: str, label: str) -> Work:
        self.n += 1
        return Work(impl, self.root / f"{self.n:03d}-{impl}-{label}")

    def row(self, name: str, cells: dict[str, str], data: Any) -> None:
        self.rows.append((name, cells))
        self.data[name] = data
        progress(f"{name}: " + " | ".join(f"{TITLES[i]}: {cells[i]}" for i in IMPLS))

    # 1
    def scenarios(self) -> None:
        seen: dict[str, dict[str, Any]] = {s: {} for s in SCENARIOS}
        first: dict[str, dict[str, Any]] = {s: {} for s in SCENARIOS}
        for scenario in SCENARIOS:
            for impl in IMPLS:
                progress(f"scenario {scenario} on {TITLES[impl]}")
                w = self.work(impl, scenario)
                self.runs.setdefault(scenario, {})[impl] = w
                out = w.run("start", scenario)
                first[scenario][impl] = w.show()
                if scenario == "irreversible":
                    w.approve()
                seen[scenario][impl] = w.show()
                seen[scenario][impl]["exit"] = out.returncode
        self.seen, self.first = seen, first
        for scenario in SCENARIOS:
            ref = seen[scenario]["loopkernel"]
            cells = {}
            for impl in IMPLS:
                s = seen[scenario][impl]
                head = first[scenario][impl]["status"]
                status = f"{head} → {s['status']}" if head != s["status"] else s["status"]
                diff = differs(ref, s) if impl != "loopkernel" else []
                tail = "same state" if not diff else "differs: " + ", ".join(diff)
                cells[impl] = f"{status}, {s.get('spent_usd')} USD; {tail}"
            self.row(f"1. scenario {scenario}", cells, seen[scenario])

    # 2
    def lines(self) -> None:
        counts = {impl: sum(loc(ROOT / f) for f in files) for impl, files in LOOP_FILES.items()}
        cells = {
            impl: f"{n} ({', '.join(Path(f).name for f in LOOP_FILES[impl])})"
            for impl, n in counts.items()
        }
        self.row("2. lines of loop code", cells, {"lines": counts, "files": LOOP_FILES})

    # 3
    def footprint(self) -> None:
        if self.quick:
            cells = dict.fromkeys(IMPLS, "skipped (--quick)")
            self.row("3. install footprint", cells, None)
            return
        base = self._venv("empty", [])
        core = self._venv("loopkernel", ["loopkernel-core"])
        tools = self._venv("loopkernel-tools", ["loopkernel[tools]"])
        bench = self._venv("langgraph", ["loopkernel[bench]"])

        def fmt(v: dict[str, Any]) -> str:
            n = v["dists"] - base["dists"]
            return (
                f"{n} distribution{'s' if n != 1 else ''}, "
                f"+{(v['bytes'] - base['bytes']) / 2**20:.0f} MiB"
            )

        lg_extra = (
            f"; beyond the shared layer +{bench['dists'] - tools['dists']} dists, "
            f"+{(bench['bytes'] - tools['bytes']) / 2**20:.0f} MiB"
        )
        cells = {
            "loopkernel": f"{fmt(tools)} (kernel alone: {fmt(core)})",
            "handrolled": f"{fmt(tools)} (the shared MCP layer; the loop adds nothing)",
            "langgraph": fmt(bench) + lg_extra,
        }
        self.row(
            "3. install footprint (fresh venv)",
            cells,
            {"empty": base, "kernel": core, "tools": tools, "langgraph": bench},
        )

    def _venv(self, name: str, reqs: list[str]) -> dict[str, Any]:
        progress(f"building a throwaway virtualenv: {name}")
        v = self.root / f"venv-{name}"
        subprocess.run([PY, "-m", "venv", str(v)], check=True, capture_output=True)
        pip = [
            str(v / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]
        for req in reqs:
            spec = str(ROOT) if req == "loopkernel-core" else str(ROOT) + req[len("loopkernel") :]
            subprocess.run([*pip, spec], check=True, capture_output=True, timeout=1200)
        site = next((v / "lib").glob("python*/site-packages"))
        dists = len(list(site.glob("*.dist-info")))
        size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
        return {"dists": dists, "bytes": size}

    # 4
    def import_time(self) -> None:
        times: dict[str, list[float]] = {impl: [] for impl in (*IMPLS, "python")}
        env = Work("loopkernel", self.root / "imports").env()
        code = {**IMPORTS, "python": "pass"}
        for rep in range(self.reps + 1):  # the first round warms the bytecode caches
            for impl, stmt in code.items():
                t0 = time.perf_counter()
                subprocess.run([PY, "-c", stmt], env=env, check=True, cwd=ROOT)
                if rep:
                    times[impl].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        cells = {
            impl: f"{med[impl] * 1000:.0f} ms ({med[impl] / med['loopkernel']:.2f}x; "
            f"{min(times[impl]) * 1000:.0f}-{max(times[impl]) * 1000:.0f})"
            for impl in IMPLS
        }
        cells["loopkernel"] += f"; bare python {med['python'] * 1000:.0f} ms"
        self.row(f"4. import time (median of {self.reps})", cells, times)

    # 5
    def whole_process(self) -> None:
        times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
        for rep in range(self.reps + 1):
            for impl in IMPLS:
                w = self.work(impl, f"proc{rep}")
                t0 = time.perf_counter()
                out = w.run("start", "baseline")
                if rep:
                    times[impl].append(time.perf_counter() - t0)
                if out.returncode != 0:
                    raise SystemExit(f"{impl} baseline failed: {out.stderr[-500:]}")
            progress(f"whole-process baseline: round {rep}/{self.reps}")
        med = {k: statistics.median(v) for k, v in times.items()}
        cells = {
            impl: f"{med[impl]:.2f} s ({med[impl] / med['loopkernel']:.2f}x; "
            f"{min(times[impl]):.1f}-{max(times[impl]):.1f})"
            for impl in IMPLS
        }
        self.row(f"5. baseline, whole process (median of {self.reps})", cells, times)

    # 6
    def kill_mid_call(self) -> None:
        cells, data = {}, {}
        for impl in IMPLS:
            parts, data[impl] = [], {}
            for keys in (True,) if impl == "loopkernel" else (True, False):
                progress(f"SIGKILL mid-call on {TITLES[impl]} (keys={keys})")
                sets: dict[str, Any] = {"act_delay": 3.0, "slow_step": 2}
                if not keys:
                    sets["keys"] = False
                ref = self.work(impl, "slow-ref")
                ref.run("start", "baseline", sets)
                want = ref.show()
                w = self.work(impl, "slow-kill")
                proc = subprocess.Popen(
                    w.command("start", "baseline", sets),
                    env=w.env(),
                    cwd=w.path,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                deadline = time.monotonic() + 120
                while not _arrivals(w, "transform", 1):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"{impl}: the slow call never started")
                    time.sleep(0.02)
                time.sleep(1.0)  # one second into the three-second call
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                resumed = w.run("resume")
                got = w.show()
                diff = differs(want, got)
                sent = _arrivals(w, "transform", 1)
                n = got.get("applied", []).count("transform#1")
                ok = "identical" if not diff else "differs: " + ", ".join(diff)
                label = "" if keys else "without keys: "
                parts.append(f"{label}{ok}; sent {sent}x, applied {n}x")
                data[impl][f"keys={keys}"] = {
                    "want": want,
                    "got": got,
                    "resume_exit": resumed.returncode,
                }
            cells[impl] = "; ".join(parts)
        self.row("6. SIGKILL 1.0 s into a 3.0 s tool call, resume", cells, data)

    # 7
    def death_after_return(self) -> None:
        cells, data = {}, {}
        want = {impl: self.seen["baseline"][impl] for impl in IMPLS}
        for impl in IMPLS:
            parts, data[impl] = [], {}
            variants: list[tuple[str, dict[str, Any]]] = [("", {})]
            if impl != "loopkernel":
                variants.append(("without keys: ", {"keys": False}))
            if impl == "langgraph":
                default = {"keys": False, "durability": "async"}
                variants.append(("default durability='async', no keys: ", default))
            for label, sets in variants:
                progress(f"death after the tool returned on {TITLES[impl]} {sets}")
                w = self.work(impl, f"returned-{len(parts)}")
                # tool call 2 is step 1's action (call 1 is load)
                w.run("start", "baseline", sets, **w.crash_env(2))
                w.run("resume")
                got = w.show()
                diff = differs(want[impl], got)
                n = got.get("applied", []).count("fetch#1")
                ok = "identical" if not diff else "state differs (" + ", ".join(diff) + ")"
                parts.append(f"{label}{ok}, applied {n}x")
                data[impl][label or "default"] = got
            cells[impl] = "; ".join(parts)
        self.row("7. death after the tool returned, before persisting", cells, data)

    # 8
    def file_alone(self) -> None:
        cells, data = {}, {}
        for impl in IMPLS:
            progress(f"copying the checkpoint file alone on {TITLES[impl]}")
            w = self.work(impl, "live")
            holder = None
            if impl == "handrolled":
                w.run("start", "irreversible")
            else:
                cmd = (
                    [PY, "-m", "bench.lk_hold", "--db", str(w.state_file), "--run", RUN]
                    if impl == "loopkernel"
                    else [*w.command("start", "irreversible"), "--hold", "60"]
                )
                holder = subprocess.Popen(
                    cmd,
                    env=w.env(),
                    cwd=w.path,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                marker = Path(f"{w.state_file}.paused")
                deadline = time.monotonic() + 120
                while not marker.exists():
                    if holder.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"{impl}: the run never paused")
                    time.sleep(0.05)
            c = self.work(impl, "copy")
            shutil.copyfile(w.state_file, c.state_file)  # the file alone: no -wal, no -shm
            shutil.copytree(w.lab, c.lab)
            size = c.state_file.stat().st_size
            sidecar = Path(f"{w.state_file}-wal")
            wal = sidecar.stat().st_size if sidecar.exists() else 0
            if holder is not None:
                holder.kill()
                holder.wait()
            c.approve()
            got = c.show()
            want = self.seen["irreversible"][impl]
            diff = differs(want, got)
            sizes = f"file {_size(size)}, WAL sidecar {_size(wal)}"
            if not diff:
                cells[impl] = f"yes ({sizes})"
            elif got.get("checkpoint") is False:
                cells[impl] = f"no: the copy holds no checkpoint of the run ({sizes})"
            else:
                cells[impl] = f"no: the copy resumes to {got.get('status')} ({sizes})"
            data[impl] = {"file_bytes": size, "wal_bytes": wal, "got": got}
            # the same, once the process that paused has exited cleanly
            paused = self.work(impl, "paused-exited")
            paused.run("start", "irreversible")
            c2 = self.work(impl, "copy-after-exit")
            shutil.copyfile(paused.state_file, c2.state_file)
            shutil.copytree(paused.lab, c2.lab)
            c2.approve()
            after = "yes" if not differs(want, c2.show()) else "no"
            cells[impl] += f"; copied after a clean exit: {after}"
            data[impl]["after_clean_exit"] = after
        self.row("8. checkpoint file alone (copied at the pause, host alive)", cells, data)

    # 9
    def injected(self) -> None:
        cells, data = {}, {}
        for impl in IMPLS:
            progress(f"injected exception on {TITLES[impl]}")
            w = self.work(impl, "inject")
            out = w.run("start", "baseline", {"inject": "plan"})
            got = w.show()
            says = got["status"] == "failed" and "injected" in str(got.get("why"))
            where = {
                "loopkernel": "run row",
                "handrolled": "state.json",
                "langgraph": "pending write of the failed task",
            }[impl]
            cells[impl] = (
                f"yes: failed, '{got.get('why')}' ({where})"
                if says
                else f"no: state says {got['status']}"
            )
            data[impl] = {"exit": out.returncode, "got": got}
        self.row("9. exception mid-run: persisted failed + why?", cells, data)

    # 10 + 11
    def approvals(self) -> None:
        cells, data = {}, {}
        for impl in IMPLS:
            before, after = self.first["irreversible"][impl], self.seen["irreversible"][impl]
            halted = before["status"] == "waiting" and "deploy#1" not in before["applied"]
            answered = after["status"] == "succeeded" and after["applied"].count("deploy#1") == 1
            cells[impl] = (
                f"halts: {'yes' if halted else 'no'}; another process answers: "
                f"{'yes' if answered else 'no'}"
            )
            data[impl] = {"before": before, "after": after}
        self.row("10. halts before the irreversible action; separate process answers", cells, data)

        cells, data = {}, {}
        for impl in IMPLS:
            counts = []
            for keys in (True,) if impl == "loopkernel" else (True, False):
                if keys:
                    got = self.seen["irreversible"][impl]
                else:
                    progress(f"approval without idempotency keys on {TITLES[impl]}")
                    w = self.work(impl, "approve-nokeys")
                    w.run("start", "irreversible", {"keys": False})
                    w.approve()
                    got = w.show()
                n = sum(e.startswith("approval requested") for e in got.get("record", []))
                counts.append(n)
            esc = sum(e.startswith("escalated") for e in self.seen["overspend"][impl]["record"])
            text = f"pause: {counts[0]}x"
            if len(counts) > 1:
                text += f" (without keys: {counts[1]}x)"
            cells[impl] = f"{text}; overspend escalation: {esc}x"
            data[impl] = {"approval_request": counts, "overspend_escalation": esc}
        self.row(
            "11. escalation entries in the durable record (side effect above the pause)",
            cells,
            data,
        )

    # 12
    def runaway(self) -> None:
        cells, data = {}, {}
        base = self.seen["baseline"]
        needed = {
            "loopkernel": self._lk_events(),
            "handrolled": 18,  # node executions in baseline
            "langgraph": 19,  # supersteps: found by the same probing (18 fails)
        }
        defaults = {
            "loopkernel": "default max_events 100,000",
            "handrolled": "none unless written",
            "langgraph": "default recursion_limit 10,007",
        }
        for impl in IMPLS:
            progress(f"runaway guard on {TITLES[impl]}")
            ok = self.work(impl, "limit-ok")
            ok.run("start", "baseline", {"max_steps": needed[impl]})
            fits = ok.show()["status"] == "succeeded"
            w = self.work(impl, "limit-short")
            out = w.run("start", "baseline", {"max_steps": needed[impl] - 1})
            got = w.show()
            persisted = got["status"]
            if impl == "loopkernel":
                what = f"stops: run row {persisted}, verdict {got.get('verdict')}"
            elif impl == "handrolled":
                what = f"stops: state.json {persisted} ({got.get('why')})"
            else:
                err = (
                    json.loads(out.stdout.strip().splitlines()[-1])["verdict"]["type"]
                    if out.stdout.strip()
                    else "?"
                )
                what = f"raises {err}; checkpoint says {persisted}"
            fit = "yes" if fits else "NO"
            cells[impl] = (
                f"{what} (limit {needed[impl] - 1}; {needed[impl]} fits: {fit}; {defaults[impl]})"
            )
            data[impl] = {
                "limit": needed[impl] - 1,
                "fits_at": needed[impl],
                "fits": fits,
                "got": got,
                "baseline": base[impl]["status"],
            }
        self.row("12. runaway: one step more than the limit", cells, data)

    def _lk_events(self) -> int:
        w = self.work("loopkernel", "count-events")
        w.run("start", "baseline")
        out = subprocess.run(
            [PY, "-m", "loopkernel", "--db", str(w.state_file), "inspect", RUN, "--json"],
            env=w.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        last = json.loads(out.stdout)["last_seq"]
        return int(last) - 1  # run_finished is journaled, not planned

    # 13
    def faults(self) -> None:
        cells, data = {}, {}
        for impl in IMPLS:
            parts, data[impl] = [], {}
            for fault in ("wrong_type", "timeout", "raise"):
                progress(f"tool fault {fault} on {TITLES[impl]}")
                w = self.work(impl, f"fault-{fault}")
                out = w.run("start", "baseline", {"fault": fault, "tool_timeout": 1.0})
                got = w.show()
                seen = _error_kind(impl, out, got)
                parts.append(f"{fault}: {seen} → {got['status']}")
                data[impl][fault] = {"error": seen, "got": got}
            cells[impl] = "; ".join(parts)
        self.row("13. faults at the tool boundary: error seen → persisted status", cells, data)


def _error_kind(impl: str, out: subprocess.CompletedProcess[str], got: dict[str, Any]) -> str:
    if impl == "loopkernel":
        return str(got.get("error"))
    try:
        verdict = json.loads(out.stdout.strip().splitlines()[-1])["verdict"]
    except (ValueError, IndexError, KeyError):
        return "?"
    return f"{verdict.get('type')}({verdict.get('kind')})"


def _arrivals(w: Work, step: str, attempt: int) -> int:
    """How many requests for ``step``'s ``attempt``-th action reached the tool server."""
    from loopkernel_apps.looplab.tools import calls_path

    lines = _read(calls_path(w.lab, RUN)).splitlines()
    calls = [json.loads(line) for line in lines if line.strip()]
    return sum(1 for c in calls if c["step"] == step and c["at"] == attempt)


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.0f} KiB"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def loc(path: Path) -> int:
    """Lines of code: no blank lines, no comment lines, no docstrings."""
    text = path.read_text()
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                doc_lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        code_lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(code_lines - doc_lines)


# -- output --------------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("loopkernel", "mcp", "langgraph", "langgraph-checkpoint-sqlite", "aiosqlite"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "missing"
    return out


def markdown(board: Board, when: str, took: float) -> str:
    head = "| measure | " + " | ".join(TITLES[i] for i in IMPLS) + " |"
    sep = "|---|" + "---|" * len(IMPLS)
    lines = [head, sep]
    for name, cells in board.rows:
        lines.append(f"| {name} | " + " | ".join(cells[i].replace("|", "/") for i in IMPLS) + " |")
    v = versions()
    meta = (
        f"{when}, {machine()}; loopkernel {v['loopkernel']}, mcp {v['mcp']}, langgraph "
        f"{v['langgraph']}, langgraph-checkpoint-sqlite {v['langgraph-checkpoint-sqlite']}; "
        f"{'--quick, ' if board.quick else ''}took {took:.0f} s"
    )
    return "\n".join(lines) + f"\n\n_{meta}_\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scoreboard", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 repetitions, no virtualenvs")
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    parser.add_argument(
        "--out",
        type=Path,
        help="where results are written (default bench/results; with --quick "
        f"{results_dir(quick=True)}, so a quick run never overwrites the committed results)",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = results_dir(args.quick)
    try:
        import langgraph
        import langgraph.checkpoint.sqlite.aio  # noqa: F401
    except ImportError:
        print("the scoreboard needs LangGraph: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    started = time.perf_counter()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    root = Path(tempfile.mkdtemp(prefix="lk-scoreboard-"))
    board = Board(root, reps=3 if args.quick else 7, quick=args.quick)
    steps: list[Callable[[], None]] = [
        board.scenarios,
        board.lines,
        board.footprint,
        board.import_time,
        board.whole_process,
        board.kill_mid_call,
        board.death_after_return,
        board.file_alone,
        board.injected,
        board.approvals,
        board.runaway,
        board.faults,
    ]
    try:
        for step in steps:
            step()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            progress(f"working directories kept in {root}")
    took = time.perf_counter() - started
    table = markdown(board, when, took)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scoreboard.md").write_text(table)
    payload = {
        "when": when,
        "machine": machine(),
        "versions": versions(),
        "quick": args.quick,
        "seconds": round(took, 1),
        "rows": [{"measure": n, **c} for n, c in board.rows],
        "data": board.data,
    }
    (args.out / "scoreboard.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(table)
    print(f"written: {args.out / 'scoreboard.md'}, {args.out / 'scoreboard.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
