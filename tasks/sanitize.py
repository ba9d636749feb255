"""Sanitization of stored partitions' six histograms with the SBH.

This task is what the flow maps over chunks of the partitions, on Prefect's
Dask task runner (or, with ``workers=0``, in the flow's own process): it may
run in another process or on another machine. It is
given paths and names only (the dataset's directory, the partitions' modes and
dates, the ledger's path and the release id), never data: nothing true crosses
a task boundary or lands in Prefect's parameters. For each of its partitions it
reads only that partition's file, reads (never writes) the six charges from the
ledger, draws its noise there (from that process's cryptographically secure
source) and returns the released histograms and internal figures, never the
rows. Should Dask re-run a task because its worker died, the lost draws were
never seen by anyone, and only one result per partition is ever used.
"""

from __future__ import annotations

import dataclasses
import os
import socket

from schemas import PartitionMarginals, marginals_frame, validate
from tasks import data_task
from transit_release.accounting.ledger import Ledger
from transit_release.config import ReleaseConfig
from transit_release.files import partition_store
from transit_release.noise import NoiseSource
from transit_release.releases import opal
from transit_release.runtime import cluster


def _sanitize_one(dataset, charged: list, mode: str, date: str, config: ReleaseConfig,
                  noise: NoiseSource) -> opal.PartitionOutcome:
    histograms = partition_store.read_partition_histograms(dataset, mode, date)
    validate(PartitionMarginals, marginals_frame([histograms]), f"histograms of partition {histograms.partition}")
    outcome = opal.sanitize_and_evaluate(histograms, config, charged, dataset.key_space, noise)
    return dataclasses.replace(outcome, process=f"{socket.gethostname()}/{os.getpid()}")


@data_task(name="sanitize-chunk")
def sanitize_chunk(dataset_root: str, partitions: list[tuple[str, str]], config: ReleaseConfig, ledger_path: str,
                   release_id: str) -> list[opal.PartitionOutcome]:
    """A few partitions, one after the other, in one task (what the flow maps: each Prefect task costs about
    0.3 s of orchestration, so a release maps a few chunks per worker rather than one task per partition).
    The dataset and the release's charges are read once; each partition is sanitized on its own, with its own
    noise streams, so the result never depends on how partitions are grouped."""
    dataset = partition_store.load_dataset(dataset_root)
    charged = [e.event() for e in Ledger(ledger_path, key=b"", read_only=True).spends(release_id)]
    noise = NoiseSource.from_environment()
    return [_sanitize_one(dataset, charged, mode, date, config, noise) for mode, date in partitions]


@data_task(name="describe-sanitizers")
def describe_sanitizers(outcomes: list[opal.PartitionOutcome], dask_address: str | None,
                        workers: int | None, prepared: list | None = None) -> dict:
    """Where the noise was drawn: the noise source the sanitizers reported (never a seed), the runner and
    how many distinct processes sanitized (and prepared the partitions) (for the manifest and the MLflow run)."""
    local = cluster.local_workers(workers)
    out = {"noise_source": opal.noise_kind(outcomes),
           "runner": f"dask-scheduler {dask_address}" if dask_address else
                     "in-process" if local == cluster.IN_PROCESS else f"local-dask {local} workers",
           "processes": len({o.process for o in outcomes})}
    if prepared is not None:
        out["prepare_processes"] = len({p.process for p in prepared})
    return out


@data_task(name="check-dask-cluster")
def check_cluster(address: str, dataset_root: str) -> int:
    """Before any spend: the scheduler answers and all its workers see the partition dataset."""
    from pathlib import Path

    return cluster.probe_scheduler(address, Path(dataset_root))
