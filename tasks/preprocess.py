"""Preprocessing: the public location index every partition step encodes with (the steps themselves are in
:mod:`tasks.stream`)."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release import preprocessing
from transit_release.config import ReleaseConfig


@data_task(name="location-index")
def location_index(stops: pd.DataFrame, config: ReleaseConfig) -> preprocessing.LocationIndex:
    """Stop id → location code, from the stop table (public): what every partition step encodes with."""
    return preprocessing.build_location_index(stops, config.modes)
