"""Utility of a trajectory release (SafePath paper, §3.3 and §5.1).

* Count queries (Definition 3.5): a query ``q`` is a sequence of (location, hour)
  pairs; ``q(D)`` counts the trajectories of which ``q`` is a sub-trajectory
  (the pairs occur in that order, not necessarily next to each other). Relative
  error ``|q(D̂) − q(D)| / max(q(D), s)`` with the sanity bound ``s = 0.1%`` of
  ``|D|``. The paper's workload: 40,000 queries whose pairs are drawn uniformly
  from ``L × T`` (hours sorted, so that every query is a possible trajectory),
  of length ``|q|`` tied to ``h`` (``h/3`` in its Figure 5). Uniform pairs make
  most queries of length ≥ 2 empty in the raw data, so we also report a
  *non-empty* workload: random sub-trajectories of random raw trajectories.
  Evaluated with an inverted index (pair → sorted (trajectory, position)
  occurrences) and greedy earliest matching, which decides "is a subsequence"
  exactly; the released data is evaluated in its compact (trajectory, copies)
  form.
* Top-k frequent sequential patterns of (location, hour) pairs of size > 1
  (PrefixSpan, the maintained ``prefixspan`` package, via
  :func:`transit_release.utility.sequences.pattern_utility` on pair ids): TP,
  FP and false drops. Also the top-k most frequent single pairs (exact counts).

These figures compare with the raw data, so they are internal: MLflow and
reports only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transit_release.mechanisms.safepath import Trajectories, unique_counts
from transit_release.utility.sequences import SANITY_SHARE, pattern_utility

N_QUERIES = 40_000


class TrajectoryIndex:
    """Occurrences of every (location, hour) pair, for sub-trajectory counting.

    ``weights`` (default 1 each) count a trajectory that many times (a release's copies).
    """

    def __init__(self, trajs: Trajectories, weights: np.ndarray | None = None):
        n = len(trajs)
        self.n_hours = trajs.n_hours
        self.weights = np.ones(n, dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
        lengths = trajs.lengths
        self.stride = int(lengths.max()) + 1 if n else 1
        who = np.repeat(np.arange(n, dtype=np.int64), lengths)
        pos = np.arange(who.size, dtype=np.int64) - trajs.offsets[who]
        pair = trajs.locations * trajs.n_hours + trajs.hours
        order = np.argsort(pair, kind="stable")  # within a pair: by (trajectory, position)
        self.traj = who[order]
        self.keys = self.traj * self.stride + pos[order]
        n_pairs = trajs.n_locations * trajs.n_hours
        self.bounds = np.concatenate([[0], np.cumsum(np.bincount(pair, minlength=n_pairs))])
        # per pair, each trajectory's earliest occurrence (the start of every match) and the weight of the
        # trajectories holding the pair (a one-pair query's count): computed once, not once per query
        first = np.ones(self.keys.size, dtype=bool)
        first[1:] = self.traj[1:] != self.traj[:-1]
        first[self.bounds[:-1][self.bounds[:-1] < self.keys.size]] = True  # a pair's first occurrence
        sorted_pair = np.repeat(np.arange(n_pairs, dtype=np.int64), np.diff(self.bounds))  # (no gather)
        holders = sorted_pair[first]
        self.first_keys = self.keys[first]
        self.first_bounds = np.concatenate([[0], np.cumsum(np.bincount(holders, minlength=n_pairs))])
        if weights is None:
            self.single = np.diff(self.first_bounds)
        else:
            self.single = np.bincount(holders, weights=self.weights[self.traj[first]],
                                      minlength=n_pairs).astype(np.int64)

    def count(self, query_pairs: np.ndarray) -> int:
        """Σ weights of the trajectories containing ``query_pairs`` (pair ids) in order."""
        p = int(query_pairs[0])
        if len(query_pairs) == 1:
            return int(self.single[p])
        cur = self.first_keys[self.first_bounds[p]:self.first_bounds[p + 1]]  # earliest match of the prefix so far
        cur_traj = cur // self.stride
        for p in query_pairs[1:]:
            lo, hi = self.bounds[p], self.bounds[p + 1]
            if lo == hi or cur.size == 0:
                return 0
            occ = self.keys[lo:hi]
            at = np.searchsorted(occ, cur, side="right")  # the next occurrence after the current match
            ok = at < occ.size
            at = np.minimum(at, occ.size - 1)
            ok &= self.traj[lo:hi][at] == cur_traj  # in the same trajectory
            cur, cur_traj = occ[at][ok], cur_traj[ok]
        return int(self.weights[cur_traj].sum())

    def counts(self, queries: list[np.ndarray]) -> np.ndarray:
        if queries and all(len(q) == 1 for q in queries):  # one pair each: looked up at once
            return self.single[np.fromiter((q[0] for q in queries), dtype=np.int64, count=len(queries))]
        return np.fromiter((self.count(q) for q in queries), dtype=np.int64, count=len(queries))


@dataclass(frozen=True)
class QueryWorkload:
    """Queries (arrays of pair ids) grouped by length."""

    by_length: dict[int, list[np.ndarray]]
    kind: str  # "uniform" or "non-empty"


def uniform_workload(n_locations: int, n_hours: int, max_length: int, n_queries: int = N_QUERIES,
                     seed: int = 0) -> QueryWorkload:
    """The paper's workload: pairs uniform from ``L × T`` (hours sorted), equal shares of lengths ``1..max_length``."""
    rng = np.random.default_rng(seed)
    max_length = max(1, int(max_length))
    per = n_queries // max_length
    out = {}
    for k in range(1, max_length + 1):
        loc = rng.integers(0, n_locations, (per, k))
        hr = np.sort(rng.integers(0, n_hours, (per, k)), axis=1)
        out[k] = list(loc * n_hours + hr)
    return QueryWorkload(out, "uniform")


def nonempty_workload(trajs: Trajectories, max_length: int, n_queries: int = N_QUERIES,
                      seed: int = 0) -> QueryWorkload:
    """Random sub-trajectories (pairs in order) of random trajectories at least ``k`` long."""
    rng = np.random.default_rng(seed)
    max_length = max(1, int(max_length))
    per = n_queries // max_length
    pairs = trajs.locations * trajs.n_hours + trajs.hours
    lengths = trajs.lengths
    out = {}
    for k in range(1, max_length + 1):
        pool = np.flatnonzero(lengths >= k)
        if pool.size == 0:
            continue
        who = rng.choice(pool, per)
        # k sorted distinct positions in each chosen trajectory
        keys = rng.random((per, int(lengths[who].max())))
        keys[np.arange(keys.shape[1])[None, :] >= lengths[who][:, None]] = 2.0
        pos = np.sort(np.argsort(keys, axis=1)[:, :k], axis=1)
        out[k] = list(pairs[trajs.offsets[who][:, None] + pos])
    return QueryWorkload(out, "non-empty")


def relative_errors(true: np.ndarray, released: np.ndarray, n_trajectories: int) -> np.ndarray:
    bound = max(SANITY_SHARE * n_trajectories, 1e-12)
    return np.abs(released - true) / np.maximum(true, bound)


def release_index(release: list, n_locations: int, n_hours: int) -> TrajectoryIndex:
    """The index of a release in its (trajectory, copies) form."""
    trajs = Trajectories.from_lists([t for t, _ in release], n_locations, n_hours)
    return TrajectoryIndex(trajs, np.array([c for _, c in release], dtype=np.int64))


def count_query_error(original: Trajectories, released: TrajectoryIndex, workload: QueryWorkload,
                      original_index: TrajectoryIndex | None = None) -> dict[str, float]:
    """Mean relative error per query length and over all (``{kind}.q{k}``, ``{kind}.mean``)."""
    a = original_index or TrajectoryIndex(original)
    out, errs = {}, []
    for k, queries in workload.by_length.items():
        e = relative_errors(a.counts(queries), released.counts(queries), len(original))
        out[f"{workload.kind}.q{k}"] = float(e.mean())
        errs.append(e)
    out[f"{workload.kind}.mean"] = float(np.concatenate(errs).mean()) if errs else float("nan")
    return out


def top_pairs(trajs: Trajectories, k: int, weights: np.ndarray | None = None) -> set[int]:
    """The ``k`` (location, hour) pairs that the most trajectories contain (ties by pair id)."""
    n = len(trajs)
    who = np.repeat(np.arange(n), trajs.lengths)
    pair = trajs.locations * trajs.n_hours + trajs.hours
    key, _ = unique_counts(who * (trajs.n_locations * trajs.n_hours) + pair)  # each pair once per trajectory
    w = np.ones(n, dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
    support = np.bincount(key % (trajs.n_locations * trajs.n_hours),
                          weights=w[key // (trajs.n_locations * trajs.n_hours)],
                          minlength=trajs.n_locations * trajs.n_hours)
    order = np.lexsort((np.arange(support.size), -support))
    top = order[:k]
    return {int(p) for p in top[support[top] > 0]}


def top_pair_utility(original: Trajectories, released: list, ks=(100, 200, 300)) -> dict[str, int]:
    rel = Trajectories.from_lists([t for t, _ in released], original.n_locations, original.n_hours)
    w = np.array([c for _, c in released], dtype=np.int64)
    out = {}
    for k in ks:
        truth, found = top_pairs(original, k), top_pairs(rel, k, w)
        out[f"pairs.top{k}.tp"] = len(truth & found)
        out[f"pairs.top{k}.fp"] = len(found - truth)
    return out


def trajectory_pattern_utility(original: Trajectories, released_trajs: Trajectories, ks=(100, 200, 300)
                               ) -> dict[str, int]:
    """Top-k frequent sequential patterns of size > 1 over pair ids (PrefixSpan)."""
    return {f"patterns.{k}": v for k, v in pattern_utility(original.pairs(), released_trajs.pairs(), ks=ks).items()}


# ---- frequent points and ordered pairs, lengths, surviving records ---------------------------------------------

def truncated(trajs: Trajectories, height: int) -> Trajectories:
    """What a release of height ``height`` can hold (:meth:`Trajectories.truncated`)."""
    return trajs.truncated(height)


def top_points(trajs: Trajectories, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` (location, hour) points the most trajectories contain, as pair ids, and their supports
    (descending; ties by pair id)."""
    n_pairs = trajs.n_locations * trajs.n_hours
    who = np.repeat(np.arange(len(trajs), dtype=np.int64), trajs.lengths)
    key, _ = unique_counts(who * n_pairs + trajs.locations * trajs.n_hours + trajs.hours)
    support = np.bincount(key % n_pairs, minlength=n_pairs)
    order = np.lexsort((np.arange(n_pairs), -support))[:k]
    order = order[support[order] > 0]
    return order, support[order]


def top_ordered_pairs(trajs: Trajectories, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` ordered pairs of points ``(a, b)`` (``a`` before ``b``, not necessarily next to it) that the
    most trajectories contain, as an ``(n, 2)`` array of pair ids, and their supports (ties by ids)."""
    n_pairs = trajs.n_locations * trajs.n_hours
    point = trajs.locations * trajs.n_hours + trajs.hours
    lengths = trajs.lengths
    keys = []
    for length in np.unique(lengths[lengths >= 2]).tolist():
        rows = np.flatnonzero(lengths == length)
        i, j = np.triu_indices(length, 1)
        base = trajs.offsets[rows][:, None]
        pair = np.sort(point[base + i] * n_pairs + point[base + j], axis=1)  # (rows, pairs), each row sorted
        once = np.ones(pair.shape, dtype=bool)
        once[:, 1:] = pair[:, 1:] != pair[:, :-1]
        keys.append(pair[once])  # each pair once per trajectory
    if not keys:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
    pair, support = unique_counts(np.concatenate(keys))
    order = np.lexsort((pair, -support))[:k]
    return np.stack([pair[order] // n_pairs, pair[order] % n_pairs], axis=1), support[order]


def frequent_queries(original: Trajectories, released: TrajectoryIndex, k: int = 100) -> dict[str, np.ndarray]:
    """True and released counts of the ``k`` most frequent points and ordered pairs of ``original``
    (``{points,ordered_pairs}.{true,released}``; a query counts the trajectories containing it)."""
    points, p_support = top_points(original, k)
    pairs, q_support = top_ordered_pairs(original, k)
    return {"points.true": p_support, "points.released": released.counts([np.array([p]) for p in points]),
            "ordered_pairs.true": q_support, "ordered_pairs.released": released.counts(list(pairs))}


def length_shares(lengths: np.ndarray, weights: np.ndarray | None = None, height: int | None = None) -> np.ndarray:
    """Share of trajectories of each length ``0..height`` (``height``: the longest length, default the data's)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    top = int(lengths.max(initial=0)) if height is None else int(height)
    counts = np.bincount(np.minimum(lengths, top), weights=weights, minlength=top + 1)[:top + 1].astype(float)
    total = counts.sum()
    return counts / total if total else counts


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    size = max(p.size, q.size)
    return float(0.5 * np.abs(np.pad(p, (0, size - p.size)) - np.pad(q, (0, size - q.size))).sum())


def share_released(original: Trajectories, release: list) -> float:
    """Share of the trajectories of ``original`` whose exact trajectory appears in the release."""
    if len(original) == 0:
        return 0.0
    kept = [t for t, c in release if c > 0]
    if not kept:
        return 0.0
    ours, theirs = _rows(original), _rows(Trajectories.from_lists(kept, original.n_locations, original.n_hours))
    width = max(ours.shape[1], theirs.shape[1])
    ours, theirs = (np.pad(m, ((0, 0), (0, width - m.shape[1])), constant_values=-1) for m in (ours, theirs))
    as_bytes = np.dtype((np.void, 8 * width))  # a whole trajectory as one value: exact comparison
    return int(np.isin(ours.view(as_bytes).ravel(), theirs.view(as_bytes).ravel()).sum()) / len(original)


def _rows(trajs: Trajectories) -> np.ndarray:
    """Each trajectory as a row of its pair ids (location·n_hours + hour), padded with -1."""
    lengths = trajs.lengths
    out = np.full((len(trajs), max(int(lengths.max(initial=0)), 1)), -1, dtype=np.int64)
    who = np.repeat(np.arange(len(trajs), dtype=np.int64), lengths)
    out[who, np.arange(who.size, dtype=np.int64) - trajs.offsets[who]] = trajs.locations * trajs.n_hours + trajs.hours
    return out
