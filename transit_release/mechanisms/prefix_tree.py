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
must have a chance to appear. The children with true count 0 are handled by the
shared :mod:`~transit_release.mechanisms.empty_candidates` sampler, which draws
*exactly* the law of testing each of them with the table's noise: which pass are
independent Bernoulli(``P̂(Z ≥ T)``) trials over all empty children of a
sub-level laid end to end, found by exact geometric gaps on the ChaCha20 stream
(``k ~ Binomial(m, P̂(Z ≥ T))`` per node, ranks uniform without replacement), and
their counts are the table's noise conditioned on ``Z ≥ T``. (The paper's
``θ + Exp`` tail is the continuous version of the same conditional law.)

Privacy slack. An empty candidate is then indistinguishable in law from a
non-empty one at count 0, so δ only covers the integer table's exact
total-variation distance ``η`` to the ideal discrete Laplace, once per noisy
count a sequence can change: one per sub-level, ``h`` (simple) or ``2h``
(hybrid), each ``(1 + e^ε')·η`` at that sub-level's ε' (:func:`delta_slack`).
Budgets whose noise scales the samplers cannot honour (ε too small or too large
for the height and fan-out) are refused when the budget is built
(:meth:`TreeBudget.of`, a :class:`~transit_release.errors.NoiseParameterError`).

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

from transit_release.errors import NoiseParameterError
from transit_release.mechanisms.empty_candidates import (candidate_total_variation, free_items,
                                                         sample_passing_empties)
from transit_release.noise import MAX_SCALE, check_scale, discrete_laplace_table, exact_fraction

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
        eps = exact_fraction(epsilon, "epsilon")
        if eps <= 0:
            raise NoiseParameterError(f"epsilon must be positive. Found {float(eps)}.")
        if variant == "hybrid":
            if taxonomy is None:
                raise ValueError("the hybrid variant needs a taxonomy (a station → line table or a fan-out)")
            if taxonomy.fanout <= 2:
                raise ValueError(f"the taxonomy's fan-out must be greater than 2. Found {float(taxonomy.fanout):g}.")
            budget = cls(eps, height, variant, taxonomy.fanout)
        else:
            budget = cls(eps, height, variant, None)
        budget.check_noise_scales()
        return budget

    def check_noise_scales(self) -> None:
        """Refuse (:class:`NoiseParameterError`, before any spend) a sub-level whose noise scale is unsupported."""
        where = f"prefix tree ({self.variant} variant, height {self.height}"
        where += f", fan-out {float(self.fanout):g})" if self.fanout is not None else ")"
        if self.variant == "hybrid":
            levels = (("generalized", self.generalized_epsilon, "h·f/(2ε)"),
                      ("station", self.station_epsilon, "h·f/((f-2)ε)"))
        else:
            levels = (("station", self.station_epsilon, "h/ε"),)
        # the largest scale bounds ε from below, the smallest from above: check those first so the
        # message's suggestion is the binding one
        smallest = max(levels, key=lambda lv: lv[1])
        largest = min(levels, key=lambda lv: lv[1])
        for name, eps, formula in (largest, smallest) if 1 / largest[1] > MAX_SCALE else (smallest, largest):
            check_scale(1 / eps, epsilon=self.epsilon, where=f"{where}, {name} nodes (scale {formula})")

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


def delta_slack(budget: TreeBudget) -> float:
    """The δ to charge for the samplers: ``h · Σ_sub-levels (1 + e^ε')·η(1/ε')``.

    One sequence changes one noisy count per sub-level (``h`` in the simple variant,
    ``2h`` in the hybrid), empty or not; each count's sampler is within total variation
    ``η`` (:func:`~transit_release.mechanisms.empty_candidates.candidate_total_variation`:
    the table's exact error; the empty-candidate sampling adds nothing) of the ideal
    discrete Laplace at its sub-level's ε', which costs ``(1 + e^ε')·η`` of δ by coupling.
    Rounded up (by a relative 1e-12, far above the float error of these few operations).
    """
    total = 0.0
    for eps in (budget.generalized_epsilon, budget.station_epsilon):
        if eps > 0:
            total += (1.0 + math.exp(float(eps))) * candidate_total_variation(1 / eps)
    return budget.height * total * (1.0 + 1e-12)


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
    if budget.variant == "hybrid":
        members = taxonomy.members()
        width = max(m.size for m in members)
        # station at each position of its group, and each station's position in its group
        member_at = np.full((taxonomy.n_groups, width), -1, dtype=np.int64)
        position = np.empty(L, dtype=np.int64)
        for g, m in enumerate(members):
            member_at[g, :m.size] = m
            position[m] = np.arange(m.size)
        group_size = np.array([m.size for m in members], dtype=np.int64)
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
            empty_groups = sample_passing_empties(generator, G - per_parent, scale_g, t_g)
            eg = free_items(empty_groups.group, empty_groups.rank, G, gkey)
            kept_group_keys = np.union1d(gkey[keep_g], empty_groups.group * G + eg)
            # non-empty stations under kept groups
            under_kept = np.isin(par * G + taxonomy.group[sta], kept_group_keys)
            cand_par, cand_sta, cand_cnt = par[under_kept], sta[under_kept], cnt[under_kept]
            # empty stations under each kept group: positions within the group not taken by a non-empty one
            kg = kept_group_keys % G
            taken = np.searchsorted(kept_group_keys, cand_par * G + taxonomy.group[cand_sta]) * width \
                + position[cand_sta]
            n_taken = np.bincount(taken // width, minlength=kept_group_keys.size)
            empty_st = sample_passing_empties(generator, group_size[kg] - n_taken, scale_ng, t_ng)
            pos = free_items(empty_st.group, empty_st.rank, width, taken)
            e_par = kept_group_keys[empty_st.group] // G
            e_sta = member_at[kg[empty_st.group], pos]
            e_cnt = empty_st.count
        else:
            cand_par, cand_sta, cand_cnt = par, sta, cnt
            per_parent = np.bincount(par, minlength=n_parents)
            empty_st = sample_passing_empties(generator, L - per_parent, scale_ng, t_ng)
            e_par, e_cnt = empty_st.group, empty_st.count
            e_sta = free_items(e_par, empty_st.rank, L, uniq)
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
