"""Sanitization of one partition's six histograms with the SBH."""

from __future__ import annotations

from tasks import data_task
from transit_release import opal
from transit_release.config import ReleaseConfig
from transit_release.noise import NoiseSource
from transit_release.preprocessing import PartitionHistograms


@data_task(name="sanitize-partition")
def sanitize_partition(partition: PartitionHistograms, config: ReleaseConfig, charged: list) -> opal.SanitizedPartition:
    """Draw noise only after the partition's spends are on the ledger (``charged``)."""
    opal.check_charges(partition, config, [e.event() for e in charged])
    return opal.sanitize_partition(partition, config, NoiseSource.from_environment())
