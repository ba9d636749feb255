"""The validation gate: file contract, release period, row screening and quarantine."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from prefect import get_run_logger

from schemas import TripsFile, validate
from tasks import data_task
from transit_release.config import ReleaseConfig
from transit_release.errors import InputDataError
from transit_release.files.home import Home
from transit_release.inputs import screening
from transit_release.inputs.refusals import refusal
from transit_release.runtime.disclosure import log_internal


@data_task(name="validate-trips-file")
def validate_trips_file(trips: pd.DataFrame, path: str) -> pd.DataFrame:
    """Columns and types (file-level: any failure aborts, naming column and rows)."""
    if len(trips) == 0:
        raise refusal("row-count", InputDataError(f"trips file {Path(path).name}: no data rows (header only)"))
    return validate(TripsFile, trips, f"trips file {Path(path).name}")


@data_task(name="release-period")
def release_period(trips: pd.DataFrame, start: str | None, end: str | None, dry_run: bool = False) -> screening.Period:
    """The declared period (:func:`~transit_release.inputs.screening.declared_period`)."""
    return screening.declared_period(start, end, dry_run, lambda: screening.infer_period(trips))


@data_task(name="screen-trips")
def screen_trips(home: Home, release_id: str, trips: pd.DataFrame, stops: pd.DataFrame,
                 period: screening.Period, config: ReleaseConfig, path: str,
                 dry_run: bool = False) -> screening.ScreenResult:
    """Quarantine row-level problems (raw rows to ``private/``; counts only in logs) or abort the file.
    A dry run counts them and writes nothing."""
    logger = get_run_logger()
    name = Path(path).name
    result = screening.screen_trips(trips, stops, period, config.quality, config.modes)
    where = None if dry_run else _write_quarantine(home, release_id, result.quarantined)
    if where:
        log_internal(logger, logging.WARNING, "rows quarantined",
                     "quarantined %d of %d rows (%.3f%%), by reason %s; raw rows kept privately in %s",
                     result.quarantined_rows, result.total_rows, 100 * result.share, result.counts, where)
    else:
        log_internal(logger, logging.INFO, "rows screened", "screened %d rows: none quarantined", result.total_rows)
    try:
        screening.check_gate(result, config.quality)
    except InputDataError as exc:
        raise type(exc)(f"trips file {name}: {exc}" + (f" (quarantined rows: {where})" if where else "")) from None
    return result


def _write_quarantine(home: Home, release_id: str, rows: pd.DataFrame) -> str | None:
    """Raw quarantined rows with their row number and reason, under ``private/`` only."""
    if not len(rows):
        return None
    folder = home.quarantine / release_id
    home.quarantine.mkdir(exist_ok=True, mode=0o700)
    folder.mkdir(exist_ok=True, mode=0o700)
    path = folder / f"quarantine-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}.parquet"
    rows.to_parquet(path, index=False)
    os.chmod(path, 0o600)
    return str(path)
