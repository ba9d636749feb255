"""Which period a scheduled run publishes and where its input is (plain library)."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from transit_release.inputs.schedule import PatternError, fill_pattern, period_containing, previous_period


def test_a_monday_morning_in_sydney_publishes_the_week_that_just_ended():
    # Monday 23 Nov 2026 03:00 in Sydney is Sunday 16:00 UTC: the local date decides
    at = datetime(2026, 11, 22, 16, 0, tzinfo=timezone.utc)
    assert previous_period("weekly", at, "Australia/Sydney") == (date(2026, 11, 16), date(2026, 11, 22))
    # the same instant in UTC is still Sunday: the week before
    assert previous_period("weekly", at, "UTC") == (date(2026, 11, 9), date(2026, 11, 15))


def test_a_late_run_publishes_the_same_week_as_an_on_time_one():
    on_time = datetime(2026, 11, 22, 16, 0, tzinfo=timezone.utc)
    late = datetime(2026, 11, 25, 9, 0, tzinfo=timezone.utc)  # Wednesday
    assert previous_period("weekly", on_time, "Australia/Sydney") == previous_period("weekly", late,
                                                                                      "Australia/Sydney")


def test_monthly_periods_and_leap_years():
    at = datetime(2028, 3, 2, 9, 0, tzinfo=timezone.utc)
    assert previous_period("monthly", at, "America/Montreal") == (date(2028, 2, 1), date(2028, 2, 29))
    assert period_containing("monthly", date(2026, 12, 31)) == (date(2026, 12, 1), date(2026, 12, 31))
    assert period_containing("weekly", date(2016, 8, 14)) == (date(2016, 8, 8), date(2016, 8, 14))


def test_bad_cadence_and_naive_times_are_refused():
    with pytest.raises(ValueError, match="cadence must be one of"):
        previous_period("daily", datetime(2026, 1, 1, tzinfo=timezone.utc), "UTC")
    with pytest.raises(ValueError, match="must carry a time zone"):
        previous_period("weekly", datetime(2026, 1, 1), "UTC")


def test_patterns():
    s, e = date(2026, 11, 16), date(2026, 11, 22)
    assert fill_pattern("/d/trips-{start}_{end}.csv", s, e) == "/d/trips-2026-11-16_2026-11-22.csv"
    assert fill_pattern("/d/{year}/w{week}.parquet", s, e) == "/d/2026/w47.parquet"
    assert fill_pattern("/d/seq-{year}-{month}.txt", date(2026, 10, 1), date(2026, 10, 31)) == "/d/seq-2026-10.txt"
    # ISO week-year: 29 Dec 2025 is in week 1 of 2026
    assert fill_pattern("{year}-w{week}", date(2025, 12, 29), date(2026, 1, 4)) == "2026-w01"
    with pytest.raises(PatternError, match=r"unknown placeholder\(s\) \['date'\]"):
        fill_pattern("/d/{date}.csv", s, e)
    with pytest.raises(PatternError, match="is malformed"):
        fill_pattern("/d/{start.csv", s, e)
