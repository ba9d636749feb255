"""The Opal release: ingest → validate → screen → preprocess → charge → sanitize → check → publish → track."""

from __future__ import annotations

from prefect import flow, unmapped

from flows.scale_out import sanitization_runner
from flows.tail import publish_staged
from tasks.budget import charge_budget, check_budget, load_policy, precheck_budget, resolve_release
from tasks.config import check_scale_out, load_config
from tasks.evaluate import evaluate_utility
from tasks.home import discard_run, prepare_home
from tasks.ingest import fingerprint_inputs, ingest_stops, ingest_trips
from tasks.opal import (assemble_tables, bound_contributions, build_manifest, plan_spends, same_release,
                        tracking_record)
from tasks.preprocess import encode_trips, write_partitions
from tasks.publish import load_manifest, stage_release
from tasks.quality import check_raw_quality, check_release_tables
from tasks.sanitize import check_cluster, describe_sanitizers, sanitize_partition
from tasks.screen import release_period, screen_trips, validate_trips_file
from tasks.summary import summarize, summarize_dry_run
from tasks.track import anchor_ledger, check_store
from tasks.validate import validate_clean_trips, validate_encoded, validate_release_tables, validate_stops
from tasks.report import write_report
from transit_release import progress
from transit_release.recovery import work_dir
from transit_release.releases import opal
from transit_release.version import code_version


@flow(name="sanitize-partitions", persist_result=False)
def sanitize_partitions(dataset_root: str, partitions: list[tuple[str, str]], config, ledger_path: str,
                        release_id: str) -> list:
    """Map the sanitizer over the stored partitions (on the Dask task runner the caller gives). Only paths and
    names are passed: no data and no true count becomes a Prefect parameter."""
    futures = sanitize_partition.map(unmapped(dataset_root), [m for m, _ in partitions], [d for _, d in partitions],
                                     unmapped(config), unmapped(ledger_path), unmapped(release_id))
    with progress.stage(f"sanitizing {len(partitions)} partitions", total=len(partitions)) as bar:
        results = []
        for f in futures:
            results.append(f.result())
            bar.advance()
    return results


@flow(name="opal-release")
def opal_release(trips: str, stops: str, period_start: str | None = None, period_end: str | None = None,
                 home: str = ".", config: str | None = None, epsilons: list[float] | None = None,
                 delta: float | None = None, release_id: str | None = None, policy: str | None = None,
                 ledger: str | None = None, quarantine_limit: float | None = None, dask_address: str | None = None,
                 workers: int | None = None, dry_run: bool = False, unit: str | None = None) -> dict:
    """Publish an (ε, δ)-DP Opal-style release of one declared period's trips.

    Nothing is charged before every input check has passed; nothing is visible
    under ``releases/`` before the final commit; a refused or failed run removes
    what it created (the quarantine excepted). The partitions are sanitized on a
    local Dask cluster of ``workers`` processes (default 2), or on the Dask
    scheduler at ``dask_address``. ``dry_run`` validates everything, reports the
    spends and the policy's verdict, and stops before anything is charged or written.
    ``unit`` is ``trip`` (the paper's, the default) or ``card`` (each card's contribution bounded first; the
    card-level defaults unless ``config`` is given).
    """
    check_scale_out(workers, dask_address)
    cfg = load_config(config, epsilons, delta, quarantine_limit, unit)
    where = prepare_home(home, ledger, cfg.quality.quarantine_retention_days)
    budget_policy = load_policy(policy)
    with progress.stage("reading the trips"):
        raw = validate_trips_file(ingest_trips(trips), trips)
        stop_table = validate_stops(ingest_stops(stops), stops)
    period = release_period(raw, period_start, period_end, dry_run)
    fingerprint = fingerprint_inputs(where, [trips, stops])
    target = resolve_release(where, release_id or opal.release_id_for(period.start, period.end),
                             same_release(cfg, fingerprint))
    if target.already_published:
        return summarize(where, load_manifest(where, target.release_id), "already published: nothing drawn or spent")
    rid = target.release_id
    with work_dir(where, rid) as work:
        raw_quality = None
        try:
            with progress.stage("validating"):
                raw_quality = check_raw_quality.submit(where, str(work.path), rid, raw, stop_table, period, cfg)
                screened = screen_trips(where, rid, raw, stop_table, period, cfg, trips, dry_run)
                del raw  # the card id goes no further than the screen and encode_trips
                quarantine = screened.summary()  # counts only
                clean = validate_clean_trips(screened.clean, trips)
                kept = None
                if cfg.unit_of_privacy == "card":  # before the card id is dropped: at most k trips, P partitions
                    kept, bounding = bound_contributions(clean, cfg)
                    quarantine = {**quarantine, "bounding": bounding}  # internal figures, never public
                encoded = encode_trips(clean, stop_table, cfg, kept)
                del clean, screened
                validate_encoded(encoded.frame)
                dataset = write_partitions(str(work.partitions), encoded)
                del encoded  # from here on, partitions are read from their files one at a time
                if dask_address:
                    check_cluster(dask_address, str(dataset.root))  # before any spend
                events = plan_spends(rid, period, cfg, fingerprint, code_version())
                raw_quality = raw_quality.result()  # the raw-data suite must pass before anything is spent
            if dry_run:
                return summarize_dry_run(rid, period, period_start is not None, events,
                                         check_budget(where, events, budget_policy), quarantine)
            precheck_budget(where, events, budget_policy)
            check_store(where)  # MLflow must work before anything is spent
            charged = charge_budget(where, events, budget_policy)
            anchor_ledger(where, rid, "charge")
            outcomes = sanitize_partitions.with_options(task_runner=sanitization_runner(dask_address, workers))(
                str(dataset.root), opal.partitions_of(period, cfg), cfg, str(where.ledger), rid)
            with progress.stage("checking and publishing"):
                tables = validate_release_tables(assemble_tables(outcomes, dataset))
                release_quality = check_release_tables(where, str(work.path), rid, tables, outcomes, dataset, cfg)
                utility = evaluate_utility(outcomes)
                sanitizers = describe_sanitizers(outcomes, dask_address, workers)
                manifest = build_manifest(rid, period, cfg, sanitizers["noise_source"], code_version())
                staged = stage_release(where, rid, tables, {}, manifest, opal.render_datacard, charged)
                report = write_report(where, str(work.path), staged.manifest, utility, outcomes, quarantine)
                record = tracking_record(staged.manifest, utility, quarantine,
                                         {"raw": raw_quality, "release": release_quality}, sanitizers)
                run_id = publish_staged(where, staged, charged, record, report)
        except BaseException:
            if raw_quality is not None and hasattr(raw_quality, "wait"):
                raw_quality.wait()  # the raw-data suite writes under the work directory: let it finish first
            discard_run(where, rid, keep_reports=False)
            raise
    return summarize(where, staged.manifest, "published", run_id, f"{report}/report.html", quarantine)
