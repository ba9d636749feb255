"""The sequence release as plain functions: taxonomy, spend, sanitize, evaluate, publish files.

One privacy spend per release (a :class:`PrefixTreeEvent`), charged before the
tree is built. Utility figures compare with the raw sequences and are internal.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from transit_release.accounting.events import PrefixTreeEvent
from transit_release.errors import InputDataError
from transit_release.mechanisms.prefix_tree import Sequences, Taxonomy, TreeBudget, sanitize_sequences
from transit_release.noise import NoiseSource, discrete_laplace_table
from transit_release.utility.sequences import count_query_error, expand_release, pattern_utility, query_workload

UNIT = "passenger-sequence"
NEIGHBOURING = "add-remove-one"


def load_taxonomy(path: str | Path, vocabulary: tuple[str, ...]) -> Taxonomy:
    """A CSV ``location,group`` (e.g. station,line) covering every location of the input."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError):
        raise InputDataError(f"taxonomy file {path.name}: cannot be read as CSV") from None
    if list(df.columns[:2]) != ["location", "group"]:
        raise InputDataError(f"taxonomy file {path.name}: expected columns 'location,group'")
    if df["location"].duplicated().any():
        raise InputDataError(f"taxonomy file {path.name}: {int(df['location'].duplicated().sum())} location(s) "
                             "listed twice: each location needs exactly one group")
    group = df.set_index("location")["group"]
    missing = [loc for loc in vocabulary if loc not in group.index]
    if missing:
        raise InputDataError(f"taxonomy file {path.name}: {len(missing)} location(s) of the input have no group")
    return Taxonomy.from_groups([group[loc] for loc in vocabulary])


def plan_spend(release_id: str, scope: str, budget: TreeBudget, fingerprint: str, code_version: str) -> PrefixTreeEvent:
    """The one event of a sequence release.

    ``delta`` bounds the sampler's deviation from ideal noise on the counts one
    sequence can change (two per level in the hybrid variant): ``2h (1 + e^ε') η``.
    """
    worst = 0.0
    for eps in (budget.generalized_epsilon, budget.station_epsilon):
        if eps > 0:
            table = discrete_laplace_table(1 / eps)
            worst = max(worst, (1 + math.exp(float(eps))) * table.total_variation)
    return PrefixTreeEvent(release_id=release_id, scope=scope, epsilon=float(budget.epsilon),
                           delta=2 * budget.height * worst, height=budget.height, variant=budget.variant,
                           fanout=str(budget.fanout) if budget.fanout is not None else "",
                           sensitivity=1, unit_of_privacy=UNIT, neighbouring=NEIGHBOURING,
                           input_fingerprint=fingerprint, code_version=code_version)


def sanitize(seqs: Sequences, budget: TreeBudget, taxonomy: Taxonomy | None, noise: NoiseSource, release_id: str):
    return sanitize_sequences(seqs, float(budget.epsilon), budget.height, budget.variant, taxonomy,
                              noise.stream("sequences", release_id))


def evaluate(seqs: Sequences, release: list, height: int, n_queries: int, top_k: tuple[int, ...]) -> dict:
    released = expand_release(release, seqs.n_locations)
    out = {"sequences.input": float(len(seqs)), "sequences.released": float(len(released)),
           "prefixes.released": float(len(release))}
    if n_queries:
        wl = query_workload(seqs.n_locations, height, n_queries=n_queries, seed=0)
        out.update({f"count_query.relative_error.{k}": v for k, v in count_query_error(seqs, released, wl).items()})
    if top_k:
        out.update({f"patterns.{k}": float(v) for k, v in pattern_utility(seqs, released, ks=top_k).items()})
    return out


def build_manifest(release_id: str, scope: str, budget: TreeBudget, event: PrefixTreeEvent, noise_kind: str,
                   code_version: str, created_at: str) -> dict:
    return {
        "release_id": release_id,
        "created_at": created_at,
        "product": "passenger journeys: sequences of stations, one line per sequence",
        "scope": scope,
        "privacy": {
            "unit_of_privacy": UNIT,
            "neighbouring_relation": "add or remove one passenger's whole sequence",
            "epsilon": float(budget.epsilon),
            "delta": event.delta,
            "mechanism": f"noisy prefix tree, {budget.variant} variant (Chen, Fung, Desai & Sossou, KDD 2012)",
            "height": budget.height,
            "fanout": event.fanout,
            "level_epsilon": float(budget.level_epsilon),
            "generalized_epsilon": float(budget.generalized_epsilon),
            "station_epsilon": float(budget.station_epsilon),
            "generalized_threshold": budget.generalized_threshold if budget.variant == "hybrid" else None,
            "station_threshold": budget.station_threshold,
        },
        "noise_source": noise_kind,
        "code_version": code_version,
        "licence": "CC BY 4.0",
    }


def render_datacard(manifest: dict, n_lines: int) -> str:
    p = manifest["privacy"]
    return f"""# {manifest['release_id']}: differentially private passenger journeys

`sequences.txt` holds {n_lines:,} sequences, one per line: the stations a passenger
tapped at, in order, separated by spaces (lines starting with `#` are comments).
Scope: {manifest['scope']}.

## How they were made
A prefix tree of all sequences (height {p['height']}) was built level by level with
integer noise on every node's count; nodes below a threshold were dropped, counts
were made consistent (a node counts at least as many journeys as its children, and
counts never grow along a path), and each node released as many copies of its
prefix as journeys end there ({p['mechanism']}).

- Sequences are at most {p['height']} stations long: longer journeys are cut.
- Rare journeys are missing; frequent ones have noisy counts.
- Every line is a real prefix shape of the tree, not a record of one person.

## Privacy guarantee
{p['epsilon']:g}-differential privacy for one **passenger's whole sequence**
({p['neighbouring_relation']}; δ = {p['delta']:.2g} covers the exactly computed
deviation of the integer noise sampler).

Noise source: {manifest['noise_source']}. Code version: {manifest['code_version']}.
"""
