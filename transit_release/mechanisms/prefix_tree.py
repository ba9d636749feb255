"""Noisy hybrid-granularity prefix tree for sequences of stations.

Chen, Fung, Desai & Sossou, "Differentially private transit data publication"
(KDD 2012), §4 (Procedure 1 and GeneratePrivateRelease); spec
``../shared/specs/prefix_tree.md``. One record is one passenger's whole
sequence; neighbours add or remove one sequence.

Budget. ``ε̄ = ε/h`` per level. In the *hybrid* variant each level has two
sub-levels: generalized nodes (taxonomy groups, e.g. metro lines) get
``ε̄₁ = 2ε̄/f`` and station nodes ``ε̄₂ = (f−2)ε̄/f``, ``f`` the taxonomy's
fan-out (stations per group; the mean when groups differ in size). Within a
sub-level nodes hold disjoint sequences (parallel composition) and one
sequence changes one count by one (sensitivity 1), so each node's count gets
discrete Laplace noise at scale ``1/ε̄₁`` or ``1/ε̄₂``; levels and sub-levels
compose sequentially: ``h (ε̄₁ + ε̄₂) = ε`` along every root-to-leaf path. The
*simple* variant gives all of ``ε̄`` to station nodes.

Thresholds (paper §4.1): ``θ_g = 4√2/ε̄₁`` and ``θ_ng = 2√2/ε̄₂`` (``2√2/ε̄`` in
the simple variant). Noisy counts are integers, so ``c ≥ θ`` is ``c ≥ ⌈θ⌉``.

Empty candidates (Theorem 4.1, adapted to integer noise). Every possible child
must have a chance to appear. For the ``m`` children of a node with true
count 0, the number that pass is ``k ~ Binomial(m, P(Z ≥ T))``; ``k`` of them
are chosen uniformly without replacement and get ``T + G``, ``G`` geometric
with ``P(G = j) = (1 − a) a^j`` (the discrete Laplace tail is memoryless), which
is exactly the distribution of explicit per-candidate testing. ``P(Z ≥ T)``
comes from the noise table actually used; the binomial draw is NumPy's on the
ChaCha20 stream.

Deviation from the paper, and why: phase 2 of the constrained inference shares
a parent's deficit among its children as in the paper, ``c̄(u) = c̃(u) − λ``,
but never below zero (``max(0, c̃(u) − λ)`` with ``λ`` chosen so that the
children sum to the parent: water-filling). The paper's formula can make a
child negative, and then another child larger than its parent; with the floor
both consistency constraints hold for every tree (tested property). When no
child would go negative the two coincide.

Release (post-processing): in postorder, each node ``v`` emits
``round(c̄(v) − Σ_children c̄)`` copies (half to even, clamped at 0) of
``prefix(v)``: the sequences that end at ``v``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from transit_release.noise import discrete_laplace_table, exact_fraction, geometric_table

MECHANISM_NAME = "prefix_tree"
VARIANTS = ("simple", "hybrid")
# refuse a tree whose data-independent size estimate (see ``estimated_false_nodes``) exceeds this
MAX_ESTIMATED_FALSE_NODES = 5_000_000


class TreeTooLargeError(ValueError):
    """The false (empty) nodes alone would make the tree too large to build."""


@dataclass(frozen=True)
class Sequences:
    """Sequences of location ids ``0..n_locations-1`` in compressed form."""

    locations: np.ndarray  # int64, all sequences concatenated
    offsets: np.ndarray  # int64, len = n + 1
    n_locations: int

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, seqs, n_locations: int) -> "Sequences":
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64)
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((x for s in seqs for x in s), dtype=np.int64, count=int(offsets[-1]))
        if flat.size and (flat.min() < 0 or flat.max() >= n_locations):
            raise ValueError(f"locations must be in 0..{n_locations - 1}")
        return cls(flat, offsets, n_locations)

    def to_lists(self) -> list[tuple[int, ...]]:
        return [tuple(self.locations[a:b].tolist()) for a, b in zip(self.offsets[:-1], self.offsets[1:])]


@dataclass(frozen=True)
class Taxonomy:
    """A two-level location taxonomy: each location has exactly one group (e.g. its line)."""

    group: np.ndarray  # int64 per location
    n_groups: int

    @classmethod
    def from_fanout(cls, n_locations: int, fanout: int) -> "Taxonomy":
        if fanout <= 2:
            raise ValueError(f"fan-out must be greater than 2. Found {fanout}.")
        group = np.arange(n_locations, dtype=np.int64) // fanout
        return cls(group, int(group.max()) + 1 if n_locations else 0)

    @classmethod
    def from_groups(cls, group_of_location) -> "Taxonomy":
        labels, group = np.unique(np.asarray(group_of_location), return_inverse=True)
        return cls(group.astype(np.int64), labels.size)

    @property
    def fanout(self) -> Fraction:
        return Fraction(self.group.size, self.n_groups)

    def members(self) -> list[np.ndarray]:
        order = np.argsort(self.group, kind="stable")
        bounds = np.searchsorted(self.group[order], np.arange(self.n_groups + 1))
        return [order[bounds[g]:bounds[g + 1]] for g in range(self.n_groups)]


@dataclass(frozen=True)
class TreeBudget:
    """How ε is spent along every root-to-leaf path, exactly."""

    epsilon: Fraction
    height: int
    variant: str
    fanout: Fraction | None  # None for the simple variant

    @classmethod
    def of(cls, epsilon: float, height: int, variant: str, taxonomy: Taxonomy | None = None) -> "TreeBudget":
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}. Found {variant!r}.")
        if height < 1:
            raise ValueError(f"height must be at least 1. Found {height}.")
        eps = exact_fraction(epsilon)
        if eps <= 0:
            raise ValueError(f"epsilon must be positive. Found {float(eps)}.")
        if variant == "hybrid":
            if taxonomy is None:
                raise ValueError("the hybrid variant needs a taxonomy (a station → line table or a fan-out)")
            if taxonomy.fanout <= 2:
                raise ValueError(f"the taxonomy's fan-out must be greater than 2. Found {float(taxonomy.fanout):g}.")
            return cls(eps, height, variant, taxonomy.fanout)
        return cls(eps, height, variant, None)

    @property
    def level_epsilon(self) -> Fraction:
        return self.epsilon / self.height

    @property
    def generalized_epsilon(self) -> Fraction:
        return 2 * self.level_epsilon / self.fanout if self.variant == "hybrid" else Fraction(0)

    @property
    def station_epsilon(self) -> Fraction:
        if self.variant == "hybrid":
            return (self.fanout - 2) * self.level_epsilon / self.fanout
        return self.level_epsilon

    @property
    def generalized_threshold(self) -> int:
        return math.ceil(4 * math.sqrt(2) / float(self.generalized_epsilon))

    @property
    def station_threshold(self) -> int:
        return math.ceil(2 * math.sqrt(2) / float(self.station_epsilon))

    def path_spend(self) -> Fraction:
        """ε spent along any root-to-leaf path of full height (sequential composition)."""
        return self.height * (self.generalized_epsilon + self.station_epsilon)


def false_node_growth(budget: TreeBudget, n_locations: int) -> float:
    """Expected number of kept empty children of one kept empty node (Theorem 4.2 of the paper).

    Simple: ``|L| P(Z ≥ θ_ng)``; hybrid: ``Σ_groups P(Z₁ ≥ θ_g) |group| P(Z₂ ≥ θ_ng) = |L| p_g p_ng``,
    with the tails of the integer noise actually used.
    """
    p_ng = discrete_laplace_table(1 / budget.station_epsilon).upper_tail(budget.station_threshold)
    if budget.variant == "simple":
        return n_locations * p_ng
    p_g = discrete_laplace_table(1 / budget.generalized_epsilon).upper_tail(budget.generalized_threshold)
    return n_locations * p_g * p_ng


def estimated_false_nodes(budget: TreeBudget, n_locations: int) -> float:
    """A data-independent size estimate: ``|L|`` chains of empty descendants, ``Σ_{i=1..h} g^i`` each.

    Every node of the first level can start such a chain; real trees have more (every real node
    starts chains too) but the estimate tells a feasible tree from an impossible one without
    looking at the data, so refusing on it reveals nothing.
    """
    g = false_node_growth(budget, n_locations)
    chain = sum(g ** i for i in range(1, budget.height + 1))
    return n_locations * chain


def check_tree_size(budget: TreeBudget, n_locations: int) -> None:
    """Raise ``TreeTooLargeError`` before any noise is drawn if the tree could not be built."""
    estimate = estimated_false_nodes(budget, n_locations)
    if estimate > MAX_ESTIMATED_FALSE_NODES:
        raise TreeTooLargeError(
            f"the {budget.variant} variant over {n_locations} locations at height {budget.height} would grow about "
            f"{estimate:.2g} empty nodes (each kept empty node keeps on average "
            f"{false_node_growth(budget, n_locations):.3g} empty children; limit "
            f"{MAX_ESTIMATED_FALSE_NODES:,}). Use the hybrid variant, a lower height or fewer locations.")


@dataclass(frozen=True)
class Level:
    """Nodes of one level, sorted by (parent, location)."""

    parent: np.ndarray  # int64 index into the previous level (0 = the root for level 1)
    location: np.ndarray  # int64
    count: np.ndarray  # int64 noisy count


@dataclass(frozen=True)
class NoisyPrefixTree:
    levels: list[Level]
    budget: TreeBudget
    n_locations: int

    @property
    def n_nodes(self) -> int:
        return sum(lv.location.size for lv in self.levels)


def _sample_empty(generator, parents: np.ndarray, m: np.ndarray, universe, taken, threshold: int,
                  scale: Fraction, universe_size: int | None = None,
                  taken_keys: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each parent, how many of its ``m`` empty candidates pass, which ones, and their counts.

    ``universe(p)`` gives the candidate ids of parent ``p`` and ``taken(p)`` the non-empty ones.
    When every parent's universe is ``0..universe_size-1`` and ``taken_keys`` (sorted
    ``parent * universe_size + id``) is given, the choice is vectorised by rejection.
    """
    p_pass = discrete_laplace_table(scale).upper_tail(threshold)
    k = generator.binomial(m, p_pass) if m.size else np.zeros(0, dtype=np.int64)
    rows = np.flatnonzero(k)
    if rows.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    if universe_size is not None and taken_keys is not None:
        p_arr, x_arr = _choose_by_rejection(generator, parents[rows], k[rows], m[rows], universe_size, taken_keys)
    else:
        out_p, out_x = [], []
        for i in rows:
            empty = np.setdiff1d(universe(parents[i]), taken(parents[i]), assume_unique=True)
            chosen = generator.choice(empty, size=int(k[i]), replace=False)
            out_p.append(np.full(chosen.size, parents[i], dtype=np.int64))
            out_x.append(chosen.astype(np.int64))
        p_arr, x_arr = np.concatenate(out_p), np.concatenate(out_x)
    counts = threshold + geometric_table(scale).sample(generator, p_arr.size)
    return p_arr, x_arr, counts


def _choose_by_rejection(generator, parents, k, m, size: int, taken_keys: np.ndarray):
    """``k[i]`` distinct ids of ``0..size-1`` per parent, none in ``taken_keys``; uniform without replacement."""
    dense = k * 2 > m  # nearly all empty candidates pass: choose explicitly
    out_p, out_x = [], []
    for i in np.flatnonzero(dense):
        own = taken_keys[(taken_keys >= parents[i] * size) & (taken_keys < (parents[i] + 1) * size)] % size
        empty = np.setdiff1d(np.arange(size, dtype=np.int64), own, assume_unique=True)
        chosen = generator.choice(empty, size=int(k[i]), replace=False)
        out_p.append(np.full(chosen.size, parents[i], dtype=np.int64))
        out_x.append(chosen.astype(np.int64))
    sparse = ~dense
    taken_sorted = np.sort(taken_keys)
    need_p = np.repeat(parents[sparse], k[sparse])
    rounds: list[np.ndarray] = []  # accepted keys, one sorted array per round
    while need_p.size:
        keys = need_p * size + generator.integers(0, size, need_p.size)
        bad = _in_sorted(keys, taken_sorted)
        for accepted in rounds:
            bad |= _in_sorted(keys, accepted)
        # a key drawn twice in this round is accepted once; the other slot draws again
        order = np.argsort(keys, kind="stable")
        repeat = np.r_[False, keys[order][1:] == keys[order][:-1]]
        bad[order[repeat]] = True
        rounds.append(np.sort(keys[~bad]))
        need_p = need_p[bad]
    if rounds:
        accepted = np.concatenate(rounds)
        out_p.append(accepted // size)
        out_x.append(accepted % size)
    return np.concatenate(out_p), np.concatenate(out_x)


def _in_sorted(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    if sorted_keys.size == 0:
        return np.zeros(keys.size, dtype=bool)
    pos = np.searchsorted(sorted_keys, keys).clip(0, sorted_keys.size - 1)
    return sorted_keys[pos] == keys


def _group_by_parent(parent: np.ndarray, item: np.ndarray):
    """parent → sorted items, as a lookup function."""
    order = np.lexsort((item, parent))
    parent, item = parent[order], item[order]
    starts = {}
    if parent.size:
        uniq, first = np.unique(parent, return_index=True)
        ends = np.append(first[1:], parent.size)
        starts = {int(u): (int(a), int(b)) for u, a, b in zip(uniq, first, ends)}
    return lambda p: item[slice(*starts.get(int(p), (0, 0)))]


def build_noisy_prefix_tree(seqs: Sequences, budget: TreeBudget, taxonomy: Taxonomy | None,
                            generator: np.random.Generator) -> NoisyPrefixTree:
    """Procedure 1 (BuildNoisyPrefixTree), level by level, vectorised over nodes."""
    check_tree_size(budget, seqs.n_locations)
    L = seqs.n_locations
    lengths = seqs.lengths
    node = np.zeros(len(seqs), dtype=np.int64)  # each sequence's node at the previous level; root = 0
    n_parents = 1
    levels: list[Level] = []
    scale_ng = 1 / budget.station_epsilon
    t_ng = budget.station_threshold
    all_locations = np.arange(L, dtype=np.int64)
    members = taxonomy.members() if budget.variant == "hybrid" else None
    for depth in range(budget.height):
        idx = np.flatnonzero((node >= 0) & (lengths > depth))
        loc = seqs.locations[seqs.offsets[idx] + depth]
        key = node[idx] * L + loc
        uniq, cnt = np.unique(key, return_counts=True)
        par, sta = uniq // L, uniq % L
        if budget.variant == "hybrid":
            G = taxonomy.n_groups
            scale_g = 1 / budget.generalized_epsilon
            t_g = budget.generalized_threshold
            gkey, ginv = np.unique(par * G + taxonomy.group[sta], return_inverse=True)
            gcnt = np.bincount(ginv, weights=cnt).astype(np.int64)
            gpar = gkey // G
            noisy_g = gcnt + discrete_laplace_table(scale_g).sample(generator, gcnt.size)
            keep_g = noisy_g >= t_g
            per_parent = np.bincount(gpar, minlength=n_parents)
            parents = np.arange(n_parents, dtype=np.int64)
            ep, eg, _ = _sample_empty(generator, parents, G - per_parent, None, None, t_g, scale_g,
                                      universe_size=G, taken_keys=gkey)
            kept_group_keys = np.union1d(gkey[keep_g], ep * G + eg)
            # non-empty stations under kept groups
            under_kept = np.isin(par * G + taxonomy.group[sta], kept_group_keys)
            cand_par, cand_sta, cand_cnt = par[under_kept], sta[under_kept], cnt[under_kept]
            # empty stations under each kept group
            kp, kg = kept_group_keys // G, kept_group_keys % G
            nonempty_in = _group_by_parent(cand_par * G + taxonomy.group[cand_sta], cand_sta)
            sizes = np.array([members[g].size for g in kg], dtype=np.int64)
            m = sizes - np.array([nonempty_in(k).size for k in kept_group_keys], dtype=np.int64)
            e_key, e_sta, e_cnt = _sample_empty(generator, kept_group_keys, m, lambda k: members[int(k) % G],
                                                nonempty_in, t_ng, scale_ng)
            e_par = e_key // G
            del kp
        else:
            cand_par, cand_sta, cand_cnt = par, sta, cnt
            per_parent = np.bincount(par, minlength=n_parents)
            e_par, e_sta, e_cnt = _sample_empty(generator, np.arange(n_parents, dtype=np.int64), L - per_parent,
                                                lambda p: all_locations, None, t_ng, scale_ng,
                                                universe_size=L, taken_keys=uniq)
        noisy = cand_cnt + discrete_laplace_table(scale_ng).sample(generator, cand_cnt.size)
        keep = noisy >= t_ng
        new_par = np.concatenate([cand_par[keep], e_par])
        new_loc = np.concatenate([cand_sta[keep], e_sta])
        new_cnt = np.concatenate([noisy[keep], e_cnt])
        order = np.lexsort((new_loc, new_par))
        new_par, new_loc, new_cnt = new_par[order], new_loc[order], new_cnt[order]
        if new_par.size == 0:
            break
        levels.append(Level(new_par, new_loc, new_cnt))
        # move each sequence to its (kept, non-empty) child
        child_key = new_par * L + new_loc
        pos = np.searchsorted(child_key, key)
        pos = pos.clip(0, child_key.size - 1)
        hit = child_key[pos] == key
        seq_child = np.full(len(seqs), -1, dtype=np.int64)
        seq_child[idx] = np.where(hit, pos, -1)
        node = seq_child
        n_parents = new_par.size
    return NoisyPrefixTree(levels, budget, L)


def _isotonic_paths(paths: np.ndarray) -> np.ndarray:
    """Least-squares non-increasing fit of every row (root first), all rows at once.

    Uses the min-max formula of isotonic regression on the reversed (leaf-first,
    non-decreasing) rows: ``I_m = min_{j ≥ m} max_{i ≤ m} mean(y[i..j])``. Works on the
    transpose so that every reduction runs across rows (contiguous), not along a short row.
    """
    y = np.ascontiguousarray(paths[:, ::-1].T, dtype=float)  # (d, n), leaf first
    d, n = y.shape
    c = np.zeros((d + 1, n))
    np.cumsum(y, axis=0, out=c[1:])
    run_max = np.full((d, n), -np.inf)  # run_max[j] = max over i <= m of mean(y[i..j]), for j >= m
    out = np.empty((d, n))
    mean = np.empty((d, n))
    for m in range(d):
        width = (np.arange(m, d) + 1 - m).astype(float)[:, None]
        np.subtract(c[m + 1:], c[m], out=mean[m:])
        mean[m:] /= width
        np.maximum(run_max[m:], mean[m:], out=run_max[m:])
        run_max[m:].min(axis=0, out=out[m])
    return out[::-1].T


def constrained_inference(tree: NoisyPrefixTree) -> list[np.ndarray]:
    """GeneratePrivateRelease steps 1–2: consistent counts c̄ per level."""
    levels = tree.levels
    n_children = [np.bincount(levels[d + 1].parent, minlength=lv.count.size) if d + 1 < len(levels)
                  else np.zeros(lv.count.size, dtype=np.int64) for d, lv in enumerate(levels)]
    sums = [np.zeros(lv.count.size) for lv in levels]
    hits = [np.zeros(lv.count.size) for lv in levels]
    # phase 1: per root-to-leaf path, the least-squares non-increasing fit; nodes average their paths
    for d in range(len(levels)):
        leaves = np.flatnonzero(n_children[d] == 0)
        for chunk in np.array_split(leaves, max(1, leaves.size // 50_000 + 1)):
            if chunk.size == 0:
                continue
            idx = [chunk]
            for up in range(d, 0, -1):
                idx.append(levels[up].parent[idx[-1]])
            idx.reverse()  # root-first: level 0 .. d
            fit = _isotonic_paths(np.stack([levels[k].count[j] for k, j in enumerate(idx)], axis=1))
            for k, j in enumerate(idx):
                # leaves are consecutive and levels sorted by parent, so j spans a short range
                lo = int(j.min())
                span = int(j.max()) - lo + 1
                sums[k][lo:lo + span] += np.bincount(j - lo, weights=fit[:, k], minlength=span)
                hits[k][lo:lo + span] += np.bincount(j - lo, minlength=span)
    tilde = [s / np.maximum(h, 1) for s, h in zip(sums, hits)]
    # phase 2: top-down, children never exceed their parent in sum (water-filling, floor 0)
    bar = [np.maximum(tilde[0], 0.0)] if levels else []
    for d in range(1, len(levels)):
        out = np.maximum(tilde[d], 0.0)
        parent = levels[d].parent
        child_sum = np.bincount(parent, weights=out, minlength=levels[d - 1].count.size)
        over = child_sum > bar[d - 1] + 1e-9
        kids = np.flatnonzero(over[parent])
        if kids.size:
            out[kids] = _water_fill_groups(out[kids], parent[kids], bar[d - 1])
        bar.append(out)
    return bar


def _water_fill_groups(x: np.ndarray, group: np.ndarray, total: np.ndarray) -> np.ndarray:
    """``max(0, x − λ_g)`` per sibling group ``g``, with ``λ_g ≥ 0`` such that the group sums to ``total[g]``
    (called only for groups whose children sum to more than their parent).

    Michelot's active-set iteration for the projection onto a simplex, all groups at once: ``λ_g``
    is the mean excess over the group's still-active members; members at or below ``λ_g`` leave
    for good (``λ_g`` only grows). No sort; each round is a bincount, and the number of rounds is
    at most the largest sibling group (a handful in practice).
    """
    n_groups = total.size
    active = np.ones(x.size, dtype=bool)
    while True:
        size = np.bincount(group[active], minlength=n_groups)
        excess = np.bincount(group[active], weights=x[active], minlength=n_groups) - total
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = np.where(size > 0, excess / np.maximum(size, 1), np.inf)
        drop = active & (x - lam[group] <= 0)
        if not drop.any():
            break
        active &= ~drop
    return np.where(active, np.maximum(x - np.maximum(lam[group], 0.0), 0.0), 0.0)


def release_sequences(tree: NoisyPrefixTree, bar: list[np.ndarray]) -> list[tuple[tuple[int, ...], int]]:
    """GeneratePrivateRelease step 3: (prefix, copies) for every node with copies > 0, sorted by prefix."""
    levels = tree.levels
    out = []
    for d, lv in enumerate(levels):
        child_sum = (np.bincount(levels[d + 1].parent, weights=bar[d + 1], minlength=lv.count.size)
                     if d + 1 < len(levels) else np.zeros(lv.count.size))
        copies = np.maximum(np.rint(bar[d] - child_sum), 0).astype(np.int64)
        nodes = np.flatnonzero(copies)
        if nodes.size == 0:
            continue
        cols = [nodes]
        for up in range(d, 0, -1):
            cols.append(levels[up].parent[cols[-1]])
        cols.reverse()
        prefix = np.stack([levels[k].location[j] for k, j in enumerate(cols)], axis=1)
        out.extend(zip(map(tuple, prefix.tolist()), copies[nodes].tolist()))
    return sorted(out)


def sanitize_sequences(seqs: Sequences, epsilon: float, height: int, variant: str, taxonomy: Taxonomy | None,
                       generator: np.random.Generator) -> tuple[NoisyPrefixTree, list[tuple[tuple[int, ...], int]]]:
    """The whole ε-DP pipeline: noisy tree, constrained inference, release."""
    budget = TreeBudget.of(epsilon, height, variant, taxonomy)
    tree = build_noisy_prefix_tree(seqs, budget, taxonomy, generator)
    return tree, release_sequences(tree, constrained_inference(tree))
