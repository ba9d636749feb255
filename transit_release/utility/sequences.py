"""Utility of a sequence release (KDD 2012 paper, §3.3).

* Count queries: ``Q(D) = |{S ∈ D : 𝕃 ⊆ set(S)}|`` (order ignored); relative
  error ``|Q(D̃) − Q(D)| / max(Q(D), s)`` with sanity bound ``s = 0.1%`` of
  ``|D|``. The workload has subsets ``i = 1..n_subsets`` of queries with sizes
  uniform in ``[1, i·h/n_subsets]`` and locations uniform from ``L``.
  Evaluated with one bitset per location over the sequences (``np.bitwise_count``).
* Frequent sequential patterns of size > 1 (PrefixSpan, from the maintained
  ``prefixspan`` package): ``TP = |F_k(D) ∩ F_k(D̃)|``, ``FP = |F_k(D̃) − F_k(D)|``
  (equal to the false drops FD, since both sets have ``k`` elements).

These figures compare with the raw data, so they are internal: MLflow and
reports only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transit_release.mechanisms.prefix_tree import Sequences

SANITY_SHARE = 0.001


def location_bitsets(seqs: Sequences) -> np.ndarray:
    """``(n_locations, ceil(n/64))`` uint64: bit ``r`` of row ``l`` is set if sequence ``r`` visits ``l``."""
    n, L = len(seqs), seqs.n_locations
    words = (n + 63) // 64
    out = np.zeros((L, words * 64), dtype=bool)
    who = np.repeat(np.arange(n), seqs.lengths)
    out[seqs.locations, who] = True
    return np.packbits(out, axis=1, bitorder="little").view(np.uint64)


def count_queries(bitsets: np.ndarray, queries: list[np.ndarray]) -> np.ndarray:
    """Number of sequences containing every location of each query."""
    out = np.empty(len(queries), dtype=np.int64)
    for i, q in enumerate(queries):
        acc = bitsets[q[0]].copy()
        for loc in q[1:]:
            acc &= bitsets[loc]
        out[i] = int(np.bitwise_count(acc).sum())
    return out


@dataclass(frozen=True)
class Workload:
    subsets: list[list[np.ndarray]]
    max_sizes: list[int]


def query_workload(n_locations: int, height: int, n_queries: int = 40_000, n_subsets: int = 4,
                   seed: int = 0) -> Workload:
    """The paper's workload: ``n_subsets`` subsets with sizes uniform in ``[1, i·h/n_subsets]``."""
    rng = np.random.default_rng(seed)
    per = n_queries // n_subsets
    subsets, sizes = [], []
    for i in range(1, n_subsets + 1):
        top = max(1, min(n_locations, (i * height) // n_subsets))
        k = rng.integers(1, top + 1, per)
        subsets.append([rng.choice(n_locations, size=int(x), replace=False) for x in k])
        sizes.append(top)
    return Workload(subsets, sizes)


def relative_errors(true: np.ndarray, released: np.ndarray, n_sequences: int) -> np.ndarray:
    bound = max(SANITY_SHARE * n_sequences, 1e-12)
    return np.abs(released - true) / np.maximum(true, bound)


def count_query_error(original: Sequences, released: Sequences, workload: Workload) -> dict[str, float]:
    """Mean relative error per subset (keyed by its largest query size)."""
    a, b = location_bitsets(original), location_bitsets(released)
    out = {}
    for size, queries in zip(workload.max_sizes, workload.subsets):
        err = relative_errors(count_queries(a, queries), count_queries(b, queries), len(original))
        out[f"max_q{size}"] = float(err.mean())
    return out


def top_k_patterns(seqs: Sequences, k: int) -> set[tuple[int, ...]]:
    """The ``k`` most frequent sequential patterns of size > 1 (PrefixSpan)."""
    from prefixspan import PrefixSpan

    ps = PrefixSpan(seqs.to_lists())
    ps.minlen = 2
    return {tuple(p) for _, p in ps.topk(k)}


def pattern_utility(original: Sequences, released: Sequences, ks=(100, 200, 300)) -> dict[str, int]:
    out = {}
    for k in ks:
        truth, found = top_k_patterns(original, k), top_k_patterns(released, k)
        out[f"top{k}.tp"] = len(truth & found)
        out[f"top{k}.fp"] = len(found - truth)
        out[f"top{k}.fd"] = len(truth - found)
    return out


def expand_release(release: list[tuple[tuple[int, ...], int]], n_locations: int) -> Sequences:
    """The released (prefix, copies) pairs as a data set of sequences."""
    return Sequences.from_lists([p for p, c in release for _ in range(c)], n_locations)
