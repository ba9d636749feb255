"""The Opal release: ingest → validate → screen → preprocess → charge → sanitize → check → publish → track."""

from __future__ import annotations

from prefect import flow

from tasks.budget import charge_budget, load_policy, plan_spends, resolve_release
from tasks.config import load_config
from tasks.evaluate import evaluate_utility
from tasks.ingest import fingerprint_inputs, ingest_stops, ingest_trips
from tasks.preprocess import build_partitions, encode_trips
from tasks.publish import assemble_tables, commit_release, load_manifest, stage_release
from tasks.quality import check_raw_quality, check_release_tables
from tasks.report import update_index, write_report
from tasks.sanitize import sanitize_partition
from tasks.screen import release_period, screen_trips, validate_trips_file
from tasks.summary import summarize
from tasks.track import mark_published, track_release
from tasks.validate import (validate_clean_trips, validate_encoded, validate_partitions, validate_release_tables,
                            validate_stops)
from transit_release.home import Home
from transit_release.version import code_version


@flow(name="opal-release")
def opal_release(trips: str, stops: str, home: str = ".", config: str | None = None,
                 epsilons: list[float] | None = None, delta: float | None = None,
                 release_id: str | None = None, policy: str | None = None, ledger: str | None = None,
                 period_start: str | None = None, period_end: str | None = None,
                 quarantine_limit: float | None = None) -> dict:
    """Publish an (ε, δ)-DP Opal-style release of one period's trips.

    Nothing is charged before every input check has passed; nothing is visible
    under ``releases/`` before the final commit.
    """
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
    partitions = validate_partitions(build_partitions(encoded))
    events = plan_spends(target.release_id, partitions, cfg, fingerprint, code_version())
    raw_quality = raw_quality.result()  # the raw-data suite must pass before anything is spent
    charged = charge_budget(where, events, budget_policy)
    sanitized = [sanitize_partition(p, cfg, charged) for p in partitions]
    tables = validate_release_tables(assemble_tables(sanitized, encoded))
    release_quality = check_release_tables(where, target.release_id, tables, partitions, encoded, cfg)
    utility = evaluate_utility(partitions, sanitized, cfg)
    staged = stage_release(where, target.release_id, period, tables, cfg, code_version())
    report = write_report(where, staged.manifest, utility, partitions, sanitized, quarantine)
    run_id = track_release(where, staged.manifest, utility, charged, report, quarantine,
                           {"raw": raw_quality, "release": release_quality})
    commit_release(where, staged)  # the release becomes visible here, and only here
    mark_published(where, run_id)
    update_index(where)
    return summarize(where, staged.manifest, "published", run_id, report, quarantine)
