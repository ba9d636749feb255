"""Tasks of the Opal release kind: plan, tables, manifest and tracking record (one library call each)."""

from __future__ import annotations

from datetime import datetime, timezone

import pandas as pd

from tasks import data_task
from transit_release.accounting.events import DEFAULT_POPULATION
from transit_release.config import ReleaseConfig
from transit_release.files.partition_store import PartitionDataset
from transit_release.releases import opal


@data_task(name="plan-spends")
def plan_spends(release_id: str, period, config: ReleaseConfig, fingerprint: str, code_version: str,
                population: str = DEFAULT_POPULATION) -> list:
    """Describe every mechanism run as an event (one per partition of the declared period and marginal)."""
    return opal.plan_spends(period, config, release_id, fingerprint, code_version, population)


@data_task(name="assemble-release-tables")
def assemble_tables(outcomes: list[opal.PartitionOutcome], dataset: PartitionDataset) -> dict[str, pd.DataFrame]:
    return opal.release_tables([o.sanitized for o in outcomes], dataset.key_space, dataset.vocab,
                               dataset.bin_minutes)


@data_task(name="build-manifest")
def build_manifest(release_id: str, period, config: ReleaseConfig, noise_kind: str, code_version: str) -> dict:
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return opal.build_manifest(release_id, period, config, noise_kind, code_version, created)


@data_task(name="tracking-record")
def tracking_record(manifest: dict, utility: pd.DataFrame, quarantine: dict, validations: dict,
                    sanitizers: dict) -> dict:
    return opal.tracking(manifest, utility, quarantine, validations, sanitizers)


@data_task(name="count-true-cells")
def count_true_cells(dataset: PartitionDataset, partitions: list[tuple[str, str]], config: ReleaseConfig) -> tuple:
    """Internal: the cells of the stored partitions by their true counts, per published file
    (:func:`~transit_release.releases.opal_expectation.count_cells`); for the custodian's terminal only."""
    from transit_release.files.partition_store import read_partition_histograms
    from transit_release.releases.opal_expectation import count_cells

    return count_cells((read_partition_histograms(dataset, mode, date) for mode, date in partitions), config)


@data_task(name="space-needed")
def space_needed(period, config, index_path: str) -> dict[str, int]:
    """Bytes the release still writes once charged, per place (:mod:`transit_release.files.storage`): its public files
    from the public domain alone, the release suite's Data Docs and MLflow's copy of both sites."""
    from transit_release.files import storage
    from transit_release.preprocessing import load_location_index

    vocab = load_location_index(index_path).vocab  # the stop table's locations: public
    rows = storage.opal_public_rows(len(period.days), {m: len(vocab.get(m, ())) for m in config.modes},
                                    1440 // config.bin_minutes)
    return storage.release_needs_by_place(rows, docs_sites=1, docs_copies=1)
