"""The station-set release: universe → budget → read → charge → DiffPart → evaluate → publish → track."""

from __future__ import annotations

from prefect import flow

from flows.tail import publish_staged
from flows.taps import clean_taps
from tasks.budget import charge_budget, check_budget, load_policy, precheck_budget, resolve_release, same_spend
from tasks.home import check_free_space, discard_run, prepare_home, records_space_needed
from tasks.ingest import fingerprint_inputs, ingest_stops
from tasks.publish import load_manifest, stage_release
from tasks.report import write_sequence_report
from tasks.sequences import declared_period, load_universe
from tasks.sets import (evaluate_sets, plan_set_spend, read_sets, sanitize_sets, set_budget, set_outputs,
                        sets_from_taps, stop_locations, tracking_record)
from tasks.summary import summarize, summarize_dry_run
from tasks.track import anchor_ledger, check_store
from tasks.validate import validate_stops
from transit_release import progress
from transit_release.releases import sets
from transit_release.config import population_named
from transit_release.version import code_version


@flow(name="set-release", persist_result=False)
def set_release(epsilon: float, input: str | None = None, locations: str | None = None,
                period_start: str | None = None, period_end: str | None = None, fanout: int | None = sets.DEFAULT_FANOUT,
                trips: str | None = None, stops: str | None = None, mode: str | None = None, home: str = ".",
                release_id: str | None = None, policy: str | None = None, ledger: str | None = None,
                quarantine_limit: float = 0.01, queries: int = sets.DEFAULT_QUERIES, top_k: list[int] | None = None,
                dry_run: bool = False, population: str | None = None) -> dict:
    """Publish an ε-DP release of the passengers' station sets of a declared period (one spend: DiffPart).

    Input: a one-set-a-line file over the public universe of a ``locations`` file, or tap data (``trips``
    and ``stops``: one set per card over the period, the stop table's ``mode:location`` ids of ``mode``, or
    of every mode, as universe). Everything computed from the universe before the data is read is public:
    the taxonomy (its fan-out given, or from the universe size), C1 and C2, the noise scales and the size check.
    """
    population = population_named(population)  # a malformed name is refused before anything else
    where = prepare_home(home, ledger)
    budget_policy = load_policy(policy)
    period = declared_period(period_start, period_end)
    modes = (mode,) if mode else None
    stop_table = validate_stops(ingest_stops(stops), stops) if trips else None
    universe = stop_locations(stop_table, modes, stops) if trips else load_universe(locations, None)
    budget = set_budget(universe, epsilon, fanout)
    wanted = release_id or sets.default_release_id(period)
    inputs = [p for p in (input, locations, trips, stops) if p]
    fingerprint = fingerprint_inputs(where, inputs)
    target = resolve_release(where, wanted, same_spend("diffpart", epsilon, fingerprint), fingerprint, inputs)
    if target.already_published:
        return summarize(where, load_manifest(where, target.release_id), "already published: nothing drawn or spent")
    rid = target.release_id
    with progress.stage("reading the sets"):
        if trips:
            clean, _, screen = clean_taps(where, rid, trips, stops, period, quarantine_limit, dry_run)
            data = sets_from_taps(clean, stop_table, period, universe, modes)
            quarantine = {**screen["by_reason"], **data.quarantine_counts}
        else:
            data = read_sets(input, universe, quarantine_limit)
            quarantine = data.quarantine_counts
    event = plan_set_spend(rid, period, budget, fingerprint, code_version(), population)
    if dry_run:
        return summarize_dry_run(rid, period, True, [event], check_budget(where, [event], budget_policy), quarantine)
    precheck_budget(where, [event], budget_policy)
    check_store(where)  # MLflow must work before anything is spent
    check_free_space(where, records_space_needed(), rid)  # room to finish once charged
    charged = None
    try:
        charged = charge_budget(where, [event], budget_policy)
        anchor_ledger(where, rid, "charge")
        with progress.stage("partitioning (DiffPart)"):
            release, noise_kind = sanitize_sets(data, budget, charged, rid)
        with progress.stage("evaluating"):
            metrics, figures = evaluate_sets(data, release, queries, top_k if top_k is not None else list(sets.TOP_K))
        with progress.stage("publishing"):
            tables, texts, manifest = set_outputs(rid, period, universe, sets.describe_input(bool(trips), modes),
                                                  budget, event, noise_kind, code_version(), release,
                                                  sets.fanout_rule(fanout))
            staged = stage_release(where, rid, tables, texts, manifest, sets.render_datacard, charged,
                                   budget_policy)
            report = write_sequence_report(where, staged.manifest, metrics, quarantine, figures)
            run_id = publish_staged(where, staged, charged, tracking_record(staged.manifest, metrics, quarantine),
                                    report)
    except BaseException:
        # refused at its charge, a run wrote no report: a folder there is another run's (of the same id)
        discard_run(where, rid, keep_reports=charged is None)
        raise
    return {**summarize(where, staged.manifest, "published", run_id, f"{report}/report.html"), "metrics": metrics}
