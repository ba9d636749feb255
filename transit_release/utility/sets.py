"""Utility of a set-valued release (thesis ch. 4, §4.2.3 and §4.4.1).

* Count queries: for an itemset ``U``, ``Q(D) = |{R ∈ D : U ⊆ R}|``; relative
  error ``|Q(D̃) − Q(D)| / max(Q(D), s)`` with sanity bound ``s = 0.1%·|D|``.
  The workload has 5 subsets of 10,000 queries; subset ``i`` has lengths
  uniform in ``[1, ⌊i·max|D|/5⌋]`` (floor, at least 1; the last subset always
  reaches ``max|D|``) and distinct items uniform from ``I``. Evaluated with one
  bitset per item over the *distinct* sets (``np.bitwise_count``), each
  distinct set weighted by its multiplicity.
* Top-K frequent itemsets (any length ≥ 1) mined with the maintained
  ``mlxtend`` FP-growth on a sparse one-hot frame (the thesis used MAFIA):
  true positives ``TP = |F_K(D) ∩ F_K(D̃)|`` and the thesis's loss
  ``(1/K)·Σ_{F ∈ F_K(D)} |sup_D(F) − sup_D̃(F)| / sup_D(F)``, ``sup_D̃(F) = 0`` if
  ``F ∉ F_K(D̃)``; supports are counts of records (``loss``) and, as a second
  reading, shares of the data set's size (``loss_share``), since ``|D̃| ≠ |D|``.
  Ties at the K-th support are broken by the itemsets' sorted item ids.

These figures compare with the raw data, so they are internal: MLflow and
reports only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from transit_release.mechanisms.diffpart import ItemSets

SANITY_SHARE = 0.001
N_SUBSETS = 5
QUERIES_PER_SUBSET = 10_000


@dataclass(frozen=True)
class WeightedSets:
    """Distinct sets with multiplicities, and one bitset per item over them."""

    bitsets: np.ndarray  # (universe_size, words) uint64: bit r of row i is set if distinct set r holds item i
    weights: np.ndarray  # int64 multiplicity of each distinct set
    total: int  # number of records

    @classmethod
    def of(cls, pairs: list[tuple[tuple[int, ...], int]], universe_size: int) -> "WeightedSets":
        """From (set, copies) pairs, e.g. a release."""
        sets = [s for s, c in pairs if c > 0]
        weights = np.array([c for s, c in pairs if c > 0], dtype=np.int64)
        n = len(sets)
        words = (n + 63) // 64
        out = np.zeros((universe_size, words * 64), dtype=bool)
        if n:
            sizes = np.fromiter((len(s) for s in sets), dtype=np.int64, count=n)
            items = np.fromiter((x for s in sets for x in s), dtype=np.int64, count=int(sizes.sum()))
            out[items, np.repeat(np.arange(n), sizes)] = True
        bits = np.packbits(out, axis=1, bitorder="little").view(np.uint64)
        return cls(bits, weights, int(weights.sum()))

    @classmethod
    def from_item_sets(cls, sets: ItemSets) -> "WeightedSets":
        return cls.of(sorted(Counter(sets.to_lists()).items()), sets.universe_size)

    def count(self, queries: list[np.ndarray]) -> np.ndarray:
        """Number of records containing every item of each query."""
        out = np.zeros(len(queries), dtype=np.int64)
        if self.weights.size == 0:
            return out
        n = self.weights.size
        for i, q in enumerate(queries):
            acc = self.bitsets[q[0]].copy()
            for item in q[1:]:
                acc &= self.bitsets[item]
            if not acc.any():
                continue
            hit = np.unpackbits(acc.view(np.uint8), bitorder="little")[:n].astype(bool)
            out[i] = int(self.weights[hit].sum())
        return out


@dataclass(frozen=True)
class Workload:
    subsets: list[list[np.ndarray]]
    max_sizes: list[int]


def query_workload(universe_size: int, max_record_size: int, per_subset: int = QUERIES_PER_SUBSET,
                   n_subsets: int = N_SUBSETS, seed: int = 0, max_sizes: list[int] | None = None) -> Workload:
    """The thesis's workload: subset ``i`` has lengths uniform in ``[1, ⌊i·max|D|/n_subsets⌋]``.

    ``max_sizes`` overrides the subsets' largest lengths (e.g. ``[3]`` for queries of up to 3 items).
    """
    rng = np.random.default_rng(seed)
    if max_sizes is None:
        max_sizes = [max(1, (i * max_record_size) // n_subsets) for i in range(1, n_subsets + 1)]
    subsets, sizes = [], []
    for top in max_sizes:
        top = max(1, min(universe_size, int(top)))
        k = rng.integers(1, top + 1, per_subset)
        subsets.append([rng.choice(universe_size, size=int(x), replace=False) for x in k])
        sizes.append(top)
    return Workload(subsets, sizes)


def relative_errors(true: np.ndarray, released: np.ndarray, n_records: int) -> np.ndarray:
    bound = max(SANITY_SHARE * n_records, 1e-12)
    return np.abs(released - true) / np.maximum(true, bound)


def count_query_error(original: WeightedSets, released: WeightedSets, workload: Workload) -> dict[str, float]:
    """Mean relative error per subset, keyed ``max_q<largest length>``."""
    out = {}
    for size, queries in zip(workload.max_sizes, workload.subsets):
        err = relative_errors(original.count(queries), released.count(queries), original.total)
        out[f"max_q{size}"] = float(err.mean())
    return out


def _one_hot(pairs: list[tuple[tuple[int, ...], int]], universe_size: int):
    import pandas as pd
    import scipy.sparse as sp

    rows = [s for s, c in pairs for _ in range(c)]
    sizes = np.fromiter((len(s) for s in rows), dtype=np.int64, count=len(rows))
    items = np.fromiter((x for s in rows for x in s), dtype=np.int64, count=int(sizes.sum()))
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    m = sp.csr_matrix((np.ones(items.size, dtype=bool), items, indptr), shape=(len(rows), universe_size))
    return pd.DataFrame.sparse.from_spmatrix(m, columns=range(universe_size))


def top_k_itemsets(pairs: list[tuple[tuple[int, ...], int]], universe_size: int, k: int) -> dict[tuple[int, ...], int]:
    """The ``k`` most frequent itemsets (length ≥ 1) with their supports (record counts), by FP-growth.

    The minimum support starts at the ``k``-th largest item count (or 1 record) and halves until at
    least ``k`` itemsets are frequent.
    """
    from mlxtend.frequent_patterns import fpgrowth

    n = sum(c for _, c in pairs)
    if n == 0:
        return {}
    df = _one_hot(pairs, universe_size)
    item_counts = np.sort(np.asarray(df.sum(axis=0), dtype=np.int64))[::-1]
    min_count = max(1, int(item_counts[min(k, item_counts.size) - 1]))
    while True:
        found = fpgrowth(df, min_support=min_count / n, use_colnames=False)
        if len(found) >= k or min_count == 1:
            break
        min_count = max(1, min_count // 2)
    supports = {tuple(sorted(int(x) for x in s)): int(round(v * n))
                for s, v in zip(found["itemsets"], found["support"])}
    ranked = sorted(supports.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return dict(ranked)


def itemset_utility(original: list[tuple[tuple[int, ...], int]], released: list[tuple[tuple[int, ...], int]],
                    universe_size: int, ks=(10, 50, 100)) -> dict[str, float]:
    """TP and the thesis's loss of the top-K frequent itemsets, for each K."""
    n_orig = sum(c for _, c in original)
    n_rel = sum(c for _, c in released)
    biggest = max(ks)
    truth_all = top_k_itemsets(original, universe_size, biggest)
    found_all = top_k_itemsets(released, universe_size, biggest)
    out: dict[str, float] = {}
    for k in ks:
        truth = dict(list(truth_all.items())[:k])
        found = dict(list(found_all.items())[:k])
        out[f"top{k}.tp"] = len(truth.keys() & found.keys())
        out[f"top{k}.loss"] = float(np.mean([abs(s - found.get(f, 0)) / s for f, s in truth.items()]))
        out[f"top{k}.loss_share"] = float(np.mean([abs(s / n_orig - (found.get(f, 0) / n_rel if n_rel else 0.0))
                                                   / (s / n_orig) for f, s in truth.items()]))
    return out


def release_pairs(sets: ItemSets) -> list[tuple[tuple[int, ...], int]]:
    """A data set as (set, multiplicity) pairs, sorted: the same shape as a release."""
    return sorted(Counter(sets.to_lists()).items())
