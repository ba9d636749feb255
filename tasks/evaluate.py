"""Utility evaluation against the raw partitions (internal figures only)."""

from __future__ import annotations

import pandas as pd

from tasks import data_task
from transit_release.releases import opal


@data_task(name="evaluate-utility")
def evaluate_utility(outcomes: list[opal.PartitionOutcome]) -> pd.DataFrame:
    """The per-(partition, marginal) figures each sanitizer computed next to its true histograms."""
    return opal.utility_table(outcomes)
