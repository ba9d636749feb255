"""Ingestion: read the custodian's files (CSV or Parquet)."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release.accounting.ledger import Ledger
from transit_release.home import Home
from transit_release.inputs import tables as io


@data_task(name="ingest-trips")
def ingest_trips(path: str) -> pd.DataFrame:
    return io.read_trips(path)


@data_task(name="ingest-stops")
def ingest_stops(path: str) -> pd.DataFrame:
    return io.read_stops(path)


@data_task(name="fingerprint-inputs")
def fingerprint_inputs(home: Home, paths: list[str], release_id: str) -> str:
    """The home-keyed fingerprint of the input files (recorded in the ledger, never published).

    In the scheme of the release's earlier spends: a release whose spends were recorded with the earlier
    HMAC-SHA-256 fingerprints (re-published, or dry-run, after an upgrade) is fingerprinted that way, so that
    the same input is still recognised as the same release (nothing drawn or spent)."""
    key = home.fingerprint_key()
    earlier = [e.event().input_fingerprint for e in Ledger(home.ledger).spends(release_id)]
    if earlier and all(io.is_legacy_fingerprint(f) for f in earlier):
        return io.legacy_fingerprint(*paths, key=key)
    return io.fingerprint(*paths, key=key)
