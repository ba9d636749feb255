"""Preprocessing: drop the card id, bin times, stops → locations; store the partitions for the sanitizers."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release import partition_store, preprocessing
from transit_release.config import ReleaseConfig


@data_task(name="encode-trips")
def encode_trips(trips: pd.DataFrame, stops: pd.DataFrame, config: ReleaseConfig,
                 kept=None) -> preprocessing.EncodedTrips:
    index = preprocessing.build_location_index(stops, config.modes)
    return preprocessing.encode_trips(trips, index, config.bin_minutes, kept)


@data_task(name="write-partitions")
def write_partitions(root: str, encoded: preprocessing.EncodedTrips) -> partition_store.PartitionDataset:
    """One Parquet file per (mode, date) under the run's own working directory (``private/work/…/partitions``)."""
    return partition_store.write_dataset(encoded, root)
