"""The station-set release: universe → mechanism and budget → read → charge → set histogram or DiffPart → evaluate →
publish → track."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow
from prefect.utilities.annotations import quote

from flows.passengers import PassengerKind, TapInput
from flows.tail import PublicOutputs, Records, ReleaseRun, publish_release
from tasks.budget import declared_population, load_policy, same_spend
from tasks.home import prepare_home
from tasks.ingest import ingest_stops
from tasks.inputs import declared_period, load_universe
from tasks.sets import (evaluate_sets, plan_set_spend, read_sets, sanitize_sets, set_outputs, set_setup,
                        sets_from_taps, stop_locations, tracking_record)
from tasks.validate import validate_stops
from tasks.summary import REPORTS_OUTCOME
from transit_release.accounting.events import population_named
from transit_release.releases import sets
from transit_release.runtime.disclosure import refusals_kept_private
from transit_release.version import code_version


@dataclass(frozen=True)
class SetKind(PassengerKind):
    """The passengers' station sets of a declared period: the set histogram or DiffPart (one spend)."""

    setup: sets.SetSetup
    epsilon: float
    modes: tuple[str, ...] | None

    reading = "reading the sets"
    record_role = "sets"
    render_datacard = staticmethod(sets.render_datacard)
    tracking_task = staticmethod(tracking_record)

    @property
    def budget(self):
        return self.setup.budget

    @property
    def sanitizing(self) -> str:
        return "partitioning (DiffPart)" if self.setup.mechanism == "diffpart" else "counting every set (histogram)"

    @property
    def default_release_id(self) -> str:
        return sets.default_release_id(self.period, self.setup.mechanism)

    @property
    def earlier_release_ids(self) -> tuple[str, ...]:
        return sets.earlier_release_ids(self.period, self.setup)

    def same_release(self, fingerprint):
        return same_spend(self.setup.event_kind, self.epsilon, fingerprint)

    def same_earlier_release(self, fingerprint):
        """The former default's spend (DiffPart) of the same input and ε."""
        return same_spend("diffpart", self.epsilon, fingerprint)

    def read_file(self) -> Records:
        data = read_sets(self.input, self.universe, self.quarantine_limit)
        return Records(data, data.quarantine_counts)

    def from_taps(self, clean, screen) -> Records:
        data = sets_from_taps(clean, self.taps.stop_table, self.period, self.universe, self.modes)
        return Records(data, {**screen["by_reason"], **data.quarantine_counts})

    def plan_spend(self, release_id, fingerprint, population):
        return plan_set_spend(release_id, self.period, self.budget, fingerprint, code_version(), population)

    # the records and the release are large plain collections: quote() spares Prefect visiting every item
    def sanitize(self, run: ReleaseRun, records: Records, charged: list):
        return sanitize_sets(quote(records.data), self.budget, charged, run.release_id)

    def evaluate(self, records: Records, sanitized):
        release, _ = sanitized
        return self.timed(evaluate_sets)(quote(records.data), quote(release), self.queries, self.top_k)

    def outputs(self, run, events, records, sanitized, evaluation, in_flight) -> PublicOutputs:
        release, noise_kind = sanitized
        return PublicOutputs(*set_outputs(run.release_id, self.period, self.universe,
                                          sets.describe_input(self.taps is not None, self.modes), self.budget,
                                          events[0], noise_kind, code_version(), quote(release),
                                          sets.fanout_rule(self.setup.fanout), self.setup.chosen))


@flow(name="set-release", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def set_release(epsilon: float, input: str | None = None, locations: str | None = None,
                period_start: str | None = None, period_end: str | None = None, mechanism: str | None = None,
                fanout: int | None = sets.DEFAULT_FANOUT,
                trips: str | None = None, stops: str | None = None, mode: str | None = None, home: str = ".",
                release_id: str | None = None, policy: str | None = None, ledger: str | None = None,
                quarantine_limit: float = 0.01, queries: int = sets.DEFAULT_QUERIES, top_k: list[int] | None = None,
                dry_run: bool = False, population: str | None = None) -> dict:
    """Publish an ε-DP release of the passengers' station sets of a declared period (one spend: the set histogram
    or DiffPart).

    ``mechanism``: ``histogram`` or ``diffpart``; without it, DiffPart if its ``fanout`` is given, else the
    mechanism the public universe size and ε pick (the histogram where 2^|I| ≤ 2^20·ε²). Input: a one-set-a-line file over the
    public universe of a ``locations`` file, or tap data (``trips`` and ``stops``: one set per card over the period,
    the stop table's ``mode:location`` ids of ``mode``, or of every mode, as universe). Everything computed from the
    universe before the data is read is public: the mechanism, the taxonomy (its fan-out given, or from the
    universe size), C1 and C2, the head threshold, the noise scales and the size checks.
    """
    population = population_named(population)  # a malformed name is refused before anything else
    where = prepare_home(home, ledger)
    budget_policy = load_policy(policy)
    population = declared_population(where, budget_policy, population)  # before any input is read
    period = declared_period(period_start, period_end)
    modes = (mode,) if mode else None
    stop_table = validate_stops(ingest_stops(stops), stops) if trips else None
    universe = stop_locations(stop_table, modes, stops) if trips else load_universe(locations, None)
    setup = set_setup(universe, epsilon, mechanism, fanout)
    kind = SetKind(period=period, universe=universe, input=input,
                   taps=TapInput(trips, stops, stop_table) if trips else None, quarantine_limit=quarantine_limit,
                   queries=queries, top_k=top_k if top_k is not None else list(sets.TOP_K),
                   inputs=[p for p in (input, locations, trips, stops) if p],
                   setup=setup, epsilon=epsilon, modes=modes)
    return publish_release(kind, where, budget_policy, population, release_id, dry_run)
