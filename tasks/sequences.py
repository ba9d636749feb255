"""Tasks of the sequence release kind (prefix tree, n-grams)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from tasks import bulk_task, data_task, evaluation_task
from tasks.inputs import check_quarantine
from transit_release.accounting.events import DEFAULT_POPULATION
from transit_release.inputs import universe as universes
from transit_release.inputs.screening import Period
from transit_release.inputs.sequences import SequenceInput, read_sequence_file, sequences_from_trips
from transit_release.mechanisms.prefix_tree import Taxonomy
from transit_release.noise import NoiseSource
from transit_release.releases import sequences


@bulk_task(name="read-sequences")
def read_sequences(path: str, universe: universes.LocationUniverse, quarantine_limit: float) -> SequenceInput:
    """Read and screen the sequences against the public universe; too many bad lines abort (counts and line
    numbers only)."""
    data = read_sequence_file(path, universe)
    check_quarantine("sequence file", Path(path).name, data.quarantine_counts, data.lines, quarantine_limit)
    return data


@bulk_task(name="sequences-from-taps")
def sequences_from_taps(trips, stops, mode: str) -> SequenceInput:
    """One sequence per card over the period (its tap-ons in time order), the stop table's names as universe."""
    return sequences_from_trips(trips, stops, mode)


@data_task(name="sequence-budget")
def sequence_budget(mechanism: str | None, universe: universes.LocationUniverse, epsilon: float, height: int | None,
                    variant: str | None, fanout: int | None, lmax: int | None,
                    nmax: int | None) -> tuple[sequences.Budget, Taxonomy | None]:
    """Budget (and the hybrid tree's taxonomy) and size check from the public universe and parameters only
    (before the data is read)."""
    return sequences.budget_for(mechanism, universe, epsilon, height, variant, fanout, lmax, nmax)


@data_task(name="plan-sequence-spend")
def plan_sequence_spend(release_id: str, period: Period, budget: sequences.Budget, fingerprint: str,
                        code_version: str, population: str = DEFAULT_POPULATION):
    return sequences.plan_spend(release_id, period, budget, fingerprint, code_version, population)


@bulk_task(name="sanitize-sequences")
def sanitize_sequences(data: SequenceInput, budget: sequences.Budget, taxonomy: Taxonomy | None, charged: list,
                       release_id: str) -> tuple[sequences.SequenceRelease, str]:
    """Sanitize only after the spend is on the ledger; returns the release and the noise source kind."""
    kind = sequences.event_kind(budget)
    if not any(e.event().kind == kind and e.release_id == release_id for e in charged):
        raise RuntimeError("no ledger charge for this sequence release: noise is never drawn before its spend")
    noise = NoiseSource.from_environment()
    return sequences.sanitize(data.sequences, budget, taxonomy, noise, release_id), noise.kind


@evaluation_task(name="evaluate-sequences")
def evaluate_sequences(data: SequenceInput, release: sequences.SequenceRelease, budget: sequences.Budget,
                       queries: int, top_k: list[int]) -> tuple[dict, dict]:
    """(metrics, figures): the utility figures against the raw sequences and the arrays the report plots."""
    figures: dict = {}
    metrics = sequences.evaluate(data.sequences, release.sequences, sequences.workload_height(budget), queries,
                                 tuple(top_k), figures=figures)
    return metrics, figures


@bulk_task(name="sequence-outputs")
def sequence_outputs(release_id: str, period: Period, universe: universes.LocationUniverse, budget: sequences.Budget,
                     event, noise_kind: str, code_version: str,
                     release: sequences.SequenceRelease) -> tuple[dict, dict, dict]:
    """(tables, texts, manifest) of a sequence release."""
    return sequences.outputs(release_id, period, universe, budget, event, noise_kind, code_version,
                             datetime.now(timezone.utc).isoformat(timespec="seconds"), release)


@data_task(name="sequence-tracking-record")
def tracking_record(manifest: dict, metrics: dict, quarantine: dict) -> dict:
    return sequences.tracking(manifest, metrics, quarantine)
