"""One executor per run, with real processes: a second ``resume`` (or a ``resume`` next to a
live ``run``) is refused at once with exit 7 and writes nothing; the run ends with the
digest of an uninterrupted one, each effect applied once, no task run twice; a holder that
died is taken over, at once on this machine, at the end of its lease from elsewhere."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lk_helpers import cli_env
from loopkernel.errors import RunHeld
from loopkernel.ids import RunId
from loopkernel.store import open_store
from loopkernel.store._lease import Holder
from loopkernel.testing import read_trace, run_cli, was_killed
from loopkernel.tools import read_ledger
from loopkernel_apps.looplab.tools import applied, calls_path, record_path, world_path

pytestmark = pytest.mark.slow

RUN = "one"
# speculation with a distiller slow enough that a second resume starts while it runs
SPEC = ["--set", "delays=[0.01, 0.02, 2.0]", "--set", "distill_delay=6.0"]
LAB_SLOW = ["--set", "act_delay=3.0", "--set", "slow_step=2"]
LAB_SLOW_DIGEST = "c222fc4d648af728b21f9d479622ebb7bb14d517d11d2db9ff6f091a0f15e153"
LAB_BASELINE_DIGEST = "6b02b22f6da538bbb48d2ca18dc45ba153666183c8046d42d71437d28ef6e0c9"
LAB_APPLIED = ["fetch#1", "transform#1", "transform#2", "report#1"]


def env(lab: Path | None = None, trace: Path | None = None) -> dict[str, str]:
    extra = {}
    if lab is not None:
        extra["LOOPLAB_DIR"] = str(lab)
    if trace is not None:
        extra["LOOPKERNEL_TRACE"] = str(trace)
    return cli_env(**extra)


def cli(db: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    crash = kw.pop("crash_at", None)
    return run_cli(list(args), db=db, env=env(**kw), crash_at=crash)


def spawn(db: Path | str, *args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopkernel", "--db", str(db), *args],
        env=env(**kw),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def inspect(db: Path) -> dict[str, Any]:
    out = cli(db, "inspect", RUN, "--json")
    assert out.returncode != 2, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def until(what: str, check: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """Wait for a condition (a journal row, a trace line) while ``proc`` lives."""
    deadline = time.monotonic() + 60
    while not check():
        assert proc.poll() is None, f"{what}: the process ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)


def rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute(query).fetchall()
    except sqlite3.OperationalError:
        return []


def journal(db: Path) -> list[tuple[Any, ...]]:
    return rows(db, "SELECT seq, kind, task_id FROM events ORDER BY seq") + rows(
        db, "SELECT event_seq, outcome FROM patches ORDER BY event_seq"
    )


def late_planned(db: Path) -> bool:
    return bool(
        rows(
            db,
            "SELECT 1 FROM patches p JOIN events e ON e.run_id = p.run_id "
            "AND e.seq = p.event_seq WHERE e.kind = 'late_result_discarded'",
        )
    )


def assert_refused(proc: subprocess.CompletedProcess[str], holder_pid: int | None) -> None:
    assert proc.returncode == 7, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"run {RUN} is held by another executor" in lines[0]
    if holder_pid is not None:
        assert f"pid {holder_pid} on host {socket.gethostname()} since " in lines[0]
    assert "its lease ends at" in lines[0]
    assert proc.stdout == ""


@pytest.fixture(scope="module")
def spec_reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = tmp_path_factory.mktemp("ref") / "runs.db"
    out = cli(db, "run", "speculation", "--run-id", RUN, "--quiet", *SPEC)
    assert out.returncode == 0, out.stderr
    return str(inspect(db)["digest"])


def test_a_second_resume_of_speculation_is_refused_while_the_first_runs(
    tmp_path: Path, spec_reference: str
) -> None:
    db, trace = tmp_path / "runs.db", tmp_path / "trace.txt"
    crashed = cli(
        db,
        "run",
        "speculation",
        "--run-id",
        RUN,
        "--quiet",
        *SPEC,
        crash_at="patch_committed:2",
        trace=trace,
    )
    assert was_killed(crashed), crashed.stderr
    done_before = {tid for (what, tid), _ in read_trace(trace).items() if what == "done"}
    first = spawn(db, "resume", RUN, "--quiet", trace=trace)
    try:
        until("the distiller to start", lambda: ("start", "distill") in read_trace(trace), first)
        until("the straggler's late result to be planned", lambda: late_planned(db), first)
        before = journal(db)  # quiet now until the distiller returns
        second = cli(db, "resume", RUN, "--quiet", trace=trace)
        assert_refused(second, first.pid)
        assert journal(db) == before  # the refused executor wrote nothing
        third = cli(db, "run", "speculation", "--run-id", RUN, "--quiet", *SPEC)
        assert third.returncode == 2  # the id is taken; nothing else happens
    finally:
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert inspect(db)["digest"] == spec_reference
    starts = {tid: n for (what, tid), n in read_trace(trace).items() if what == "start"}
    for tid, n in starts.items():  # the crash may have cut one run of a task short
        assert n <= (1 if tid in done_before else 2), (tid, n)
    assert starts["distill"] == 1


def test_two_resumes_started_together_run_speculation_once(
    tmp_path: Path, spec_reference: str
) -> None:
    db, trace = tmp_path / "runs.db", tmp_path / "trace.txt"
    crashed = cli(
        db, "run", "speculation", "--run-id", RUN, "--quiet", *SPEC, crash_at="patch_committed:2"
    )
    assert was_killed(crashed), crashed.stderr
    procs = [spawn(db, "resume", RUN, "--quiet", trace=trace) for _ in range(2)]
    results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    codes = sorted(code for _, code in results)
    assert codes in ([0, 0], [0, 7]), results  # 0, 0: the second came after the end
    assert inspect(db)["digest"] == spec_reference
    starts = {tid: n for (what, tid), n in read_trace(trace).items() if what == "start"}
    assert all(n == 1 for n in starts.values()), starts  # no task ran twice
    assert starts.get("distill") == 1


def test_a_resume_next_to_a_live_looplab_run_is_refused_and_effects_apply_once(
    tmp_path: Path,
) -> None:
    db, lab = tmp_path / "runs.db", tmp_path / "lab"
    live = spawn(db, "run", "looplab", "--run-id", RUN, "--quiet", *LAB_SLOW, lab=lab)
    try:
        until(
            "the slow act:2.1 call",
            lambda: bool(rows(db, "SELECT 1 FROM effects WHERE task_id = 'act:2.1'")),
            live,
        )
        assert_refused(cli(db, "resume", RUN, "--quiet", lab=lab), live.pid)
    finally:
        _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    assert inspect(db)["digest"] == LAB_SLOW_DIGEST
    assert applied(lab, RUN) == LAB_APPLIED
    for path in (record_path(lab, RUN), world_path(lab, RUN)):
        keys = [e["key"] for e in read_ledger(path)]
        assert len(keys) == len(set(keys)), keys  # the durable run record: each effect once
    sent = [json.loads(line)["key"] for line in calls_path(lab, RUN).read_text().splitlines()]
    assert len(sent) == len(set(sent)), sent  # no action was even sent twice


def test_two_resumes_of_a_crashed_looplab_run_apply_each_effect_once(tmp_path: Path) -> None:
    db, lab = tmp_path / "runs.db", tmp_path / "lab"
    killed = cli(db, "run", "looplab", "--run-id", RUN, "--quiet", lab=lab, crash_at="tool_sent:5")
    assert was_killed(killed), killed.stderr
    procs = [spawn(db, "resume", RUN, "--quiet", lab=lab) for _ in range(2)]
    results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    assert sorted(code for _, code in results) in ([0, 0], [0, 7]), results
    assert inspect(db)["digest"] == LAB_BASELINE_DIGEST
    assert applied(lab, RUN) == LAB_APPLIED
    for path in (record_path(lab, RUN), world_path(lab, RUN)):
        keys = [e["key"] for e in read_ledger(path)]
        assert len(keys) == len(set(keys)), keys


def _hold(db: Path, holder: Holder, seconds: float, run: str = RUN) -> None:
    async def go() -> None:
        store = open_store(str(db))
        await store.open()
        try:
            try:
                await store.acquire(RunId(run), holder, seconds)
            except RunHeld as held:  # the crashed process's lease: known dead
                await store.acquire(RunId(run), holder, seconds, takeover=held.attrs["epoch"])
        finally:
            await store.close()

    asyncio.run(go())


def test_a_holder_elsewhere_is_waited_for_and_a_dead_one_here_is_taken_over(
    tmp_path: Path, spec_reference: str
) -> None:
    db = tmp_path / "runs.db"
    for run in (RUN, "two"):
        crashed = cli(
            db,
            "run",
            "speculation",
            "--run-id",
            run,
            "--quiet",
            *SPEC,
            crash_at="patch_committed:2",
        )
        assert was_killed(crashed), crashed.stderr
    # Held from another machine: refused while its lease lasts, taken over once it ran out.
    _hold(db, Holder(host="elsewhere.example", pid=4242, since=time.time()), 600)
    before = journal(db)
    refused = cli(db, "resume", RUN, "--quiet")
    assert refused.returncode == 7, refused.stderr
    assert "pid 4242 on host elsewhere.example" in refused.stderr
    assert journal(db) == before
    with sqlite3.connect(db) as conn:  # no heartbeat came: its lease runs out
        conn.execute("UPDATE runs SET lease_until = ? WHERE run_id = ?", (time.time() - 1, RUN))
    resumed = cli(db, "resume", RUN, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert inspect(db)["digest"] == spec_reference
    # Held by a process of this machine that is gone: taken over at once, lease or not.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = Holder(host=socket.gethostname(), pid=int(dead.stdout), since=time.time())
    _hold(db, gone, 600, run="two")
    resumed = cli(db, "resume", "two", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert rows(db, "SELECT owner, lease_until FROM runs") == [(None, None), (None, None)]


def test_on_postgresql_a_resume_next_to_a_live_run_is_refused_and_a_lost_server_retried(
    pg_backend: Any, tmp_path: Path, spec_reference: str
) -> None:
    url, trace = pg_backend.url, tmp_path / "trace.txt"

    def pg_journal() -> list[tuple[Any, ...]]:
        return pg_backend.sql("SELECT seq, kind FROM events ORDER BY seq") + pg_backend.sql(
            "SELECT event_seq FROM patches ORDER BY event_seq"
        )

    def pg_late_planned() -> bool:
        return bool(
            pg_backend.sql(
                "SELECT 1 FROM patches p JOIN events e ON e.run_id = p.run_id "
                "AND e.seq = p.event_seq WHERE e.kind = 'late_result_discarded'"
            )
        )

    live = spawn(url, "run", "speculation", "--run-id", RUN, "--quiet", *SPEC, trace=trace)
    try:
        until("the distiller to start", lambda: ("start", "distill") in read_trace(trace), live)
        until("the straggler's late result to be planned", pg_late_planned, live)
        before = pg_journal()
        refused = run_cli(["resume", RUN, "--quiet"], db=url, env=env())
        assert_refused(refused, live.pid)
        assert pg_journal() == before
        # The server drops every connection of the live executor (a restart, a failover):
        # its next writes fail, are retried on fresh connections, and the run goes on.
        pg_backend.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        _, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    out = run_cli(["inspect", RUN, "--json"], db=url, env=env())
    assert json.loads(out.stdout)["digest"] == spec_reference
    starts = {tid: n for (what, tid), n in read_trace(trace).items() if what == "start"}
    # What had finished before the fault never runs again; the distiller, in flight when
    # the connections dropped, may run again (at least once at the task boundary).
    assert {tid: n for tid, n in starts.items() if tid != "distill"} == dict.fromkeys(
        ("plan", "r1", "r2", "r3"), 1
    )
    assert starts["distill"] in (1, 2)


def test_an_unreachable_postgresql_is_one_line_and_exit_8() -> None:
    url = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1"
    out = run_cli(["resume", "r", "--quiet", "--store-retry", "0"], db=url, env=env())
    assert out.returncode == 8, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("loopkernel: store unavailable: cannot connect to PostgreSQL")


def test_a_waiting_run_holds_no_lease_and_is_approved_from_another_process(
    tmp_path: Path,
) -> None:
    db, trace = tmp_path / "runs.db", tmp_path / "trace.txt"
    parked = cli(db, "run", "lk_testapps:gate", "--run-id", RUN, "--quiet", trace=trace)
    assert parked.returncode == 3, parked.stderr  # waiting
    assert rows(db, "SELECT status, owner, lease_until FROM runs") == [("waiting", None, None)]
    approved = cli(db, "approve", RUN, "gate", "--payload", '{"by": "ops"}')
    assert approved.returncode == 0, approved.stderr
    done = cli(db, "resume", RUN, "--json", trace=trace)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "succeeded"
    starts = {tid: n for (what, tid), n in read_trace(trace).items() if what == "start"}
    assert starts == {"prep": 1, "gate": 1, "ship": 1}
