"""Utility evaluation against the raw partitions (internal figures only)."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release import opal
from transit_release.config import ReleaseConfig


@data_task(name="evaluate-utility")
def evaluate_utility(partitions: list, sanitized: list, config: ReleaseConfig) -> pd.DataFrame:
    return opal.utility_table(partitions, sanitized, config)
