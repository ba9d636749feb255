"""Utility of a sequence release (KDD 2012 paper, §3.3).

* Count queries: ``Q(D) = |{S ∈ D : 𝕃 ⊆ set(S)}|`` (order ignored); relative
  error ``|Q(D̃) − Q(D)| / max(Q(D), s)`` with sanity bound ``s = 0.1%`` of
  ``|D|``. The workload has subsets ``i = 1..n_subsets`` of queries with sizes
  uniform in ``[1, i·h/n_subsets]`` and locations uniform from ``L``.
  Evaluated by :func:`containment_counts` (every distinct location set walks the
  trie of the sorted queries; tested equal to the bitset count :func:`count_queries`).
* Frequent sequential patterns of size > 1, PrefixSpan's definition (support =
  number of sequences containing the pattern as a subsequence, not necessarily
  contiguous): ``TP = |F_k(D) ∩ F_k(D̃)|``, ``FP = |F_k(D̃) − F_k(D)|`` (equal to
  the false drops FD, since both sets have ``k`` elements). Mined by
  :func:`top_k_subsequence_patterns`, a vectorised best-first PrefixSpan over
  the distinct sequences with their multiplicities; it is tested equal to the
  maintained ``prefixspan`` package on small data (the package's pure-Python
  projections took 20–30 s per top-k on a million sequences; this takes 1–3 s).
  Ties at the k-th support are broken by the pattern (ascending), so the
  result is deterministic.

These figures compare with the raw data, so they are internal: MLflow and
reports only.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from transit_release.mechanisms.prefix_tree import Sequences

SANITY_SHARE = 0.001


@dataclass(frozen=True)
class WeightedSequences:
    """Distinct sequences with their multiplicities (a released ``(sequence, copies)`` list, or raw data)."""

    seqs: Sequences
    weights: np.ndarray  # int64 copies of each sequence

    @property
    def total(self) -> int:
        """Number of sequences counted with multiplicity."""
        return int(self.weights.sum())

    @classmethod
    def from_release(cls, release: list[tuple[tuple[int, ...], int]], n_locations: int) -> "WeightedSequences":
        kept = [(s, c) for s, c in release if c > 0]
        return cls(Sequences.from_lists([s for s, _ in kept], n_locations),
                   np.fromiter((c for _, c in kept), dtype=np.int64, count=len(kept)))

    @classmethod
    def of(cls, seqs: Sequences, weights: np.ndarray | None = None) -> "WeightedSequences":
        """``seqs`` (each with ``weights``, default 1) with repeated sequences merged, their weights summed.

        Only sequences short enough for one integer key per sequence (about ten locations) are
        merged; longer ones are rare and nearly all distinct, and stay one by one.
        """
        lengths = seqs.lengths
        weights = np.ones(len(seqs), dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
        parts_loc, parts_len, parts_w = [], [], []
        bits = np.log2(max(seqs.n_locations, 2))
        for n in np.unique(lengths).tolist():
            idx = np.flatnonzero(lengths == n)
            rows = seqs.locations[seqs.offsets[idx][:, None] + np.arange(n)]
            if n * bits < 62:  # one integer key per row: a fast sort
                key = np.zeros(idx.size, dtype=np.int64)
                for j in range(n):
                    key = key * seqs.n_locations + rows[:, j]
                _, first, inv = np.unique(key, return_index=True, return_inverse=True)
                rows, w = rows[first], np.bincount(inv.ravel(), weights=weights[idx]).astype(np.int64)
            else:
                w = weights[idx]
            parts_loc.append(rows.ravel())
            parts_len.append(np.full(rows.shape[0], n, dtype=np.int64))
            parts_w.append(w)
        if not parts_len:
            return cls(seqs, np.zeros(0, dtype=np.int64))
        lens = np.concatenate(parts_len)
        offsets = np.zeros(lens.size + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return cls(Sequences(np.concatenate(parts_loc).astype(np.int64), offsets, seqs.n_locations),
                   np.concatenate(parts_w))

    def location_sets(self) -> "WeightedSequences":
        """Each sequence's distinct locations in ascending order, equal sets merged."""
        return WeightedSequences.of(self.location_sets_unmerged(), self.weights)

    def location_sets_unmerged(self) -> Sequences:
        seqs = self.seqs
        L = max(seqs.n_locations, 1)
        who = np.repeat(np.arange(len(seqs), dtype=np.int64), seqs.lengths)
        key = np.sort(who * L + seqs.locations)
        key = key[np.r_[True, key[1:] != key[:-1]]] if key.size else key
        lengths = np.bincount(key // L, minlength=len(seqs))
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return Sequences(key % L, offsets, seqs.n_locations)

    def expand(self) -> Sequences:
        """Every sequence repeated by its weight."""
        idx = np.repeat(np.arange(len(self.seqs), dtype=np.int64), self.weights)
        lengths = self.seqs.lengths[idx]
        offsets = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        rank = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
        locs = self.seqs.locations[np.repeat(self.seqs.offsets[idx], lengths) + rank]
        return Sequences(locs, offsets, self.seqs.n_locations)


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


class QueryTrie:
    """Many queries (rows of a :class:`Sequences`) as a trie, for answering them all in one pass over data.

    Depth ``d`` holds the distinct query prefixes of length ``d + 1``; :meth:`step` maps
    (node at depth ``d − 1``, location) to the node at depth ``d`` (-1 if no query continues so).
    """

    _DENSE = 1 << 22  # lookup tables up to this size; sorted keys and a binary search beyond

    def __init__(self, queries: Sequences, n_locations: int):
        self.L = max(int(n_locations), 1)
        self.lengths = queries.lengths
        n_q = self.lengths.size
        self.final = np.full(n_q, -1, dtype=np.int64)  # each query's node at depth length − 1
        self.keys: list[np.ndarray] = []
        self.tables: list[np.ndarray | None] = []
        node = np.zeros(n_q, dtype=np.int64)
        n_parents = 1
        for depth in range(int(self.lengths.max()) if n_q else 0):
            live = np.flatnonzero(self.lengths > depth)
            key = node[live] * self.L + queries.locations[queries.offsets[live] + depth]
            uniq, inv = np.unique(key, return_inverse=True)
            self.keys.append(uniq)
            table = None
            if n_parents * self.L <= self._DENSE:
                table = np.full(n_parents * self.L, -1, dtype=np.int64)
                table[uniq] = np.arange(uniq.size)
            self.tables.append(table)
            node[live] = inv.ravel()
            ends = live[self.lengths[live] == depth + 1]
            self.final[ends] = node[ends]
            n_parents = uniq.size

    @property
    def depth(self) -> int:
        return len(self.keys)

    def size(self, depth: int) -> int:
        return int(self.keys[depth].size)

    def step(self, depth: int, node: np.ndarray, location: np.ndarray) -> np.ndarray:
        key = node * self.L + location
        if self.tables[depth] is not None:
            return self.tables[depth][key]
        kk = self.keys[depth]
        pos = np.searchsorted(kk, key).clip(0, kk.size - 1)
        return np.where(kk[pos] == key, pos, -1)

    def answers(self, counts: list[np.ndarray]) -> np.ndarray:
        """Each query's count from the per-depth counts of the nodes (depths not reached count 0)."""
        out = np.zeros(self.lengths.size, dtype=np.int64)
        for depth, c in enumerate(counts):
            sel = self.lengths == depth + 1
            out[sel] = np.rint(c[self.final[sel]]).astype(np.int64)
        return out


def _sorted_sets(queries: list[np.ndarray] | Sequences, n_locations: int) -> Sequences:
    """Each query as its distinct locations in ascending order."""
    if not isinstance(queries, Sequences):
        queries = Sequences.from_lists([np.asarray(q).tolist() for q in queries], n_locations)
    return WeightedSequences(queries, np.ones(len(queries), dtype=np.int64)).location_sets_unmerged()


def containment_counts(data: Sequences | WeightedSequences, queries: list[np.ndarray] | Sequences) -> np.ndarray:
    """Number of sequences (weighted by copies) whose locations include every location of each query.

    The same answers as :func:`count_queries` on bitsets, in one pass: every distinct location
    set walks the trie of the sorted queries, each step to any larger location of the set.
    """
    w = data if isinstance(data, WeightedSequences) else WeightedSequences(data, np.ones(len(data), dtype=np.int64))
    L = w.seqs.n_locations
    trie = QueryTrie(_sorted_sets(queries, L), L)
    if trie.depth == 0:
        return np.zeros(0, dtype=np.int64)
    sets = w.location_sets()
    counts = [np.zeros(trie.size(d)) for d in range(trie.depth)]
    lengths = sets.seqs.lengths
    # chunks of sets with a bounded number of location pairs (long sets expand quadratically)
    cost = np.cumsum(lengths * lengths)
    bounds = np.searchsorted(cost, np.arange(0, int(cost[-1]) if cost.size else 0, _CHUNK_PAIRS), side="right")
    bounds = np.unique(np.r_[0, bounds, lengths.size])
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        _walk_sets(trie, sets, int(lo), int(hi), counts)
    return trie.answers(counts)


_CHUNK_PAIRS = 20_000_000


def _walk_sets(trie: QueryTrie, sets: WeightedSequences, lo: int, hi: int, counts: list[np.ndarray]) -> None:
    offsets = sets.seqs.offsets
    loc = sets.seqs.locations
    lengths = sets.seqs.lengths[lo:hi]
    seq_of = np.repeat(np.arange(lo, hi, dtype=np.int64), lengths)
    pos = np.arange(offsets[lo], offsets[hi], dtype=np.int64)
    end = np.repeat(offsets[lo + 1:hi + 1], lengths)
    node = np.zeros(pos.size, dtype=np.int64)
    for depth in range(trie.depth):
        if depth:  # extend every partial match by any later (larger) location of its set
            span = end - pos - 1
            total = int(span.sum())
            if total == 0:
                break
            rep = np.repeat(np.arange(pos.size, dtype=np.int64), span)
            within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(span) - span, span)
            pos = np.repeat(pos + 1, span) + within
            node, end, seq_of = node[rep], end[rep], seq_of[rep]
        node = trie.step(depth, node, loc[pos])
        hit = node >= 0
        pos, node, end, seq_of = pos[hit], node[hit], end[hit], seq_of[hit]
        counts[depth] += np.bincount(node, weights=sets.weights[seq_of], minlength=counts[depth].size)
        if pos.size == 0:
            break


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


def count_query_error(original: Sequences | WeightedSequences, released: Sequences | WeightedSequences,
                      workload: Workload) -> dict[str, float]:
    """Mean relative error per subset (keyed by its largest query size)."""
    n = original.total if isinstance(original, WeightedSequences) else len(original)
    every = sum(workload.subsets, [])
    err = relative_errors(containment_counts(original, every), containment_counts(released, every), n)
    out, lo = {}, 0
    for size, queries in zip(workload.max_sizes, workload.subsets):
        out[f"max_q{size}"] = float(err[lo:lo + len(queries)].mean())
        lo += len(queries)
    return out


class _Positions:
    """Per position of the flattened sequences: its sequence, the sequence's end, the previous same item."""

    def __init__(self, seqs: Sequences):
        n = len(seqs)
        lengths = seqs.lengths
        self.loc = seqs.locations
        self.seq = np.repeat(np.arange(n, dtype=np.int64), lengths)
        self.end = np.repeat(seqs.offsets[1:], lengths)
        # previous position of the same location in the same sequence (-1 if none)
        order = np.argsort(self.seq * max(seqs.n_locations, 1) + self.loc, kind="stable")
        key = self.seq[order] * max(seqs.n_locations, 1) + self.loc[order]
        prev = np.full(self.loc.size, -1, dtype=np.int64)
        same = key[1:] == key[:-1]
        prev[order[1:][same]] = order[:-1][same]
        self.prev_same = prev


def _extend(pos: _Positions, weights: np.ndarray, ends: np.ndarray, n_items: int, threshold: float):
    """Supports of the one-item extensions of a pattern whose earliest embeddings end at ``ends``.

    An extension's earliest embedding ends at the first occurrence of its item after the
    pattern's. Returns the support per item and, for the items with support ≥ ``threshold``,
    their embeddings' end positions.
    """
    span = pos.end[ends] - ends - 1
    total = int(span.sum())
    if total == 0:
        return np.zeros(n_items), {}
    base = np.repeat(ends, span)
    q = base + 1 + (np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(span) - span, span))
    first = pos.prev_same[q] <= base
    q = q[first]
    item = pos.loc[q]
    support = np.bincount(item, weights=weights[pos.seq[q]], minlength=n_items)
    chosen = np.flatnonzero(support >= threshold)
    if chosen.size == 0:
        return support, {}
    keep = np.zeros(n_items, dtype=bool)
    keep[chosen] = True
    sel = keep[item]
    q, item = q[sel], item[sel]
    order = np.argsort(item, kind="stable")
    bounds = np.searchsorted(item[order], np.r_[chosen, chosen[-1] + 1])
    q = q[order]
    return support, {x: q[bounds[i]:bounds[i + 1]] for i, x in enumerate(chosen.tolist())}


def top_k_subsequence_patterns(data: Sequences | WeightedSequences, k: int,
                               min_size: int = 2) -> list[tuple[tuple[int, ...], int]]:
    """The ``k`` patterns of at least ``min_size`` items with the largest PrefixSpan support, with it.

    Best-first search over the pattern tree (supports only shrink along it), each node's
    projection kept as the end positions of the earliest embedding per sequence; ties at the
    k-th support broken by the pattern, ascending.

    The queue pops nodes of equal support in ascending pattern order, and a node's extensions
    sort after it: once the k best found are full and the next node has the k-th support and a
    pattern after the k-th best's, nothing left to find can enter the k best, and the search
    stops. (Expanding every node tied at the k-th support instead enumerated every pattern of a
    sparse data set, where the k-th support is 1: 727,000 extensions of 3,400 trajectories.)
    """
    w = data if isinstance(data, WeightedSequences) else WeightedSequences.of(data)
    seqs, weights = w.seqs, w.weights.astype(float)
    L = seqs.n_locations
    if k <= 0 or seqs.locations.size == 0:
        return []
    pos = _Positions(seqs)
    found: list[tuple[float, _Descending]] = []  # the best k found, the k-th (the worst) first
    best: list[tuple[int, tuple[int, ...]]] = []
    queue: list[tuple[float, tuple[int, ...], np.ndarray]] = []

    def threshold() -> float:
        return found[0][0] if len(found) >= k else 1.0

    def more_to_find() -> bool:
        """Whether the queue's next node, or a pattern below it, can still enter the k best."""
        support, pattern = -queue[0][0], queue[0][1]
        if support != threshold() or len(found) < k:
            return support >= threshold()
        return pattern < found[0][1].pattern

    # size-1 patterns: the first occurrence of each item in each sequence
    firsts = np.flatnonzero(pos.prev_same < 0)
    item = pos.loc[firsts]
    support = np.bincount(item, weights=weights[pos.seq[firsts]], minlength=L)
    order = np.argsort(item, kind="stable")
    bounds = np.searchsorted(item[order], np.arange(L + 1))
    for x in np.flatnonzero(support > 0).tolist():
        pattern = (x,)
        if min_size <= 1:
            best.append((support[x], pattern))
            _push_found(found, k, support[x], pattern)
        heapq.heappush(queue, (-support[x], pattern, firsts[order[bounds[x]:bounds[x + 1]]]))
    while queue and more_to_find():
        neg, pattern, ends = heapq.heappop(queue)
        t = threshold()
        sup, proj = _extend(pos, weights, ends, L, t)
        for x, child_ends in proj.items():
            child = pattern + (x,)
            if len(child) >= min_size:
                best.append((sup[x], child))
                _push_found(found, k, sup[x], child)
            heapq.heappush(queue, (-sup[x], child, child_ends))
    best.sort(key=lambda t: (-t[0], t[1]))
    return [(p, int(round(s))) for s, p in best[:k]]


class _Descending:
    """A pattern that sorts in descending order: in a min-heap of (support, pattern), the worst of the k best
    (the lowest support, and of those the pattern that sorts last) comes first."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: tuple[int, ...]):
        self.pattern = pattern

    def __lt__(self, other: _Descending) -> bool:
        return self.pattern > other.pattern

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.pattern == other.pattern


def _push_found(found: list, k: int, support: float, pattern: tuple[int, ...]) -> None:
    """Keep the ``k`` best patterns seen by (support descending, pattern ascending), the worst first."""
    item = (support, _Descending(pattern))
    if len(found) < k:
        heapq.heappush(found, item)
    elif found[0] < item:
        heapq.heapreplace(found, item)


def top_k_patterns(seqs: Sequences | WeightedSequences, k: int) -> set[tuple[int, ...]]:
    """The ``k`` most frequent sequential patterns of size > 1 (PrefixSpan support)."""
    return {p for p, _ in top_k_subsequence_patterns(seqs, k)}


def pattern_utility(original: Sequences | WeightedSequences, released: Sequences | WeightedSequences,
                    ks=(100, 200, 300)) -> dict[str, int]:
    out = {}
    if not ks:
        return out
    truth_all = [p for p, _ in top_k_subsequence_patterns(original, max(ks))]
    found_all = [p for p, _ in top_k_subsequence_patterns(released, max(ks))]
    for k in ks:
        truth, found = set(truth_all[:k]), set(found_all[:k])
        out[f"top{k}.tp"] = len(truth & found)
        out[f"top{k}.fp"] = len(found - truth)
        out[f"top{k}.fd"] = len(truth - found)
    return out


def expand_release(release: list[tuple[tuple[int, ...], int]], n_locations: int) -> Sequences:
    """The released (prefix, copies) pairs as a data set of sequences."""
    return Sequences.from_lists([p for p, c in release for _ in range(c)], n_locations)
