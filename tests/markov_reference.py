"""The factored Markov model's generation as it was before it was vectorised (commit 79df991), kept as the
reference the vectorised sampler is tested against (same random stream, same output) and timed against
(``benchmarks/bench_markov_generation.py``). Test code: not used by the library."""

from __future__ import annotations

import numpy as np

from transit_release.mechanisms.ngram import NGramTree, _block_rank, _level_keys, _lookup
from transit_release.mechanisms.safepath import HOURS_PER_WEEK


def reference_sample_from_tree(tree: NGramTree, starts: np.ndarray, lengths: np.ndarray, generator: np.random.Generator,
                     n_symbols: int, floor=None) -> np.ndarray:
    """Sequences drawn from the tree's variable-order Markov model (post-processing of the consistent counts).

    Row ``r`` starts with the symbol ``starts[r]`` and gets ``lengths[r]`` more symbols, each drawn from the
    consistent counts of the children of the longest suffix of the row so far (at most ``nmax − 1``
    symbols) that the tree expanded, among the symbols ``0..n_symbols−1`` only (the symbols above, e.g.
    start markers, and the end marker are never drawn). ``floor(rows, i, seq)``, if given, is the
    smallest symbol allowed at position ``i`` of each of ``rows``. Where a context holds no mass at or
    above the floor the next shorter one is used, down to the unigrams; with none at all the symbol is the
    floor itself. Returns an ``(n, 1 + max(lengths))`` array, ``-1`` past each row's end.
    """
    B = tree.budget.n_locations + 1
    levels = tree.levels
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    longest = int(lengths.max(initial=0))
    seq = np.full((starts.size, 1 + longest), -1, dtype=np.int64)
    seq[:, 0] = starts
    keys = [np.arange(levels[0].size, dtype=np.int64)] + [_level_keys(lv, B) for lv in levels[1:]]

    def cumulative(weights: np.ndarray) -> np.ndarray:  # rows of weights over the drawable symbols, summed
        w = np.maximum(np.nan_to_num(weights[:, :n_symbols].astype(float)), 0.0)
        return np.concatenate([np.zeros((w.shape[0], 1)), np.cumsum(w, axis=1)], axis=1)

    cum = [cumulative(levels[0].count[None, :])]  # m = 0: the unigrams
    for m in range(1, min(len(levels), tree.budget.max_gram)):
        cum.append(cumulative(levels[m].count.reshape(-1, B)) if levels[m].size else np.zeros((0, n_symbols + 1)))
    for i in range(1, longest + 1):
        rows = np.flatnonzero(lengths >= i)
        lo = np.zeros(rows.size, dtype=np.int64) if floor is None else np.clip(floor(rows, i, seq), 0, n_symbols)
        choice_cum = np.full(rows.size, -1, dtype=np.int64)  # which m, and which row of cum[m]
        choice_row = np.zeros(rows.size, dtype=np.int64)
        for m in range(0, min(i, len(cum) - 1) + 1):  # shortest first: longer contexts overwrite
            if m == 0:
                row = np.zeros(rows.size, dtype=np.int64)
            else:
                idx = _lookup(levels, keys, seq[rows, i - m:i], B)
                ok = idx >= 0
                ok[ok] = levels[m - 1].expanded[idx[ok]]
                row = np.full(rows.size, -1, dtype=np.int64)
                row[ok] = _block_rank(levels[m - 1])[idx[ok]]
            has = row >= 0
            mass = np.zeros(rows.size)
            mass[has] = cum[m][row[has], n_symbols] - cum[m][row[has], lo[has]]
            use = has & (mass > 0)
            choice_cum[use], choice_row[use] = m, row[use]
        out = lo.copy()
        u = generator.random(rows.size)
        for m in np.unique(choice_cum[choice_cum >= 0]).tolist():
            sel = np.flatnonzero(choice_cum == m)
            c = cum[m][choice_row[sel]]
            base = c[np.arange(sel.size), lo[sel]]
            target = base + u[sel] * (c[:, -1] - base)
            # the first symbol whose cumulative mass exceeds the target (at or above the floor)
            out[sel] = np.maximum((c[:, 1:] <= target[:, None]).sum(axis=1), lo[sel]).clip(max=n_symbols - 1)
        seq[rows, i] = out
    return seq


def reference_count_distinct(locations: np.ndarray, hours: np.ndarray, lengths: np.ndarray) -> list:
    """``(trajectory, copies)`` of the generated rows (``-1``-padded arrays), sorted by trajectory."""
    if lengths.size == 0:
        return []
    width = locations.shape[1]
    key = np.where(np.arange(width)[None, :] < lengths[:, None], locations * HOURS_PER_WEEK + hours, -1)
    uniq, copies = np.unique(key, axis=0, return_counts=True)
    out = []
    for row, c in zip(uniq.tolist(), copies.tolist()):
        traj = tuple((p // HOURS_PER_WEEK, p % HOURS_PER_WEEK) for p in row if p >= 0)
        out.append((traj, int(c)))
    return sorted(out)
