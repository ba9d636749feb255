"""The Opal release: ingest → validate → preprocess → charge → sanitize → evaluate → publish → track."""

from __future__ import annotations

from prefect import flow

from tasks.budget import charge_budget, load_policy, plan_release
from tasks.config import load_config
from tasks.evaluate import evaluate_utility
from tasks.ingest import fingerprint_inputs, ingest_stops, ingest_trips
from tasks.preprocess import build_partitions, encode_trips
from tasks.publish import assemble_tables, commit_release, load_manifest, stage_release
from tasks.report import write_report
from tasks.sanitize import sanitize_partition
from tasks.summary import summarize
from tasks.track import mark_published, track_release
from tasks.validate import validate_encoded, validate_release_tables, validate_stops, validate_trips
from transit_release.home import Home
from transit_release.version import code_version


@flow(name="opal-release")
def opal_release(trips: str, stops: str, home: str = ".", config: str | None = None,
                 epsilons: list[float] | None = None, delta: float | None = None,
                 release_id: str | None = None, policy: str | None = None, ledger: str | None = None) -> dict:
    """Publish an (ε, δ)-DP Opal-style release of one period's trips."""
    where = Home.at(home, ledger)
    cfg = load_config(config, epsilons, delta)
    budget_policy = load_policy(policy)
    raw = validate_trips(ingest_trips(trips), trips)
    stop_table = validate_stops(ingest_stops(stops), stops)
    fingerprint = fingerprint_inputs(trips, stops)
    encoded = encode_trips(raw, stop_table, cfg)
    del raw  # the card id goes no further than encode_trips
    validate_encoded(encoded.frame)
    partitions = build_partitions(encoded)
    plan = plan_release(where, release_id, partitions, cfg, fingerprint, code_version())
    if plan.already_published:
        return summarize(where, load_manifest(where, plan.release_id), "already published: nothing drawn or spent")
    charged = charge_budget(where, plan.events, budget_policy)
    sanitized = [sanitize_partition(p, cfg, charged) for p in partitions]
    tables = validate_release_tables(assemble_tables(sanitized, encoded))
    utility = evaluate_utility(partitions, sanitized, cfg)
    staged = stage_release(where, plan.release_id, partitions, tables, cfg, code_version())
    report = write_report(where, staged.manifest, utility, partitions, sanitized)
    run_id = track_release(where, staged.manifest, utility, charged, report)
    commit_release(where, staged)  # the release becomes visible here, and only here
    mark_published(where, run_id)
    return summarize(where, staged.manifest, "published", run_id, report)
