"""Variable-length n-gram sanitizer for sequences of locations.

Chen, Ács & Castelluccia, "Differentially private sequential data publication
via variable-length n-grams" (CCS 2012) = Rui Chen's thesis §6.4 (Algorithm
6.3); spec ``../shared/specs/ngram.md``. One record is one passenger's whole
sequence; neighbours add or remove one sequence. ε-DP (δ only for the integer
noise table's exact total variation, see :func:`noise_delta`).

Counts. Each sequence keeps its first ``ℓmax`` locations and gets the end
marker ``&`` appended. ``|g|`` is the number of contiguous occurrences of the
gram ``g`` *with multiplicity* (thesis Table 6.2: ``L2 L3`` counts 6);
``|g&|`` the number of sequences ending with ``g``, so the children of a gram
sum to its count. The root has the ``|L|`` unigrams as children and no ``&``
child (its count would be ``|D|`` and one more chain per record).

Exploration tree. Every child ``u ∈ L ∪ {&}`` of an expanded node ``v`` gets
``|g(u)| + Z``, ``Z`` integer discrete Laplace noise at scale ``ℓmax/ε_v``
(explicit draws: ``|L| + 1`` per expanded node). ``u`` passes if its count is at
least ``θ_u = ℓmax·ln(|L|/2)/ε_v``, ``ε_v`` the budget that *produced* ``u``'s
count (integer counts: ``c ≥ ⌈θ_u⌉``); ``&`` nodes are never expanded.

Privacy. A record ``x1..xℓ&`` (``ℓ ≤ ℓmax``) adds one to every node of the
chains ``π_k = x_k, x_k x_{k+1}, …`` for ``k = 1..ℓ`` (at most ``nmax`` nodes
each), so its loss is at most ``Σ_k Σ_{u∈π_k} ε_parent(u)/ℓmax ≤ ℓ·ε/ℓmax ≤ ε``
provided every root-to-leaf path spends at most ``ε`` — which the clamps below
guarantee exactly (``Fraction`` arithmetic, tested). The scale is ``ℓmax/ε_v`` at
every level, as the thesis says (the per-level ``ℓmax − i + 1`` of its text would
ignore ``&``).

Adaptive budget (thesis §6.4.1; applied from level 1 on, as in Example 6.4.2,
although the text says ``i ≥ 2``). Level-1 counts use ``ε/nmax``. An expanded
node ``v`` at level ``i`` with remaining budget ``ε̄_v = ε − (spent along its
path, its own count included)`` gives its children ``ε_v = ε̄_v / h_v`` with

    h_v = clamp(⌈log_{p_max}(θ_v / c(v))⌉, 1, nmax − i),

``θ_v`` the threshold that tested ``c(v)``, ``p_max = max_x P̃(x | g(v))`` from the
noisy counts (negative ones taken as 0) of the children of the *Markov context*:
the longest proper suffix of ``g(v)`` that has been expanded (level-1 nodes and
nodes without one use the unigrams). The raw formula gives ``h < 1`` when
``c·p_max < θ``, ``0`` at ``c = θ`` and is undefined for ``p_max ∈ {0, 1}``: we take
the ceiling and clamp to ``[1, nmax − i]``; ``p_max = 1`` gives ``nmax − i``,
``p_max = 0`` (all context children ≤ 0) gives ``1``. With ``h_v = 1`` nothing is
left: ``v``'s children are leaves even if they pass. Hence every root-to-leaf
path spends ``≤ ε``, and exactly ``ε`` when it reaches level ``nmax``.

Consistency (post-processing, top-down, thesis §6.4.1 "Enforcing consistency
constraints"). For the children ``V`` of an expanded node ``v`` (consistent count
``c(v)``), ``A`` the raw noisy counts, ``V⁺`` those that passed, ``V⁻`` the rest:
1. ``V⁺ = ∅``: every child gets 0.
2. ``v`` has a non-empty Markov context (so each ``u``'s Markov parent ``C(u)``
   is at level ≥ 2): the missing children share the parent's rest
   ``R = max(c(v) − Σ_{V⁺} A, 0)`` in proportion to their Markov parents,
   ``A(u) = R·c(C(u)) / Σ_{w∈V⁻} c(C(w))`` (the context's children's consistent
   counts). If that denominator is 0 we fall back to case 3.
3. Otherwise ``A(u) = (c(v) − Σ_{V⁺} A)/|V⁻|`` if that is ≥ 0, else 0.
4. ``c(u) = c(v)·A(u) / Σ_V A``.
The root's children are not renormalised (the root has no count): a unigram
keeps its raw noisy count, negative ones set to 0.

Case 2 departs from the thesis, which sets the *total* of the missing children
from the context too: ``A(u) = r_u·Σ_{V⁺} A``, ``r_u = c(C(u)) / Σ_{w∈V⁺} c(C(w))``
(``enforce_consistency(..., missing="thesis")`` keeps it for experiments). Where
the next location depends on more than the context (a commuter's ``H W H`` is
followed by ``W`` far more often than ``W H`` alone suggests), the context puts
far more mass on the missing children than they have, and step 4 then shrinks
the children that passed — the true, large ones — compounding level by level:
on the synthetic metro at ε = 1 the thesis rule publishes ``0 24 0 24`` at 4,932
for a true 11,767 (noisy count 11,803), and the synthetic database finds only
83–84 of the true top-100 grams (95–97 with the rest). The parent's rest is the better estimate of the
missing total (its noise is that of ``|V⁺| + 1`` counts) and leaves the passing
children at their noisy counts whenever they fit under the parent. Both are
post-processing of the noisy counts: the privacy guarantee is unchanged.

Synthetic database (thesis "Synthetic sequential database construction";
the thesis leaves rounding and negative residuals open, choices below).
Grams ending in ``&`` take part only through the transition probabilities.
1. Joins. For ``n = 2..ℓmax−1``, every *leaf* ``g1`` of level ``n`` (a gram
   without children: the tree's own leaves at every level, then the joined
   grams) joins every level-``n`` gram ``g2`` with ``g2[1..n−1] = g1[2..n]``:
   ``c(g1⋈g2) = c(g1)·c(g2)/c(g2[1..n−1])``. Counts stay fractional; a joined
   gram under ½ is dropped (it, and everything joined from it, would round to
   no copy since a child never exceeds its parent). Stop at ``ℓmax``.
   The thesis joins only the grams of level ``h`` (the tree's height);
   ``synthetic_database(..., joins="thesis")`` keeps that for experiments. Its
   shorter leaves — grams whose path ran out of budget, e.g. ``25 2 25`` at level
   3 — are then peeled as whole sequences although most of their occurrences lie
   inside longer ones, so their copies claim occurrences of shorter grams that
   the longer sequences also need, and the peel must scale whole levels down:
   on the synthetic metro at ε = 1 the bigrams ``x 0`` came out 15–25 % below
   their published counts. Joining every leaf keeps them (top-100 TP 97–98
   instead of 95–96; count-query errors about 10 % lower), at about 2 s more
   for a million sequences.
2. Peeling, deepest level first. A gram with residual ``R ≥ ½`` asks for ``R``
   copies; where the grams of one level together ask for more occurrences of
   a shorter gram than its residual holds, they are all scaled down in
   proportion (an order-independent form of the reference code's "skip a gram
   whose subtraction would go negative"); the copies are ``⌊x + ½⌋`` of the
   scaled amount, and every copy subtracts its occurrences (with multiplicity)
   from the residual of every shorter gram of the tree. Residuals may end
   slightly below 0 by rounding; such grams emit nothing.

Published table (:func:`released_ngrams`): every gram of the tree with a positive count
after consistency (``END`` = ``&`` as the last symbol); the synthetic database as
``(sequence, copies)`` pairs.

Where the thesis, the spec and the reference code differ, we follow the thesis text:
θ uses ``|L|`` (the reference code ``|L| + 1``); the root has no ``&`` child (the
reference code zeroes it). The spec's reading of Example 6.4.3 — Markov parents'
*consistent* counts in ``r_u`` — is ours too. Two departures, both post-processing
(above): in consistency case 2 the missing children's total is the parent's rest,
not the context's guess; and the joins extend the leaves of every level, not only
those of level ``h``.

Output order never depends on input order: the tree is sorted by gram, noise
is drawn in that order, and the synthetic database is sorted by sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from transit_release.mechanisms.prefix_tree import Sequences, TreeTooLargeError
from transit_release.noise import check_scale, discrete_laplace_table, exact_fraction

MECHANISM_NAME = "ngram"
#: the end marker ``&`` in published grams
END = -1
#: refuse a tree whose data-independent estimate of noise draws (see ``estimated_draws``) exceeds this
MAX_ESTIMATED_DRAWS = 20_000_000
#: joined grams below this count are dropped, and the peel emits ``⌊x + ½⌋`` copies
_HALF = 0.5
#: ``synthetic_database(..., joins=)``: extend every leaf (default) or, as the thesis, level ``h`` only
JOIN_RULES = ("leaves", "thesis")


class NGramParameterError(ValueError):
    """The parameters of the n-gram sanitizer are impossible (checked before any noise is drawn)."""


@dataclass(frozen=True)
class NGramBudget:
    """Public parameters of one sanitization: ε, ``ℓmax``, ``nmax`` and the universe size ``|L|``."""

    epsilon: Fraction
    max_length: int  # ℓmax: locations kept per sequence
    max_gram: int  # nmax: the exploration tree's height limit
    n_locations: int  # |L| of the public universe

    @classmethod
    def of(cls, epsilon: float | Fraction, max_length: int, max_gram: int, n_locations: int) -> "NGramBudget":
        eps = exact_fraction(epsilon)
        if eps <= 0:
            raise NGramParameterError(f"epsilon must be positive. Found {float(eps)}.")
        if int(max_length) != max_length or max_length < 1:
            raise NGramParameterError("the maximal sequence length ℓmax must be a positive integer. "
                                      f"Found {max_length}.")
        if int(max_gram) != max_gram or max_gram < 1:
            raise NGramParameterError(f"the maximal gram size nmax must be a positive integer. Found {max_gram}.")
        if max_gram > max_length + 1:
            raise NGramParameterError(f"the maximal gram size nmax = {max_gram} exceeds ℓmax + 1 = "
                                      f"{max_length + 1}: no gram can be that long")
        if int(n_locations) != n_locations or n_locations <= 2:
            raise NGramParameterError("the threshold θ = ℓmax·ln(|L|/2)/ε′ needs a universe of more than 2 "
                                      f"locations. Found {n_locations}.")
        budget = cls(eps, int(max_length), int(max_gram), int(n_locations))
        budget.check_noise_scales()
        return budget

    def check_noise_scales(self) -> None:
        """Every noise scale ``ℓmax/ε′`` the run can draw at is one the exact samplers support: refused at plan
        time (before any draw) with the ε to use instead, by :class:`~transit_release.errors.NoiseParameterError`."""
        budgets = self.node_budgets()  # every scale is ℓmax/ε′ with ε′ ∝ ε: the extremes decide
        for eps_v in (budgets[0], budgets[-1]):
            check_scale(self.noise_scale(eps_v), epsilon=self.epsilon,
                        where="n-gram sanitizer (noise scale ℓmax/ε′ at its node budgets ε′)")

    @property
    def root_epsilon(self) -> Fraction:
        """The budget of every level-1 count: ``ε/nmax``."""
        return self.epsilon / self.max_gram

    def noise_scale(self, eps: Fraction) -> Fraction:
        return Fraction(self.max_length) / eps

    def threshold(self, eps: Fraction) -> float:
        """``θ = ℓmax·ln(|L|/2)/ε′`` for counts produced with ``ε′``."""
        return self.max_length * math.log(self.n_locations / 2) / float(eps)

    def integer_threshold(self, eps: Fraction) -> int:
        """Integer noisy counts pass ``c ≥ θ`` exactly when ``c ≥ ⌈θ⌉``."""
        return math.ceil(self.threshold(eps))

    def node_budgets(self) -> tuple[Fraction, ...]:
        """Every ε a count can be produced with (root's ``ε/nmax`` and each reachable ``ε̄/h``), ascending.

        Public: it depends on ``ε`` and ``nmax`` only.
        """
        out = {self.root_epsilon}

        def walk(level: int, remaining: Fraction) -> None:  # an expanded node at ``level``
            for h in range(1, self.max_gram - level + 1):
                eps_v = remaining / h
                out.add(eps_v)
                if h > 1 and level + 1 < self.max_gram:
                    walk(level + 1, remaining - eps_v)

        if self.max_gram > 1:
            walk(1, self.epsilon - self.root_epsilon)
        return tuple(sorted(out))


def subtree_heights(noisy: np.ndarray, threshold: np.ndarray, p_max: np.ndarray, level: int,
                    max_gram: int) -> np.ndarray:
    """``h_v = clamp(⌈log_{p_max}(θ_v/c(v))⌉, 1, nmax − level)``.

    ``p_max = 1`` gives ``nmax − level``, ``p_max = 0`` gives 1.
    """
    cap = max_gram - level
    if cap < 1:
        raise ValueError(f"nodes at level {level} cannot be expanded when nmax = {max_gram}")
    noisy = np.asarray(noisy, dtype=float)
    threshold = np.broadcast_to(np.asarray(threshold, dtype=float), noisy.shape)
    p_max = np.broadcast_to(np.asarray(p_max, dtype=float), noisy.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.ceil(np.log(threshold / noisy) / np.log(p_max))
    raw = np.where(p_max >= 1, cap, np.where(p_max <= 0, 1, raw))
    raw = np.nan_to_num(raw, nan=1.0, posinf=cap, neginf=1.0)
    return np.clip(raw, 1, cap).astype(np.int64)


def child_budget(epsilon: Fraction, spent: Fraction, height: int) -> Fraction:
    """``ε_v = ε̄_v / h_v``, ``ε̄_v = ε − spent`` (``spent``: along ``v``'s path, its own count included)."""
    if height < 1:
        raise ValueError(f"h_v must be at least 1. Found {height}.")
    return (epsilon - spent) / height


def estimated_draws(budget: NGramBudget) -> float:
    """A data-independent size estimate: noise draws for the empty ("false") expansions alone.

    Each expanded node costs ``|L| + 1`` draws; a false node passes with probability at most
    ``a^θ/(1+a) = (2/|L|)/(1+a)``, ``a = e^{−ε_v/ℓmax} ≥ e^{−ε/ℓmax}``, so it has at most
    ``g = 2/(1 + e^{−ε/ℓmax})`` expanded false children on average. Starting from the ``|L|``
    unigrams: ``|L|·(|L|+1)·Σ_{i<nmax−1} g^i`` draws. Real nodes add to this in proportion to the
    data, as in any count.
    """
    g = 2 / (1 + math.exp(-float(budget.epsilon) / budget.max_length))
    chain = sum(g ** i for i in range(max(budget.max_gram - 1, 0)))
    L = budget.n_locations
    return L + L * (L + 1) * chain


def check_tree_size(budget: NGramBudget) -> None:
    """Raise ``TreeTooLargeError`` before any noise is drawn if the exploration could not be afforded."""
    estimate = estimated_draws(budget)
    if estimate > MAX_ESTIMATED_DRAWS:
        raise TreeTooLargeError(
            f"the n-gram exploration over {budget.n_locations} locations up to size {budget.max_gram} would draw "
            f"about {estimate:.2g} noisy counts for empty grams alone (limit {MAX_ESTIMATED_DRAWS:,}). "
            "Use fewer locations (e.g. a coarser universe) or a smaller nmax.")


def noise_delta(budget: NGramBudget) -> float:
    """δ to charge for the integer noise table's exact total variation.

    One record changes the true counts of at most ``ℓmax·nmax`` nodes (``≤ ℓmax`` chains of
    ``≤ nmax`` nodes). Coupling those draws with the ideal distribution costs at most
    ``Σ η`` in total variation, so the mechanism is ``(ε, ℓmax·nmax·(1 + e^ε)·η)``-DP with ``η``
    the largest table TV over every budget a count can be produced with (:meth:`node_budgets`);
    all other draws are identically distributed on neighbouring inputs.
    """
    eta = max(discrete_laplace_table(budget.noise_scale(e)).total_variation for e in budget.node_budgets())
    return budget.max_length * budget.max_gram * (1 + math.exp(float(budget.epsilon))) * eta


# ---- exploration tree -------------------------------------------------------------------------------

@dataclass
class GramLevel:
    """The nodes of one level of the exploration tree, sorted by gram.

    Children of an expanded node are a block of ``|L| + 1`` consecutive nodes (symbols ``0..|L|``,
    ``|L|`` = ``&``), blocks in the order of their parents; level 1 is the root's ``|L|`` unigrams.
    """

    parent: np.ndarray  # int64 index into the previous level (0 = the root, for level 1)
    symbol: np.ndarray  # int64 location id, or |L| for the end marker
    noisy: np.ndarray  # int64 raw noisy count A(u)
    spent: np.ndarray  # int64 index into NGramTree.budgets: the ε that produced the count
    path: np.ndarray  # int64 index into NGramTree.path_sums: ε spent down to and including this count
    passed: np.ndarray  # bool: noisy ≥ ⌈θ⌉ for the ε that produced it
    expanded: np.ndarray = field(default=None)  # bool: children drawn
    height: np.ndarray = field(default=None)  # int64 h_v of expanded nodes, 0 otherwise
    context_level: np.ndarray = field(default=None)  # int64 level of the Markov context (0 = root)
    context_index: np.ndarray = field(default=None)  # int64 its index in that level
    count: np.ndarray = field(default=None)  # float64 count after consistency

    @property
    def size(self) -> int:
        return int(self.symbol.size)


@dataclass
class NGramTree:
    levels: list[GramLevel]  # levels[0] is level 1
    budget: NGramBudget
    budgets: tuple[Fraction, ...]  # the ε of each ``spent`` code (= budget.node_budgets())
    path_sums: list[Fraction]  # the ε of each ``path`` code
    root_pmax: float = 0.0

    @property
    def n_nodes(self) -> int:
        return sum(lv.size for lv in self.levels)

    @property
    def end(self) -> int:
        return self.budget.n_locations

    def grams(self, level: int, index: np.ndarray | None = None) -> np.ndarray:
        """``(n, level)`` symbols of the nodes ``index`` of ``level`` (1-based; all nodes if None)."""
        idx = np.arange(self.levels[level - 1].size) if index is None else index
        return _gram_matrix(self.levels, level, idx)

    def leaf_path_spends(self) -> set[tuple[int, Fraction]]:
        """Every distinct (level, ε spent along the root-to-leaf path) over the leaves (nodes without children)."""
        out = set()
        for d, lv in enumerate(self.levels, start=1):
            for code in np.unique(lv.path[~lv.expanded]).tolist():
                out.add((d, self.path_sums[code]))
        return out


def _truncate(seqs: Sequences, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of every sequence cut to ``max_length`` with the end marker ``|L|`` appended, and their offsets.

    Tokens are ``int32`` (halves the memory traffic of the counting passes); offsets ``int64``.
    """
    n = len(seqs)
    kept = np.minimum(seqs.lengths, max_length)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(kept + 1, out=off[1:])
    tok = np.full(int(off[-1]), seqs.n_locations, dtype=np.int32)
    who = np.repeat(np.arange(n, dtype=np.int64), kept)
    rank = np.arange(who.size, dtype=np.int64) - np.repeat(np.cumsum(kept) - kept, kept)
    tok[off[who] + rank] = seqs.locations[seqs.offsets[who] + rank]
    return tok, off


def _index_type(size: int) -> type:
    """``int32`` for positions and node indices below 2³¹, ``int64`` beyond."""
    return np.int32 if size < 2**31 - 1 else np.int64


def _level_keys(level: GramLevel, base: int) -> np.ndarray:
    return level.parent * base + level.symbol


def _lookup(levels: list[GramLevel], keys: list[np.ndarray], grams: np.ndarray, base: int) -> np.ndarray:
    """Index of each gram (rows of ``grams``, length ``m`` = columns) in level ``m``, or -1 if absent."""
    n, m = grams.shape
    node = grams[:, 0].copy()
    node[node >= levels[0].size] = -1  # the end marker is no unigram
    for k in range(1, m):
        ok = node >= 0
        key = node[ok] * base + grams[ok, k]
        kk = keys[k]
        pos = np.searchsorted(kk, key).clip(0, max(kk.size - 1, 0))
        hit = kk[pos] == key if kk.size else np.zeros(key.size, dtype=bool)
        out = np.full(n, -1, dtype=np.int64)
        out[np.flatnonzero(ok)[hit]] = pos[hit]
        node = out
    return node


def _child_pmax(noisy_blocks: np.ndarray) -> np.ndarray:
    """``max_x P̃(x)`` per row of noisy child counts (negative counts as 0); 0 when every count is ≤ 0."""
    c = np.maximum(noisy_blocks, 0).astype(float)
    s = c.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(s > 0, c.max(axis=1) / np.where(s > 0, s, 1), 0.0)


def build_exploration_tree(seqs: Sequences, budget: NGramBudget, generator: np.random.Generator) -> NGramTree:
    """Algorithm 6.3 lines 1–18: truncation, noisy exploration with adaptive budgets, vectorised per level."""
    if seqs.n_locations != budget.n_locations:
        raise NGramParameterError(f"the sequences use a universe of {seqs.n_locations} locations but the budget "
                                  f"was planned for {budget.n_locations}")
    check_tree_size(budget)
    L, B = budget.n_locations, budget.n_locations + 1
    budgets = budget.node_budgets()
    code_of = {e: i for i, e in enumerate(budgets)}
    path_sums: list[Fraction] = []
    path_code: dict[Fraction, int] = {}

    def path_index(x: Fraction) -> int:
        if x not in path_code:
            path_code[x] = len(path_sums)
            path_sums.append(x)
        return path_code[x]

    tok, off = _truncate(seqs, budget.max_length)
    # level 1: every non-end position starts an occurrence of its unigram
    occ_pos = np.flatnonzero(tok < L).astype(_index_type(tok.size))
    true1 = np.bincount(tok[occ_pos], minlength=L)
    e1 = budget.root_epsilon
    noisy1 = true1 + discrete_laplace_table(budget.noise_scale(e1)).sample(generator, L)
    levels = [GramLevel(parent=np.zeros(L, dtype=np.int64), symbol=np.arange(L, dtype=np.int64), noisy=noisy1,
                        spent=np.full(L, code_of[e1], dtype=np.int64),
                        path=np.full(L, path_index(e1), dtype=np.int64),
                        passed=noisy1 >= budget.integer_threshold(e1))]
    keys = [np.arange(L, dtype=np.int64)]
    root_pmax = float(_child_pmax(noisy1[None, :])[0])
    child_pmax: list[np.ndarray] = []  # per level: p_max of each expanded node's children (by rank)
    occ_node = tok[occ_pos]  # index, at the current level, of the gram occurring at each position
    for level in range(1, budget.max_gram):
        lv = levels[-1]
        remaining_by_code = np.array([budget.epsilon - s for s in path_sums], dtype=object)
        has_left = np.array([r > 0 for r in remaining_by_code], dtype=bool)[lv.path]
        cand = np.flatnonzero(lv.passed & (lv.symbol != L) & has_left)
        lv.expanded = np.zeros(lv.size, dtype=bool)
        lv.height = np.zeros(lv.size, dtype=np.int64)
        lv.context_level = np.zeros(lv.size, dtype=np.int64)
        lv.context_index = np.full(lv.size, -1, dtype=np.int64)
        if cand.size == 0:
            break
        lv.expanded[cand] = True
        # Markov context: the longest proper suffix of the gram that has been expanded
        grams = _gram_matrix(levels, level, cand)
        ctx_level = np.zeros(cand.size, dtype=np.int64)
        ctx_index = np.full(cand.size, -1, dtype=np.int64)
        for j in range(level - 1, 0, -1):  # shortest suffix first, longer ones overwrite
            m = level - j
            idx = _lookup(levels, keys, grams[:, j:], B)
            ok = idx >= 0
            ok[ok] = levels[m - 1].expanded[idx[ok]]
            ctx_level[ok], ctx_index[ok] = m, idx[ok]
        p_max = np.full(cand.size, root_pmax)
        for m in np.unique(ctx_level[ctx_level > 0]):
            sel = ctx_level == m
            rank = np.cumsum(levels[m - 1].expanded) - 1
            p_max[sel] = child_pmax[m - 1][rank[ctx_index[sel]]]
        lv.context_level[cand], lv.context_index[cand] = ctx_level, ctx_index
        theta = np.array([budget.threshold(budgets[c]) for c in range(len(budgets))])[lv.spent[cand]]
        h = subtree_heights(lv.noisy[cand], theta, p_max, level, budget.max_gram)
        lv.height[cand] = h
        # ε_v = ε̄_v / h_v, exactly, per distinct (path, h)
        pair, inv = np.unique(lv.path[cand] * (budget.max_gram + 1) + h, return_inverse=True)
        eps_code = np.empty(pair.size, dtype=np.int64)
        new_path = np.empty(pair.size, dtype=np.int64)
        for k, p in enumerate(pair.tolist()):
            spent_so_far, hv = path_sums[p // (budget.max_gram + 1)], p % (budget.max_gram + 1)
            eps_v = child_budget(budget.epsilon, spent_so_far, hv)
            eps_code[k] = code_of[eps_v]
            new_path[k] = path_index(spent_so_far + eps_v)
        child_code = np.repeat(eps_code[inv.ravel()], B)
        child_path = np.repeat(new_path[inv.ravel()], B)
        # true counts of the children: the occurrences of expanded grams, by their next symbol
        itype = _index_type(cand.size * B)
        rank = np.full(lv.size, -1, dtype=itype)
        rank[cand] = np.arange(cand.size, dtype=itype)
        r = rank[occ_node]
        keep = r >= 0
        occ_pos, r = occ_pos[keep], r[keep]
        nxt = tok[occ_pos + level]
        child = r * itype(B) + nxt
        true = np.bincount(child, minlength=cand.size * B)
        noisy = true.copy()
        for code in np.unique(child_code):  # ascending ε: the draw order does not depend on the data's order
            sel = np.flatnonzero(child_code == code)
            noisy[sel] += discrete_laplace_table(budget.noise_scale(budgets[code])).sample(generator, sel.size)
        t_int = np.array([budget.integer_threshold(e) for e in budgets], dtype=np.int64)
        child_pmax.append(_child_pmax(noisy.reshape(cand.size, B)))
        new = GramLevel(parent=np.repeat(cand, B), symbol=np.tile(np.arange(B, dtype=np.int64), cand.size),
                        noisy=noisy, spent=child_code, path=child_path, passed=noisy >= t_int[child_code])
        levels.append(new)
        keys.append(_level_keys(new, B))
        # occurrences continue only through non-end children
        go = nxt != L
        occ_pos, occ_node = occ_pos[go], child[go]
    last = levels[-1]
    if last.expanded is None:
        last.expanded = np.zeros(last.size, dtype=bool)
        last.height = np.zeros(last.size, dtype=np.int64)
        last.context_level = np.zeros(last.size, dtype=np.int64)
        last.context_index = np.full(last.size, -1, dtype=np.int64)
    return NGramTree(levels, budget, budgets, path_sums, root_pmax)


def _gram_matrix(levels: list[GramLevel], level: int, index: np.ndarray) -> np.ndarray:
    idx = np.asarray(index, dtype=np.int64)
    cols = []
    for lv in range(level, 0, -1):
        cols.append(levels[lv - 1].symbol[idx])
        idx = levels[lv - 1].parent[idx]
    return np.stack(cols[::-1], axis=1)


# ---- consistency ------------------------------------------------------------------------------------

def _block_rank(level: GramLevel) -> np.ndarray:
    """The children block of each expanded node of ``level`` (its rank among the expanded ones)."""
    return np.cumsum(level.expanded) - 1


MISSING_RULES = ("rest", "thesis")


def enforce_consistency(tree: NGramTree, approximate: bool = True, missing: str = "rest") -> None:
    """Fill ``count`` of every node, top-down (cases 1–4 of the module docstring).

    ``missing`` sets the total that case 2 gives the children under the threshold: ``"rest"`` (the
    default) the parent's rest ``max(c(v) − Σ_{V⁺} A, 0)``, as case 3 does, shared in proportion to
    the Markov parents' counts; ``"thesis"`` the thesis's ``Σ_{V⁺} A · Σ_{V⁻} c(C) / Σ_{V⁺} c(C)``.
    ``approximate=False`` is the thesis's "No-Approx" variant of Fig. 6.11 (for experiments): the
    children that fail the threshold get 0 instead of cases 2–3, then step 4 as usual.
    """
    if missing not in MISSING_RULES:
        raise ValueError(f"missing must be one of {MISSING_RULES}. Found {missing!r}.")
    B = tree.budget.n_locations + 1
    levels = tree.levels
    levels[0].count = np.maximum(levels[0].noisy, 0).astype(float)  # the root's children: not renormalised
    for d in range(1, len(levels)):
        parent, child = levels[d - 1], levels[d]
        cand = np.flatnonzero(parent.expanded)
        A = child.noisy.reshape(cand.size, B).astype(float)
        plus = child.passed.reshape(cand.size, B)
        cv = parent.count[cand]
        any_plus = plus.any(axis=1)
        sum_plus = np.where(plus, A, 0.0).sum(axis=1)
        approx = np.zeros_like(A)
        # case 2: a non-empty Markov context; C(u) is the context's child with u's label
        ctx_level, ctx_index = parent.context_level[cand], parent.context_index[cand]
        markov = any_plus & (ctx_level > 0) & approximate
        if markov.any():
            ctx_counts = np.zeros_like(A)
            for m in np.unique(ctx_level[markov]).tolist():
                sel = np.flatnonzero(markov & (ctx_level == m))
                ctx_counts[sel] = levels[m].count.reshape(-1, B)[_block_rank(levels[m - 1])[ctx_index[sel]]]
            if missing == "thesis":
                den = np.where(plus, ctx_counts, 0.0).sum(axis=1)
                mass = sum_plus
            else:  # the parent's rest, shaped by the context
                den = np.where(plus, 0.0, ctx_counts).sum(axis=1)
                mass = np.maximum(cv - sum_plus, 0.0)
            markov &= den > 0  # no information in the context: fall back to case 3
            ok = np.flatnonzero(markov)
            approx[ok] = ctx_counts[ok] / den[ok, None] * mass[ok, None]
        # case 3: share what the parent has left uniformly among the missing children
        uniform = any_plus & ~markov & approximate
        n_minus = (~plus).sum(axis=1)
        share = np.maximum(cv - sum_plus, 0.0) / np.maximum(n_minus, 1)
        approx[uniform] = share[uniform, None]
        filled = np.where(plus, A, approx)
        filled[~any_plus] = 0.0  # case 1
        total = filled.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.where(total > 0, cv / np.where(total > 0, total, 1.0), 0.0)
        child.count = (filled * factor[:, None]).ravel()  # case 4


def released_ngrams(tree: NGramTree) -> list[tuple[tuple[int, ...], float]]:
    """The published table: every gram of the tree with a positive count after consistency, sorted.

    A gram is a tuple of location ids, the last one possibly :data:`END` (``&``).
    """
    out = []
    for d in range(1, len(tree.levels) + 1):
        lv = tree.levels[d - 1]
        idx = np.flatnonzero(lv.count > 0)
        if idx.size == 0:
            continue
        grams = tree.grams(d, idx)
        grams = np.where(grams == tree.end, END, grams)
        out.extend(zip(map(tuple, grams.tolist()), lv.count[idx].tolist()))
    return sorted(out)


def true_counts(tree: NGramTree, seqs: Sequences) -> list[np.ndarray]:
    """The exact ``|g(v)|`` of every node (after truncation). Diagnostic only: it reads the raw data.

    Used by experiments to separate the tree's shape from the noise on its counts.
    """
    B = tree.budget.n_locations + 1
    tok, _ = _truncate(seqs, tree.budget.max_length)
    occ_pos = np.flatnonzero(tok < tree.end).astype(_index_type(tok.size))
    node = tok[occ_pos]
    out = [np.bincount(node, minlength=tree.levels[0].size).astype(float)]
    for d in range(1, len(tree.levels)):
        rank = np.full(tree.levels[d - 1].size, -1, dtype=np.int64)
        cand = np.flatnonzero(tree.levels[d - 1].expanded)
        rank[cand] = np.arange(cand.size)
        r = rank[node]
        keep = r >= 0
        occ_pos, r = occ_pos[keep], r[keep]
        nxt = tok[occ_pos + d]
        child = r * B + nxt
        out.append(np.bincount(child, minlength=tree.levels[d].size).astype(float))
        go = nxt != tree.end
        occ_pos, node = occ_pos[go], child[go]
    return out


# ---- synthetic database -----------------------------------------------------------------------------

@dataclass
class _Trie:
    """Prefix-closed set of grams, level by level (the tree, extended by joins)."""

    parent: list[np.ndarray]
    symbol: list[np.ndarray]
    count: list[np.ndarray]
    keys: list[np.ndarray]
    base: int

    def add(self, parent: np.ndarray, symbol: np.ndarray, count: np.ndarray) -> None:
        self.parent.append(parent)
        self.symbol.append(symbol)
        self.count.append(count)
        self.keys.append(parent * self.base + symbol)

    def grams(self, level: int, index: np.ndarray) -> np.ndarray:
        idx = np.asarray(index, dtype=np.int64)
        cols = []
        for lv in range(level, 0, -1):
            cols.append(self.symbol[lv - 1][idx])
            idx = self.parent[lv - 1][idx]
        return np.stack(cols[::-1], axis=1)

    def step(self, level: int, node: np.ndarray, symbol: np.ndarray) -> np.ndarray:
        """Index at ``level`` of the child ``symbol`` of each ``node`` of ``level − 1`` (-1 if absent)."""
        out = np.full(node.size, -1, dtype=np.int64)
        kk = self.keys[level - 1]
        ok = np.flatnonzero(node >= 0)
        if kk.size == 0 or ok.size == 0:
            return out
        key = node[ok] * self.base + symbol[ok]
        pos = np.searchsorted(kk, key).clip(0, kk.size - 1)
        hit = kk[pos] == key
        out[ok[hit]] = pos[hit]
        return out

    def lookup(self, grams: np.ndarray) -> np.ndarray:
        node = grams[:, 0].copy()
        node[node >= self.symbol[0].size] = -1
        for k in range(1, grams.shape[1]):
            node = self.step(k + 1, node, grams[:, k])
        return node


def _extend_by_joins(trie: _Trie, end: int, max_length: int) -> None:
    """The thesis's joins: add levels ``h+1..ℓmax`` by joining level-``n`` grams (no grams ending in ``&``; counts
    below ½ dropped). ``synthetic_database(..., joins="thesis")``."""
    h = len(trie.count)
    if h < 2:
        return  # a tree of unigrams has no transition to join with
    n = h
    g1 = np.flatnonzero((trie.symbol[n - 1] != end) & (trie.count[n - 1] >= _HALF))
    suffix = trie.lookup(trie.grams(n, g1)[:, 1:])  # the overlap g1[2..n], a level n−1 gram
    while n < max_length and g1.size:
        parent, sym, c, g2 = _join_children(trie, n, g1, suffix, end)
        if not parent.size:
            break
        trie.add(parent, sym, c)
        n += 1
        g1 = np.arange(parent.size, dtype=np.int64)
        suffix = g2  # (g1 ⋈ g2)[2..n+1] = g2


def _join_children(trie: _Trie, n: int, g1: np.ndarray, suffix: np.ndarray, end: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``g1 ⋈ g2`` for the level-``n`` grams ``g1`` whose overlap ``g1[2..n]`` is the level-``n−1`` node ``suffix``.

    Returns (parent at level ``n``, symbol, count, the ``g2`` node at level ``n``) of the joins that are kept
    (no ``&``, count ≥ ½), sorted by (parent, symbol) when ``g1`` is sorted.
    """
    ok = suffix >= 0
    g1, ov = g1[ok], suffix[ok]
    # children of the overlap at level n: a contiguous run (levels are sorted by parent)
    lo = np.searchsorted(trie.parent[n - 1], ov, side="left")
    hi = np.searchsorted(trie.parent[n - 1], ov, side="right")
    width = hi - lo
    left = np.repeat(np.arange(g1.size, dtype=np.int64), width)
    g2 = np.repeat(lo, width) + (np.arange(left.size, dtype=np.int64) - np.repeat(np.cumsum(width) - width, width))
    ov_count = trie.count[n - 2][ov][left]
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(ov_count > 0, trie.count[n - 1][g1][left] * trie.count[n - 1][g2]
                     / np.where(ov_count > 0, ov_count, 1.0), 0.0)
    sym = trie.symbol[n - 1][g2]
    keep = (sym != end) & (c >= _HALF)
    return g1[left[keep]], sym[keep], c[keep], g2[keep]


def _extend_leaves_by_joins(trie: _Trie, end: int, max_length: int) -> None:
    """Join every leaf of every level ``n ≥ 2`` (not only level ``h``) up to ``ℓmax`` (module docstring)."""
    n = 2
    while n < max_length and n <= len(trie.count):
        size = trie.count[n - 1].size
        has_child = np.zeros(size, dtype=bool)
        if n < len(trie.count):
            has_child[trie.parent[n]] = True
        g1 = np.flatnonzero(~has_child & (trie.symbol[n - 1] != end) & (trie.count[n - 1] >= _HALF))
        if g1.size:
            suffix = trie.lookup(trie.grams(n, g1)[:, 1:])
            parent, sym, c, _ = _join_children(trie, n, g1, suffix, end)
            if parent.size:
                if n == len(trie.count):
                    trie.add(parent, sym, c)
                else:
                    _merge_into_level(trie, n + 1, parent, sym, c)
        n += 1


def _merge_into_level(trie: _Trie, level: int, parent: np.ndarray, symbol: np.ndarray, count: np.ndarray) -> None:
    """Add new nodes (children of nodes that had none) to ``level``, keeping it sorted; remap the next level."""
    i = level - 1
    key = parent * trie.base + symbol
    keys = np.concatenate([trie.keys[i], key])
    order = np.argsort(keys, kind="stable")
    where = np.empty(order.size, dtype=np.int64)
    where[order] = np.arange(order.size, dtype=np.int64)
    old = trie.keys[i].size
    trie.parent[i] = np.concatenate([trie.parent[i], parent])[order]
    trie.symbol[i] = np.concatenate([trie.symbol[i], symbol])[order]
    trie.count[i] = np.concatenate([trie.count[i], count])[order]
    trie.keys[i] = keys[order]
    if level < len(trie.count):  # old nodes keep their relative order: the next level stays sorted
        trie.parent[i + 1] = where[:old][trie.parent[i + 1]]
        trie.keys[i + 1] = trie.parent[i + 1] * trie.base + trie.symbol[i + 1]


def _peel(trie: _Trie, end: int) -> list[tuple[tuple[int, ...], int]]:
    """Deepest level first: emit copies, subtract their occurrences from every shorter gram."""
    residual = [c.astype(float).copy() for c in trie.count]
    out: list[tuple[tuple[int, ...], int]] = []
    for n in range(len(residual), 0, -1):
        cand = np.flatnonzero((trie.symbol[n - 1] != end) & (residual[n - 1] >= _HALF))
        if cand.size == 0:
            continue
        want = residual[n - 1][cand]
        grams = trie.grams(n, cand)
        # every proper contiguous sub-gram present in the trie: walk from each start position
        subs: list[tuple[int, np.ndarray, np.ndarray]] = []  # (level, gram row, node)
        if n > 1:
            row = np.repeat(np.arange(cand.size, dtype=np.int64), n)
            start = np.tile(np.arange(n, dtype=np.int64), cand.size)
            node = grams[row, start]
            for m in range(1, n + 1):
                if m > 1:
                    live = np.flatnonzero(start + m <= n)
                    row, start, node = row[live], start[live], node[live]
                    node = trie.step(m, node, grams[row, start + m - 1])
                    live = node >= 0
                    row, start, node = row[live], start[live], node[live]
                proper = ~((start == 0) & (m == n))
                if proper.any():
                    subs.append((m, row[proper], node[proper]))
        # scale down where the level asks for more occurrences of a sub-gram than it has left
        cap = np.ones(cand.size)
        for m, r, nd in subs:
            demand = np.bincount(nd, weights=want[r], minlength=residual[m - 1].size)
            with np.errstate(divide="ignore", invalid="ignore"):
                s = np.where(demand > 0, np.clip(np.maximum(residual[m - 1], 0.0) / demand, 0.0, 1.0), 1.0)
            np.minimum.at(cap, r, s[nd])
        copies = np.floor(want * cap + _HALF).astype(np.int64)
        for m, r, nd in subs:
            residual[m - 1] -= np.bincount(nd, weights=copies[r], minlength=residual[m - 1].size)
        residual[n - 1][cand] -= copies
        emit = np.flatnonzero(copies > 0)
        out.extend(zip(map(tuple, grams[emit].tolist()), copies[emit].tolist()))
    return sorted(out)


def synthetic_database(tree: NGramTree, joins: str = "leaves") -> list[tuple[tuple[int, ...], int]]:
    """Algorithm 6.3 line 20: (sequence, copies) pairs, sorted by sequence (module docstring for the rounding).

    ``joins="leaves"`` extends every leaf of the tree by joins; ``"thesis"`` only the grams of level ``h``.
    """
    if joins not in JOIN_RULES:
        raise ValueError(f"joins must be one of {JOIN_RULES}. Found {joins!r}.")
    B = tree.budget.n_locations + 1
    trie = _Trie([], [], [], [], B)
    for lv in tree.levels:
        trie.add(lv.parent, lv.symbol, lv.count)
    if joins == "leaves":
        _extend_leaves_by_joins(trie, tree.end, tree.budget.max_length)
    else:
        _extend_by_joins(trie, tree.end, tree.budget.max_length)
    return _peel(trie, tree.end)


# ---- the whole mechanism ----------------------------------------------------------------------------

@dataclass(frozen=True)
class NGramRelease:
    """Plain results: the tree (internal), the published n-gram table and the synthetic database."""

    tree: NGramTree
    ngrams: list[tuple[tuple[int, ...], float]]  # (gram, count after consistency), sorted; END = ``&``
    sequences: list[tuple[tuple[int, ...], int]]  # (sequence, copies), sorted by sequence


def sanitize(seqs: Sequences, budget: NGramBudget, generator: np.random.Generator) -> NGramRelease:
    """The ε-DP pipeline: exploration tree, consistency, published table, synthetic database."""
    tree = build_exploration_tree(seqs, budget, generator)
    enforce_consistency(tree)
    return NGramRelease(tree, released_ngrams(tree), synthetic_database(tree))


def sanitize_ngrams(seqs: Sequences, epsilon: float, max_length: int, max_gram: int,
                    generator: np.random.Generator) -> NGramRelease:
    """:func:`sanitize` with the budget built from ``seqs``' (public) universe size."""
    return sanitize(seqs, NGramBudget.of(epsilon, max_length, max_gram, seqs.n_locations), generator)


# ---- sampling from the model --------------------------------------------------------------------------------

def sample_from_tree(tree: NGramTree, starts: np.ndarray, lengths: np.ndarray, generator: np.random.Generator,
                     n_symbols: int, floor=None) -> np.ndarray:
    """Sequences drawn from the tree's variable-order Markov model (post-processing of the consistent counts).

    Row ``r`` starts with the symbol ``starts[r]`` and gets ``lengths[r]`` more symbols, each drawn from the
    consistent counts of the children of the longest suffix of the row so far (at most ``nmax − 1``
    symbols) that the tree expanded, among the symbols ``0..n_symbols−1`` only (the symbols above, e.g.
    start markers, and the end marker are never drawn). ``floor(rows, i, seq)``, if given, is the
    smallest symbol allowed at position ``i`` of each of ``rows``. Where a context holds no mass at or
    above the floor the next shorter one is used, down to the unigrams; with none at all the symbol is the
    floor itself. Returns an ``(n, 1 + max(lengths))`` array, ``-1`` past each row's end.

    Vectorised over the rows, one position at a time (a loop of ``max(lengths)`` steps, never one per row):
    one uniform of ``generator`` per row and position, in row order, turned into a symbol by inverting the
    context's cumulative counts with a binary search per row (:func:`_count_at_most`), so memory stays
    proportional to the rows, not to rows × symbols.
    """
    B = tree.budget.n_locations + 1
    levels = tree.levels
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    longest = int(lengths.max(initial=0))
    seq = np.full((starts.size, 1 + longest), -1, dtype=np.int64)
    seq[:, 0] = starts
    keys = [np.arange(levels[0].size, dtype=np.int64)] + [_level_keys(lv, B) for lv in levels[1:]]
    block_rank = [_block_rank(lv) for lv in levels]

    def cumulative(weights: np.ndarray) -> np.ndarray:  # rows of weights over the drawable symbols, summed
        w = np.maximum(np.nan_to_num(weights[:, :n_symbols].astype(float)), 0.0)
        return np.concatenate([np.zeros((w.shape[0], 1)), np.cumsum(w, axis=1)], axis=1)

    cum = [cumulative(levels[0].count[None, :])]  # m = 0: the unigrams
    for m in range(1, min(len(levels), tree.budget.max_gram)):
        cum.append(cumulative(levels[m].count.reshape(-1, B)) if levels[m].size else np.zeros((0, n_symbols + 1)))
    width = n_symbols + 1
    flat = [c.reshape(-1) for c in cum]
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
                row[ok] = block_rank[m - 1][idx[ok]]
            has = np.flatnonzero(row >= 0)
            start = row[has] * width
            mass = flat[m][start + n_symbols] - flat[m][start + lo[has]]
            use = has[mass > 0]
            choice_cum[use], choice_row[use] = m, row[use]
        out = lo.copy()
        u = generator.random(rows.size)
        for m in np.unique(choice_cum[choice_cum >= 0]).tolist():
            sel = np.flatnonzero(choice_cum == m)
            start = choice_row[sel] * width
            base = flat[m][start + lo[sel]]
            target = base + u[sel] * (flat[m][start + n_symbols] - base)
            # the first symbol whose cumulative mass exceeds the target (at or above the floor)
            below = _count_at_most(flat[m], start + 1, n_symbols, target)
            out[sel] = np.maximum(below, lo[sel]).clip(max=n_symbols - 1)
        seq[rows, i] = out
    return seq


def _count_at_most(flat: np.ndarray, start: np.ndarray, n: int, target: np.ndarray) -> np.ndarray:
    """Per row ``r``: how many of the non-decreasing ``flat[start[r] : start[r] + n]`` are ``≤ target[r]``.

    Binary lifting on every row at once (``⌊log2 n⌋ + 1`` steps of one gather each): the count grows by a
    power of two while the entry it would reach is still ``≤ target`` — the same comparisons, so the same answer,
    as counting the row's entries ``≤ target``.
    """
    found = np.zeros(start.size, dtype=np.int64)
    step = 1 << (int(n).bit_length() - 1) if n > 0 else 0
    last = start + (n - 1)
    while step:
        reach = found + step
        found += step * (flat[np.minimum(start + reach - 1, last)] <= target) * (reach <= n)
        step >>= 1
    return found
