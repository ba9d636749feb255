"""Scheduled runs: the period to publish and the input it lives in."""

from __future__ import annotations

from datetime import date, datetime, timezone as tz
from pathlib import Path

from prefect.runtime import flow_run

from tasks import data_task
from transit_release.errors import InputDataError
from transit_release.inputs import schedule


@data_task(name="period-to-publish")
def period_to_publish(cadence: str, timezone: str, period_of: str | None) -> tuple[str, str]:
    """The previous week or month before the run's scheduled time, or the one holding ``period_of``."""
    try:
        if period_of:
            start, end = schedule.period_containing(cadence, date.fromisoformat(period_of))
        else:
            at = flow_run.scheduled_start_time or datetime.now(tz.utc)
            start, end = schedule.previous_period(cadence, at, timezone)
    except ValueError as exc:
        raise InputDataError(str(exc)) from None
    return start.isoformat(), end.isoformat()


@data_task(name="locate-input")
def locate_input(pattern: str, period: tuple[str, str]) -> str:
    try:
        path = schedule.fill_pattern(pattern, date.fromisoformat(period[0]), date.fromisoformat(period[1]))
    except schedule.PatternError as exc:
        raise InputDataError(str(exc)) from None
    if not Path(path).exists():
        raise InputDataError(f"no input for the period {period[0]}..{period[1]}: {path} does not exist")
    return path
