"""The trajectory release: week → universe → setup → read → charge → tree or models → evaluate → publish → track."""

from __future__ import annotations

from prefect import flow

from flows.tail import publish_staged
from flows.taps import clean_taps
from tasks.budget import charge_budget, check_budget, load_policy, precheck_budget, resolve_release
from tasks.home import check_free_space, discard_run, prepare_home, records_space_needed
from tasks.ingest import fingerprint_inputs, ingest_stops
from tasks.publish import load_manifest, stage_release
from tasks.report import write_sequence_report
from tasks.sequences import declared_period, stop_universe
from tasks.summary import summarize, summarize_dry_run
from tasks.track import anchor_ledger, check_store
from tasks.trajectories import (check_trajectory_period, evaluate_trajectories, plan_trajectory_spend,
                                read_trajectories, same_release, sanitize_trajectories, tracking_record,
                                trajectories_from_taps, trajectory_outputs, trajectory_setup, trajectory_universe)
from tasks.validate import validate_stops
from transit_release import progress
from transit_release.releases import trajectories
from transit_release.config import population_named
from transit_release.version import code_version


@flow(name="trajectory-release", persist_result=False)
def trajectory_release(epsilon: float, height: int, input: str | None = None, period_start: str | None = None,
                       period_end: str | None = None, locations: str | None = None,
                       location_taxonomy: str | None = None, location_fanout: int | None = None,
                       location_taxonomy_height: int | None = None, time_fanout: int | None = None,
                       time_taxonomy_height: int | None = None, thresholds: str | None = None,
                       mechanism: str = trajectories.DEFAULT_MECHANISM, budget: str = trajectories.DEFAULT_BUDGET,
                       nmax: int | None = None,
                       trips: str | None = None, stops: str | None = None, mode: str = "train", home: str = ".",
                       release_id: str | None = None, policy: str | None = None, ledger: str | None = None,
                       quarantine_limit: float = 0.01, queries: int = 40_000, top_k: list[int] | None = None,
                       dry_run: bool = False, population: str | None = None) -> dict:
    """Publish an ε-DP release of the passenger trajectories of one declared week (one spend: the whole tree, or the
    three models of ``mechanism="markov"``).

    Input: a ``station@hour`` one-a-line file over a public universe (``locations`` and/or
    ``location_taxonomy`` files), or tap data (``trips`` and ``stops``: one trajectory per card over the
    week, the stop table's ``mode`` stations as universe). Everything computed before the data is read
    is public: the taxonomies, the budget split, the thresholds, the guards and the size checks.
    """
    population = population_named(population)  # a malformed name is refused before anything else
    where = prepare_home(home, ledger)
    budget_policy = load_policy(policy)
    period = check_trajectory_period(declared_period(period_start, period_end))
    stop_table = validate_stops(ingest_stops(stops), stops) if trips else None
    universe = trajectory_universe(locations, location_taxonomy,
                                   stop_universe(stop_table, mode, stops) if trips else None)
    setup = trajectory_setup(universe, epsilon, height, mechanism, budget, location_fanout, location_taxonomy_height,
                             time_fanout, time_taxonomy_height, thresholds, nmax)
    wanted = release_id or trajectories.default_release_id(period, mechanism)
    inputs = [p for p in (input, locations, location_taxonomy, trips, stops) if p]
    fingerprint = fingerprint_inputs(where, inputs)
    target = resolve_release(where, wanted, same_release(setup, fingerprint), fingerprint, inputs)
    if target.already_published:
        return summarize(where, load_manifest(where, target.release_id), "already published: nothing drawn or spent")
    rid = target.release_id
    with progress.stage("reading the trajectories"):
        if trips:
            clean, _, _ = clean_taps(where, rid, trips, stops, period, quarantine_limit, dry_run)
            data = trajectories_from_taps(clean, stop_table, period, mode)
        else:
            data = read_trajectories(input, universe, quarantine_limit)
    event = plan_trajectory_spend(rid, period, setup, fingerprint, code_version(), population)
    if dry_run:
        return summarize_dry_run(rid, period, True, [event], check_budget(where, [event], budget_policy),
                                 data.quarantine_counts)
    precheck_budget(where, [event], budget_policy)
    check_store(where)  # MLflow must work before anything is spent
    check_free_space(where, records_space_needed(), rid)  # room to finish once charged
    charged = None
    try:
        charged = charge_budget(where, [event], budget_policy)
        anchor_ledger(where, rid, "charge")
        with progress.stage("building the SafePath tree" if mechanism == "safepath" else "building the models"):
            release, n_nodes, noise_kind = sanitize_trajectories(data, setup, charged, rid)
        with progress.stage("evaluating"):
            metrics, figures = evaluate_trajectories(data, release, height, queries,
                                                     top_k if top_k is not None else list(trajectories.TOP_K), n_nodes)
        with progress.stage("publishing"):
            tables, texts, manifest = trajectory_outputs(rid, period, universe, setup, event, noise_kind,
                                                         code_version(), release)
            staged = stage_release(where, rid, tables, texts, manifest, trajectories.render_datacard, charged,
                                   budget_policy)
            report = write_sequence_report(where, staged.manifest, metrics, data.quarantine_counts, figures)
            run_id = publish_staged(where, staged, charged, tracking_record(staged.manifest, metrics,
                                                                            data.quarantine_counts), report)
    except BaseException:
        # refused at its charge, a run wrote no report: a folder there is another run's (of the same id)
        discard_run(where, rid, keep_reports=charged is None)
        raise
    return {**summarize(where, staged.manifest, "published", run_id, f"{report}/report.html"), "metrics": metrics}
