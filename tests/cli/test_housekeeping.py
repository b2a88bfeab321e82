"""Run housekeeping on both stores (issue 24, section 3): ``delete``, ``prune``, retention
of ``worker`` and ``serve``, ``runs`` with its start time, age, ``--since`` and pages,
``--version`` and the bash completion."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from lk_stores import Backend
from loopkernel.client import Client
from loopkernel.errors import RunHeld, RunNotFound
from loopkernel.ids import RunId
from loopkernel.store._lease import Holder

pytestmark = pytest.mark.slow

DAY = 86400


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(), capture_output=True, text=True, timeout=120, cwd=cwd
    )


def tables_with_rows(backend: Backend, run: str) -> dict[str, int]:
    """Every table that has a ``run_id`` column, and how many rows of ``run`` it holds."""
    if backend.kind == "sqlite":
        names = backend.sql(
            "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c "
            "WHERE m.type = 'table' AND c.name = 'run_id'"
        )
    else:
        names = backend.sql(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'run_id' "
            "AND table_schema = current_schema()"
        )
    counts = {
        str(n): int(backend.sql(f"SELECT count(*) FROM {n} WHERE run_id = '{run}'")[0][0])
        for (n,) in names
    }
    return {n: c for n, c in counts.items() if c}


def age_runs(backend: Backend, days: float, *runs: str) -> None:
    """Move the runs' start and last change ``days`` into the past."""
    ids = ", ".join(f"'{r}'" for r in runs)
    backend.sql(
        f"UPDATE runs SET created_at = created_at - {days * DAY}, "
        f"updated_at = updated_at - {days * DAY} WHERE run_id IN ({ids})"
    )


def test_delete_removes_every_row_of_a_run_and_refuses_a_held_one(
    backend: Backend, tmp_path: Path
) -> None:
    db = backend.url
    lab = cli("--db", db, "run", "looplab", "--run-id", "lab", "--quiet", cwd=tmp_path)
    assert lab.returncode == 0, lab.stderr
    assert cli("--db", db, "run", "lk_testapps:gate", "--run-id", "g").returncode == 3
    rows = tables_with_rows(backend, "lab")
    assert {"runs", "tasks", "events", "patches", "effects"} <= set(rows), rows
    out = cli("--db", db, "delete", "lab")
    assert out.returncode == 0 and out.stdout == "deleted run lab\n", out.stderr
    assert tables_with_rows(backend, "lab") == {}
    assert tables_with_rows(backend, "g")  # the other run is untouched
    missing = cli("--db", db, "delete", "lab")
    assert missing.returncode == 2 and "no run lab" in missing.stderr

    # a live lease (this test process holds it): refused, exit 7, nothing deleted
    async def hold(store: object) -> None:
        await store.acquire(RunId("g"), Holder.here(), 60.0)  # type: ignore[attr-defined]

    backend.run(hold)
    held = cli("--db", db, "delete", "g")
    assert held.returncode == 7 and "held by another executor" in held.stderr, held.stderr
    assert len(held.stderr.strip().splitlines()) == 1
    assert tables_with_rows(backend, "g")


def test_prune_deletes_old_finished_runs_only_and_dry_run_deletes_nothing(
    backend: Backend,
) -> None:
    db = backend.url
    finished_runs(db, "old-1", "old-2", "new")
    assert cli("--db", db, "run", "lk_testapps:gate", "--run-id", "old-wait").returncode == 3
    age_runs(backend, 40, "old-1", "old-2", "old-wait")

    dry = cli("--db", db, "prune", "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert sorted(dry.stdout.splitlines()[:-1]) == [
        "would delete run old-1",
        "would delete run old-2",
    ]
    assert dry.stdout.splitlines()[-1] == "would delete 2 run(s)"
    assert tables_with_rows(backend, "old-1")

    out = cli("--db", db, "prune", "--older-than", "30d")
    assert "deleted 2 run(s)" in out.stdout.splitlines(), out.stdout  # then the space, SQLite
    listed = cli("--db", db, "runs").stdout
    assert re.findall(r"^(\S+)", listed, re.M) == ["new", "old-wait"]
    # a waiting run goes only when asked for by status
    out = cli("--db", db, "prune", "--older-than", "30d", "--status", "waiting")
    assert "deleted 1 run(s)" in out.stdout.splitlines(), out.stdout
    assert re.findall(r"^(\S+)", cli("--db", db, "runs").stdout, re.M) == ["new"]


def test_prune_keeps_a_run_an_executor_holds(backend: Backend) -> None:
    async def body(store: object) -> tuple[tuple[RunId, ...], tuple[RunId, ...]]:
        client = Client(store=store)  # type: ignore[arg-type]
        _, started = await client.start("lk_testapps:gate", run_id="g")
        await client.execute(started.run_id)  # waiting now
        await client.cancel("g", "done with it")
        await store.acquire(RunId("g"), Holder.here(), 60.0)  # type: ignore[attr-defined]
        with pytest.raises(RunHeld):
            await client.delete("g")
        pruned = await client.prune(0.0, now=time.time() + 1)
        with pytest.raises(RunNotFound):
            await client.delete("nope")
        return pruned.deleted, pruned.held

    assert backend.run(body) == ((), ("g",))


def finished_runs(db: str | Path, *runs: str) -> None:
    """Finished runs of speculation's ``fast`` scenario, made in this process: housekeeping
    is what these tests drive through the CLI, and a CLI start costs a process per run."""
    from loopkernel import sync

    with sync.Client(db) as client:
        for run in runs:
            _, outcome = client.run_app("speculation", scenario="fast", run_id=run)
            assert outcome.status == "succeeded", outcome


def test_runs_shows_start_and_age_filters_by_date_and_pages(backend: Backend) -> None:
    db = backend.url
    finished_runs(db, "r1", "r2", "r3")
    args = ["run", "speculation", "--scenario", "fast", "--run-id", "r4", "--quiet"]
    assert cli("--db", db, *args).returncode == 0  # and one as the CLI starts it
    age_runs(backend, 10, "r1")
    age_runs(backend, 3, "r2")
    out = cli("--db", db, "runs")
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["r4", "r3", "r2", "r1"]
    r1 = lines[-1].split()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", r1[3]) and re.fullmatch(r"\d\d:\d\d:\d\d", r1[4])
    assert r1[5] in ("10d", "9d"), lines[-1]  # its age
    assert lines[0].split()[5].endswith(("s", "m"))

    since = cli("--db", db, "runs", "--since", "7d")
    assert [line.split()[0] for line in since.stdout.splitlines()] == ["r4", "r3", "r2"]
    day = time.strftime("%Y-%m-%d", time.localtime(time.time() - 5 * DAY))
    by_date = cli("--db", db, "runs", "--since", day)
    assert [line.split()[0] for line in by_date.stdout.splitlines()] == ["r4", "r3", "r2"]

    page, seen = cli("--db", db, "runs", "--limit", "2"), []
    while True:
        seen += [line.split()[0] for line in page.stdout.splitlines()]
        more = re.search(
            r"\(more: loopkernel --db \S+ runs (--before \S+ --limit 2)\)", page.stderr
        )
        if more is None:
            break
        page = cli("--db", db, "runs", *more.group(1).split())
    assert seen == ["r4", "r3", "r2", "r1"]

    # the next page's command keeps the filters, an age as the moment it meant
    page, seen = (
        cli(
            "--db",
            db,
            "runs",
            "--limit",
            "1",
            "--app",
            "speculation",
            "--status",
            "succeeded",
            "--since",
            "7d",
        ),
        [],
    )
    while True:
        seen += [line.split()[0] for line in page.stdout.splitlines()]
        more = re.search(r"\(more: loopkernel --db \S+ runs (.*)\)", page.stderr)
        if more is None:
            break
        words = more.group(1).split()
        assert words[2:8] == ["--limit", "1", "--status", "succeeded", "--app", "speculation"]
        assert words[8] == "--since" and re.fullmatch(r"\d{4}-.*T.*[+-]\d\d:\d\d", words[9])
        page = cli("--db", db, "runs", *words)
    assert seen == ["r4", "r3", "r2"]


def _wait_for_line(proc: subprocess.Popen[str], pattern: str) -> str:
    assert proc.stderr is not None
    for line in proc.stderr:
        if re.search(pattern, line):
            return line
    raise AssertionError(f"the process ended without a line matching {pattern!r}")


def test_a_worker_with_retention_prunes_old_finished_runs(backend: Backend) -> None:
    db = backend.url
    finished_runs(db, "old", "new")
    age_runs(backend, 40, "old")
    proc = subprocess.Popen(
        [*LOOPKERNEL, "--db", db, "worker", "--retention", "30d"],
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = _wait_for_line(proc, r"^loopkernel: retention")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert "retention 30d: 1 run(s) deleted" in line, line
    assert re.findall(r"^(\S+)", cli("--db", db, "runs").stdout, re.M) == ["new"]


def test_serve_with_retention_prunes_old_finished_runs(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    db = str(tmp_path / "runs.db")
    finished_runs(db, "old", "new")
    Backend(kind="sqlite", url=db).sql(
        f"UPDATE runs SET created_at = created_at - {40 * DAY}, "
        f"updated_at = updated_at - {40 * DAY} WHERE run_id = 'old'"
    )
    proc = subprocess.Popen(
        [*LOOPKERNEL, "--db", db, "serve", "--port", "0", "--retention", "30d"],
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = _wait_for_line(proc, r"^loopkernel: retention")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert "retention 30d: 1 run(s) deleted" in line, line
    assert re.findall(r"^(\S+)", cli("--db", db, "runs").stdout, re.M) == ["new"]


# The loopkernel program itself, as completion calls it back (COMP_WORDS[0]) for run ids.
PROG = (str(Path(sys.executable).parent / "loopkernel"),)


def test_bash_completion_is_generated_from_the_parser(tmp_path: Path) -> None:
    out = cli("completion", "bash")
    assert out.returncode == 0 and "complete -F _loopkernel loopkernel" in out.stdout
    script = tmp_path / "lk.bash"
    script.write_text(out.stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        probe = (
            f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
            '_loopkernel; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("loopkernel", "pr") == ["prune"]
    assert {"delete", "prune", "runs", "investigate", "completion"} <= set(
        complete("loopkernel", "")
    )
    assert complete("loopkernel", "--db", "x.db", "runs", "--si") == ["--since"]
    assert "--older-than" in complete("loopkernel", "prune", "--")
    assert complete("loopkernel", "--ver") == ["--verbose", "--version"]

    # a positional is completed by what it names: apps, the database's runs, a shell
    assert {"looplab", "speculation", "sre"} <= set(complete("loopkernel", "run", ""))
    assert complete("loopkernel", "submit", "--scenario", "x", "spec") == ["speculation"]
    assert complete("loopkernel", "completion", "") == ["bash"]
    db = tmp_path / "runs.db"
    for run in ("alpha", "beta"):
        args = ["--db", str(db), "run", "speculation", "--scenario", "fast", "--run-id", run]
        assert cli(*args, "--quiet").returncode == 0
    assert complete(*PROG, "--db", str(db), "inspect", "") == ["beta", "alpha"]  # newest first
    assert complete(*PROG, "inspect", "--db", str(db), "--journal", "al") == ["alpha"]
    assert complete(*PROG, "--db", str(db), "delete", "alpha", "b") == ["beta"]
    task = complete(*PROG, "--db", str(db), "approve", "alpha", "")  # a task: file names
    assert task and not {"alpha", "beta"} & set(task)
    (tmp_path / "scenario.json").write_text("{}")
    assert complete(*PROG, "run", "--set", str(tmp_path / "scen")) == [
        str(tmp_path / "scenario.json")
    ]


def test_the_sync_client_deletes_and_prunes_too(tmp_path: Path) -> None:
    from loopkernel import sync

    with sync.Client(tmp_path / "runs.db") as client:
        client.run_app("speculation", scenario="fast", run_id="s1")
        client.run_app("speculation", scenario="fast", run_id="s2")
        client.delete("s1")
        assert [r.run_id for r in client.list_runs()] == ["s2"]
        assert client.prune(0.0, dry_run=True).deleted == ("s2",)
        asyncio.run(asyncio.sleep(0))  # an event loop in this thread changes nothing
        assert client.prune(3600.0).deleted == ()


def test_prune_gives_the_space_back_and_says_how_much(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _runs(db, "s", 12)
    full = db.stat().st_size
    out = cli("--db", str(db), "prune", "--older-than", "0s")
    assert out.returncode == 0, out.stderr
    space = re.search(r"space: ([\d,]+) -> ([\d,]+) bytes \(([\d,]+) returned; (.*)\)", out.stdout)
    assert space is not None, out.stdout
    before, after, returned = (int(space.group(i).replace(",", "")) for i in (1, 2, 3))
    assert space.group(4) == "incremental vacuum" and returned == before - after
    assert before >= full > after == db.stat().st_size  # the WAL folded in and truncated
    assert _free_pages(db) == 0  # every page the runs had is back with the file system

    # a file made before auto_vacuum was set: prune says so, --vacuum rewrites it once
    old = tmp_path / "old.db"
    _runs(old, "o", 12)
    _make_old(old)
    kept = cli("--db", str(old), "prune", "--older-than", "0s")
    assert "none: an older file (prune --vacuum rewrites it once)" in kept.stdout, kept.stdout
    assert _free_pages(old) > 0
    vac = cli("--db", str(old), "prune", "--older-than", "0s", "--vacuum")
    assert "deleted 0 run(s)" in vac.stdout and "; vacuum)" in vac.stdout, vac.stdout
    assert _free_pages(old) == 0 and old.stat().st_size < full
    _runs(old, "p", 2)
    later = cli("--db", str(old), "prune", "--older-than", "0s")
    assert "; incremental vacuum)" in later.stdout, later.stdout  # incremental from then on
    dry = cli("--db", str(old), "prune", "--older-than", "0s", "--dry-run")
    assert "space:" not in dry.stdout  # a dry run gives nothing back


def _runs(db: Path, prefix: str, n: int) -> None:
    finished_runs(db, *(f"{prefix}{i}" for i in range(n)))


def _free_pages(db: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    finally:
        conn.close()


def _make_old(path: Path) -> None:
    """The file as an earlier version made it: no auto_vacuum."""
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("VACUUM")
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    finally:
        conn.close()
