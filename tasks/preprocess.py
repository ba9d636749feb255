"""Preprocessing: drop the card id, bin times, stops → locations; store the partitions for the sanitizers."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release import partition_store, preprocessing
from transit_release.config import ReleaseConfig
from transit_release.home import Home


@data_task(name="encode-trips")
def encode_trips(trips: pd.DataFrame, stops: pd.DataFrame, config: ReleaseConfig) -> preprocessing.EncodedTrips:
    index = preprocessing.build_location_index(stops, config.modes)
    return preprocessing.encode_trips(trips, index, config.bin_minutes)


@data_task(name="write-partitions")
def write_partitions(home: Home, release_id: str,
                     encoded: preprocessing.EncodedTrips) -> partition_store.PartitionDataset:
    """One Parquet file per (mode, date) under ``private/<release-id>/partitions/``."""
    return partition_store.write_dataset(encoded, home.partition_dataset(release_id))


@data_task(name="remove-partitions")
def remove_partitions(dataset: partition_store.PartitionDataset) -> None:
    partition_store.remove_dataset(dataset.root)
