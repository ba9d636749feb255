"""The sequence release: universe → budget → read → charge → prefix tree or n-grams → evaluate → publish → track."""

from __future__ import annotations

from prefect import flow
from prefect.utilities.annotations import quote

from flows.tail import publish_staged
from tasks.budget import charge_budget, check_budget, load_policy, precheck_budget, resolve_release
from tasks.home import check_free_space, discard_run, prepare_home, records_space_needed
from flows.taps import clean_taps
from tasks.ingest import fingerprint_inputs, ingest_stops
from tasks.publish import load_manifest, stage_release
from tasks.report import write_sequence_report
from tasks.sequences import (declared_period, evaluate_sequences, load_universe, plan_sequence_spend, read_sequences,
                             sanitize_sequences, sequence_budget, sequence_outputs, sequences_from_taps, stop_universe,
                             tracking_record)
from tasks.validate import validate_stops
from tasks.summary import summarize, summarize_dry_run
from tasks.track import anchor_ledger, check_store
from transit_release import progress
from transit_release.releases import sequences
from transit_release.config import population_named
from transit_release.version import code_version


@flow(name="sequence-release", persist_result=False)
def sequence_release(epsilon: float, height: int | None = None, input: str | None = None,
                     period_start: str | None = None, period_end: str | None = None, variant: str | None = None,
                     locations: str | None = None, taxonomy: str | None = None, fanout: int | None = None,
                     trips: str | None = None, stops: str | None = None, mode: str = "train", home: str = ".",
                     release_id: str | None = None, policy: str | None = None, ledger: str | None = None,
                     quarantine_limit: float = 0.01, queries: int = 40_000, top_k: list[int] | None = None,
                     dry_run: bool = False, mechanism: str = "prefix-tree", lmax: int | None = None,
                     nmax: int | None = None, population: str | None = None) -> dict:
    """Publish an ε-DP release of the passenger sequences of a declared period (one spend).

    ``mechanism``: ``prefix-tree`` (``height``, ``variant`` default hybrid, ``fanout``) or ``ngram``
    (``lmax`` default 20, ``nmax`` default 5). Input: a one-sequence-a-line file over a public
    universe (``locations`` and/or ``taxonomy`` files), or tap data (``trips`` and ``stops``: one
    sequence per card over the period, the stop table's ``mode`` stations as universe). Everything
    computed from the universe before the data is read is public: the taxonomy, the budget split,
    the thresholds and the size check.
    """
    population = population_named(population)  # a malformed name is refused before anything else
    where = prepare_home(home, ledger)
    budget_policy = load_policy(policy)
    period = declared_period(period_start, period_end)
    stop_table = validate_stops(ingest_stops(stops), stops) if trips else None
    universe = stop_universe(stop_table, mode, stops) if trips else load_universe(locations, taxonomy)
    budget, tax = sequence_budget(mechanism, universe, epsilon, height, variant, fanout, lmax, nmax)
    inputs = [p for p in (input, locations, taxonomy, trips, stops) if p]
    wanted = release_id or sequences.default_release_id(mechanism, period)
    fingerprint = fingerprint_inputs(where, inputs)
    target = resolve_release(where, wanted, sequences.same_release(budget, fingerprint), fingerprint, inputs)
    if target.already_published:
        return summarize(where, load_manifest(where, target.release_id), "already published: nothing drawn or spent")
    rid = target.release_id
    with progress.stage("reading the sequences"):
        if trips:
            clean, _, _ = clean_taps(where, rid, trips, stops, period, quarantine_limit, dry_run)
            data = sequences_from_taps(clean, stop_table, mode)
        else:
            data = read_sequences(input, universe, quarantine_limit)
    event = plan_sequence_spend(rid, period, budget, fingerprint, code_version(), population)
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
        # the records and the release are large plain collections: quote() spares Prefect visiting every item
        with progress.stage(f"sanitizing ({mechanism})"):
            release, noise_kind = sanitize_sequences(quote(data), budget, tax, charged, rid)
        with progress.stage("evaluating"):
            metrics, figures = evaluate_sequences(quote(data), quote(release), budget, queries,
                                                  top_k if top_k is not None else [100, 200, 300])
        with progress.stage("publishing"):
            tables, texts, manifest = sequence_outputs(rid, period, universe, budget, event, noise_kind, code_version(),
                                                       quote(release))
            staged = stage_release(where, rid, tables, texts, manifest, sequences.render_datacard, charged,
                                   budget_policy)
            report = write_sequence_report(where, staged.manifest, metrics, data.quarantine_counts, figures)
            run_id = publish_staged(where, staged, charged, tracking_record(staged.manifest, metrics,
                                                                            data.quarantine_counts), report)
    except BaseException:
        # refused at its charge, a run wrote no report: a folder there is another run's (of the same id)
        discard_run(where, rid, keep_reports=charged is None)
        raise
    return {**summarize(where, staged.manifest, "published", run_id, f"{report}/report.html"), "metrics": metrics}
