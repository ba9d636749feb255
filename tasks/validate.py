"""Schema validation at the task boundaries (pandera, lazily, values never echoed)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from schemas import RELEASE_MODELS, RawTrips, Stops, validate
from tasks import data_task


@data_task(name="validate-clean-trips")
def validate_clean_trips(trips: pd.DataFrame, path: str) -> pd.DataFrame:
    """The rows the screen let through must satisfy the full contract (one row = one known trip)."""
    return validate(RawTrips, trips, f"clean trips of {Path(path).name}")


@data_task(name="validate-stops")
def validate_stops(stops: pd.DataFrame, path: str) -> pd.DataFrame:
    return validate(Stops, stops, f"stops file {Path(path).name}")


@data_task(name="validate-release-tables")
def validate_release_tables(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    return {name: validate(RELEASE_MODELS[name], df, f"release table {name}") for name, df in tables.items()}
