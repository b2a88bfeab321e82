"""The schedules' rows (``loopkernel._schedules``; docs/operations.md, "Schedules"): each
schedule's cron, policy and decided state in ``schedules``, every change a compare-and-set
on its revision with its journal rows in ``schedule_events``, in one transaction. A base of
``SQLStore`` (``_engine``), over its ``_call``; the dialects share them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from loopkernel.errors import UsageError
from loopkernel.store._codec import dumps, loads
from loopkernel.store._protocol import Schedule, ScheduleEvent

if TYPE_CHECKING:
    from loopkernel.store._engine import Cursor, How

__all__ = ["ScheduleRows"]

T = TypeVar("T")


class ScheduleRows:
    """The ``Schedules`` protocol over SQL."""

    async def _call(
        self,
        body: Callable[[Cursor], T],
        how: How = "statement",
        *,
        sync: bool = True,
        bulk: bool = False,
    ) -> T:
        raise NotImplementedError  # ``SQLStore._call``

    async def add_schedule(self, schedule: Schedule) -> None:
        now = time.time()
        row = (*_schedule_values(schedule), now)
        sql = f"INSERT INTO schedules ({_SCHEDULE_COLUMNS}, created_at) "
        sql += "VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (name) DO NOTHING"
        detail = f"{schedule.cron} ({schedule.tz}) -> {schedule.app}, overlap {schedule.overlap}"
        event = (schedule.name, schedule.rev, 0, now, "added", None, detail)

        def body(cur: Cursor) -> bool:
            if cur.run(sql, row) != 1:
                return False
            cur.run("DELETE FROM schedule_events WHERE name = ?", (schedule.name,))
            cur.run(_INSERT_SCHEDULE_EVENT, event)
            return True

        if not await self._call(body, "write"):
            raise UsageError(f"schedule {schedule.name} exists already; remove it first")

    async def schedules(self) -> list[Schedule]:
        sql = f"SELECT {_SCHEDULE_COLUMNS} FROM schedules ORDER BY name"
        rows = await self._call(lambda cur: cur.all(sql))
        return [_schedule_of(r) for r in rows]

    async def due_schedules(self, now: float) -> list[Schedule]:
        sql = f"SELECT {_SCHEDULE_COLUMNS} FROM schedules "
        sql += "WHERE busy OR (paused IS NULL AND next_due <= ?) ORDER BY name"
        rows = await self._call(lambda cur: cur.all(sql, (now,)))
        return [_schedule_of(r) for r in rows]

    async def remove_schedule(self, name: str) -> None:
        def body(cur: Cursor) -> int:
            cur.run("DELETE FROM schedule_events WHERE name = ?", (name,))
            return cur.run("DELETE FROM schedules WHERE name = ?", (name,))

        if await self._call(body, "write") != 1:
            raise UsageError(f"no schedule {name!r}")

    async def write_schedule(
        self, schedule: Schedule, events: Sequence[tuple[str, str | None, str]]
    ) -> bool:
        names = _SCHEDULE_COLUMNS.split(", ")[1:]
        sql = "UPDATE schedules SET " + ", ".join(f"{c} = ?" for c in names)
        sql += " WHERE name = ? AND rev = ?"
        changed = replace(schedule, rev=schedule.rev + 1)
        values = (*_schedule_values(changed)[1:], schedule.name, schedule.rev)
        now = time.time()
        rows = [
            (schedule.name, changed.rev, n, now, kind, run_id, detail)
            for n, (kind, run_id, detail) in enumerate(events)
        ]

        def body(cur: Cursor) -> bool:
            if cur.run(sql, values) != 1:
                return False
            cur.many(_INSERT_SCHEDULE_EVENT, rows)
            return True

        return await self._call(body, "write")

    async def schedule_events(self, name: str) -> list[ScheduleEvent]:
        sql = "SELECT name, rev, n, at, kind, run_id, detail FROM schedule_events "
        sql += "WHERE name = ? ORDER BY rev, n"
        rows = await self._call(lambda cur: cur.all(sql, (name,)))
        return [
            ScheduleEvent(name=r[0], rev=r[1], n=r[2], at=r[3], kind=r[4], run_id=r[5], detail=r[6])
            for r in rows
        ]


_SCHEDULE_COLUMNS = (
    "name, cron, app, params, next_due, last_run, policy, state, paused, rev, busy"
)
_INSERT_SCHEDULE_EVENT = (
    "INSERT INTO schedule_events (name, rev, n, at, kind, run_id, detail) VALUES (?,?,?,?,?,?,?)"
)


def _schedule_values(s: Schedule) -> tuple[Any, ...]:
    """The row of ``s``, in ``_SCHEDULE_COLUMNS`` order."""
    policy = {
        "overlap": s.overlap,
        "catchup_window": s.catchup_window,
        "jitter": s.jitter,
        "tz": s.tz,
        "scenario": s.scenario,
    }
    state = {
        "pending": list(s.pending),
        "buffer": list(s.buffer),
        "cancel": list(s.cancel),
        "requests": [list(r) for r in s.requests],
        "counts": s.counts,
    }
    return (
        s.name,
        s.cron,
        s.app,
        dumps(s.params),
        s.next_due,
        s.last_run,
        dumps(policy),
        dumps(state),
        s.paused,
        s.rev,
        s.busy,
    )


def _schedule_of(r: Sequence[Any]) -> Schedule:
    """A ``schedules`` row (``_SCHEDULE_COLUMNS``); a row from before schema 13 has ``{}``
    for policy and state: Temporal's defaults."""
    policy: dict[str, Any] = loads(r[6]) or {}
    state: dict[str, Any] = loads(r[7]) or {}
    base = Schedule(name=r[0], cron=r[1], app=r[2], params={}, next_due=r[4])
    return Schedule(
        name=r[0],
        cron=r[1],
        app=r[2],
        params=loads(r[3]),
        next_due=r[4],
        last_run=r[5],
        overlap=policy.get("overlap", base.overlap),
        catchup_window=policy.get("catchup_window", base.catchup_window),
        jitter=policy.get("jitter", base.jitter),
        tz=policy.get("tz", base.tz),
        scenario=policy.get("scenario"),
        paused=r[8],
        pending=tuple(state.get("pending", ())),
        buffer=tuple(state.get("buffer", ())),
        cancel=tuple(state.get("cancel", ())),
        requests=tuple((q[0], q[1], q[2]) for q in state.get("requests", ())),
        counts=dict(state.get("counts", {})),
        rev=r[9],
    )

