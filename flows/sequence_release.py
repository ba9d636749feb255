"""The sequence release: universe → budget → read → charge → prefix tree or n-grams → evaluate → publish → track."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow
from prefect.utilities.annotations import quote

from flows.passengers import PassengerKind, TapInput
from flows.tail import PublicOutputs, Records, ReleaseRun, publish_release
from tasks.budget import declared_population, load_policy
from tasks.home import prepare_home
from tasks.ingest import ingest_stops
from tasks.inputs import declared_period, load_universe, stop_universe
from tasks.sequences import (evaluate_sequences, plan_sequence_spend, read_sequences, sanitize_sequences,
                             sequence_budget, sequence_outputs, sequences_from_taps, tracking_record)
from tasks.validate import validate_stops
from tasks.summary import REPORTS_OUTCOME
from transit_release.accounting.events import population_named
from transit_release.mechanisms.prefix_tree import Taxonomy
from transit_release.releases import sequences
from transit_release.runtime.disclosure import refusals_kept_private
from transit_release.version import code_version


@dataclass(frozen=True)
class SequenceKind(PassengerKind):
    """Passenger sequences over a public universe: a noisy prefix tree or variable-length n-grams (one spend)."""

    mechanism: str
    budget: sequences.Budget
    taxonomy: Taxonomy | None
    mode: str

    reading = "reading the sequences"
    record_role = "sequences"
    render_datacard = staticmethod(sequences.render_datacard)
    tracking_task = staticmethod(tracking_record)

    @property
    def default_release_id(self) -> str:
        return sequences.default_release_id(self.mechanism, self.period)

    @property
    def sanitizing(self) -> str:
        return f"sanitizing ({self.mechanism})"

    def same_release(self, fingerprint):
        return sequences.same_release(self.budget, fingerprint)

    @property
    def record_cut(self) -> int:
        return sequences.workload_height(self.budget)  # the tree's height, the n-gram's ℓmax

    def read_file(self) -> Records:
        data = read_sequences(self.input, self.universe, self.quarantine_limit)
        return Records(data, data.quarantine_counts)

    def from_taps(self, clean, screen) -> Records:
        data = sequences_from_taps(clean, self.taps.stop_table, self.mode)
        return Records(data, data.quarantine_counts)

    def plan_spend(self, release_id, fingerprint, population):
        return plan_sequence_spend(release_id, self.period, self.budget, fingerprint, code_version(), population)

    # the records and the release are large plain collections: quote() spares Prefect visiting every item
    def sanitize(self, run: ReleaseRun, records: Records, charged: list):
        return sanitize_sequences(quote(records.data), self.budget, self.taxonomy, charged, run.release_id)

    def evaluate(self, records: Records, sanitized):
        release, _ = sanitized
        return self.timed(evaluate_sequences)(quote(records.data), quote(release), self.budget, self.queries, self.top_k)

    def outputs(self, run, events, records, sanitized, evaluation, in_flight) -> PublicOutputs:
        release, noise_kind = sanitized
        return PublicOutputs(*sequence_outputs(run.release_id, self.period, self.universe, self.budget, events[0],
                                               noise_kind, code_version(), quote(release)))


@flow(name="sequence-release", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def sequence_release(epsilon: float, height: int | None = None, input: str | None = None,
                     period_start: str | None = None, period_end: str | None = None, variant: str | None = None,
                     locations: str | None = None, taxonomy: str | None = None, fanout: int | None = None,
                     trips: str | None = None, stops: str | None = None, mode: str = "train", home: str = ".",
                     release_id: str | None = None, policy: str | None = None, ledger: str | None = None,
                     quarantine_limit: float = 0.01, queries: int = 40_000, top_k: list[int] | None = None,
                     dry_run: bool = False, mechanism: str | None = None, lmax: int | None = None,
                     nmax: int | None = None, population: str | None = None) -> dict:
    """Publish an ε-DP release of the passenger sequences of a declared period (one spend).

    ``mechanism``: ``ngram`` (``lmax`` default 20, ``nmax`` default 5; the default) or ``prefix-tree``
    (``height``, ``variant`` default hybrid, ``fanout``; chosen too when one of these is given without
    ``mechanism``, as when it was the default). Input: a one-sequence-a-line file over a public
    universe (``locations`` and/or ``taxonomy`` files), or tap data (``trips`` and ``stops``: one
    sequence per card over the period, the stop table's ``mode`` stations as universe). Everything
    computed from the universe before the data is read is public: the taxonomy, the budget split,
    the thresholds and the size check.
    """
    population = population_named(population)  # a malformed name is refused before anything else
    where = prepare_home(home, ledger)
    budget_policy = load_policy(policy)
    population = declared_population(where, budget_policy, population)  # before any input is read
    period = declared_period(period_start, period_end)
    stop_table = validate_stops(ingest_stops(stops), stops) if trips else None
    universe = stop_universe(stop_table, mode, stops) if trips else load_universe(locations, taxonomy)
    mechanism = sequences.resolve_mechanism(mechanism, height, variant, fanout)
    budget, tax = sequence_budget(mechanism, universe, epsilon, height, variant, fanout, lmax, nmax)
    kind = SequenceKind(period=period, universe=universe, input=input,
                        taps=TapInput(trips, stops, stop_table) if trips else None, quarantine_limit=quarantine_limit,
                        queries=queries, top_k=top_k if top_k is not None else [100, 200, 300],
                        inputs=[p for p in (input, locations, taxonomy, trips, stops) if p],
                        mechanism=mechanism, budget=budget, taxonomy=tax, mode=mode)
    return publish_release(kind, where, budget_policy, population, release_id, dry_run)
