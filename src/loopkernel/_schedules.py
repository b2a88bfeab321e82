"""Schedules: a cron expression that starts a run of an app at each due time.

A worker looks at the schedules on every round (``fire_due``). For each schedule whose
``next_due`` has come, it starts one run, for the **latest** due time that has come (the
catch-up policy: missed due times before it are skipped, so a worker that was down for a
day starts one run, not 288), then moves ``next_due`` to the first due time after now.
The run's id is the schedule's name and the due time (``NAME.20261201T1005Z``): the runs
table's primary key on it is the unique key on (schedule, due time), so two workers, or a
worker resuming the round a crash cut short, start the run once; the one that finds it
started already only enqueues it (idempotent) and moves ``next_due`` on (a compare-and-set
on the ``next_due`` it read, so the first to move it wins). Overlap policy: a due time
starts its run even if the previous run of the schedule is still going.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from loopkernel._cron import Cron
from loopkernel._hooks import crashpoint
from loopkernel.errors import RunNotFound, UsageError
from loopkernel.ids import RunId
from loopkernel.store import Schedule

__all__ = ["Schedule", "fire_due", "schedule_run_id"]


def schedule_run_id(name: str, due: float) -> RunId:
    return RunId(f"{name}.{time.strftime('%Y%m%dT%H%MZ', time.gmtime(due))}")


async def fire_due(client: object, now: float, log: Callable[[str], None]) -> list[RunId]:
    """Start the run of every due schedule (see the module docstring); the ids started or
    found started. ``client`` is a ``loopkernel.client.Client``."""
    from loopkernel.client import Client

    assert isinstance(client, Client)
    store = client.store
    out: list[RunId] = []
    for schedule in await store.due_schedules(now):
        cron = Cron.parse(schedule.cron)
        due = cron.latest_at_or_before(now, after=schedule.next_due - 60)
        run_id = None
        if due is not None:
            run_id = schedule_run_id(schedule.name, due)
            try:
                await store.get_run(run_id)
            except RunNotFound:
                try:
                    await client.start(schedule.app, overrides=schedule.params, run_id=run_id)
                except UsageError as exc:
                    try:
                        await store.get_run(run_id)  # another worker started it meanwhile
                    except RunNotFound:
                        log(f"schedule {schedule.name}: cannot start {run_id}: {exc}")
                        run_id = None
            if run_id is not None:
                crashpoint("schedule_started")
                await store.enqueue(run_id)
                out.append(run_id)
        following = cron.next_after(now)
        await store.advance_schedule(schedule.name, schedule.next_due, following, run_id)
    return out
