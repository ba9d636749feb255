"""The Opal release: ingest → validate → screen → preprocess → charge → sanitize → check → publish → track."""

from __future__ import annotations

from prefect import flow, unmapped

from flows.scale_out import sanitization_runner
from tasks.budget import charge_budget, load_policy, plan_spends, resolve_release
from tasks.config import check_scale_out, load_config
from tasks.evaluate import evaluate_utility
from tasks.ingest import fingerprint_inputs, ingest_stops, ingest_trips
from tasks.preprocess import encode_trips, remove_partitions, write_partitions
from tasks.publish import assemble_tables, commit_release, load_manifest, stage_release
from tasks.quality import check_raw_quality, check_release_tables
from tasks.report import update_index, write_report
from tasks.sanitize import check_cluster, describe_sanitizers, sanitize_partition
from tasks.screen import release_period, screen_trips, validate_trips_file
from tasks.summary import summarize
from tasks.track import mark_published, track_release
from tasks.validate import validate_clean_trips, validate_encoded, validate_release_tables, validate_stops
from transit_release.home import Home
from transit_release.partition_store import PartitionDataset
from transit_release.version import code_version


@flow(name="sanitize-partitions")
def sanitize_partitions(dataset: PartitionDataset, config, charged: list) -> list:
    """Map the sanitizer over the stored partitions (on the Dask task runner the caller gives)."""
    return sanitize_partition.map(unmapped(dataset), list(dataset.partitions), unmapped(config),
                                  unmapped(charged)).result()


@flow(name="opal-release")
def opal_release(trips: str, stops: str, home: str = ".", config: str | None = None,
                 epsilons: list[float] | None = None, delta: float | None = None,
                 release_id: str | None = None, policy: str | None = None, ledger: str | None = None,
                 period_start: str | None = None, period_end: str | None = None,
                 quarantine_limit: float | None = None, dask_address: str | None = None,
                 workers: int | None = None) -> dict:
    """Publish an (ε, δ)-DP Opal-style release of one period's trips.

    Nothing is charged before every input check has passed; nothing is visible
    under ``releases/`` before the final commit. The partitions are sanitized
    on a local Dask cluster of ``workers`` processes (default 2), or on the
    Dask scheduler at ``dask_address``.
    """
    check_scale_out(workers, dask_address)
    where = Home.at(home, ledger)
    cfg = load_config(config, epsilons, delta, quarantine_limit)
    budget_policy = load_policy(policy)
    raw = validate_trips_file(ingest_trips(trips), trips)
    stop_table = validate_stops(ingest_stops(stops), stops)
    fingerprint = fingerprint_inputs([trips, stops])
    period = release_period(raw, period_start, period_end)
    target = resolve_release(where, release_id, period, cfg, fingerprint)
    if target.already_published:
        return summarize(where, load_manifest(where, target.release_id), "already published: nothing drawn or spent")
    raw_quality = check_raw_quality.submit(where, target.release_id, raw, stop_table, period, cfg)
    screened = screen_trips(where, target.release_id, raw, stop_table, period, cfg, trips)
    del raw  # the card id goes no further than the screen and encode_trips
    quarantine = screened.summary()  # counts only
    clean = validate_clean_trips(screened.clean, trips)
    encoded = encode_trips(clean, stop_table, cfg)
    del clean, screened
    validate_encoded(encoded.frame)
    dataset = write_partitions(where, target.release_id, encoded)
    del encoded  # from here on, partitions are read from their files one at a time
    if dask_address:
        check_cluster(dask_address, dataset)  # before any spend
    events = plan_spends(target.release_id, dataset.partitions, cfg, fingerprint, code_version())
    raw_quality = raw_quality.result()  # the raw-data suite must pass before anything is spent
    charged = charge_budget(where, events, budget_policy)
    outcomes = sanitize_partitions.with_options(task_runner=sanitization_runner(dask_address, workers))(
        dataset, cfg, charged)
    tables = validate_release_tables(assemble_tables(outcomes, dataset))
    release_quality = check_release_tables(where, target.release_id, tables, outcomes, dataset, cfg)
    utility = evaluate_utility(outcomes)
    sanitizers = describe_sanitizers(outcomes, dask_address, workers)
    staged = stage_release(where, target.release_id, period, tables, cfg, code_version(), sanitizers["noise_source"])
    report = write_report(where, staged.manifest, utility, outcomes, quarantine)
    run_id = track_release(where, staged.manifest, utility, charged, report, quarantine,
                           {"raw": raw_quality, "release": release_quality}, sanitizers)
    commit_release(where, staged)  # the release becomes visible here, and only here
    mark_published(where, run_id)
    remove_partitions(dataset)
    update_index(where)
    return summarize(where, staged.manifest, "published", run_id, report, quarantine)
