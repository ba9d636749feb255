"""Which period a scheduled run publishes, and where its input is.

A weekly deployment that fires on a Monday publishes the previous full week
(Monday to Sunday); a monthly one publishes the previous calendar month. The
time a run was *scheduled* for decides (not when it happens to start), in the
agency's time zone, so a late or retried run still publishes the same period.
Input locations are patterns with ``{start}``, ``{end}`` (ISO dates),
``{year}``, ``{month}`` and ``{week}`` (ISO week of the start).
"""

from __future__ import annotations

import string
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

PLACEHOLDERS = ("start", "end", "year", "month", "week")
CADENCES = ("weekly", "monthly")


class PatternError(ValueError):
    """An input location pattern with an unknown or malformed placeholder."""


def local_date(at: datetime, timezone: str) -> date:
    if at.tzinfo is None:
        raise ValueError("the scheduled time must carry a time zone")
    return at.astimezone(ZoneInfo(timezone)).date()


def previous_period(cadence: str, at: datetime, timezone: str) -> tuple[date, date]:
    """The last full week (Monday–Sunday) or calendar month that ended before ``at``'s local date."""
    today = local_date(at, timezone)
    if cadence == "weekly":
        this_monday = today - timedelta(days=today.weekday())
        return this_monday - timedelta(days=7), this_monday - timedelta(days=1)
    if cadence == "monthly":
        last = today.replace(day=1) - timedelta(days=1)
        return last.replace(day=1), last
    raise ValueError(f"cadence must be one of {CADENCES}. Found {cadence!r}.")


def period_containing(cadence: str, day: date) -> tuple[date, date]:
    """The week (Monday–Sunday) or month holding ``day``: for a run asked for a given period."""
    if cadence == "weekly":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=6)
    if cadence == "monthly":
        nxt = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
        return day.replace(day=1), nxt - timedelta(days=1)
    raise ValueError(f"cadence must be one of {CADENCES}. Found {cadence!r}.")


def fill_pattern(pattern: str, start: date, end: date) -> str:
    """``pattern`` with its placeholders filled for the period ``start..end``."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(pattern) if f is not None]
    except ValueError as exc:
        raise PatternError(f"input pattern {pattern!r} is malformed: {exc}") from None
    unknown = sorted({f for f in fields if f not in PLACEHOLDERS})
    if unknown:
        raise PatternError(f"input pattern {pattern!r} has unknown placeholder(s) {unknown}; "
                           f"known: {list(PLACEHOLDERS)}")
    iso = start.isocalendar()
    # with {week}, {year} is the ISO week-year (29 Dec 2025 is in 2026-W01); otherwise the calendar year
    year = iso.year if "week" in fields else start.year
    return pattern.format(start=start.isoformat(), end=end.isoformat(), year=f"{year:04d}",
                          month=f"{start.month:02d}", week=f"{iso.week:02d}")
