"""The Opal release: stream the input → prepare the partitions → gate → charge → sanitize → check → publish → track."""

from __future__ import annotations

from prefect import flow, unmapped
from prefect.utilities.annotations import quote

from flows.scale_out import dask_cluster, partition_chunks, run_on_partitions
from flows.tail import publish_staged
from tasks.budget import charge_budget, check_budget, load_policy, precheck_budget, resolve_release
from tasks.config import check_scale_out, load_config
from tasks.evaluate import evaluate_utility
from tasks.home import check_free_space, discard_run, prepare_home
from tasks.ingest import fingerprint_inputs, ingest_stops
from tasks.opal import assemble_tables, build_manifest, plan_spends, same_release, space_needed, tracking_record
from tasks.preprocess import location_index
from tasks.publish import load_manifest, stage_release
from tasks.quality import check_raw_quality, check_release_tables
from tasks.sanitize import check_cluster, describe_sanitizers, sanitize_chunk
from tasks.stream import (bound_partitions_per_card, commit_partitions, declared_period, early_gate,
                          pair_shards, prepare_chunk, screen_verdict, stream_trips)
from tasks.summary import summarize, summarize_dry_run
from tasks.track import anchor_ledger, check_store
from tasks.validate import validate_release_tables, validate_stops
from tasks.report import draw_report_figures, write_report
from transit_release import partition_store, progress, warmup
from transit_release.recovery import work_dir
from transit_release.releases import opal
from transit_release.config import population_named
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
def prepare_partitions(work, staging: str, chunks: list[list[tuple[str, str]]], config, index_path: str,
                       shards: int) -> list:
    """Map the partition step over chunks of the public partitions (on the task runner the caller gives: Dask, or
    one thread in this process).
    Only paths, names and public parameters are passed; counts come back."""
    return _mapped(prepare_chunk, "preparing", chunks, (work, staging), (config, index_path, shards))


@flow(name="sanitize-partitions", persist_result=False)
def sanitize_partitions(dataset_root: str, chunks: list[list[tuple[str, str]]], config, ledger_path: str,
                        release_id: str) -> list:
    """Map the sanitizer over chunks of the stored partitions (on the task runner the caller gives). Only
    paths and names are passed: no data and no true count becomes a Prefect parameter."""
    return _mapped(sanitize_chunk, "sanitizing", chunks, (dataset_root,), (config, ledger_path, release_id))


@flow(name="opal-release", persist_result=False)
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
    stop_table = validate_stops(ingest_stops(stops), stops)
    period = declared_period(trips, period_start, period_end, dry_run)
    # hashed in a thread of its own (no GIL) while the trips are read: a new release id needs it only when its
    # spends are planned; an existing one waits for it here, to compare with the earlier spends (quoted: Prefect
    # would wait for a future given as a task's parameter)
    wanted = release_id or opal.release_id_for(period.start, period.end, cfg.unit_of_privacy)
    fingerprint = fingerprint_inputs.submit(where, [trips, stops])
    target = resolve_release(where, wanted, same_release(cfg, fingerprint), quote(fingerprint), [trips, stops],
                             [] if release_id else opal.earlier_release_ids(period.start, period.end))
    if target.already_published:
        return summarize(where, load_manifest(where, target.release_id), "already published: nothing drawn or spent")
    rid = target.release_id
    partitions = opal.partitions_of(period, cfg)
    report_figures = None
    with work_dir(where, rid) as work, dask_cluster(dask_address, workers) as cluster:
        try:
            workers_used = cluster.local_workers
            if dask_address:  # before any work on it, and before any spend
                workers_used = check_cluster(dask_address, str(work.path))
            chunks = partition_chunks(partitions, workers_used)
            index = location_index(stop_table, cfg, work)  # a path: the stop table is no subflow parameter
            with progress.stage("reading and screening the trips"):
                streamed = stream_trips(work, trips, stop_table, period, cfg)  # the card id stays in work.spill
                early_gate(where, rid, work, trips, streamed, cfg, dry_run)
            staging = str(partition_store.staging_for(work.partitions))
            # per-partition results are passed on quoted: Prefect would walk every one's fields at every task
            prepared = quote(run_on_partitions(prepare_partitions, cluster, work, staging, chunks, cfg, index,
                                               pair_shards(period)))
            with progress.stage("validating"):
                figures = screen_verdict(where, rid, work, trips, streamed, prepared, cfg, dry_run)
                raw_quality = check_raw_quality(where, str(work.path), rid, figures, prepared, partitions, cfg)
                quarantine = figures.summary()  # counts only
                if cfg.unit_of_privacy == "card":  # at most P partitions per card
                    quarantine = {**quarantine, "bounding": bound_partitions_per_card(
                        work, staging, period, cfg, prepared)}  # internal figures, never public
                dataset = commit_partitions(work, staging, prepared, index, cfg)
                events = plan_spends(rid, period, cfg, fingerprint.result(), code_version(),
                                     population)  # raises its error
            if dry_run:
                return summarize_dry_run(rid, period, period_start is not None, events,
                                         check_budget(where, events, budget_policy), quarantine)
            precheck_budget(where, events, budget_policy)
            check_store(where)  # MLflow must work before anything is spent
            check_free_space(where, space_needed(period, cfg, index), rid)  # room to finish
            charged = charge_budget(where, events, budget_policy)
            anchor_ledger(where, rid, "charge")
            outcomes = quote(run_on_partitions(sanitize_partitions, cluster, str(dataset.root), chunks, cfg,
                                               str(where.ledger), rid))
            with progress.stage("checking and publishing"):
                utility = evaluate_utility(outcomes)
                sanitizers = describe_sanitizers(outcomes, dask_address, workers, prepared)
                manifest = build_manifest(rid, period, cfg, sanitizers["noise_source"], code_version())
                # the report's figures, drawn in a process of their own while the release is checked and staged
                report_figures = draw_report_figures.submit(where, manifest, utility, outcomes)
                tables = validate_release_tables(assemble_tables(outcomes, dataset))
                release_quality = check_release_tables(where, str(work.path), rid, tables, outcomes, dataset, cfg)
                staged = stage_release(where, rid, tables, {}, manifest, opal.render_datacard, charged,
                                       budget_policy)
                report = write_report(where, str(work.path), staged.manifest, utility, quarantine,
                                      report_figures.result())
                record = tracking_record(staged.manifest, utility, quarantine,
                                         {"raw": raw_quality, "release": release_quality}, sanitizers)
                run_id = publish_staged(where, staged, charged, record, report)
        except BaseException:
            try:
                if report_figures is not None:
                    report_figures.wait()  # its process writes into the report's folder, which is removed next
            finally:  # also when the wait is interrupted
                # a run that drew nothing made no report folder: one there is another run's (e.g. of the same
                # id, which this one lost to when charging), and stays
                discard_run(where, rid, keep_reports=report_figures is None)
            raise
    return summarize(where, staged.manifest, "published", run_id, f"{report}/report.html", quarantine)
