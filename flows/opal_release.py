"""The Opal release: stream the input → prepare the partitions → gate → charge → sanitize → check → publish → track."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import pandas as pd
from prefect import flow, unmapped
from prefect.utilities.annotations import quote

from flows.scale_out import ReleaseCluster, dask_cluster, partition_chunks, run_on_partitions
from flows.tail import PublicOutputs, Records, ReleaseKind, ReleaseRun, publish_release
from tasks.budget import declared_population, load_policy
from tasks.config import check_scale_out, load_config
from tasks.evaluate import evaluate_utility
from tasks.home import prepare_home
from tasks.ingest import ingest_stops
from tasks.inputs import fingerprint_inputs
from tasks.opal import assemble_tables, build_manifest, count_true_cells, plan_spends, space_needed, tracking_record
from tasks.preprocess import location_index
from tasks.quality import check_raw_quality, check_release_tables
from tasks.sanitize import check_cluster, describe_sanitizers, sanitize_chunk
from tasks.stream import (bound_partitions_per_card, commit_partitions, content_dir, declared_period, early_gate,
                          pair_shards, prepare_chunk, screen_verdict, stream_trips)
from tasks.report import draw_report_figures, write_report
from tasks.summary import REPORTS_OUTCOME, summarize
from tasks.validate import validate_release_tables, validate_stops
from transit_release.accounting.events import population_named
from transit_release.config import ReleaseConfig
from transit_release.files import partition_store
from transit_release.files.partition_store import PartitionDataset
from transit_release.inputs.screening import Period
from transit_release.integrity.recovery import WorkDir, work_dir
from transit_release.releases import opal
from transit_release.releases.opal_expectation import Expectation, public_rules
from transit_release.reports import report_process
from transit_release.runtime import progress, warmup
from transit_release.runtime.disclosure import refusals_kept_private
from transit_release.version import code_version


def _mapped(task, label: str, chunks: list[list[tuple[str, str]]], before: tuple, after: tuple) -> list:
    """``task(*before, chunk, *after)`` mapped over the chunks of partitions (on the task runner the subflow was
    given); one result per partition, in the partitions' (mode, date) order."""
    futures = task.map(*[unmapped(a) for a in before], chunks, *[unmapped(a) for a in after])
    total = sum(len(c) for c in chunks)
    with progress.stage(f"{label} {total} partitions", total=total) as bar:
        results = {}
        for chunk, f in zip(chunks, futures):
            results.update(zip(chunk, f.result()))
            bar.advance(len(chunk))
    return [results[p] for p in sorted(results)]


@flow(name="prepare-partitions", persist_result=False)
@refusals_kept_private
def prepare_partitions(work, staging: str, chunks: list[list[tuple[str, str]]], config, index_path: str,
                       shards: int) -> list:
    """Map the partition step over chunks of the public partitions (on the task runner the caller gives: Dask, or
    one thread in this process).
    Only paths, names and public parameters are passed; counts come back."""
    return _mapped(prepare_chunk, "preparing", chunks, (work, staging), (config, index_path, shards))


@flow(name="sanitize-partitions", persist_result=False)
@refusals_kept_private
def sanitize_partitions(dataset_root: str, chunks: list[list[tuple[str, str]]], config, ledger_path: str,
                        release_id: str) -> list:
    """Map the sanitizer over chunks of the stored partitions (on the task runner the caller gives). Only
    paths and names are passed: no data and no true count becomes a Prefect parameter."""
    return _mapped(sanitize_chunk, "sanitizing", chunks, (dataset_root,), (config, ledger_path, release_id))


@dataclass(frozen=True)
class OpalWorkspace:
    """The run's private working directory and the cluster its partition steps run on."""

    work: WorkDir
    cluster: ReleaseCluster


@dataclass(frozen=True)
class OpalRecords:
    """The committed partitions of the run (on disk, under its working directory) and what the steps after the
    gate need of the way there. Per-partition results are quoted: Prefect would walk every one's fields at every
    task."""

    workspace: OpalWorkspace
    chunks: list[list[tuple[str, str]]]
    index: str
    prepared: object
    dataset: PartitionDataset
    raw_quality: dict


@dataclass(frozen=True)
class OpalKind(ReleaseKind):
    """Opal-style marginals of one declared period's trips, at trip or card level: six stability histograms per
    (mode, date) partition, the partitions prepared and sanitized on a Dask cluster (or in the flow's process)."""

    trips: str
    stops: str
    stop_table: pd.DataFrame
    period: Period
    config: ReleaseConfig
    dask_address: str | None
    workers: int | None
    period_declared: bool = True  # a dry run may go on with the period the data suggest

    publishing = "checking and publishing"
    evaluating = None  # checked and evaluated within "checking and publishing"
    render_datacard = staticmethod(opal.render_datacard)

    @property
    def inputs(self) -> list[str]:
        return [self.trips, self.stops]

    @property
    def default_release_id(self) -> str:
        return opal.release_id_for(self.period.start, self.period.end, self.config.unit_of_privacy)

    @property
    def earlier_release_ids(self) -> tuple[str, ...]:
        return tuple(opal.earlier_release_ids(self.period.start, self.period.end))

    def fingerprint(self, where):
        # hashed in a thread of its own (no GIL) while the trips are read: a new release id needs it only when its
        # spends are planned; an existing one waits for it, to compare with the earlier spends
        return fingerprint_inputs.submit(where, self.inputs)

    def same_release(self, fingerprint):
        return opal.same_release(self.config, fingerprint)

    @contextmanager
    def workspace(self, run: ReleaseRun):
        try:
            with work_dir(run.where, run.release_id) as work, dask_cluster(self.dask_address, self.workers) as cluster:
                yield OpalWorkspace(work, cluster)
        finally:
            report_process.discard_prestarted()  # a run that stopped before its report

    def read(self, run: ReleaseRun, workspace: OpalWorkspace) -> Records:
        where, rid, work, cfg = run.where, run.release_id, workspace.work, self.config
        partitions = opal.partitions_of(self.period, cfg)
        workers_used = workspace.cluster.local_workers
        if self.dask_address:  # before any work on it, and before any spend
            workers_used = check_cluster(self.dask_address, str(work.path))
        chunks = partition_chunks(partitions, workers_used)
        index = location_index(self.stop_table, cfg, work)  # a path: the stop table is no subflow parameter
        with progress.stage("reading and screening the trips"):
            streamed = stream_trips(work, self.trips, self.stop_table, self.period, cfg)  # card ids stay in work.spill
            early_gate(where, rid, work, self.trips, streamed, cfg, run.dry_run)
        if not run.dry_run:  # the report's figures are drawn in a process that imports its libraries meanwhile
            report_process.prestart()
        staging = str(partition_store.staging_for(work.partitions))
        prepared = quote(run_on_partitions(prepare_partitions, workspace.cluster, work, staging, chunks, cfg, index,
                                           pair_shards(self.period)))
        with progress.stage("validating"):
            figures = screen_verdict(where, rid, work, self.trips, streamed, prepared, cfg, run.dry_run)
            raw_quality = check_raw_quality(where, str(work.path), rid, figures, prepared, partitions, cfg)
            quarantine = figures.summary()  # counts only
            if cfg.unit_of_privacy == "card":  # at most P partitions per card
                quarantine = {**quarantine, "bounding": bound_partitions_per_card(
                    work, staging, self.period, cfg, prepared)}  # internal figures, never public
            dataset = commit_partitions(work, staging, prepared, index, cfg)
        # what the trips file holds, as the partition steps left it (digests, card ids) under the work directory
        return Records(OpalRecords(workspace, chunks, index, prepared, dataset, raw_quality), quarantine,
                       str(content_dir(work)))

    def plan(self, run: ReleaseRun, records: Records, fingerprint: str, population: str) -> list:
        return plan_spends(run.release_id, self.period, self.config, fingerprint, code_version(), population)

    def space_needed(self, records: Records) -> dict[str, int]:
        return space_needed(self.period, self.config, records.data.index)

    def expectation(self, run: ReleaseRun, records: Records) -> Expectation:
        cells = count_true_cells(quote(records.data.dataset), opal.partitions_of(self.period, self.config),
                                 self.config)
        return Expectation(run.release_id, public_rules(self.config), cells)

    def sanitize(self, run: ReleaseRun, records: Records, charged: list):
        r = records.data
        return quote(run_on_partitions(sanitize_partitions, r.workspace.cluster, str(r.dataset.root), r.chunks,
                                       self.config, str(run.where.ledger), run.release_id))

    def evaluate(self, records: Records, outcomes):
        return evaluate_utility(outcomes), describe_sanitizers(outcomes, self.dask_address, self.workers,
                                                               records.data.prepared)

    def outputs(self, run, events, records, outcomes, evaluation, in_flight) -> PublicOutputs:
        utility, sanitizers = evaluation
        r = records.data
        manifest = build_manifest(run.release_id, self.period, self.config, sanitizers["noise_source"],
                                  code_version())
        # the report's figures, drawn in a process of their own while the release is checked and staged
        figures = draw_report_figures.submit(run.where, manifest, utility, outcomes)
        in_flight.append(figures)
        # the dataset is quoted: Prefect would walk its vocabulary (every stop name) at every task it is given to
        tables = validate_release_tables(assemble_tables(outcomes, quote(r.dataset)))
        release_quality = check_release_tables(run.where, str(r.workspace.work.path), run.release_id, tables,
                                               outcomes, quote(r.dataset), self.config)
        return PublicOutputs(tables, {}, manifest, (figures, release_quality))

    def report(self, run, manifest, records, evaluation, outputs) -> str:
        figures, _ = outputs.extra
        return write_report(run.where, str(records.data.workspace.work.path), manifest, evaluation[0],
                            records.quarantine, figures.result())

    def tracking_record(self, manifest, records, evaluation, outputs) -> dict:
        utility, sanitizers = evaluation
        return tracking_record(manifest, utility, records.quarantine,
                               {"raw": records.data.raw_quality, "release": outputs.extra[1]}, sanitizers)

    def summary(self, run, manifest, mlflow_run_id, report, records, evaluation) -> dict:
        return summarize(run.where, manifest, "published", mlflow_run_id, f"{report}/report.html",
                         records.quarantine)


@flow(name="opal-release", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def opal_release(trips: str, stops: str, period_start: str | None = None, period_end: str | None = None,
                 home: str = ".", config: str | None = None, epsilons: list[float] | None = None,
                 delta: float | None = None, release_id: str | None = None, policy: str | None = None,
                 ledger: str | None = None, quarantine_limit: float | None = None, dask_address: str | None = None,
                 workers: int | None = None, dry_run: bool = False, unit: str | None = None,
                 population: str | None = None) -> dict:
    """Publish an (ε, δ)-DP Opal-style release of one declared period's trips.

    Nothing is charged before every input check has passed; nothing is visible
    under ``releases/`` before the final commit; a refused or failed run removes
    what it created (the quarantine excepted). The partitions are sanitized on a
    local Dask cluster of ``workers`` processes (default: 2 on a machine with at
    least 4 cores, else 0; 0: no cluster, in the flow's own process), or on the
    Dask scheduler at ``dask_address``. ``dry_run`` validates everything, reports the
    spends and the policy's verdict, and stops before anything is charged or written.
    ``unit`` is ``card`` (each card's contribution bounded first, the default; the card-level defaults unless
    ``config`` is given) or ``trip`` (the paper's). ``population`` names the people the release is about
    (default: the home's one population).
    """
    check_scale_out(workers, dask_address)
    population = population_named(population)  # a malformed name is refused before anything else
    warmup.start()  # later steps' libraries, imported while the input is hashed and read (no GIL there)
    cfg = load_config(config, epsilons, delta, quarantine_limit, unit)
    where = prepare_home(home, ledger, cfg.quality.quarantine_retention_days)
    budget_policy = load_policy(policy)
    population = declared_population(where, budget_policy, population)  # before any input is read
    stop_table = validate_stops(ingest_stops(stops), stops)
    period = declared_period(trips, period_start, period_end, dry_run)
    kind = OpalKind(trips, stops, stop_table, period, cfg, dask_address, workers, period_declared=period_start is not None)
    return publish_release(kind, where, budget_policy, population, release_id, dry_run)
