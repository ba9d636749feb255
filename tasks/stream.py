"""The Opal release's input, streamed: one pass over the file, then one step per partition (see
:mod:`transit_release.inputs.streaming`). Tasks pass paths, names and counts; no row or card id is a
parameter or a result."""

from __future__ import annotations

import logging
import dataclasses
import os
import socket
from functools import partial
from pathlib import Path

import pandas as pd
from prefect import get_run_logger

from schemas import EncodedPartition, PartitionTrips, TripsFile
from schemas import expectations
from schemas.validation import check, validate
from tasks import data_task
from transit_release.config import ReleaseConfig
from transit_release.errors import InputDataError
from transit_release.files import partition_store
from transit_release.files.home import Home
from transit_release.inputs import screening, streaming
from transit_release.integrity.recovery import WorkDir
from transit_release.noise import NoiseSource
from transit_release.preprocessing import key_space_of, load_location_index
from transit_release.runtime.disclosure import log_internal


class PartitionCheckError(InputDataError):
    """A partition's clean trips failed their own suite: the screen let something through."""


@data_task(name="declared-period")
def declared_period(path: str, start: str | None, end: str | None, dry_run: bool = False) -> screening.Period:
    """The declared period (:func:`~transit_release.inputs.screening.declared_period`; a dry run's suggestion
    counted batch by batch)."""
    return screening.declared_period(start, end, dry_run, lambda: streaming.infer_period(path))


@data_task(name="stream-trips")
def stream_trips(work: WorkDir, path: str, stops: pd.DataFrame, period: screening.Period,
                 config: ReleaseConfig) -> streaming.StreamedTrips:
    """The one pass: file contract and row-local screen batch by batch; quarantined rows and each partition's
    clean rows to the run's private work directory."""
    validate_batch = partial(check, TripsFile)
    return streaming.stream_trips(path, stops, period, config.quality, config.modes, work.spill,
                                  work.quarantine_parts, lambda df, offset: validate_batch(df, offset))


def _clean_aggregates(label: str, date: str, rows: dict) -> dict:
    """A partition's clean rows: their pandera contract, then the aggregates its suite validates (counts and
    extremes; they stay on the worker: :func:`check_partitions` replaces them by the suite's results).

    The frames given to pandera are views of the arrays (``copy=False``; pandas' copy-on-write keeps the arrays
    as they are): copying them cost 0.3 s over the full-size week's partitions."""
    validate(PartitionTrips, pd.DataFrame(rows, copy=False), f"clean trips of partition {label}")
    return expectations.partition_aggregates(rows, date)


def check_partitions(prepared: list[streaming.PreparedPartition], quality) -> list[streaming.PreparedPartition]:
    """The Great Expectations suite of the partitions one task prepared, in one validation (one row of
    aggregates each); each partition then carries its own results (counts only), or the step fails naming the
    partitions whose clean trips broke it."""
    results = expectations.validate_partitions({p.label: p.checks for p in prepared}, quality)
    failed = [label for label, r in results.items() if not r["success"]]
    if failed:
        from tasks.quality import _failures

        raise PartitionCheckError(f"partition {', '.join(failed)}: its clean trips failed their suite "
                                  f"({_failures({'suites': {f: results[f] for f in failed}})})")
    return [dataclasses.replace(p, checks=results[p.label]) for p in prepared]


def content_dir(work: WorkDir) -> Path:
    """Where the partition steps leave the content of their clean rows (digests and card ids, private: the run's
    work directory), gathered for the overlap check between populations (:mod:`transit_release.accounting.claims`)."""
    return work.path / "content"


def pair_shards(period: screening.Period) -> int:
    """Card shards of the (card, partition) pairs: one per day of the period (public), so that a shard holds about
    a day's pairs whatever the period's length."""
    return len(period.days)


def _prepare(work: WorkDir, staging: str, mode: str, date: str, config: ReleaseConfig, index_path: str,
             shards: int) -> streaming.PreparedPartition:
    """One partition: duplicates, its pandera contracts, the per-partition bound (card level), encoding, its
    file; its ``checks`` are the aggregates its suite is to validate."""
    label = f"{mode}/{date}"
    bounds = config.bounds.max_trips_per_partition if config.unit_of_privacy == "card" else None
    prepared = streaming.prepare_partition(
        work.spill, Path(staging), work.quarantine_parts, work.pairs, mode, date, config.modes.index(mode),
        load_location_index(index_path),
        config.bin_minutes, bounds, NoiseSource.from_environment(),
        partial(_clean_aggregates, label, date),
        lambda enc: validate(EncodedPartition, pd.DataFrame(enc, copy=False), f"encoded trips of partition {label}"),
        shards, content_dir(work))
    return dataclasses.replace(prepared, process=f"{socket.gethostname()}/{os.getpid()}")


@data_task(name="prepare-partition")
def prepare_partition(work: WorkDir, staging: str, mode: str, date: str, config: ReleaseConfig,
                      index_path: str, shards: int) -> streaming.PreparedPartition:
    """One partition (duplicates, its pandera contracts and Great Expectations suite, the per-partition bound
    at card level, encoding, its file). Returns counts only."""
    return check_partitions([_prepare(work, staging, mode, date, config, index_path, shards)], config.quality)[0]


@data_task(name="prepare-chunk")
def prepare_chunk(work: WorkDir, staging: str, partitions: list[tuple[str, str]], config: ReleaseConfig,
                  index_path: str, shards: int) -> list[streaming.PreparedPartition]:
    """A few partitions in one task (what the flow maps, on the Dask workers when there is a cluster: each
    Prefect task costs about 0.3 s of orchestration), one after the other, then their Great Expectations suite
    in one validation (each costs about 0.07 s, whatever its rows). Each is prepared on its own and each row of
    the suite is about one partition, so the result never depends on how partitions are grouped, and a failure
    names its partitions."""
    return check_partitions([_prepare(work, staging, mode, date, config, index_path, shards)
                             for mode, date in partitions], config.quality)


@data_task(name="early-gate")
def early_gate(home: Home, release_id: str, work: WorkDir, path: str, streamed: streaming.StreamedTrips,
               config: ReleaseConfig, dry_run: bool = False) -> None:
    """When the pass found every duplicate (a file of one batch), the gate before any partition is prepared:
    a refused file then prepares none. Its quarantine is gathered only if it is refused."""
    if streamed.tally.complete:
        _gate(home, release_id, work, path, streamed.tally.figures(), config, dry_run, gather_if_passed=False)


@data_task(name="screen-verdict")
def screen_verdict(home: Home, release_id: str, work: WorkDir, path: str, streamed: streaming.StreamedTrips,
                   prepared: list[streaming.PreparedPartition], config: ReleaseConfig,
                   dry_run: bool = False) -> screening.GateFigures:
    """The screen over the whole period: gather the quarantine (raw rows to ``private/``; counts only in logs),
    then the gate, which aborts the file if too much of it is wrong. A dry run counts and writes nothing."""
    streaming.check_accounted(streamed.tally, prepared, config.modes)
    days = [d.strftime("%Y%m%d") for d in streamed.tally.period.days]
    repeats = pd.Series(0, index=days, dtype="int64")
    for p in prepared:
        repeats[p.date] += p.duplicates
    figures = streamed.tally.figures(repeats.to_numpy())
    _gate(home, release_id, work, path, figures, config, dry_run, gather_if_passed=True)
    return figures


def _gate(home: Home, release_id: str, work: WorkDir, path: str, figures: screening.GateFigures,
          config: ReleaseConfig, dry_run: bool, gather_if_passed: bool) -> None:
    logger = get_run_logger()
    try:
        screening.check_gate(figures, config.quality)
        refused = None
    except InputDataError as exc:
        refused = exc
    where = None
    if figures.quarantined_rows and not dry_run and (refused or gather_if_passed):
        where = _gather_quarantine(home, release_id, work)
        log_internal(logger, logging.WARNING, "rows quarantined",
                     "quarantined %d of %d rows (%.3f%%), by reason %s; raw rows kept privately in %s",
                     figures.quarantined_rows, figures.total_rows, 100 * figures.share, figures.counts, where)
    elif gather_if_passed:
        log_internal(logger, logging.INFO, "rows screened", "screened %d rows: %d quarantined", figures.total_rows,
                     figures.quarantined_rows)
    if refused is not None:
        raise streaming.refused_file(refused, path, where) from None


def _gather_quarantine(home: Home, release_id: str, work: WorkDir) -> str:
    return streaming.gather_quarantine(home, release_id, work.quarantine_parts)


@data_task(name="bound-partitions-per-card")
def bound_partitions_per_card(work: WorkDir, staging: str, period: screening.Period, config: ReleaseConfig,
                              prepared: list[streaming.PreparedPartition]) -> dict:
    """Card level: at most P partitions per card, chosen at random from the secure source over the pairs the
    partition steps saved; the dropped pairs are stored beside each partition's rows. Internal counts only."""
    labels = streaming.partition_labels(period, config.modes)
    result = streaming.bound_partitions_per_card(work.pairs, labels, prepared, config.bounds.max_partitions,
                                                 NoiseSource.from_environment(), pair_shards(period))
    for (mode, date), dropped in result.dropped.items():
        partition_store.write_dropped_pairs(Path(staging), mode, date, dropped)
    return result.counts


@data_task(name="commit-partitions")
def commit_partitions(work: WorkDir, staging: str, prepared: list[streaming.PreparedPartition],
                      index_path: str, config: ReleaseConfig) -> partition_store.PartitionDataset:
    """The partition dataset the sanitizers read, renamed into place whole."""
    index = load_location_index(index_path)
    return partition_store.commit_dataset(Path(staging), work.partitions, [p.entry for p in prepared if p.entry],
                                          key_space_of(index, config.bin_minutes), index.vocab,
                                          config.bin_minutes)
