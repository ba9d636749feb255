"""The sequence release as plain functions: budget, spend, sanitize, evaluate, public outputs.

Two mechanisms (:data:`MECHANISMS`), one kind:

* ``prefix-tree``: the noisy prefix tree (Chen, Fung, Desai & Sossou, KDD 2012), simple or
  hybrid variant; one :class:`PrefixTreeEvent`; publishes ``sequences.txt`` / ``sequences.csv``.
* ``ngram``: variable-length n-grams (Chen, Ács & Castelluccia, CCS 2012;
  :mod:`transit_release.mechanisms.ngram`); one :class:`NGramEvent`; publishes the noisy n-gram
  table ``ngrams.csv`` and the synthetic database generated from it, ``sequences.txt`` /
  ``sequences.csv`` in the prefix tree's format.

One privacy spend per release, charged before any noise is drawn. Everything public — the
taxonomy, the fan-out, the budget split, the thresholds, the size refusal — is computed from the
public universe (its size, ids and, from a taxonomy file, groups) and the parameters, never from
the sequences. The spend's scope is the declared calendar period the sequences cover: releases
of disjoint periods compose in parallel, others sequentially. Utility figures compare with the
raw sequences and are internal.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import pandas as pd

from transit_release.accounting.events import DEFAULT_POPULATION, NGramEvent, PrefixTreeEvent, period_label
from transit_release.errors import InputDataError
from transit_release.inputs.sequences import END_TOKEN, format_sequences, gram_text
from transit_release.inputs.universe import LocationUniverse
from transit_release.mechanisms import ngram
from transit_release.mechanisms.ngram import NGramBudget
from transit_release.mechanisms.prefix_tree import (Sequences, Taxonomy, TreeBudget, check_tree_size, delta_slack,
                                                    sanitize_sequences)
from transit_release.files.publish import CSV_NEUTRALISATION
from transit_release.noise import NoiseSource
from transit_release.opendata.titles import card_heading
from transit_release.releases.passengers import PERIOD_COMPOSITION, counted_table, cumulative_text, provenance_text
from transit_release.utility.ngrams import QUERIES_PER_SUBSET, TOP_K
from transit_release.utility.sequence_evaluation import SequenceUtility

KIND = "sequences"
UNIT = "passenger-sequence"
NEIGHBOURING = "add-remove-one"
MECHANISMS = ("prefix-tree", "ngram")
#: the recommended mechanism (docs/sequences.md): what a release without --mechanism (and without the prefix
#: tree's own parameters) uses
DEFAULT_MECHANISM = "ngram"
#: the prefix tree's own parameters: given without --mechanism, they keep the prefix tree (the former default)
PREFIX_TREE_FLAGS = ("--height", "--variant", "--fanout")
#: the n-gram sanitizer's defaults (the thesis's): ℓmax locations kept per sequence, grams of at most nmax symbols
DEFAULT_LMAX = 20
DEFAULT_NMAX = 5
#: decimals of the published n-gram counts (consistent counts are fractional)
NGRAM_DECIMALS = 2

Budget = TreeBudget | NGramBudget


def taxonomy_of(universe: LocationUniverse, fanout: int | None) -> Taxonomy:
    """The hybrid tree's taxonomy: the universe's own groups (from a taxonomy file) or ``fanout`` ids per group."""
    if (universe.groups is None) == (fanout is None):
        raise InputDataError("the hybrid variant needs exactly one of a taxonomy file (--taxonomy, whose groups are "
                             "used) or --fanout F")
    if fanout is not None:
        return Taxonomy.from_fanout(len(universe), fanout)
    return Taxonomy.from_groups(list(universe.groups))


def tree_budget(universe: LocationUniverse, epsilon: float, height: int, variant: str,
                fanout: int | None) -> tuple[TreeBudget, Taxonomy | None]:
    """Budget and taxonomy from public inputs only; refuses an impossible or too large tree before any draw."""
    try:
        tax = taxonomy_of(universe, fanout) if variant == "hybrid" else None
        budget = TreeBudget.of(epsilon, height, variant, tax)
        check_tree_size(budget, len(universe))
    except ValueError as exc:
        raise InputDataError(str(exc)) from None
    return budget, tax


def ngram_budget(universe: LocationUniverse, epsilon: float, lmax: int, nmax: int) -> NGramBudget:
    """The n-gram budget from public inputs only; refuses what the samplers cannot honour or a tree too large."""
    if END_TOKEN in universe.ids:
        raise InputDataError(f"{universe.source}: a location is named '{END_TOKEN}', which the n-gram table uses "
                             "for the end of a sequence; rename it in the universe and the input")
    try:
        budget = NGramBudget.of(epsilon, lmax, nmax, len(universe))
        ngram.check_tree_size(budget)
    except ValueError as exc:
        raise InputDataError(str(exc)) from None
    return budget


def resolve_mechanism(mechanism: str | None, height: int | None = None, variant: str | None = None,
                      fanout: int | None = None) -> str:
    """The mechanism of a release: ``mechanism`` if given; else the prefix tree when one of its own parameters
    (``height``, ``variant``, ``fanout``) is given — the prefix tree was the default and needed ``--height``, so a
    command written for it keeps its mechanism and its release id —; else :data:`DEFAULT_MECHANISM`."""
    if mechanism is not None:
        return mechanism
    return "prefix-tree" if any(v is not None for v in (height, variant, fanout)) else DEFAULT_MECHANISM


def budget_for(mechanism: str | None, universe: LocationUniverse, epsilon: float, height: int | None = None,
               variant: str | None = None, fanout: int | None = None, lmax: int | None = None,
               nmax: int | None = None) -> tuple[Budget, Taxonomy | None]:
    """The budget (and the hybrid tree's taxonomy) of ``mechanism``; refuses the other mechanism's parameters.

    Prefix tree: ``height`` (required), ``variant`` (default hybrid), ``fanout``. N-gram: ``lmax``, ``nmax``
    (defaults :data:`DEFAULT_LMAX`, :data:`DEFAULT_NMAX`); a taxonomy file only gives it the universe.
    ``mechanism`` None: :func:`resolve_mechanism`.
    """
    mechanism = resolve_mechanism(mechanism, height, variant, fanout)
    if mechanism not in MECHANISMS:
        raise InputDataError(f"unknown sequence mechanism {mechanism!r}; choose one of {', '.join(MECHANISMS)}")
    if mechanism == "ngram":
        other = [flag for flag, v in (("--height", height), ("--variant", variant), ("--fanout", fanout))
                 if v is not None]
        if other:
            raise InputDataError(f"{', '.join(other)}: prefix-tree parameter(s); the n-gram sanitizer takes "
                                 "--lmax (locations kept per sequence) and --nmax (longest gram)")
        return ngram_budget(universe, epsilon, DEFAULT_LMAX if lmax is None else lmax,
                            DEFAULT_NMAX if nmax is None else nmax), None
    other = [flag for flag, v in (("--lmax", lmax), ("--nmax", nmax)) if v is not None]
    if other:
        raise InputDataError(f"{', '.join(other)}: n-gram parameter(s); the prefix tree takes --height "
                             "(and --variant, --fanout), or choose --mechanism ngram")
    if height is None:
        raise InputDataError("the prefix tree needs --height H (the longest sequence it releases)")
    return tree_budget(universe, epsilon, height, variant or "hybrid", fanout)


def event_kind(budget: Budget) -> str:
    """The kind of the spend event a release with ``budget`` records."""
    return NGramEvent.kind if isinstance(budget, NGramBudget) else PrefixTreeEvent.kind


def plan_spend(release_id: str, period, budget: Budget, fingerprint: str,
               code_version: str, population: str = DEFAULT_POPULATION) -> PrefixTreeEvent | NGramEvent:
    """The one event of a sequence release; ``delta`` is the samplers' exact TV slack (``delta_slack`` of the
    prefix tree, ``ngram.noise_delta``)."""
    if isinstance(budget, NGramBudget):
        return NGramEvent(release_id=release_id, period_start=period.start.isoformat(),
                          period_end=period.end.isoformat(), epsilon=float(budget.epsilon),
                          delta=ngram.noise_delta(budget), max_length=budget.max_length, max_gram=budget.max_gram,
                          n_locations=budget.n_locations, sensitivity=budget.max_length, unit_of_privacy=UNIT,
                          neighbouring=NEIGHBOURING, input_fingerprint=fingerprint, code_version=code_version,
                          population=population)
    return PrefixTreeEvent(release_id=release_id, scope=period_label(period.start, period.end),
                           epsilon=float(budget.epsilon), delta=delta_slack(budget), height=budget.height,
                           variant=budget.variant, fanout=str(budget.fanout) if budget.fanout is not None else "",
                           sensitivity=1, unit_of_privacy=UNIT, neighbouring=NEIGHBOURING,
                           input_fingerprint=fingerprint, code_version=code_version, population=population)


def default_release_id(mechanism: str, period) -> str:
    return f"sequences-{mechanism}-{period.start:%Y%m%d}-{period.end:%Y%m%d}"


def same_release(budget: Budget, fingerprint: str):
    """``same(earlier_events)``: was the release published by the same mechanism, parameters and inputs?"""
    if isinstance(budget, NGramBudget):
        wanted = (float(budget.epsilon), budget.max_length, budget.max_gram, fingerprint)
        key = lambda e: (e.epsilon, e.max_length, e.max_gram, e.input_fingerprint)  # noqa: E731
    else:
        wanted = (float(budget.epsilon), budget.height, budget.variant, fingerprint)
        key = lambda e: (e.epsilon, e.height, e.variant, e.input_fingerprint)  # noqa: E731
    kind = event_kind(budget)
    return lambda earlier: any(e.kind == kind and key(e) == wanted for e in earlier)


@dataclass(frozen=True)
class SequenceRelease:
    """Plain results of either mechanism: the released sequences as ``(sequence, copies)`` sorted by sequence and,
    for the n-gram sanitizer, its published table ``(gram, consistent count)`` (``ngram.END`` = ``&``)."""

    sequences: list[tuple[tuple[int, ...], int]]
    ngrams: list[tuple[tuple[int, ...], float]] | None = None


def sanitize(seqs: Sequences, budget: Budget, taxonomy: Taxonomy | None, noise: NoiseSource,
             release_id: str) -> SequenceRelease:
    generator = noise.stream(KIND, release_id)
    if isinstance(budget, NGramBudget):
        result = ngram.sanitize(seqs, budget, generator)
        return SequenceRelease(result.sequences, result.ngrams)
    _, release = sanitize_sequences(seqs, float(budget.epsilon), budget.height, budget.variant, taxonomy, generator)
    return SequenceRelease(release)


def workload_height(budget: Budget) -> int:
    """The set-containment workload's ``h`` (query sizes up to ``i·h/4``): the longest sequence the mechanism keeps
    (the tree's height, the n-gram's ℓmax)."""
    return budget.max_length if isinstance(budget, NGramBudget) else budget.height


def evaluate(seqs: Sequences, release: list, height: int, n_queries: int, top_k: tuple[int, ...],
             gram_queries: int = QUERIES_PER_SUBSET, gram_top_k: tuple[int, ...] = TOP_K,
             figures: dict | None = None, frequent_k: int = 100) -> dict:
    """Both workloads (:mod:`transit_release.utility.sequence_evaluation`); internal figures only.

    Keys: ``count_query.relative_error.max_q*``, ``patterns.top*.{tp,fp,fd}`` (the KDD paper's) and
    ``gram_query.relative_error.max_q*``, ``grams.top*.{tp,loss}`` (the thesis's); 0 / () turns one off. Also,
    against the sequences cut at ``height``: ``grams.top{k}.relative_error`` (the ``k`` most frequent runs of two
    or more stations), ``lengths.total_variation`` and ``records.share_released``. ``figures``, if given,
    receives the arrays the report plots.
    """
    utility = SequenceUtility(seqs, height=height, n_queries=n_queries, top_k=tuple(top_k),
                              gram_queries=gram_queries, gram_top_k=tuple(gram_top_k), seed=0)
    out = utility.evaluate(release)
    out.update(reading_figures(seqs, release, height, figures, frequent_k))
    return out


def reading_figures(seqs: Sequences, release: list, height: int, figures: dict | None = None,
                    frequent_k: int = 100) -> dict:
    """The figures the report and the headline read (module :func:`evaluate`)."""
    import numpy as np

    from transit_release.utility import ngrams
    from transit_release.utility.sequences import WeightedSequences
    from transit_release.utility.trajectories import length_shares, total_variation

    lists = [s[:height] for s in seqs.to_lists()]
    released_set = {s for s, c in release if c > 0}
    out = {"records.share_released": (sum(1 for s in lists if s in released_set) / len(lists)) if lists else 0.0}
    true_len = length_shares(np.array([len(s) for s in lists], dtype=np.int64), height=height)
    got_len = (length_shares(np.array([len(s) for s, _ in release], dtype=np.int64),
                             np.array([c for _, c in release], dtype=float), height) if release else
               np.zeros(height + 1))
    out["lengths.total_variation"] = total_variation(true_len, got_len)
    if frequent_k and len(seqs):
        top = ngrams.top_k_grams(seqs, frequent_k)
        if top:
            grams = Sequences.from_lists([g for g, _ in top], seqs.n_locations)
            true = np.array([c for _, c in top], dtype=np.int64)
            got = ngrams.occurrence_counts(WeightedSequences.from_release(release, seqs.n_locations), grams)
            bound = max(0.001 * len(seqs), 1e-12)
            out[f"grams.top{frequent_k}.relative_error"] = float((np.abs(got - true) / np.maximum(true, bound)).mean())
            if figures is not None:
                figures.update({"top_patterns.true": true.tolist(), "top_patterns.released": got.tolist()})
    if figures is not None:
        figures.update({"lengths.true": true_len.tolist(), "lengths.released": got_len.tolist()})
    return out


def sequence_table(release: list[tuple[tuple[int, ...], int]], universe: LocationUniverse) -> pd.DataFrame:
    """``sequence,count``: each distinct released sequence once, stations separated by spaces, sorted."""
    return counted_table(release, universe, "sequence")


def ngram_table(table: list[tuple[tuple[int, ...], float]], universe: LocationUniverse) -> pd.DataFrame:
    """``gram,count``: the n-gram table in its order (location by location in the universe's sorted order, ``&``
    before any location), counts rounded to :data:`NGRAM_DECIMALS` decimals; grams rounding to 0 are left out."""
    grams = [gram_text(g, universe.ids) for g, _ in table]
    counts = pd.Series([c for _, c in table], dtype="float64").round(NGRAM_DECIMALS)
    df = pd.DataFrame({"gram": pd.Series(grams, dtype=object), "count": counts})
    return df[df["count"] > 0].reset_index(drop=True).astype({"gram": str, "count": "float64"})


def outputs(release_id: str, period, universe: LocationUniverse, budget: Budget, event, noise_kind: str,
            code_version: str, created_at: str, release: SequenceRelease) -> tuple[dict, dict, dict]:
    """(tables, texts, manifest) of a sequence release: ``sequences.txt`` and the ``sequences`` table, and the
    ``ngrams`` table of the n-gram sanitizer."""
    manifest = build_manifest(release_id, period, universe, budget, event, noise_kind, code_version, created_at)
    what = "synthetic sequence generated from the n-grams" if release.ngrams is not None else "passenger sequence"
    text = format_sequences(release.sequences, universe.ids, header=f"{release_id}: one {what} per line")
    tables = {"sequences": sequence_table(release.sequences, universe)}
    if release.ngrams is not None:
        tables["ngrams"] = ngram_table(release.ngrams, universe)
    return tables, {"sequences.txt": text}, manifest


def build_manifest(release_id: str, period, universe: LocationUniverse, budget: Budget, event, noise_kind: str,
                   code_version: str, created_at: str) -> dict:
    """Everything public about the release except files, ledger head and cumulative loss (added at staging)."""
    ngrams = isinstance(budget, NGramBudget)
    return {
        "release_id": release_id,
        "kind": KIND,
        "created_at": created_at,
        "product": ("passenger journeys: noisy counts of runs of consecutive stations (n-grams) and synthetic "
                    "sequences generated from them, one line per sequence" if ngrams
                    else "passenger journeys: sequences of stations, one line per sequence"),
        "period": {"start": period.start.isoformat(), "end": period.end.isoformat()},
        "scope": event.scope,
        "universe": universe.describe(),
        "privacy": {
            "unit_of_privacy": UNIT,
            "neighbouring_relation": "add or remove one passenger's whole sequence",
            "epsilon": float(budget.epsilon),
            "delta": event.delta,
            **(_ngram_privacy(budget) if ngrams else _tree_privacy(budget, event)),
            "composition": PERIOD_COMPOSITION,
        },
        "noise_source": noise_kind,
        "code_version": code_version,
        "licence": "CC BY 4.0",
    }


def _tree_privacy(budget: TreeBudget, event: PrefixTreeEvent) -> dict:
    return {
        "mechanism": f"noisy prefix tree, {budget.variant} variant (Chen, Fung, Desai & Sossou, KDD 2012)",
        "mechanism_id": "prefix-tree",
        "height": budget.height,
        "fanout": event.fanout,
        "level_epsilon": float(budget.level_epsilon),
        "generalized_epsilon": float(budget.generalized_epsilon),
        "station_epsilon": float(budget.station_epsilon),
        "generalized_threshold": budget.generalized_threshold if budget.variant == "hybrid" else None,
        "station_threshold": budget.station_threshold,
    }


def _ngram_privacy(budget: NGramBudget) -> dict:
    """Every budget a count can be drawn with (public: from ε and nmax only), its noise scale and threshold."""
    return {
        "mechanism": "variable-length n-grams (Chen, Ács & Castelluccia, CCS 2012)",
        "mechanism_id": "ngram",
        "max_length": budget.max_length,
        "max_gram": budget.max_gram,
        "end_marker": END_TOKEN,
        "level1_epsilon": float(budget.root_epsilon),
        "level1_threshold": budget.integer_threshold(budget.root_epsilon),
        "node_budgets": [_node_budget(budget, e) for e in budget.node_budgets()],
        "count_decimals": NGRAM_DECIMALS,
    }


def _node_budget(budget: NGramBudget, eps: Fraction) -> dict:
    return {"epsilon": float(eps), "epsilon_exact": str(eps), "noise_scale": float(budget.noise_scale(eps)),
            "threshold": budget.integer_threshold(eps)}


def render_datacard(manifest: dict) -> str:
    p = manifest["privacy"]
    period = manifest["period"]
    u = manifest["universe"]
    ngrams = p.get("mechanism_id") == "ngram"
    intro = (f"Passenger journeys of {period['start']} to {period['end']}, released under differential privacy\n"
             "as a table of noisy counts of runs of consecutive stations (n-grams) and a synthetic set of\n"
             "journeys generated from that table." if ngrams else
             f"Passenger journeys of {period['start']} to {period['end']} as sequences of stations,\n"
             "released under differential privacy.")
    return f"""{card_heading(manifest)}

{intro}

## Files
{_ngram_files(p) if ngrams else _tree_files()}

The possible stations are the public list of {u['locations']} locations given as
input ({u['source']}; SHA-256 `{u['sha256'][:16]}…`), never the stations found in the data.

## How they were made
{_ngram_method(p) if ngrams else _tree_method(p)}

## Privacy guarantee
{p['epsilon']:g}-differential privacy for one **passenger's whole sequence over the
period** ({p['neighbouring_relation']}; δ = {p['delta']:.2g} covers the exactly computed
deviation of the integer noise sampler). Composition: {p['composition']}.
{cumulative_text(p)}
{provenance_text(manifest)}"""


def _tree_files() -> str:
    return f"""- `sequences.txt`: one sequence per line: the stations a passenger tapped at, in order,
  separated by spaces (lines starting with `#` are comments).
- `sequences.csv` (and `sequences.parquet`): `sequence,count`, each distinct released
  sequence once with the number of lines it has in `sequences.txt`. In the CSV, {CSV_NEUTRALISATION}."""


def _tree_method(p: dict) -> str:
    return f"""A prefix tree of all sequences (height {p['height']}) was built level by level with
integer noise on every node's count; nodes below a threshold were dropped, counts
were made consistent (a node counts at least as many journeys as its children, and
counts never grow along a path), and each node released as many copies of its
prefix as journeys end there ({p['mechanism']}).

- Sequences are at most {p['height']} stations long: longer journeys are cut.
- Rare journeys are missing; frequent ones have noisy counts.
- Every line is a prefix shape of the noisy tree, not a record of one person; a few
  lines may be journeys nobody made (every possible station had a chance to appear)."""


def _ngram_files(p: dict) -> str:
    end, d = p["end_marker"], p["count_decimals"]
    return f"""- `ngrams.csv` (and `ngrams.parquet`): `gram,count`. A gram is a run of consecutive stations
  of a journey, separated by spaces, possibly followed by `{end}`, which stands for the end of the
  journey; at most {p['max_gram']} symbols in all. The count of `A B` is the (noisy) number of times a journey goes from
  station A straight to station B, every time it does (a journey through A B twice counts twice);
  the count of `A B {end}` is the number of journeys (cut as said below) that end with A then B,
  and `A {end}` of those that end at A. Where a gram's one-symbol-longer grams are listed, they add up to its count, up
  to rounding (counts were made consistent, so they are fractional: rounded to {d} decimals; grams whose
  count rounds to 0 are left out). Rows are sorted by gram, station by station in the order of
  the station list, `{end}` before any station.
- `sequences.txt`: a synthetic database, one journey per line, stations separated by spaces
  (lines starting with `#` are comments), in the format of the prefix-tree releases. It was
  generated from the gram counts alone (see below).
- `sequences.csv` (and `sequences.parquet`): `sequence,count`, each distinct line of
  `sequences.txt` once with the number of lines it has there.

In the CSVs, {CSV_NEUTRALISATION}."""


def _ngram_method(p: dict) -> str:
    end = p["end_marker"]
    return f"""Every journey was cut to its first {p['max_length']} stations and given the end symbol `{end}`.
Starting from single stations, grams were extended one symbol (a station or `{end}`) at a
time, up to {p['max_gram']} symbols, with integer noise on every count: a gram was extended only
if its noisy count reached a threshold, and how much of the privacy budget its extensions got
was decided from the noisy counts alone. Mechanism: {p['mechanism']}. The counts were then made
consistent, and the journeys of `sequences.txt` were generated from the consistent counts:
longer journeys are stitched together from overlapping grams, using their counts as how often
one station follows another.

- Journeys longer than {p['max_length']} stations were cut to their first {p['max_length']}:
  nothing after that point is counted, and no synthetic journey is longer.
- Rare grams are missing; frequent ones have noisy counts. A few grams may be runs nobody
  made (every possible station had a chance to appear).
- Every line of `sequences.txt` is made up from the grams, not a record of one person; the
  number of lines reproduces the gram counts, not the number of passengers."""


def tracking(manifest: dict, metrics: dict, quarantine: dict) -> dict:
    """The MLflow record: the same metric names for both mechanisms (both utility workloads)."""
    p = manifest["privacy"]
    universe = {"universe.locations": manifest["universe"]["locations"],
                "universe.sha256": manifest["universe"]["sha256"]}
    if p.get("mechanism_id") == "ngram":
        mechanism = "ngram"
        params = {"epsilon": p["epsilon"], "lmax": p["max_length"], "nmax": p["max_gram"],
                  "level1_threshold": p["level1_threshold"], **universe}
    else:
        mechanism = "prefix_tree"
        params = {"epsilon": p["epsilon"], "height": p["height"], "fanout": p["fanout"],
                  "variant": p["mechanism"].split(", ")[1].split(" ")[0], "station_threshold": p["station_threshold"],
                  "generalized_threshold": p["generalized_threshold"], **universe}
    m = {**metrics, **{f"input.quarantined.{k}": v for k, v in quarantine.items()}}
    return {"kind": KIND, "mechanism": mechanism, "tags": {"scope": manifest["scope"]}, "params": params,
            "metrics": m, "artifacts": {}}
