"""Schedules (issue 24, section 1): ``loopkernel schedule add|list|remove``, and workers
that start exactly one run per due time, with two workers and after a SIGKILL."""

from __future__ import annotations

import calendar
import json
import sqlite3
import subprocess
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel.errors import UsageError
from loopkernel.store import Schedule
from loopkernel.testing import run_cli

if TYPE_CHECKING:
    from lk_stores import Backend
    from loopkernel.store import Store

JAN_2026 = calendar.timegm(datetime(2026, 1, 1).timetuple())
JAN_2027 = calendar.timegm(datetime(2027, 1, 1).timetuple())


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql))


def test_add_list_remove_and_bad_input(tmp_path: Path) -> None:
    db, env = tmp_path / "runs.db", cli_env()
    add = ["schedule", "add", "yearly", "lk_timerapps:nap", "--cron", "0 0 1 1 *"]
    out = run_cli([*add, "--set", "seconds=0"], db=db, env=env)
    assert out.returncode == 0, out.stderr
    assert run_cli(add, db=db, env=env).returncode == 2  # exists already
    bad = run_cli(
        ["schedule", "add", "x", "lk_timerapps:nap", "--cron", "61 * * * *"], db=db, env=env
    )
    assert bad.returncode == 2 and "outside 0-59" in bad.stderr
    nope = run_cli(
        ["schedule", "add", "y", "lk_timerapps:nap", "--cron", "* * * * *", "--set", "zz=1"],
        db=db,
        env=env,
    )
    assert nope.returncode == 2 and "no parameter 'zz'" in nope.stderr
    listed = json.loads(run_cli(["schedule", "list", "--json"], db=db, env=env).stdout)
    assert [(s["name"], s["cron"], s["params"]) for s in listed] == [
        ("yearly", "0 0 1 1 *", {"seconds": 0})
    ]
    assert listed[0]["next_due"] > time.time()
    assert run_cli(["schedule", "remove", "yearly"], db=db, env=env).returncode == 0
    assert run_cli(["schedule", "remove", "yearly"], db=db, env=env).returncode == 2
    assert json.loads(run_cli(["schedule", "list", "--json"], db=db, env=env).stdout) == []


def worker(db: Path, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LOOPKERNEL, "--db", str(db), "worker", "--poll", "0.05", "--app", "lk_timerapps:nap"],
        env=cli_env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_missed_due_time_starts_one_run_across_a_crash_and_two_workers(
    tmp_path: Path,
) -> None:
    db, env = tmp_path / "runs.db", cli_env()
    add = ["schedule", "add", "yearly", "lk_timerapps:nap", "--cron", "0 0 1 1 *"]
    assert run_cli([*add, "--set", "seconds=0"], db=db, env=env).returncode == 0
    with sqlite3.connect(db) as conn:  # the workers were down on new year's day
        conn.execute("UPDATE schedules SET next_due = ?", (JAN_2026,))
    run_id = "yearly.20260101T0000Z"

    # A worker killed after it started the run, before it enqueued it: the decision (start
    # it; next due time next year) was written first, and stays.
    first = worker(db, LOOPKERNEL_CRASH_AT="schedule_started")
    first.communicate(timeout=120)
    assert first.returncode == -9
    assert rows(db, "SELECT run_id, status, lease_until FROM runs") == [(run_id, "running", None)]
    assert rows(db, "SELECT next_due, state FROM schedules")[0][0] == JAN_2027
    assert json.loads(str(rows(db, "SELECT state FROM schedules")[0][0]))["pending"] == [run_id]

    # Two workers at once: the run is enqueued, run once, and the schedule moves on.
    both = [worker(db), worker(db)]
    try:
        for _ in range(2400):
            if ("run_finished",) in rows(db, f"SELECT kind FROM events WHERE run_id = '{run_id}'"):
                break
            assert all(w.poll() is None for w in both)
            time.sleep(0.05)  # a look at the journal, not a threshold
        for _ in range(2400):
            if rows(db, "SELECT last_run FROM schedules") == [(run_id,)]:
                break
            time.sleep(0.05)
    finally:
        for w in both:
            w.terminate()
            w.communicate(timeout=60)
    assert rows(db, "SELECT run_id, status FROM runs") == [(run_id, "succeeded")]
    assert rows(db, "SELECT next_due, last_run FROM schedules") == [(JAN_2027, run_id)]
    kinds = [k for (k,) in rows(db, "SELECT kind FROM events ORDER BY seq")]
    assert kinds.count("run_started") == 1 and kinds.count("run_finished") == 1


def test_the_store_keeps_schedules_and_moves_them_by_compare_and_set(backend: Backend) -> None:
    async def body(store: Store) -> None:
        s = Schedule(name="s", cron="0 0 1 1 *", app="a:b", params={"k": [1]}, next_due=JAN_2026)
        await store.add_schedule(s)
        with pytest.raises(UsageError, match="exists already"):
            await store.add_schedule(s)
        assert await store.schedules() == [s]
        assert await store.due_schedules(JAN_2026 - 1) == []
        assert await store.due_schedules(JAN_2026) == [s]
        moved = replace(s, next_due=JAN_2027, last_run="s.x", buffer=("s.b",), counts={"a": 1})
        assert await store.write_schedule(moved, [("started", "s.x", "a:b")]) is True
        assert await store.write_schedule(moved, [("started", "s.y", "a:b")]) is False  # lost
        (stored,) = await store.schedules()
        assert stored == replace(moved, rev=1)
        assert await store.due_schedules(JAN_2026) == [stored]  # busy: its buffer
        kinds = [(e.rev, e.kind, e.run_id) for e in await store.schedule_events("s")]
        assert kinds == [(0, "added", None), (1, "started", "s.x")]
        await store.remove_schedule("s")
        with pytest.raises(UsageError, match="no schedule"):
            await store.remove_schedule("s")
        assert await store.schedule_events("s") == []

    backend.run(body)
