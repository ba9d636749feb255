"""Sanitization of one stored partition's six histograms with the SBH.

This task is what the flow maps over the partitions, on Prefect's Dask task
runner: it may run in another process or on another machine. It reads only its
own partition's file, draws its noise there (from that process's
cryptographically secure source) and returns the released histograms and
internal figures, never the rows. It never writes to the ledger: every spend
was charged, once, before the map started, and the task refuses to draw noise
for a partition whose six charges are not among them. Should Dask re-run a
task because its worker died, the lost draw was never seen by anyone, and
only one result per partition is ever used.
"""

from __future__ import annotations

import dataclasses
import os
import socket

from schemas import PartitionMarginals, marginals_frame, validate
from tasks import data_task
from transit_release import cluster, opal, partition_store
from transit_release.config import ReleaseConfig
from transit_release.noise import NoiseSource


@data_task(name="sanitize-partition")
def sanitize_partition(dataset: partition_store.PartitionDataset, entry: partition_store.StoredPartition,
                       config: ReleaseConfig, charged: list) -> opal.PartitionOutcome:
    histograms = partition_store.read_partition(dataset, entry)
    validate(PartitionMarginals, marginals_frame([histograms]), f"histograms of partition {entry.partition}")
    outcome = opal.sanitize_and_evaluate(histograms, config, [e.event() for e in charged], dataset.key_space,
                                         NoiseSource.from_environment())
    return dataclasses.replace(outcome, process=f"{socket.gethostname()}/{os.getpid()}")


@data_task(name="describe-sanitizers")
def describe_sanitizers(outcomes: list[opal.PartitionOutcome], dask_address: str | None,
                        workers: int | None) -> dict:
    """Where the noise was drawn: the noise source the sanitizers reported (never a seed), the runner and
    how many distinct processes sanitized (for the manifest and the MLflow run)."""
    return {"noise_source": opal.noise_kind(outcomes),
            "runner": f"dask-scheduler {dask_address}" if dask_address else
                      f"local-dask {workers or cluster.DEFAULT_LOCAL_WORKERS} workers",
            "processes": len({o.process for o in outcomes})}


@data_task(name="check-dask-cluster")
def check_cluster(address: str, dataset: partition_store.PartitionDataset) -> int:
    """Before any spend: the scheduler answers and all its workers see the partition dataset."""
    return cluster.probe_scheduler(address, dataset.root)
