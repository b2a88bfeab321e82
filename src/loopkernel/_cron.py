"""A five-field cron expression, in UTC: ``minute hour day-of-month month day-of-week``.

Each field is ``*``, a number, a range ``a-b``, a step ``*/n`` or ``a-b/n``, or a comma
list of those. Day of week is 0-6 from Sunday (7 is Sunday too). As in Vixie cron, when
both day fields are restricted a day matches if either does. No names (``MON``, ``JAN``),
no ``@hourly``, no seconds: what a schedule needs, small enough to read and test whole
(no dependency; docs/dependencies.md).
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from loopkernel.errors import UsageError

__all__ = ["Cron"]

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

    def next_after(self, t: float) -> float | None:
        """The first matching minute strictly after ``t`` (seconds since the epoch), or
        ``None`` if none comes within five years (``0 0 31 2 *``)."""
        start = datetime.fromtimestamp(t, UTC).replace(second=0, microsecond=0)
        start += timedelta(minutes=1)
        day = start.replace(hour=0, minute=0)
        for offset in range(_HORIZON_DAYS):
            current = day + timedelta(days=offset)
            if not self._day_matches(current):
                continue
            for hour in sorted(self.hours):
                for minute in sorted(self.minutes):
                    moment = current.replace(hour=hour, minute=minute)
                    if moment >= start:
                        return calendar.timegm(moment.timetuple())
        return None

    def latest_at_or_before(self, t: float, after: float) -> float | None:
        """The last matching minute in ``(after, t]``, if any: the due time a schedule that
        missed several starts (catch-up: the latest missed one only)."""
        found = None
        probe = self.next_after(after)
        while probe is not None and probe <= t:
            found = probe
            probe = self.next_after(probe)
        return found
