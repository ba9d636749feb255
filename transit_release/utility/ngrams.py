"""Utility of a sequence release the n-gram way (Rui Chen's thesis §6.4.3, CCS 2012 §6).

* Count queries: ``Q(D)`` is the number of **contiguous occurrences** of the
  query ``q1 q2 … qm`` in the sequences, with multiplicity (``L2 L3`` counts 6
  in the thesis's Table 6.2). Five subsets of 10,000 queries with sizes uniform
  in ``[1, max]`` for ``max = 4, 8, 12, 16, 20`` and each location uniform from
  the universe (independently, so repeats are allowed). Relative error
  ``|Q(D̃) − Q(D)| / max(Q(D), s)``, sanity bound ``s = 0.1%`` of ``|D|``
  (§6.3.2/§4.4; §6.4 reuses that scheme). ``D`` is the raw data (not truncated),
  so a query longer than ``ℓmax`` costs its whole true count.
  Evaluated for all queries at once: the queries form a trie, and every
  position of the data walks down it one location at a time (array work).
* Top-K frequent patterns of size > 1, support = number of contiguous
  occurrences (footnote 14 of the thesis); ``TP = |F_K(D) ∩ F_K(D̃)|``
  (the thesis reports ``TP/K``) and the utility loss of [25]
  ``Σ_{F∈F_K(D)} |sup_D(F) − sup_{F_K(D̃)}(F)| / sup_D(F) / K`` (0 when ``F ∉ F_K(D̃)``).
  Mined level by level (a gram's extensions never occur more often than it),
  ties at the K-th support broken by the gram, ascending.

Both work on :class:`~transit_release.utility.sequences.WeightedSequences`, so a
released ``(sequence, copies)`` list is never expanded. Internal figures only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transit_release.mechanisms.prefix_tree import Sequences
from transit_release.utility.sequences import SANITY_SHARE, QueryTrie, WeightedSequences

MAX_SIZES = (4, 8, 12, 16, 20)
QUERIES_PER_SUBSET = 10_000
TOP_K = (20, 40, 60, 80, 100)
_DENSE_KEYS = 1 << 24


def _weighted(data: Sequences | WeightedSequences) -> WeightedSequences:
    return data if isinstance(data, WeightedSequences) else WeightedSequences.of(data)


@dataclass(frozen=True)
class GramWorkload:
    subsets: list[Sequences]  # queries of each subset, one "sequence" per query
    max_sizes: tuple[int, ...]


def gram_workload(n_locations: int, max_sizes: tuple[int, ...] = MAX_SIZES, per_subset: int = QUERIES_PER_SUBSET,
                  seed: int = 0) -> GramWorkload:
    """The thesis's workload: per subset, sizes uniform in ``[1, max]``, locations uniform (with repeats)."""
    rng = np.random.default_rng(seed)
    subsets = []
    for top in max_sizes:
        sizes = rng.integers(1, top + 1, per_subset)
        offsets = np.zeros(per_subset + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        subsets.append(Sequences(rng.integers(0, n_locations, int(offsets[-1])).astype(np.int64), offsets,
                                 n_locations))
    return GramWorkload(subsets, tuple(max_sizes))


def occurrence_counts(data: Sequences | WeightedSequences, queries: Sequences) -> np.ndarray:
    """Contiguous occurrences (with multiplicity, weighted by copies) of every query in ``data``."""
    w = data if isinstance(data, WeightedSequences) else WeightedSequences(data, np.ones(len(data), dtype=np.int64))
    seqs = w.seqs
    trie = QueryTrie(queries, max(seqs.n_locations, queries.n_locations))
    # every start position walks down the trie while its gram is a query's prefix
    lengths = seqs.lengths
    seq_of = np.repeat(np.arange(len(seqs), dtype=np.int64), lengths)
    start = np.arange(seqs.locations.size, dtype=np.int64)
    room = np.repeat(seqs.offsets[1:], lengths) - start  # locations from the start to the sequence's end
    node = np.zeros(start.size, dtype=np.int64)
    counts: list[np.ndarray] = []
    for depth in range(trie.depth):
        if depth:
            ok = room > depth
            start, node, room, seq_of = start[ok], node[ok], room[ok], seq_of[ok]
        node = trie.step(depth, node, seqs.locations[start + depth])
        hit = node >= 0
        start, node, room, seq_of = start[hit], node[hit], room[hit], seq_of[hit]
        counts.append(np.bincount(node, weights=w.weights[seq_of], minlength=trie.size(depth)))
        if start.size == 0:
            break
    return trie.answers(counts)


def relative_errors(true: np.ndarray, released: np.ndarray, n_sequences: int) -> np.ndarray:
    bound = max(SANITY_SHARE * n_sequences, 1e-12)
    return np.abs(released - true) / np.maximum(true, bound)


def gram_count_query_error(original: Sequences | WeightedSequences, released: Sequences | WeightedSequences,
                           workload: GramWorkload) -> dict[str, float]:
    """Mean relative error of the occurrence count queries, per subset (``max_q4`` … ``max_q20``)."""
    a, b = _weighted(original), _weighted(released)
    every = concat_sequences(workload.subsets)  # all subsets in one pass over each data set
    err = relative_errors(occurrence_counts(a, every), occurrence_counts(b, every), a.total)
    bounds = np.cumsum([0] + [len(q) for q in workload.subsets])
    return {f"max_q{size}": float(err[lo:hi].mean())
            for size, lo, hi in zip(workload.max_sizes, bounds[:-1], bounds[1:])}


def concat_sequences(parts: list[Sequences]) -> Sequences:
    lengths = np.concatenate([p.lengths for p in parts])
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Sequences(np.concatenate([p.locations for p in parts]), offsets, max(p.n_locations for p in parts))


def top_k_grams(data: Sequences | WeightedSequences, k: int, min_size: int = 2) -> list[tuple[tuple[int, ...], int]]:
    """The ``k`` contiguous grams of at least ``min_size`` locations with the most occurrences, with them.

    Level by level: a gram is extended only while its count can still reach the current k-th
    largest count (an extension never occurs more often than the gram).
    """
    w = _weighted(data)
    seqs = w.seqs
    L = max(seqs.n_locations, 1)
    if k <= 0 or seqs.locations.size == 0:
        return []
    lengths = seqs.lengths
    weight = w.weights.astype(np.int64)[np.repeat(np.arange(len(seqs), dtype=np.int64), lengths)]
    end = np.repeat(seqs.offsets[1:], lengths)
    start = np.arange(seqs.locations.size, dtype=np.int64)
    node = seqs.locations.copy()  # the gram starting at each position, as a node of the current level
    parents: list[np.ndarray] = [np.zeros(L, dtype=np.int64)]
    symbols: list[np.ndarray] = [np.arange(L, dtype=np.int64)]
    counts = [np.bincount(node, weights=weight, minlength=L)]
    best: list[tuple[float, int, int]] = []  # (count, level, node) of grams of size ≥ min_size
    threshold = 1.0

    def update(level: int) -> float:
        nonlocal best
        if level >= min_size:
            c = counts[level - 1]
            idx = np.flatnonzero(c >= threshold)
            best.extend(zip(c[idx].tolist(), [level] * idx.size, idx.tolist()))
            if len(best) > 4 * k:  # drop what can no longer be in the top k
                best.sort(key=lambda t: -t[0])
                cut = best[k - 1][0]
                best = [t for t in best if t[0] >= cut]
        if len(best) >= k:
            return max(threshold, sorted((t[0] for t in best), reverse=True)[k - 1])
        return threshold

    threshold = update(1)
    level = 1
    while True:
        alive = counts[level - 1][node] >= threshold
        alive &= start + level < end
        start, node, weight, end = start[alive], node[alive], weight[alive], end[alive]
        if start.size == 0:
            break
        key = node * L + seqs.locations[start + level]
        span = counts[level - 1].size * L
        if span <= _DENSE_KEYS:  # a counting pass instead of a sort
            present = np.zeros(span, dtype=bool)
            present[key] = True
            uniq = np.flatnonzero(present)
            node = (np.cumsum(present) - 1)[key]
        else:
            uniq, inv = np.unique(key, return_inverse=True)
            node = inv.ravel()
        level += 1
        parents.append(uniq // L)
        symbols.append(uniq % L)
        counts.append(np.bincount(node, weights=weight, minlength=uniq.size))
        threshold = update(level)
    rows = []
    for c, lv, nd in best:
        if c < threshold:
            continue
        gram = []
        for d in range(lv, 0, -1):
            gram.append(int(symbols[d - 1][nd]))
            nd = parents[d - 1][nd]
        rows.append((gram[::-1], c))
    rows.sort(key=lambda t: (-t[1], t[0]))
    return [(tuple(g), int(round(c))) for g, c in rows[:k]]


def gram_pattern_utility(original: Sequences | WeightedSequences, released: Sequences | WeightedSequences,
                         ks: tuple[int, ...] = TOP_K) -> dict[str, float]:
    """``top{K}.tp`` (true positives among the top K grams of size > 1) and ``top{K}.loss`` per K."""
    out: dict[str, float] = {}
    if not ks:
        return out
    truth = top_k_grams(original, max(ks))
    found = top_k_grams(released, max(ks))
    for k in ks:
        t, f = dict(truth[:k]), dict(found[:k])
        out[f"top{k}.tp"] = float(len(t.keys() & f.keys()))
        out[f"top{k}.loss"] = float(np.mean([abs(s - f.get(g, 0)) / s for g, s in t.items()])) if t else 0.0
    return out
