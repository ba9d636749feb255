"""The station-set release as plain functions: mechanism and budget, spend, sanitize, evaluate, public outputs.

Two mechanisms (:data:`MECHANISMS`), one kind, one privacy spend per release,
charged before any noise is drawn:

* ``histogram``: the set histogram (:mod:`transit_release.mechanisms.set_histogram`,
  a :class:`SetHistogramEvent`): every subset of a small public universe is a
  cell of one noisy histogram;
* ``diffpart``: DiffPart (:mod:`transit_release.mechanisms.diffpart`, a
  :class:`DiffPartEvent`), probabilistic top-down partitioning.

Without ``--mechanism`` the mechanism follows the public universe size and ε
(:func:`~transit_release.mechanisms.set_histogram.choose_mechanism`: the set
histogram where ``2^|I| ≤ 2^20·ε²``, DiffPart otherwise; measured in
``docs/sets.md``); a
``--fanout`` (DiffPart's own parameter) without ``--mechanism`` keeps DiffPart,
as before the histogram existed. Everything public — the mechanism, the
taxonomy (from the universe's size and the fan-out), C1 and C2, the head
threshold, the noise scales and the size refusals — is computed from the public
universe and the parameters, never from the sets. The spend's
scope is the declared calendar period the sets cover: releases of disjoint
periods compose in parallel, others sequentially. Utility figures compare with
the raw sets and are internal.

Items. From a set file, an item is a location id of the public locations file.
From tap data, an item is a **mode-qualified location** ``mode:location`` of
the stop table, for one mode (``--mode``) or all of them: a bus stop counts as
its postcode and another mode's stop as its name, as in the Opal release's
location files (:func:`~transit_release.inputs.universe.from_stop_locations`).
Chosen over the sequence release's station names of one mode because a set has
no order to lose by mixing modes (a passenger's month is train and bus alike),
names of different modes cannot collide once qualified, and tens of thousands
of bus stops would make nearly every set unique (DiffPart drops rare sets);
the universe is built from the same location index the taps are mapped with,
so it matches the items exactly.
"""

from __future__ import annotations

import pandas as pd

from dataclasses import dataclass

from transit_release.accounting.events import DEFAULT_POPULATION, DiffPartEvent, SetHistogramEvent
from transit_release.errors import InputDataError, NoiseParameterError
from transit_release.inputs.universe import LocationUniverse
from transit_release.mechanisms import set_histogram
from transit_release.mechanisms.diffpart import (DiffPartBudget, ItemSets, check_partition_size, delta_slack,
                                                 fanout_for, sanitize_sets)
from transit_release.files.publish import CSV_NEUTRALISATION
from transit_release.mechanisms.set_histogram import SetHistogramBudget
from transit_release.noise import NoiseSource
from transit_release.opendata.titles import card_heading
from transit_release.releases.passengers import (PERIOD_COMPOSITION, counted_table, cumulative_text,
                                                 provenance_text)
from transit_release.utility.sets import (N_SUBSETS, WeightedSets, count_query_error, itemset_utility,
                                          query_workload, release_pairs)

KIND = "sets"
UNIT = "passenger-set"
NEIGHBOURING = "add-remove-one"
MECHANISMS = ("histogram", "diffpart")
#: the mechanism id (manifest, MLflow tag) and the ledger's event kind of each mechanism
MECHANISM_IDS = {"histogram": set_histogram.MECHANISM_NAME, "diffpart": "diffpart"}
EVENT_KINDS = {"histogram": SetHistogramEvent.kind, "diffpart": DiffPartEvent.kind}
#: without ``--fanout`` the fan-out follows the public universe size (:func:`~transit_release.mechanisms.diffpart.fanout_for`)
DEFAULT_FANOUT = None
FANOUT_RULE = "round(log2 |I|) within 4..6, from the public universe size |I|"
MECHANISM_RULE = ("the set histogram where 2^|I| ≤ 2^20·ε² (|I| ≤ 20 at ε ≥ 1, 18 at ε = 0.5, 16 at ε = 0.25), "
                  "DiffPart otherwise (from the public universe size |I| and ε)")
DEFAULT_QUERIES = 50_000  # the thesis's workload: 5 subsets of 10,000
TOP_K = (10, 50, 100)
#: The query length every evaluation reports (``count_query.relative_error.max_q3``), beside the thesis's subsets.
SHORT_QUERIES = 3


def describe_input(from_taps: bool, modes: tuple[str, ...] | None = None) -> dict[str, str]:
    """What a record and an item are (public: it follows from the kind of input and the flags)."""
    if not from_taps:
        return {"records": "one set per passenger: a line of the input set file",
                "items": "location ids of the public locations file"}
    which = f"mode {modes[0]}" if modes and len(modes) == 1 else (
        f"modes {', '.join(modes)}" if modes else "every mode of the stop table")
    return {"records": "one set per smart card: its distinct tap-on and tap-off locations over the period",
            "items": (f"mode-qualified locations mode:location of the stop table for {which}: a bus stop "
                      "counts as its postcode, any other stop as its name (spaces written as _), as in the "
                      "Opal release's location files")}


def fanout_rule(fanout: int | None) -> str:
    """How the release's fan-out was chosen (for the manifest): given, or the rule on the universe size."""
    return "given (--fanout)" if fanout is not None else FANOUT_RULE


@dataclass(frozen=True)
class SetSetup:
    """Everything public about one set release, fixed before the data is read: the mechanism, how it was chosen
    (``given``: ``--mechanism``, ``--fanout``, or the rule on the universe size) and its budget."""

    mechanism: str  # "histogram" or "diffpart"
    chosen: str  # "given (--mechanism)", "given (--fanout)" or MECHANISM_RULE
    budget: SetHistogramBudget | DiffPartBudget
    fanout: int | None = None  # DiffPart's --fanout, if given

    @property
    def by_rule(self) -> bool:
        return self.chosen == MECHANISM_RULE

    @property
    def mechanism_id(self) -> str:
        return MECHANISM_IDS[self.mechanism]

    @property
    def event_kind(self) -> str:
        return EVENT_KINDS[self.mechanism]


def resolve_mechanism(universe_size: int, epsilon: float, mechanism: str | None,
                      fanout: int | None) -> tuple[str, str]:
    """``(mechanism, how it was chosen)`` from public inputs only: ``mechanism`` if given; else DiffPart when its own
    ``fanout`` is given (as before the histogram); else the rule on the universe size."""
    if mechanism is not None:
        if mechanism not in MECHANISMS:
            raise InputDataError(f"the set mechanism must be one of {', '.join(MECHANISMS)}. Found {mechanism!r}.")
        if mechanism == "histogram" and fanout is not None:
            raise InputDataError("--fanout goes with DiffPart (--mechanism diffpart), not with the set histogram")
        return mechanism, "given (--mechanism)"
    if fanout is not None:
        return "diffpart", "given (--fanout)"
    rule = set_histogram.choose_mechanism(max(universe_size, 1), epsilon)
    return ("histogram" if rule == set_histogram.MECHANISM_NAME else "diffpart"), MECHANISM_RULE


def set_setup(universe: LocationUniverse, epsilon: float, mechanism: str | None = None,
              fanout: int | None = DEFAULT_FANOUT) -> SetSetup:
    """The mechanism (:func:`resolve_mechanism`) and its budget from public inputs only; refuses, before any data is
    read, a flag the mechanism does not take, an ε the samplers cannot honour and a universe or partitioning too
    large."""
    which, chosen = resolve_mechanism(len(universe), epsilon, mechanism, fanout)
    if which == "diffpart":
        return SetSetup(which, chosen, set_budget(universe, epsilon, fanout), fanout)
    try:
        return SetSetup(which, chosen, SetHistogramBudget.of(epsilon, len(universe)))
    except NoiseParameterError:
        raise
    except ValueError as exc:
        raise InputDataError(f"{universe.source}: {exc}") from None


def set_budget(universe: LocationUniverse, epsilon: float, fanout: int | None = DEFAULT_FANOUT) -> DiffPartBudget:
    """Budget from public inputs only (universe size, ε, fan-out — given, or from the universe size by
    :func:`~transit_release.mechanisms.diffpart.fanout_for`; C1, C2 follow the fan-out); refuses an ε the
    samplers cannot honour and a partitioning whose phantoms would explode, before any data is read."""
    if fanout is None:
        fanout = fanout_for(max(len(universe), 1))
    try:
        budget = DiffPartBudget.of(epsilon, len(universe), fanout)
        check_partition_size(budget)
    except NoiseParameterError:
        raise
    except ValueError as exc:
        raise InputDataError(str(exc)) from None
    return budget


def plan_spend(release_id: str, period, budget: DiffPartBudget | SetHistogramBudget, fingerprint: str,
               code_version: str, population: str = DEFAULT_POPULATION) -> DiffPartEvent | SetHistogramEvent:
    """The one event of a set release; ``delta`` is the samplers' exact TV slack (``delta_slack`` of the
    mechanism)."""
    if isinstance(budget, SetHistogramBudget):
        return SetHistogramEvent(release_id=release_id, period_start=period.start.isoformat(),
                                 period_end=period.end.isoformat(), epsilon=float(budget.epsilon),
                                 delta=set_histogram.delta_slack(budget), universe_size=budget.universe_size,
                                 cells=budget.cells, head_threshold=budget.head_threshold,
                                 rake_order=budget.rake_order, sensitivity=1, unit_of_privacy=UNIT,
                                 neighbouring=NEIGHBOURING, input_fingerprint=fingerprint, code_version=code_version,
                                 population=population)
    return DiffPartEvent(release_id=release_id, period_start=period.start.isoformat(),
                         period_end=period.end.isoformat(), epsilon=float(budget.epsilon), delta=delta_slack(budget),
                         fanout=budget.fanout, c_leaf=float(budget.c_leaf), c_split=float(budget.c_split),
                         universe_size=budget.universe_size, sensitivity=1, unit_of_privacy=UNIT,
                         neighbouring=NEIGHBOURING, input_fingerprint=fingerprint, code_version=code_version,
                         population=population)


def default_release_id(period, mechanism: str = "diffpart") -> str:
    return f"sets-{mechanism}-{period.start:%Y%m%d}-{period.end:%Y%m%d}"


def earlier_release_ids(period, setup: SetSetup) -> tuple[str, ...]:
    """The id the former default (DiffPart, before the rule chose the histogram) gave this release: recognised as
    this release when published from the same input and ε (only when the rule chose the mechanism)."""
    if setup.by_rule and setup.mechanism != "diffpart":
        return (default_release_id(period, "diffpart"),)
    return ()


def sanitize(sets: ItemSets, budget: DiffPartBudget | SetHistogramBudget, noise: NoiseSource,
             release_id: str) -> list:
    """The released (itemset, copies) pairs, sorted by item ids."""
    generator = noise.stream(KIND, release_id)
    if isinstance(budget, SetHistogramBudget):
        return set_histogram.sanitize_set_histogram(sets, budget, generator).released
    return sanitize_sets(sets, budget, generator).released


def evaluate(sets: ItemSets, release: list, n_queries: int = DEFAULT_QUERIES, top_k: tuple[int, ...] = TOP_K,
             seed: int = 0, figures: dict | None = None, frequent_k: int = 100) -> dict:
    """Internal figures (:mod:`transit_release.utility.sets`): ``count_query.relative_error.max_q<L>`` — mean
    relative error of count queries of up to L stations, for the thesis's subsets (L = i·max|D|/5) and for
    L = 3 — and ``itemsets.top<K>.{tp,loss,loss_share}`` of the top-K frequent itemsets; 0 / () turns one off.
    Also ``sets.input``, ``sets.released``, ``itemsets.top{k}.relative_error`` (the containment counts of the ``k``
    most frequent itemsets), ``sizes.total_variation`` and ``records.share_released``; ``figures``, if given,
    receives the arrays the report plots."""
    import numpy as np

    from transit_release.utility.sets import relative_errors, top_k_itemsets
    from transit_release.utility.trajectories import length_shares, total_variation

    universe_size = sets.universe_size
    original = release_pairs(sets)
    n_released = sum(c for _, c in release)
    out: dict[str, float] = {"sets.input": float(len(sets)), "sets.released": float(n_released),
                             "sets.distinct_released": float(len(release))}
    released_sets = {s for s, c in release if c > 0}
    out["records.share_released"] = (sum(c for s, c in original if s in released_sets) / len(sets)) if len(sets) \
        else 0.0
    largest = int(sets.sizes.max()) if len(sets) else 0
    true_size = length_shares(sets.sizes, height=largest)
    got_size = (length_shares(np.array([len(s) for s, _ in release], dtype=np.int64),
                              np.array([c for _, c in release], dtype=float), largest) if release else
                np.zeros(largest + 1))
    out["sizes.total_variation"] = total_variation(true_size, got_size)
    if figures is not None:
        figures.update({"lengths.true": true_size.tolist(), "lengths.released": got_size.tolist()})
    if frequent_k and len(sets):
        top = top_k_itemsets(original, universe_size, frequent_k)
        queries = [np.array(s, dtype=np.int64) for s in top]
        true = np.array(list(top.values()), dtype=np.int64)
        got = WeightedSets.of(release, universe_size).count(queries)
        out[f"itemsets.top{frequent_k}.relative_error"] = float(relative_errors(true, got, len(sets)).mean())
        if figures is not None:
            figures.update({"top_patterns.true": true.tolist(), "top_patterns.released": got.tolist()})
    if n_queries > 0 and len(sets):
        largest = int(sets.sizes.max())
        sizes = sorted({min(universe_size, max(1, (i * largest) // N_SUBSETS)) for i in range(1, N_SUBSETS + 1)}
                       | {min(universe_size, SHORT_QUERIES)})
        workload = query_workload(universe_size, largest, per_subset=max(1, n_queries // len(sizes)), seed=seed,
                                  max_sizes=sizes)
        errors = count_query_error(WeightedSets.of(original, universe_size), WeightedSets.of(release, universe_size),
                                   workload)
        out.update({f"count_query.relative_error.{k}": v for k, v in errors.items()})
    if top_k and len(sets):
        out.update({f"itemsets.{k}": v for k, v in itemset_utility(original, release, universe_size,
                                                                   ks=tuple(top_k)).items()})
    return out


def set_table(release: list[tuple[tuple[int, ...], int]], universe: LocationUniverse) -> pd.DataFrame:
    """``set,count``: each distinct released set once (items in universe order, separated by spaces), sorted."""
    return counted_table(release, universe, "set")


def _mechanism_privacy(budget: DiffPartBudget | SetHistogramBudget, fanout_rule: str) -> dict:
    """The manifest's description of the mechanism and its public parameters."""
    if isinstance(budget, SetHistogramBudget):
        return {"mechanism": "set histogram: a noisy count of every subset of the public universe (discrete Laplace, "
                             "scale 1/ε), the published sets estimated from them",
                "mechanism_id": set_histogram.MECHANISM_NAME, "cells": budget.cells,
                "head_threshold": budget.head_threshold, "noise_scale": str(budget.noise_scale),
                "rake_order": budget.rake_order, "rake_sweeps": set_histogram.RAKE_SWEEPS,
                "rake_z": set_histogram.RAKE_Z}
    tax = budget.taxonomy
    return {"mechanism": "DiffPart, probabilistic top-down partitioning (Chen, Mohammed, Fung, Desai & Xiong, "
                         "VLDB 2011)",
            "mechanism_id": "diffpart",
            "fanout": budget.fanout,
            "fanout_rule": fanout_rule,
            "c1": float(budget.c_leaf),
            "c2": float(budget.c_split),
            "taxonomy_height": tax.height,
            "taxonomy_internal_nodes": tax.n_internal,
            "leaf_reserve_epsilon": float(budget.leaf_reserve),
            "root_test_epsilon": float(budget.smallest_count_epsilon)}


def build_manifest(release_id: str, period, universe: LocationUniverse, described: dict,
                   budget: DiffPartBudget | SetHistogramBudget, event: DiffPartEvent | SetHistogramEvent,
                   noise_kind: str, code_version: str, created_at: str, fanout_rule: str = FANOUT_RULE,
                   mechanism_rule: str = "given (--mechanism)") -> dict:
    """Everything public about the release except files, ledger head and cumulative loss (added at staging)."""
    return {
        "release_id": release_id,
        "kind": KIND,
        "created_at": created_at,
        "product": "station sets: the distinct stations one passenger used over the period, one line per set",
        "period": {"start": period.start.isoformat(), "end": period.end.isoformat()},
        "scope": event.scope,
        "universe": universe.describe(),
        "records": described["records"],
        "items": described["items"],
        "privacy": {
            "unit_of_privacy": UNIT,
            "neighbouring_relation": "add or remove one passenger's whole set of stations over the period",
            "epsilon": float(budget.epsilon),
            "delta": event.delta,
            **_mechanism_privacy(budget, fanout_rule),
            "mechanism_rule": mechanism_rule,
            "composition": PERIOD_COMPOSITION,
        },
        "noise_source": noise_kind,
        "code_version": code_version,
        "licence": "CC BY 4.0",
    }


def _how_made(p: dict) -> str:
    """The data card's "How they were made" section for the release's mechanism."""
    if p.get("mechanism_id") == set_histogram.MECHANISM_NAME:
        return f"""## How they were made
Every possible set of stations of the public list (all {p['cells']:,} of them, whatever the data hold) got a
count of the passengers with exactly that set, plus integer noise at scale {p['noise_scale']} ({p['mechanism']}).
Sets whose noisy count reached {p['head_threshold']} are published with it. The passengers of rarer sets
were not dropped: the noisy counts of the rest were summed over groups of similar sets, and each group's
total was shared out among its sets, then adjusted so that the numbers of lines containing each station,
pair and triple of stations agree with their noisy counts wherever those are clear; each set's share
was rounded to whole lines at random (the mechanism chosen: {p.get('mechanism_rule', 'given')}).

- **Frequent sets are there with noisy counts**, so the number of lines is not the number of
  passengers. **Rare sets are estimates**: a set shared by a few passengers may be missing, or a
  similar set may stand in for it; counts of lines containing a station, a pair or a triple of
  stations are the reliable figures.
- Every line is a set drawn from the noisy counts, not a record of one person; some lines are sets
  nobody had (every possible set had a chance to appear).
"""
    return f"""## How they were made
The stations were grouped into a fixed hierarchy ({p['fanout']} per group, {p['taxonomy_height']} levels above
the stations; fan-out {p.get('fanout_rule', 'given')}), built from the public list alone. Starting from all passengers, groups of passengers
were split level by level by which parts of the hierarchy their stations fall in; every group got a
noisy size, and groups whose noisy size fell below a threshold were dropped with their passengers
({p['mechanism']}; C1 = {p['c1']:g}, C2 = {p['c2']:g}).
Each group that reached single stations is a set; it is released with its noisy count of lines.

- **Rare sets are missing**: a set shared by only a few passengers is usually dropped, and its
  passengers with it. Frequent sets are there with **noisy counts**, so the number of lines is not
  the number of passengers.
- Every line is a set of the noisy partitioning, not a record of one person; a few lines may be sets
  nobody had (every possible set had a chance to appear).
"""


def render_datacard(manifest: dict) -> str:
    p = manifest["privacy"]
    period = manifest["period"]
    u = manifest["universe"]
    return f"""{card_heading(manifest)}

The stations each passenger used between {period['start']} and {period['end']}, as sets
(without order or repeats), released under differential privacy.

## Files
- `sets.txt`: one set per line: stations separated by spaces, in a fixed (sorted) order; a set
  appears on as many lines as its noisy count (lines starting with `#` are comments).
- `sets.csv` (and `sets.parquet`): `set,count`, each distinct released set once with the number of
  lines it has in `sets.txt`. In the CSV, {CSV_NEUTRALISATION}.

The input held {manifest['records']}; a station is one of the {manifest['items']}.
The possible stations are the public list of
{u['locations']} locations given as input ({u['source']}; SHA-256 `{u['sha256'][:16]}…`),
never the stations found in the data.

{_how_made(p)}
## Privacy guarantee
{p['epsilon']:g}-differential privacy for one **passenger's whole set of stations over the
period** ({p['neighbouring_relation']}; δ = {p['delta']:.2g} covers the exactly computed
deviation of the integer noise sampler). Composition: {p['composition']}.
{cumulative_text(p)}
{provenance_text(manifest)}"""


def tracking(manifest: dict, metrics: dict, quarantine: dict) -> dict:
    p = manifest["privacy"]
    params = {"epsilon": p["epsilon"], "mechanism_rule": p.get("mechanism_rule", ""),
              "universe.locations": manifest["universe"]["locations"],
              "universe.sha256": manifest["universe"]["sha256"]}
    if p.get("mechanism_id") == set_histogram.MECHANISM_NAME:
        mechanism = "histogram"
        params.update({"cells": p["cells"], "head_threshold": p["head_threshold"], "rake_order": p["rake_order"]})
    else:
        mechanism = "diffpart"
        params.update({"fanout": p["fanout"], "fanout_rule": p.get("fanout_rule", ""), "c1": p["c1"], "c2": p["c2"],
                       "taxonomy.height": p["taxonomy_height"]})
    m = {**metrics, **{f"input.quarantined.{k}": v for k, v in quarantine.items()}}
    return {"kind": KIND, "mechanism": mechanism, "tags": {"scope": manifest["scope"]}, "params": params,
            "metrics": m, "artifacts": {}}
