"""Tasks of the station-set release kind (the set histogram, DiffPart)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from tasks import bulk_task, data_task, evaluation_task
from tasks.inputs import check_quarantine
from transit_release.accounting.events import DEFAULT_POPULATION
from transit_release.inputs import universe as universes
from transit_release.inputs.screening import Period
from transit_release.inputs.sets import SetInput, format_sets, read_set_file, sets_from_trips
from transit_release.mechanisms.diffpart import DiffPartBudget
from transit_release.mechanisms.set_histogram import SetHistogramBudget
from transit_release.noise import NoiseSource
from transit_release.releases import sets


@data_task(name="stop-table-locations")
def stop_locations(stops, modes: tuple[str, ...] | None, path: str) -> universes.LocationUniverse:
    """The public universe of sets built from taps: the stop table's locations of ``modes``, as ``mode:location``."""
    return universes.from_stop_locations(stops, modes, f"stops file {Path(path).name}")


@data_task(name="set-budget")
def set_budget(universe: universes.LocationUniverse, epsilon: float, fanout: int | None) -> DiffPartBudget:
    """DiffPart's budget, C1/C2, scale and size checks from the public universe and parameters only (before the data
    is read)."""
    return sets.set_budget(universe, epsilon, fanout)


@data_task(name="set-setup")
def set_setup(universe: universes.LocationUniverse, epsilon: float, mechanism: str | None,
              fanout: int | None) -> sets.SetSetup:
    """The mechanism (given, or from the universe size) and its budget, scale and size checks from the public
    universe and parameters only (before the data is read)."""
    return sets.set_setup(universe, epsilon, mechanism, fanout)


@bulk_task(name="read-sets")
def read_sets(path: str, universe: universes.LocationUniverse, quarantine_limit: float) -> SetInput:
    """Read and screen the sets against the public universe; too many bad lines abort (counts and line numbers)."""
    data = read_set_file(path, universe)
    check_quarantine("set file", Path(path).name, data.quarantine_counts, data.lines, quarantine_limit)
    return data


@bulk_task(name="sets-from-taps")
def sets_from_taps(trips, stops, period: Period, universe: universes.LocationUniverse,
                   modes: tuple[str, ...] | None) -> SetInput:
    """One set per card over the period (its distinct tap-on and tap-off locations), as items of ``universe``."""
    return sets_from_trips(trips, stops, period, universe, modes)


@data_task(name="plan-set-spend")
def plan_set_spend(release_id: str, period: Period, budget: DiffPartBudget | SetHistogramBudget, fingerprint: str,
                   code_version: str, population: str = DEFAULT_POPULATION):
    return sets.plan_spend(release_id, period, budget, fingerprint, code_version, population)


@bulk_task(name="sanitize-sets")
def sanitize_sets(data: SetInput, budget: DiffPartBudget | SetHistogramBudget, charged: list,
                  release_id: str) -> tuple[list, str]:
    """Draw only after the spend is on the ledger; returns the release and the noise source kind."""
    kind = "set_histogram" if isinstance(budget, SetHistogramBudget) else "diffpart"
    if not any(e.event().kind == kind and e.release_id == release_id for e in charged):
        raise RuntimeError("no ledger charge for this set release: noise is never drawn before its spend")
    noise = NoiseSource.from_environment()
    return sets.sanitize(data.sets, budget, noise, release_id), noise.kind


@evaluation_task(name="evaluate-sets")
def evaluate_sets(data: SetInput, release: list, queries: int, top_k: list[int]) -> tuple[dict, dict]:
    """(metrics, figures): the utility figures against the raw sets and the arrays the report plots."""
    figures: dict = {}
    metrics = sets.evaluate(data.sets, release, queries, tuple(top_k), figures=figures)
    return metrics, figures


@bulk_task(name="set-outputs")
def set_outputs(release_id: str, period: Period, universe: universes.LocationUniverse, described: dict,
                budget: DiffPartBudget | SetHistogramBudget, event, noise_kind: str, code_version: str,
                release: list, fanout_rule: str = sets.FANOUT_RULE,
                mechanism_rule: str = "given (--mechanism)") -> tuple[dict, dict, dict]:
    """(tables, texts, manifest) of a set release."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = sets.build_manifest(release_id, period, universe, described, budget, event, noise_kind, code_version,
                                   created, fanout_rule, mechanism_rule)
    text = format_sets(release, universe, header=f"{release_id}: one set of stations per line")
    return {"sets": sets.set_table(release, universe)}, {"sets.txt": text}, manifest


@data_task(name="set-tracking-record")
def tracking_record(manifest: dict, metrics: dict, quarantine: dict) -> dict:
    return sets.tracking(manifest, metrics, quarantine)
