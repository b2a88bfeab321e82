"""A five-field cron expression: ``minute hour day-of-month month day-of-week``, read in
an IANA time zone (UTC by default).

Each field is ``*``, a number, a range ``a-b``, a step ``*/n`` or ``a-b/n``, or a comma
list of those. Day of week is 0-6 from Sunday (7 is Sunday too). As in Vixie cron, when
both day fields are restricted a day matches if either does. No names (``MON``, ``JAN``),
no ``@hourly``, no seconds: what a schedule needs, small enough to read and test whole
(no dependency; docs/dependencies.md says why neither croniter nor cronsim).

Daylight saving time as Temporal's scheduler has it (it walks wall-clock fields and makes
the moment with Go's ``time.Date``): the matching wall-clock times are walked in order,
and each is made a moment with the offset in force before a transition (Python's
``fold=0``). So a time that does not exist (02:30 on a spring-forward night in New York)
runs once, shifted by the gap (03:30 EDT), and a time that exists twice (01:30 on a
fall-back night) runs once, at its first occurrence.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from loopkernel.errors import UsageError

__all__ = ["Cron", "zone"]


@lru_cache(maxsize=64)
def zone(name: str) -> tzinfo:
    """The IANA time zone ``name`` (``UsageError`` if there is none by that name)."""
    if name == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"time zone {name!r}: not an IANA name (Europe/Paris, UTC)") from None


_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 7))
_HORIZON_DAYS = 366 * 5
"""How far ``next_after`` looks (``0 0 29 2 *`` waits up to 4 years; ``31 4 *`` never)."""


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise UsageError(f"cron {name}: step {step_text!r} must be a whole number > 0")
            step = int(step_text)
        if body == "*":
            start, end = low, high
        elif "-" in body:
            a, _, b = body.partition("-")
            if not (a.isdigit() and b.isdigit()):
                raise UsageError(f"cron {name}: {part!r} is not a range of numbers")
            start, end = int(a), int(b)
        elif body.isdigit():
            start = end = int(body)
            if step_text:
                end = high
        else:
            raise UsageError(f"cron {name}: {part!r} is not *, a number, a range or a step")
        if not (low <= start <= high and low <= end <= high) or start > end:
            raise UsageError(f"cron {name}: {part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True, kw_only=True, slots=True)
class Cron:
    """A parsed expression; ``Cron.parse("*/5 * * * *")``."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0-6, Sunday 0."""
    any_day: bool
    """Day of month is ``*``."""
    any_weekday: bool
    """Day of week is ``*``."""

    @classmethod
    def parse(cls, text: str) -> Cron:
        parts = text.split()
        if len(parts) != 5:
            raise UsageError(
                f"cron {text!r}: expected 5 fields (minute hour day month weekday), "
                f"got {len(parts)}"
            )
        sets = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in sets[4])
        return cls(
            text=" ".join(parts),
            minutes=sets[0],
            hours=sets[1],
            days=sets[2],
            months=sets[3],
            weekdays=weekdays,
            any_day=parts[2] == "*",
            any_weekday=parts[4] == "*",
        )

    def _day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays  # Python: Monday 0
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return in_week
        if self.any_weekday:
            return in_month
        return in_month or in_week

    def next_after(self, t: float, tz: tzinfo = UTC) -> float | None:
        """The first matching minute strictly after ``t`` (seconds since the epoch), the
        fields read in ``tz`` (the module docstring: daylight saving time), or ``None`` if
        none comes within five years (``0 0 31 2 *``)."""
        start = datetime.fromtimestamp(t, tz).replace(second=0, microsecond=0, tzinfo=None)
        start += timedelta(minutes=1)
        day = start.replace(hour=0, minute=0)
        hours, minutes = sorted(self.hours), sorted(self.minutes)
        for offset in range(_HORIZON_DAYS):
            current = day + timedelta(days=offset)
            if not self._day_matches(current):
                continue
            for hour in hours:
                if offset == 0 and hour < start.hour:
                    continue
                for minute in minutes:
                    if offset == 0 and hour == start.hour and minute < start.minute:
                        continue
                    moment = _moment(current.replace(hour=hour, minute=minute), tz)
                    if moment > t:  # a second pass through a fall-back hour: the first ran
                        return moment
        return None

    def times(self, after: float, until: float, tz: tzinfo = UTC) -> list[float]:
        """The matching minutes in ``(after, until]``, oldest first."""
        out: list[float] = []
        probe = self.next_after(after, tz)
        while probe is not None and probe <= until:
            out.append(probe)
            probe = self.next_after(probe, tz)
        return out


def _moment(wall: datetime, tz: tzinfo) -> float:
    """Seconds since the epoch of wall-clock ``wall`` in ``tz``: the offset before a
    transition (``fold=0``: a skipped time is shifted by the gap, a repeated one is its
    first occurrence)."""
    if tz is UTC:
        return float(calendar.timegm(wall.timetuple()))
    return wall.replace(tzinfo=tz, fold=0).timestamp()
