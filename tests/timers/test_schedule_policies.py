"""Schedule policies (issue 33, item 4): each overlap policy with two workers on both
stores, the catch-up window, jitter, pause/resume, update, trigger and backfill, with the
clock handed to ``fire_due`` (no sleeping); and a worker SIGKILLed at the due time."""

from __future__ import annotations

import asyncio
import calendar
import json
import subprocess
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import _schedules as sched
from loopkernel.client import Client
from loopkernel.errors import UsageError
from loopkernel.ids import RunId
from loopkernel.store import Schedule
from loopkernel.testing import run_cli

if TYPE_CHECKING:
    from lk_stores import Backend
    from loopkernel.store import Store

NAP = "lk_timerapps:nap"
HOUR = 3600.0


def at(text: str) -> float:
    return float(calendar.timegm(datetime.fromisoformat(text).timetuple()))


T10 = at("2026-12-01 10:00")


def rid(hour: int) -> str:
    return f"hourly.20261201T{hour:02d}00Z"


class Pool:
    """Two workers' views of one store (two connections), fired at a given time."""

    def __init__(self, a: Client, b: Client) -> None:
        self.a, self.b = a, b
        self.log: list[str] = []

    async def fire(self, now: float) -> None:
        """Both workers at once, then each once more: a round is idempotent."""
        await asyncio.gather(
            sched.fire_due(self.a, now, self.log.append),
            sched.fire_due(self.b, now, self.log.append),
        )
        await sched.fire_due(self.a, now, self.log.append)
        await sched.fire_due(self.b, now, self.log.append)

    async def runs(self) -> dict[str, str]:
        """Run id -> status (of the schedule's runs)."""
        out = {}
        for info in await self.a.store.list_runs(limit=100):
            out[str(info.run_id)] = info.status.value
        return out

    async def schedule(self) -> Schedule:
        (s,) = await self.a.store.schedules()
        return s

    async def finish(self, run_id: str) -> str:
        """Run it to its end here (nap with seconds=0: it succeeds, or is cancelled)."""
        return (await self.a.execute(run_id)).status.value


async def pool_of(store: Store, backend: Backend, **policy: object) -> tuple[Pool, Store]:
    other = backend.store()
    await other.open()
    s = Schedule(
        name="hourly",
        cron="0 * * * *",
        app=NAP,
        params={"seconds": 0},
        next_due=T10,
        **policy,  # type: ignore[arg-type]
    )
    await store.add_schedule(s)
    return Pool(Client(store=store), Client(store=other)), other


POLICIES = {
    # policy: (runs after 10:00, 11:00 and 12:00 came while 10:00's run goes on,
    #          the runs once it ended and the rounds after, counts)
    "skip": ({rid(10)}, {rid(10)}, {"started": 1, "skipped": 2}),
    "buffer_one": ({rid(10)}, {rid(10), rid(11)}, {"started": 2, "buffered": 1, "skipped": 1}),
    "buffer_all": (
        {rid(10)},
        {rid(10), rid(11), rid(12)},
        {"started": 3, "buffered": 2},
    ),
    "cancel_other": (
        {rid(10)},
        {rid(10), rid(12)},
        {"started": 2, "buffered": 2, "skipped": 1, "cancelled": 1},
    ),
    "allow_all": ({rid(10), rid(11), rid(12)}, {rid(10), rid(11), rid(12)}, {"started": 3}),
}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_each_overlap_policy_with_two_workers(backend: Backend, policy: str) -> None:
    going, finally_, counts = POLICIES[policy]

    async def body(store: Store) -> None:
        pool, other = await pool_of(store, backend, overlap=policy)
        try:
            for hour in (10, 11, 12):
                await pool.fire(T10 + (hour - 10) * HOUR + 1)
            runs = await pool.runs()
            assert set(runs) == going
            assert all(status == "running" for status in runs.values())
            s = await pool.schedule()
            if policy == "cancel_other":  # asked once, though two due times came
                assert s.buffer == (rid(12),)
                kinds = [e.kind for e in await store.events(RunId(rid(10)))]
                assert kinds.count("cancel_requested") == 1
            # The previous runs end, one by one, each followed by a round.
            now = T10 + 2 * HOUR + 30
            for _ in range(4):
                for run_id, status in (await pool.runs()).items():
                    if status == "running":
                        ended = await pool.finish(run_id)
                        cancelled = policy == "cancel_other" and run_id == rid(10)
                        assert ended == ("cancelled" if cancelled else "succeeded")
                await pool.fire(now)
                now += 1
            runs = await pool.runs()
            assert set(runs) == finally_
            assert set(runs.values()) <= {"succeeded", "cancelled"}
            s = await pool.schedule()
            assert s.counts == counts
            assert (s.pending, s.buffer, s.cancel, s.next_due) == ((), (), (), T10 + 3 * HOUR)
            events = await store.schedule_events("hourly")
            started = [e.run_id for e in events if e.kind == "started"]
            assert sorted(started) == sorted(finally_)  # once each, by one worker
            # Every run of the pool started once: one run_started each.
            for run_id in runs:
                kinds = [e.kind for e in await store.events(RunId(run_id))]
                assert kinds.count("run_started") == 1
        finally:
            await other.close()

    backend.run(body)


def test_the_catch_up_window_counts_what_it_skips_and_jitter_is_the_same_everywhere(
    backend: Backend,
) -> None:
    async def body(store: Store) -> None:
        pool, other = await pool_of(
            store, backend, overlap="allow_all", catchup_window=2.5 * HOUR, jitter=600.0
        )
        try:
            # Down from 10:00 to 15:20: 10, 11 and 12 are older than 2.5 h, counted missed;
            # 13, 14 and 15 start, each once its jitter (< 10 min) has passed.
            now = T10 + 5 * HOUR + 20 * 60
            await pool.fire(now)
            runs = await pool.runs()
            assert set(runs) == {rid(13), rid(14), rid(15)}
            s = await pool.schedule()
            assert s.counts == {"missed": 3, "started": 3}
            (missed,) = [e for e in await store.schedule_events("hourly") if e.kind == "missed"]
            assert missed.detail.startswith("3 due times from 2026-12-01 10:00:00 UTC")
            # 16:00 with its jitter: not before 16:00 + jitter, then at once.
            delay = sched.jitter_of("hourly", T10 + 6 * HOUR, 600.0)
            assert 0 < delay < 600 and delay == sched.jitter_of("hourly", T10 + 6 * HOUR, 600.0)
            await pool.fire(T10 + 6 * HOUR + delay - 0.5)
            assert rid(16) not in await pool.runs()
            await pool.fire(T10 + 6 * HOUR + delay)
            assert rid(16) in await pool.runs()
            assert (await pool.schedule()).counts == {"missed": 3, "started": 4}
        finally:
            await other.close()

    backend.run(body)


def test_pause_resume_update_trigger_and_backfill(backend: Backend) -> None:
    async def body(store: Store) -> None:
        pool, other = await pool_of(store, backend, overlap="allow_all")
        try:
            await sched.change(store, "hourly", lambda s: sched.pause(s, "maintenance"))
            await pool.fire(T10 + 2 * HOUR + 1)
            assert await pool.runs() == {}  # paused: 10, 11 and 12 start nothing
            # A trigger runs even while paused (as Temporal's), through the policy.
            trig = T10 + 2 * HOUR + 5
            s = await sched.change(store, "hourly", lambda s: sched.trigger(s, trig, None))
            await pool.fire(trig + 1)
            assert set(await pool.runs()) == {"hourly.20261201T120005Z"}
            s = await sched.change(store, "hourly", lambda s: sched.resume(s, T10 + 2 * HOUR + 9))
            assert (s.paused, s.next_due, s.counts["paused"]) == (None, T10 + 3 * HOUR, 3)
            # Backfill 09:00-11:00 (inclusive): three runs as if they had come then.
            s, _, n = sched.backfill(s, at("2026-12-01 09:00"), at("2026-12-01 11:00"), None)
            assert n == 3
            await sched.change(
                store,
                "hourly",
                lambda s: sched.backfill(s, at("2026-12-01 09:00"), T10 + HOUR, None)[:2],
            )
            await pool.fire(T10 + 2 * HOUR + 10)
            assert set(await pool.runs()) == {"hourly.20261201T120005Z", rid(9), rid(10), rid(11)}
            # A backfill over times that ran already starts nothing new (allow_all would).
            await sched.change(
                store, "hourly", lambda s: sched.backfill(s, T10, T10 + HOUR, "allow_all")[:2]
            )
            await pool.fire(T10 + 2 * HOUR + 11)
            assert len(await pool.runs()) == 4
            s = await pool.schedule()
            assert (s.counts["started"], s.counts["existed"], s.requests) == (4, 2, ())

            # Update: another cron in another zone; the next due time follows.
            def edit(s: Schedule) -> tuple[Schedule, sched.Events]:
                moved = replace(s, cron="30 9 * * *", tz="Europe/Paris")
                due = sched.Cron.parse(moved.cron).next_after(T10, sched.zone(moved.tz))
                assert due is not None
                return replace(moved, next_due=due), [("updated", None, "test")]

            s = await sched.change(store, "hourly", edit)
            assert s.next_due == at("2026-12-02 08:30")  # 09:30 in Paris (UTC+1)
            with pytest.raises(UsageError, match="at most 1000"):
                sched.backfill(s, T10 - 4000 * 86400, T10, None)
            with pytest.raises(UsageError, match="no schedule"):
                await sched.change(store, "nope", lambda s: sched.pause(s, "x"))
            kinds = [e.kind for e in await store.schedule_events("hourly")]
            for kind in ("added", "paused", "triggered", "resumed", "backfill", "updated"):
                assert kind in kinds
        finally:
            await other.close()

    backend.run(body)


def test_the_commands(tmp_path: Path) -> None:
    db, env = tmp_path / "runs.db", cli_env()
    add = ["schedule", "add", "s", NAP, "--cron", "30 2 * * *", "--tz", "America/New_York"]
    out = run_cli([*add, "--overlap", "buffer_all", "--jitter", "5m", "--set", "seconds=0"],
                  db=db, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "overlap buffer_all" in out.stdout and "jitter 300 s" in out.stdout
    bad = run_cli(["schedule", "add", "t", NAP, "--cron", "* * * * *", "--tz", "Nowhere/X"],
                  db=db, env=env)  # fmt: skip
    assert bad.returncode == 2 and "not an IANA name" in bad.stderr
    said = {}
    for argv in (
        ["schedule", "pause", "s", "--note", "db migration"],
        ["schedule", "update", "s", "--overlap", "skip", "--catchup-window", "1h"],
        ["schedule", "trigger", "s"],
        ["schedule", "backfill", "s", "2026-11-01", "2026-11-03T23:59"],
        ["schedule", "resume", "s"],
    ):
        done = run_cli(argv, db=db, env=env)
        assert done.returncode == 0, (argv, done.stderr)
        said[argv[1]] = done.stdout
    assert "3 due times asked for" in said["backfill"]
    assert "paused" in said["pause"] and "next " in said["resume"]
    listed = run_cli(["schedule", "list"], db=db, env=env).stdout
    assert "overlap skip" in listed and "America/New_York" in listed
    nope = run_cli(["schedule", "update", "s", "--set", "zz=1"], db=db, env=env)
    assert nope.returncode == 2 and "no parameter 'zz'" in nope.stderr
    (row,) = json.loads(run_cli(["schedule", "list", "--json"], db=db, env=env).stdout)
    assert (row["overlap"], row["catchup_window"], row["jitter"], row["tz"]) == (
        "skip",
        3600.0,
        300.0,
        "America/New_York",
    )
    assert row["paused"] is None and len(row["requests"]) == 4  # a trigger, 3 backfilled
    assert row["requests"][1:] == [f"s.202611{d:02d}T0730Z" for d in (1, 2, 3)]  # 02:30 EST
    shown = json.loads(run_cli(["schedule", "show", "s", "--json"], db=db, env=env).stdout)
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds == ["added", "paused", "updated", "triggered", "backfill", "resumed"]


def worker(db: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LOOPKERNEL, "--db", db, "worker", "--poll", "0.05", "--app", NAP],
        env=cli_env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_worker_killed_at_the_due_time_leaves_the_policys_count(backend: Backend) -> None:
    """buffer_all, a daily schedule five days behind with a three-day catch-up window: the
    three oldest are missed, the other three run one after another -- across a worker
    SIGKILLed right after it wrote the decision, then two workers at once."""
    if (left := 86400 - time.time() % 86400) < 120:
        time.sleep(left + 1)  # not across midnight UTC: a seventh due time would come
    today = time.time() // 86400 * 86400
    s = Schedule(
        name="daily",
        cron="0 0 * * *",
        app=NAP,
        params={"seconds": 0},
        next_due=today - 5 * 86400,
        overlap="buffer_all",
        catchup_window=3 * 86400,
    )

    async def add(store: Store) -> None:
        await store.add_schedule(s)

    async def look(store: Store) -> tuple[dict[str, str], Schedule]:
        runs = {str(i.run_id): i.status.value for i in await store.list_runs(limit=100)}
        (stored,) = await store.schedules()
        return runs, stored

    backend.run(add)
    first = worker(backend.url, LOOPKERNEL_CRASH_AT="schedule_decided")
    first.communicate(timeout=120)
    assert first.returncode == -9
    runs, stored = backend.run(look)
    assert runs == {}  # decided, nothing started
    assert len(stored.pending) == 1 and len(stored.buffer) == 2
    assert stored.counts == {"missed": 3, "buffered": 2}
    expected = {sched.schedule_run_id("daily", today - d * 86400) for d in (2, 1, 0)}

    both = [worker(backend.url), worker(backend.url)]
    try:
        for _ in range(1200):
            runs, stored = backend.run(look)
            if len(runs) == 3 and set(runs.values()) == {"succeeded"} and not stored.busy:
                break
            assert all(w.poll() is None for w in both)
            time.sleep(0.1)  # a look at the store, not a threshold
    finally:
        for w in both:
            w.terminate()
            w.communicate(timeout=60)
    assert set(runs) == expected and set(runs.values()) == {"succeeded"}
    assert stored.counts == {"missed": 3, "buffered": 2, "started": 3}

    async def journals(store: Store) -> list[int]:
        return [
            [e.kind for e in await store.events(RunId(r))].count("run_started") for r in expected
        ]

    assert backend.run(journals) == [1, 1, 1]


def test_a_schedule_from_before_policies_migrates_with_temporals_defaults(
    backend: Backend,
) -> None:
    from loopkernel.store._schema import POSTGRES_VERSION, SQLITE_VERSION

    version = SQLITE_VERSION if backend.kind == "sqlite" else POSTGRES_VERSION

    async def create(store: Store) -> None:
        pass

    backend.run(create)
    backend.sql("DROP TABLE schedule_events")  # back to the schema before policies
    for column in ("policy", "state", "paused", "rev", "busy"):
        backend.sql(f"ALTER TABLE schedules DROP COLUMN {column}")
    backend.sql(f"UPDATE meta SET value = '{version - 1}' WHERE key = 'schema_version'")
    backend.sql(
        "INSERT INTO schedules (name, cron, app, params, next_due, last_run, created_at) "
        f"""VALUES ('hourly', '0 * * * *', '{NAP}', '{{"seconds": 0}}', {T10}, NULL, 0)"""
    )

    async def body(store: Store) -> None:  # open() migrated it
        (s,) = await store.schedules()
        assert (s.overlap, s.catchup_window, s.tz, s.rev, s.counts) == (
            "skip",
            365 * 86400.0,
            "UTC",
            0,
            {},
        )
        assert await sched.fire_due(Client(store=store), T10 + 1, print) == [RunId(rid(10))]
        assert [e.kind for e in await store.schedule_events("hourly")] == ["started"]

    backend.run(body)
    assert backend.sql("SELECT value FROM meta WHERE key = 'schema_version'") == [(str(version),)]
