"""The station-set release as plain functions: budget, spend, sanitize, evaluate, public outputs.

One privacy spend per release (a :class:`DiffPartEvent`), charged before any
noise is drawn. Everything public — the taxonomy (from the universe's size and
the fan-out), C1 and C2, the noise scales and the size refusal — is computed
from the public universe and the parameters, never from the sets. The spend's
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

from transit_release.accounting.events import DEFAULT_POPULATION, DiffPartEvent
from transit_release.errors import InputDataError, NoiseParameterError
from transit_release.inputs.universe import LocationUniverse
from transit_release.mechanisms.diffpart import (DiffPartBudget, ItemSets, check_partition_size, delta_slack,
                                                 fanout_for, sanitize_sets)
from transit_release.noise import NoiseSource
from transit_release.publish import CSV_NEUTRALISATION
from transit_release.releases.passengers import (PERIOD_COMPOSITION, counted_table, cumulative_text,
                                                 provenance_text)
from transit_release.utility.sets import (N_SUBSETS, WeightedSets, count_query_error, itemset_utility,
                                          query_workload, release_pairs)

KIND = "sets"
UNIT = "passenger-set"
NEIGHBOURING = "add-remove-one"
MECHANISMS = ("diffpart",)
#: without ``--fanout`` the fan-out follows the public universe size (:func:`~transit_release.mechanisms.diffpart.fanout_for`)
DEFAULT_FANOUT = None
FANOUT_RULE = "round(log2 |I|) within 4..6, from the public universe size |I|"
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


def plan_spend(release_id: str, period, budget: DiffPartBudget, fingerprint: str, code_version: str,
               population: str = DEFAULT_POPULATION) -> DiffPartEvent:
    """The one event of a set release; ``delta`` is the samplers' exact TV slack (see ``delta_slack``)."""
    return DiffPartEvent(release_id=release_id, period_start=period.start.isoformat(),
                         period_end=period.end.isoformat(), epsilon=float(budget.epsilon), delta=delta_slack(budget),
                         fanout=budget.fanout, c_leaf=float(budget.c_leaf), c_split=float(budget.c_split),
                         universe_size=budget.universe_size, sensitivity=1, unit_of_privacy=UNIT,
                         neighbouring=NEIGHBOURING, input_fingerprint=fingerprint, code_version=code_version,
                         population=population)


def default_release_id(period) -> str:
    return f"sets-diffpart-{period.start:%Y%m%d}-{period.end:%Y%m%d}"


def sanitize(sets: ItemSets, budget: DiffPartBudget, noise: NoiseSource, release_id: str) -> list:
    """The released (itemset, copies) pairs, sorted by item ids."""
    return sanitize_sets(sets, budget, noise.stream(KIND, release_id)).released


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


def build_manifest(release_id: str, period, universe: LocationUniverse, described: dict, budget: DiffPartBudget,
                   event: DiffPartEvent, noise_kind: str, code_version: str, created_at: str,
                   fanout_rule: str = FANOUT_RULE) -> dict:
    """Everything public about the release except files, ledger head and cumulative loss (added at staging)."""
    tax = budget.taxonomy
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
            "mechanism": "DiffPart, probabilistic top-down partitioning (Chen, Mohammed, Fung, Desai & Xiong, "
                         "VLDB 2011)",
            "mechanism_id": "diffpart",
            "fanout": budget.fanout,
            "fanout_rule": fanout_rule,
            "c1": float(budget.c_leaf),
            "c2": float(budget.c_split),
            "taxonomy_height": tax.height,
            "taxonomy_internal_nodes": tax.n_internal,
            "leaf_reserve_epsilon": float(budget.leaf_reserve),
            "root_test_epsilon": float(budget.smallest_count_epsilon),
            "composition": PERIOD_COMPOSITION,
        },
        "noise_source": noise_kind,
        "code_version": code_version,
        "licence": "CC BY 4.0",
    }


def render_datacard(manifest: dict) -> str:
    p = manifest["privacy"]
    period = manifest["period"]
    u = manifest["universe"]
    return f"""# {manifest['release_id']}: differentially private station sets

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

## How they were made
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

## Privacy guarantee
{p['epsilon']:g}-differential privacy for one **passenger's whole set of stations over the
period** ({p['neighbouring_relation']}; δ = {p['delta']:.2g} covers the exactly computed
deviation of the integer noise sampler). Composition: {p['composition']}.
{cumulative_text(p)}
{provenance_text(manifest)}"""


def tracking(manifest: dict, metrics: dict, quarantine: dict) -> dict:
    p = manifest["privacy"]
    params = {"epsilon": p["epsilon"], "fanout": p["fanout"], "fanout_rule": p.get("fanout_rule", ""),
              "c1": p["c1"], "c2": p["c2"],
              "taxonomy.height": p["taxonomy_height"], "universe.locations": manifest["universe"]["locations"],
              "universe.sha256": manifest["universe"]["sha256"]}
    m = {**metrics, **{f"input.quarantined.{k}": v for k, v in quarantine.items()}}
    return {"kind": KIND, "mechanism": "diffpart", "tags": {"scope": manifest["scope"]}, "params": params,
            "metrics": m, "artifacts": {}}
