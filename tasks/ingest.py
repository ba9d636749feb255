"""Ingestion: read the custodian's files (CSV or Parquet)."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release.inputs import tables as io


@data_task(name="ingest-trips")
def ingest_trips(path: str) -> pd.DataFrame:
    return io.read_trips(path)


@data_task(name="ingest-stops")
def ingest_stops(path: str) -> pd.DataFrame:
    return io.read_stops(path)
