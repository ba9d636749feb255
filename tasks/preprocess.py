"""Preprocessing: the public location index every partition step encodes with (the steps themselves are in
:mod:`tasks.stream`)."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release import preprocessing
from transit_release.config import ReleaseConfig
from transit_release.integrity.recovery import WorkDir


@data_task(name="location-index")
def location_index(stops: pd.DataFrame, config: ReleaseConfig, work: WorkDir) -> str:
    """Stop id → location code, from the stop table (public): what every partition step encodes with. Saved in
    the run's work directory; its path is what tasks are given."""
    index = preprocessing.build_location_index(stops, config.modes)
    return str(preprocessing.save_location_index(index, work.path / "locations.npz"))
