"""The five-field cron parser of schedules (``loopkernel._cron``)."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime

import pytest

from loopkernel._cron import Cron, zone
from loopkernel.errors import UsageError


def at(text: str) -> float:
    return calendar.timegm(datetime.fromisoformat(text).timetuple())


def nxt(expr: str, after: str) -> str | None:
    found = Cron.parse(expr).next_after(at(after))
    return None if found is None else datetime.fromtimestamp(found, UTC).strftime("%Y-%m-%dT%H:%M")


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("*/5 * * * *", "2026-12-01 10:02:30", "2026-12-01T10:05"),
        ("*/5 * * * *", "2026-12-01 10:05:00", "2026-12-01T10:10"),  # strictly after
        ("0 * * * *", "2026-12-01 23:59", "2026-12-02T00:00"),
        ("30 9 * * 1-5", "2026-12-04 10:00", "2026-12-07T09:30"),  # Friday -> Monday
        ("0 0 1 * *", "2026-12-15 00:00", "2027-01-01T00:00"),
        ("15,45 8-10/2 * * *", "2026-12-01 08:50", "2026-12-01T10:15"),
        ("0 12 * * 0", "2026-12-01 00:00", "2026-12-06T12:00"),  # Sunday 0
        ("0 12 * * 7", "2026-12-01 00:00", "2026-12-06T12:00"),  # Sunday 7
        ("0 0 13 * 5", "2026-12-01 00:00", "2026-12-04T00:00"),  # day OR weekday
        ("0 0 29 2 *", "2026-03-01 00:00", "2028-02-29T00:00"),
        ("5 4 10-20/5 * *", "2026-12-11 00:00", "2026-12-15T04:05"),
        ("0 0 31 2 *", "2026-01-01 00:00", None),  # never
    ],
)
def test_next_due_time(expr: str, after: str, expected: str | None) -> None:
    assert nxt(expr, after) == expected


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "expected 5 fields"),
        ("60 * * * *", "outside 0-59"),
        ("*/0 * * * *", "step '0'"),
        ("5-1 * * * *", "outside"),
        ("MON * * * *", r"is not \*, a number"),
        ("* * 0 * *", "outside 1-31"),
        ("a-b * * * *", "not a range"),
    ],
)
def test_bad_expressions_are_refused_with_the_field_named(expr: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Cron.parse(expr)


def test_the_due_times_between_two_moments() -> None:
    cron = Cron.parse("*/10 * * * *")
    assert cron.times(at("2026-12-01 10:05"), at("2026-12-01 10:40")) == [
        at(f"2026-12-01 10:{m}") for m in ("10", "20", "30", "40")
    ]
    assert cron.times(at("2026-12-01 10:00"), at("2026-12-01 10:09")) == []


def local(expr: str, tz: str, after: str, n: int) -> list[str]:
    """The next ``n`` due times of ``expr`` in ``tz`` after local time ``after``, as
    local times with their offsets."""
    zone_ = zone(tz)
    t = datetime.fromisoformat(after).replace(tzinfo=zone_).timestamp()
    out = []
    for _ in range(n):
        found = Cron.parse(expr).next_after(t, zone_)
        assert found is not None
        out.append(datetime.fromtimestamp(found, zone_).isoformat(timespec="minutes"))
        t = found
    return out


def test_a_time_zone_with_daylight_saving_as_temporal_has_it() -> None:
    ny = "America/New_York"
    # Spring forward (2026-03-08, 02:00 -> 03:00): 02:30 does not exist; it runs once,
    # shifted by the gap, and the days around it keep their wall-clock time.
    assert local("30 2 * * *", ny, "2026-03-07 12:00", 3) == [
        "2026-03-08T03:30-04:00",
        "2026-03-09T02:30-04:00",
        "2026-03-10T02:30-04:00",
    ]
    # An hourly schedule through the gap: 01:30, then 03:30 once (02:30 is 03:30).
    assert local("30 * * * *", ny, "2026-03-08 00:45", 3) == [
        "2026-03-08T01:30-05:00",
        "2026-03-08T03:30-04:00",
        "2026-03-08T04:30-04:00",
    ]
    # Fall back (2026-11-01, 02:00 -> 01:00): 01:30 exists twice and runs once, the first.
    assert local("30 1 * * *", ny, "2026-10-31 12:00", 2) == [
        "2026-11-01T01:30-04:00",
        "2026-11-02T01:30-05:00",
    ]
    assert local("0 * * * *", ny, "2026-11-01 00:30", 3) == [
        "2026-11-01T01:00-04:00",
        "2026-11-01T02:00-05:00",  # the repeated hour's second 01:00 does not run again
        "2026-11-01T03:00-05:00",
    ]
    # A day field in the zone, not in UTC: 09:00 Tokyo on Mondays is Sunday 00:00 UTC.
    assert local("0 9 * * 1", "Asia/Tokyo", "2026-12-01 00:00", 1) == ["2026-12-07T09:00+09:00"]


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(UsageError, match="not an IANA name"):
        zone("Mars/Olympus_Mons")
    assert zone("UTC") is UTC
