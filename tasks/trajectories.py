"""Tasks of the trajectory release kind (SafePath, the factored Markov model)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from tasks import bulk_task, data_task, evaluation_task
from tasks.inputs import check_quarantine
from transit_release.accounting.events import DEFAULT_POPULATION, MARKOV_KINDS
from transit_release.inputs import universe as universes
from transit_release.inputs.screening import Period
from transit_release.inputs.trajectories import TrajectoryInput, read_trajectory_file, trajectories_from_trips
from transit_release.noise import NoiseSource
from transit_release.releases import trajectories
from transit_release.releases.trajectories import SafePathSetup, Setup


@data_task(name="check-trajectory-period")
def check_trajectory_period(period: Period) -> Period:
    """A trajectory release covers one calendar week, Monday to Sunday (hours of the week)."""
    trajectories.check_period(period)
    return period


@data_task(name="trajectory-universe")
def trajectory_universe(locations: str | None, location_taxonomy: str | None,
                        stop_universe: universes.LocationUniverse | None = None) -> universes.LocationUniverse:
    """The public universe: the stop table's stations (tap data) or a locations file, with the taxonomy file's
    groups (and lines) if one is given; a taxonomy file alone is its own universe."""
    if stop_universe is None:
        return universes.load_universe(locations, location_taxonomy, "--location-taxonomy")
    if location_taxonomy is None:
        return stop_universe
    return universes.with_taxonomy(stop_universe, universes.read_taxonomy_file(location_taxonomy))


@data_task(name="safepath-setup")
def safepath_setup(universe: universes.LocationUniverse, epsilon: float, height: int, location_fanout: int | None,
                   location_taxonomy_height: int | None, time_fanout: int | None, time_taxonomy_height: int | None,
                   rule: str) -> SafePathSetup:
    """Taxonomies, budget, thresholds and size check from the public universe and parameters only."""
    return trajectories.safepath_setup(universe, epsilon, height, location_fanout=location_fanout,
                                       location_taxonomy_height=location_taxonomy_height, time_fanout=time_fanout,
                                       time_taxonomy_height=time_taxonomy_height, rule=rule)


@data_task(name="trajectory-setup")
def trajectory_setup(universe: universes.LocationUniverse, epsilon: float, height: int | None, mechanism: str | None,
                     budget: str | None,
                     location_fanout: int | None, location_taxonomy_height: int | None, time_fanout: int | None,
                     time_taxonomy_height: int | None, rule: str | None, max_gram: int | None) -> Setup:
    """The mechanism's public setup (taxonomies, budget split, thresholds, size checks) from public inputs only."""
    return trajectories.trajectory_setup(universe, epsilon, height, mechanism=mechanism, budget=budget,
                                         location_fanout=location_fanout,
                                         location_taxonomy_height=location_taxonomy_height, time_fanout=time_fanout,
                                         time_taxonomy_height=time_taxonomy_height, rule=rule, max_gram=max_gram)


def _public_parameters(e) -> tuple:
    """What makes two spends the same trajectory release besides ε and the inputs (None for other kinds)."""
    if e.kind == "safepath":
        return ("paper", e.height, e.location_taxonomy_height, e.time_taxonomy_height, e.thresholds)
    if e.kind == "safepath_joint":
        return ("joint", e.height)
    if e.kind in MARKOV_KINDS:
        return ("markov", e.height, e.max_gram)
    return (None,)


def _setup_parameters(setup: Setup) -> tuple[str, tuple]:
    b = setup.budget
    if isinstance(setup, trajectories.MarkovSetup):
        return "trajectory_markov", ("markov", b.height, b.max_gram)
    if isinstance(setup, trajectories.JointSetup):
        return "safepath_joint", ("joint", b.height)
    return "safepath", ("paper", b.height, b.location.taxonomy_height, b.time.taxonomy_height, setup.rule)


def same_release(setup: Setup, fingerprint: str) -> Callable[[list], bool]:
    """An earlier spend of the same inputs and public parameters (mechanism, ε, h and what the mechanism fixes:
    both taxonomy heights and the threshold rule, or the gram size)."""
    kind, params = _setup_parameters(setup)
    wanted = (kind, float(setup.budget.epsilon), fingerprint, params)
    # a Markov release recorded before its event named each part's sensitivity is the same release
    return lambda earlier: wanted in {("trajectory_markov" if e.kind in MARKOV_KINDS else e.kind, e.epsilon,
                                       e.input_fingerprint, _public_parameters(e)) for e in earlier}


@bulk_task(name="read-trajectories")
def read_trajectories(path: str, universe: universes.LocationUniverse, quarantine_limit: float) -> TrajectoryInput:
    """Read and screen the ``station@hour`` lines against the public universe; too many bad lines abort (counts and
    line numbers only)."""
    data = read_trajectory_file(path, universe)
    check_quarantine("trajectory file", Path(path).name, data.quarantine_counts, data.lines, quarantine_limit)
    return data


@bulk_task(name="trajectories-from-taps")
def trajectories_from_taps(trips, stops, period: Period, mode: str) -> TrajectoryInput:
    """One trajectory per card over the week (its tap-ons in time order, hours of the week), the stop table's
    names as universe."""
    return trajectories_from_trips(trips, stops, period.start, period.end, mode)


@data_task(name="plan-trajectory-spend")
def plan_trajectory_spend(release_id: str, period: Period, setup: Setup, fingerprint: str,
                          code_version: str, population: str = DEFAULT_POPULATION):
    return trajectories.plan_spend(release_id, period, setup, fingerprint, code_version, population)


@bulk_task(name="sanitize-trajectories")
def sanitize_trajectories(data: TrajectoryInput, setup: Setup, charged: list,
                          release_id: str) -> tuple[list, int, str]:
    """Build the tree (or the models) only after its spend is on the ledger; returns the release, the tree's or
    models' size and the noise source kind."""
    kinds = {"safepath", "safepath_joint", *MARKOV_KINDS}
    if not any(e.event().kind in kinds and e.release_id == release_id for e in charged):
        raise RuntimeError("no ledger charge for this trajectory release: noise is never drawn before its spend")
    noise = NoiseSource.from_environment()
    size, release = trajectories.sanitize(data.trajectories, setup, noise, release_id)
    return release, size, noise.kind


@evaluation_task(name="evaluate-trajectories")
def evaluate_trajectories(data: TrajectoryInput, release: list, height: int, queries: int, top_k: list[int],
                          n_nodes: int) -> tuple[dict, dict]:
    """(metrics, figures): the utility figures against the raw trajectories and the arrays the report plots."""
    figures: dict = {}
    metrics = trajectories.evaluate(data.trajectories, release, height, queries, tuple(top_k), n_nodes, figures)
    return metrics, figures


@bulk_task(name="trajectory-outputs")
def trajectory_outputs(release_id: str, period: Period, universe: universes.LocationUniverse, setup: Setup,
                       event, noise_kind: str, code_version: str, release: list) -> tuple[dict, dict, dict]:
    """(tables, texts, manifest) of a trajectory release."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = trajectories.build_manifest(release_id, period, universe, setup, event, noise_kind, code_version,
                                           created)
    text = trajectories.trajectory_text(release, universe, trajectories.trajectory_header(release_id, setup))
    return ({"trajectories": trajectories.trajectory_table(release, universe)}, {"trajectories.txt": text},
            manifest)


@data_task(name="trajectory-tracking-record")
def tracking_record(manifest: dict, metrics: dict, quarantine: dict) -> dict:
    return trajectories.tracking(manifest, metrics, quarantine)
