"""Preprocessing: drop the card id, bin times, stops → locations, partitions, histograms."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release import preprocessing
from transit_release.config import ReleaseConfig


@data_task(name="encode-trips")
def encode_trips(trips: pd.DataFrame, stops: pd.DataFrame, config: ReleaseConfig) -> preprocessing.EncodedTrips:
    index = preprocessing.build_location_index(stops, config.modes)
    return preprocessing.encode_trips(trips, index, config.bin_minutes)


@data_task(name="build-partitions")
def build_partitions(encoded: preprocessing.EncodedTrips) -> list[preprocessing.PartitionHistograms]:
    return preprocessing.partition_histograms(encoded)
