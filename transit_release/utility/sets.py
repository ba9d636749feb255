"""Utility of a set-valued release (thesis ch. 4, §4.2.3 and §4.4.1).

* Count queries: for an itemset ``U``, ``Q(D) = |{R ∈ D : U ⊆ R}|``; relative
  error ``|Q(D̃) − Q(D)| / max(Q(D), s)`` with sanity bound ``s = 0.1%·|D|``.
  The workload has 5 subsets of 10,000 queries; subset ``i`` has lengths
  uniform in ``[1, ⌊i·max|D|/5⌋]`` (floor, at least 1; the last subset always
  reaches ``max|D|``) and distinct items uniform from ``I``. Evaluated with one
  bitset per item over the *distinct* sets (``np.bitwise_count``), each
  distinct set weighted by its multiplicity.
* Top-K frequent itemsets (any length ≥ 1), found exactly by a best-first search
  whose cost is at most ``K + 1`` passes over the data (:func:`top_k_itemsets`;
  the thesis used MAFIA, this project FP-growth until one passenger's large set
  made it enumerate ``2^|set|`` itemsets):
  true positives ``TP = |F_K(D) ∩ F_K(D̃)|`` and the thesis's loss
  ``(1/K)·Σ_{F ∈ F_K(D)} |sup_D(F) − sup_D̃(F)| / sup_D(F)``, ``sup_D̃(F) = 0`` if
  ``F ∉ F_K(D̃)``; supports are counts of records (``loss``) and, as a second
  reading, shares of the data set's size (``loss_share``), since ``|D̃| ≠ |D|``.
  Ties are broken by length (shorter first), then by the itemsets' sorted item ids.

These figures compare with the raw data, so they are internal: MLflow and
reports only.
"""

from __future__ import annotations

import heapq
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


def top_k_itemsets(pairs: list[tuple[tuple[int, ...], int]], universe_size: int, k: int) -> dict[tuple[int, ...], int]:
    """The ``k`` most frequent itemsets (length ≥ 1) with their supports (record counts), exactly: ranked by
    support (descending), then length (ascending), then item ids.

    A best-first search over the set-enumeration tree (an itemset's children add one item larger than its
    last): every subset of an itemset ranks before it under this order (at least its support, fewer items), so
    the ``i``-th itemset taken from the queue is the ``i``-th of the ranking, and the search stops after ``k``.
    Each itemset taken costs one pass over the distinct sets that hold it (their children's supports at
    once); children below the ``k``-th largest support seen are never queued. The cost is at most ``k + 1``
    passes over the data, whatever the sets hold: one record with many items adds its items, not the
    ``2^|record|`` itemsets FP-growth with a minimum support of one record enumerated (atk40 C1). The ranking
    puts the shorter of equal supports first, so no top-``k`` itemset has more than ``log2(k + 1)`` items.
    """
    if k <= 0:
        return {}
    kept = [(s, c) for s, c in pairs if c > 0 and len(s)]
    if not kept:
        return {}
    sizes = np.fromiter((len(s) for s, _ in kept), dtype=np.int64, count=len(kept))
    items = np.fromiter((x for s, _ in kept for x in s), dtype=np.int64, count=int(sizes.sum()))
    weights = np.fromiter((c for _, c in kept), dtype=np.int64, count=len(kept))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    owner = np.repeat(np.arange(len(kept), dtype=np.int64), sizes)
    # the distinct sets holding each item (sorted), to find an itemset's sets
    order = np.argsort(items, kind="stable")
    holders = owner[order]
    bounds = np.searchsorted(items[order], np.arange(universe_size + 1))

    def holding(itemset: tuple[int, ...]) -> np.ndarray:
        if not itemset:
            return np.arange(len(kept), dtype=np.int64)
        hits = np.zeros(len(kept), dtype=np.int32)
        for x in itemset:
            hits[holders[bounds[x]:bounds[x + 1]]] += 1
        return np.flatnonzero(hits == len(itemset))

    def child_supports(rows: np.ndarray, last: int) -> np.ndarray:
        """Support of the itemset plus each item larger than ``last``, over the sets ``rows`` (those holding it)."""
        lengths = sizes[rows]
        total = int(lengths.sum())
        at = np.repeat(offsets[rows] - np.cumsum(lengths) + lengths, lengths) + np.arange(total, dtype=np.int64)
        got = items[at]
        larger = got > last
        return np.rint(np.bincount(got[larger], weights=np.repeat(weights[rows], lengths)[larger],
                                   minlength=universe_size)).astype(np.int64)

    best: list[int] = []  # min-heap of the k largest supports seen: a child below its least can never rank
    queue: list[tuple[int, int, tuple[int, ...]]] = []

    def offer(itemset: tuple[int, ...], rows: np.ndarray) -> None:
        support = child_supports(rows, itemset[-1] if itemset else -1)
        for x in np.flatnonzero(support > 0).tolist():
            s = int(support[x])
            if len(best) >= k and s < best[0]:
                continue
            if len(best) < k:
                heapq.heappush(best, s)
            elif s > best[0]:
                heapq.heapreplace(best, s)
            heapq.heappush(queue, (-s, len(itemset) + 1, itemset + (x,)))

    offer((), holding(()))
    out: dict[tuple[int, ...], int] = {}
    while queue and len(out) < k:
        neg, _, itemset = heapq.heappop(queue)
        out[itemset] = -neg
        if len(out) < k:
            offer(itemset, holding(itemset))
    return out


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
