"""The five-field cron parser of schedules (``loopkernel._cron``)."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime

import pytest

from loopkernel._cron import Cron
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


def test_the_latest_missed_due_time_is_the_catch_up() -> None:
    cron = Cron.parse("*/10 * * * *")
    assert cron.latest_at_or_before(at("2026-12-01 10:47"), at("2026-12-01 10:05")) == at(
        "2026-12-01 10:40"
    )
    assert cron.latest_at_or_before(at("2026-12-01 10:09"), at("2026-12-01 10:00")) is None
