"""The trajectory release: week → universe → setup → read → charge → tree or models → evaluate → publish → track."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow
from prefect.utilities.annotations import quote

from flows.passengers import PassengerKind, TapInput
from flows.tail import PublicOutputs, Records, ReleaseRun, publish_release
from tasks.budget import declared_population, load_policy
from tasks.home import prepare_home
from tasks.ingest import ingest_stops
from tasks.inputs import declared_period, stop_universe
from tasks.trajectories import (check_trajectory_period, evaluate_trajectories, plan_trajectory_spend,
                                read_trajectories, same_release, sanitize_trajectories, tracking_record,
                                trajectories_from_taps, trajectory_outputs, trajectory_setup, trajectory_universe)
from tasks.validate import validate_stops
from tasks.summary import REPORTS_OUTCOME
from transit_release.accounting.events import population_named
from transit_release.releases import trajectories
from transit_release.runtime.disclosure import refusals_kept_private
from transit_release.version import code_version


@dataclass(frozen=True)
class TrajectoryKind(PassengerKind):
    """Passenger trajectories (station, hour of the week) of one week: SafePath's tree, or the factored Markov
    model (one spend)."""

    mechanism: str
    setup: trajectories.Setup
    height: int
    mode: str
    #: the former default's setup (SafePath) when the mechanism is the new default by default: its id is recognised
    former: trajectories.SafePathSetup | None = None

    reading = "reading the trajectories"
    record_role = "trajectories"
    render_datacard = staticmethod(trajectories.render_datacard)
    tracking_task = staticmethod(tracking_record)

    @property
    def default_release_id(self) -> str:
        return trajectories.default_release_id(self.period, self.mechanism)

    @property
    def sanitizing(self) -> str:
        return "building the SafePath tree" if self.mechanism == "safepath" else "building the models"

    @property
    def earlier_release_ids(self) -> tuple[str, ...]:
        return trajectories.earlier_release_ids(self.period, self.former)

    def same_release(self, fingerprint):
        return same_release(self.setup, fingerprint)

    @property
    def record_cut(self) -> int:
        return self.setup.budget.height  # every mechanism reads Trajectories.truncated(h)

    def same_earlier_release(self, fingerprint):
        """The former default's spend (SafePath, the paper's budget, default taxonomies) of the same input, ε and h."""
        return same_release(self.former, fingerprint) if self.former is not None else self.same_release(fingerprint)

    def read_file(self) -> Records:
        data = read_trajectories(self.input, self.universe, self.quarantine_limit)
        return Records(data, data.quarantine_counts)

    def from_taps(self, clean, screen) -> Records:
        data = trajectories_from_taps(clean, self.taps.stop_table, self.period, self.mode)
        return Records(data, data.quarantine_counts)

    def plan_spend(self, release_id, fingerprint, population):
        return plan_trajectory_spend(release_id, self.period, self.setup, fingerprint, code_version(), population)

    # the records and the release are large plain collections: quote() spares Prefect visiting every item (at
    # every task it is given to: 137 s of gaps between the tasks of 300,000 trajectories)
    def sanitize(self, run: ReleaseRun, records: Records, charged: list):
        return sanitize_trajectories(quote(records.data), self.setup, charged, run.release_id)

    def evaluate(self, records: Records, sanitized):
        release, n_nodes, _ = sanitized
        return self.timed(evaluate_trajectories)(quote(records.data), quote(release), self.height, self.queries,
                                                 self.top_k, n_nodes)

    def outputs(self, run, events, records, sanitized, evaluation, in_flight) -> PublicOutputs:
        release, _, noise_kind = sanitized
        return PublicOutputs(*trajectory_outputs(run.release_id, self.period, self.universe, self.setup, events[0],
                                                 noise_kind, code_version(), quote(release)))


@flow(name="trajectory-release", persist_result=False, **REPORTS_OUTCOME)
@refusals_kept_private
def trajectory_release(epsilon: float, height: int | None = None, input: str | None = None,
                       period_start: str | None = None,
                       period_end: str | None = None, locations: str | None = None,
                       location_taxonomy: str | None = None, location_fanout: int | None = None,
                       location_taxonomy_height: int | None = None, time_fanout: int | None = None,
                       time_taxonomy_height: int | None = None, thresholds: str | None = None,
                       mechanism: str | None = None, budget: str | None = None,
                       nmax: int | None = None,
                       trips: str | None = None, stops: str | None = None, mode: str = "train", home: str = ".",
                       release_id: str | None = None, policy: str | None = None, ledger: str | None = None,
                       quarantine_limit: float = 0.01, queries: int = 40_000, top_k: list[int] | None = None,
                       dry_run: bool = False, population: str | None = None) -> dict:
    """Publish an ε-DP release of the passenger trajectories of one declared week (one spend: the three models of
    ``mechanism="markov"``, the default, or SafePath's whole tree; SafePath's own parameters without ``mechanism``
    choose SafePath, as when it was the default). ``height``: the longest released trajectory (default 6).

    Input: a ``station@hour`` one-a-line file over a public universe (``locations`` and/or
    ``location_taxonomy`` files), or tap data (``trips`` and ``stops``: one trajectory per card over the
    week, the stop table's ``mode`` stations as universe). Everything computed before the data is read
    is public: the taxonomies, the budget split, the thresholds, the guards and the size checks.
    """
    population = population_named(population)  # a malformed name is refused before anything else
    where = prepare_home(home, ledger)
    budget_policy = load_policy(policy)
    population = declared_population(where, budget_policy, population)  # before any input is read
    period = check_trajectory_period(declared_period(period_start, period_end))
    stop_table = validate_stops(ingest_stops(stops), stops) if trips else None
    universe = trajectory_universe(locations, location_taxonomy,
                                   stop_universe(stop_table, mode, stops) if trips else None)
    safepath_own = (budget, location_fanout, location_taxonomy_height, time_fanout, time_taxonomy_height, thresholds)
    resolved = trajectories.resolve_mechanism(mechanism, *safepath_own)
    height = trajectories.DEFAULT_HEIGHT if height is None else height
    setup = trajectory_setup(universe, epsilon, height, resolved, budget, location_fanout, location_taxonomy_height,
                             time_fanout, time_taxonomy_height, thresholds, nmax)
    # by default (no --mechanism, no SafePath flag) the former default's id is this release's too, if published
    former = trajectories.former_default_setup(universe, epsilon, height) if mechanism is None and \
        resolved == trajectories.DEFAULT_MECHANISM else None
    kind = TrajectoryKind(period=period, universe=universe, input=input,
                          taps=TapInput(trips, stops, stop_table) if trips else None,
                          quarantine_limit=quarantine_limit, queries=queries,
                          top_k=top_k if top_k is not None else list(trajectories.TOP_K),
                          inputs=[p for p in (input, locations, location_taxonomy, trips, stops) if p],
                          mechanism=resolved, setup=setup, height=height, mode=mode, former=former)
    return publish_release(kind, where, budget_policy, population, release_id, dry_run)
