"""Set histogram: set-valued data over a small public universe, as a noisy histogram of whole sets.

A record is one person's set of items (e.g. the stations one passenger used in
a month); neighbours add or remove one record. ε-DP (δ only for the integer
noise table's exact total variation, :func:`delta_slack`). Chosen over DiffPart
(:mod:`~transit_release.mechanisms.diffpart`) when the public universe is small
enough to enumerate every possible set (:func:`choose_mechanism`; measured in
``docs/sets.md``).

The noisy part. Every non-empty subset ``c`` of the public universe ``I`` is a
cell — ``2^|I| − 1`` of them, 131,071 for 17 items, whatever the data hold
(sets of every size, up to the whole universe: no bound on a record's size is
assumed or needed). A record adds one to the cell of its set, so one record
changes one cell by one: L1 sensitivity 1. Every cell gets integer discrete
Laplace noise at scale ``1/ε`` from :mod:`transit_release.noise`, drawn
explicitly in cell order (the empty cells too: a set nobody has can appear).
That vector of noisy counts ``x̃`` is the whole ε-DP release; everything below
is post-processing of ``x̃`` and the public parameters (``|I|``, ε), with the
release's own secure generator for the one random step (rounding).

Post-processing: from noisy counts to a set-valued file. DiffPart, or a
histogram whose cells below a threshold are dropped, lose the records whose
set few others share; on data like real web or travel logs those few are the
users with the largest sets, and they hold most of the counts of 2- and
3-item combinations (on the heavy-tailed benchmark data 2.5% of the records
hold a set shared by fewer than 12 records, yet a typical 3-item containment
count comes mostly from them). So the mass of the rare sets is kept, in
aggregate:

1. **Head.** A cell whose noisy count reaches ``θ = ⌈ln(2^|I| − 1)/ε⌉`` keeps
   it (about one empty cell in ``2^|I|`` passes: a kept cell is a real set).
2. **The rest, by a binary trie.** The other cells' noisy counts are summed
   over the dyadic blocks of the cell index (the trie that splits on item
   ``|I| − 1`` first, item 0 last): a block's sum has noise of standard
   deviation ``√(2·size)/ε`` but holds many rare sets' records. From the root
   (the noisy total of the rest, at least 0) each block's mass is shared
   between its two halves in proportion to their noisy sums (negative sums
   count 0; both non-positive: halves), down to the cells. Sparse regions keep
   their total; where inside them it lies is estimated from noisy sums.
3. **Raking to noisy sums.** The noisy number of sets of each size ``s`` is
   ``Σ_{|c| = s} x̃_c``, and the noisy number of records containing an itemset
   ``Q`` is ``f̃(Q) = Σ_{c ⊇ Q} x̃_c`` (both unbiased; all ``Q`` at once by the
   superset-sum transform, ``|I|·2^|I|`` additions). Iterative proportional
   fitting, :data:`RAKE_SWEEPS` sweeps, each over the sizes and then every
   ``Q`` of 1 to :data:`RAKE_ORDER` items: the cells of the constraint are
   scaled to its noisy sum (at least 0) and the others so that the total
   stays (a noisy sum at or above the estimated total puts all of it inside the
   constraint, the other cells at 0), wherever the estimate and the noisy sum differ by more than
   :data:`RAKE_Z` of its standard deviations (``√(2·C(|I|, s))/ε`` and
   ``√(2·2^{|I|−|Q|})/ε``). This undoes the trie's drift (its halves' noise
   spreads mass from populated cells into empty neighbours, and into the many
   large sets nobody has) where the data say so, and leaves the estimate alone
   where the sum is too noisy to tell.
4. **Rounding.** Each cell's estimate ``m`` becomes ``⌊m + U⌋`` copies, ``U``
   uniform from the release's generator (unbiased), in cell order.

Published: ``(set, copies)`` for every cell with copies, sorted by item ids.
Output order never depends on input order (a bincount over cells, then cells
in their fixed order).

Cost: ``2^|I|`` noisy counts and the raking's ``Σ_{k≤3} C(|I|, k)`` constraints
each touching ``2^{|I|−k}`` cells per sweep; :data:`MAX_ITEMS` bounds ``|I|``
(refused before any noise is drawn, :class:`SetHistogramParameterError`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from transit_release.mechanisms.diffpart import ItemSets
from transit_release.noise import check_scale, discrete_laplace_table, exact_fraction

MECHANISM_NAME = "set-histogram"
#: the largest universe whose every subset is a cell (2^20 = 1,048,576 cells)
MAX_ITEMS = 20
#: containment counts of up to this many items are raked to
RAKE_ORDER = 3
#: full passes over the raking constraints
RAKE_SWEEPS = 3
#: a containment count is raked to only where the estimate is this many standard deviations of f̃(Q) away
RAKE_Z = 2.0
#: :func:`choose_mechanism`: the set histogram where ``2^|I| ≤ HISTOGRAM_CELLS·ε²`` (docs/sets.md)
HISTOGRAM_CELLS = 1 << 20


class SetHistogramParameterError(ValueError):
    """Parameters the set histogram cannot run with (checked before any noise is drawn)."""


def choose_mechanism(universe_size: int, epsilon: float | Fraction) -> str:
    """The set mechanism for a public universe of ``universe_size`` items at ``epsilon``: ``set-histogram`` where
    ``2^|I| ≤ 2^20·ε²`` (and ``|I| ≤`` :data:`MAX_ITEMS`), else ``diffpart``: 20 items at ε ≥ 1, 18 at ε = 0.5, 16 at
    ε = 0.25.

    Why ``2^|I|/ε²``: the histogram's noisy containment count of an itemset sums ``2^{|I|−k}`` noisy cells, so its
    noise variance is ``2·2^{|I|−k}/ε²``; where that outgrows what the data can carry, DiffPart, which counts a few
    large partitions, keeps the frequent itemsets better. Public inputs only (never the data, nor the number of
    records); measured in ``docs/sets.md`` (``benchmarks/experiment_sets.py --rule``)."""
    if universe_size < 1:
        raise SetHistogramParameterError(f"the universe must hold at least one item. Found {universe_size}.")
    eps = exact_fraction(epsilon)
    fits = universe_size <= MAX_ITEMS and (1 << universe_size) <= HISTOGRAM_CELLS * eps * eps
    return MECHANISM_NAME if fits else "diffpart"


@dataclass(frozen=True)
class SetHistogramBudget:
    """The public parameters: ε and the universe size ``|I|``; everything else follows from them."""

    epsilon: Fraction
    universe_size: int

    @classmethod
    def of(cls, epsilon: float | Fraction, universe_size: int) -> "SetHistogramBudget":
        eps = exact_fraction(epsilon)
        if eps <= 0:
            raise SetHistogramParameterError(f"epsilon must be positive. Found {float(eps)}.")
        if int(universe_size) != universe_size or universe_size < 1:
            raise SetHistogramParameterError(f"the universe must hold at least one item. Found {universe_size}.")
        if universe_size > MAX_ITEMS:
            raise SetHistogramParameterError(
                f"the set histogram enumerates every subset of the universe: {universe_size} items make "
                f"{2 ** universe_size - 1:,} cells (at most {MAX_ITEMS} items, {2 ** MAX_ITEMS - 1:,} cells); "
                "use DiffPart (--mechanism diffpart) for a larger universe")
        check_scale(1 / eps, epsilon=eps, where="set histogram (noise scale 1/ε on every cell)")
        return cls(eps, int(universe_size))

    @property
    def cells(self) -> int:
        """``2^|I| − 1``: every non-empty set of the universe."""
        return (1 << self.universe_size) - 1

    @property
    def noise_scale(self) -> Fraction:
        return 1 / self.epsilon

    @property
    def head_threshold(self) -> int:
        """``⌈ln(2^|I| − 1)/ε⌉`` (at least 1): a cell at or above it keeps its own noisy count."""
        return max(1, math.ceil(math.log(max(self.cells, 2)) / float(self.epsilon)))

    @property
    def rake_order(self) -> int:
        return min(RAKE_ORDER, self.universe_size)


def delta_slack(budget: SetHistogramBudget) -> float:
    """δ for the noise table's exact total variation ``η``: one record changes one cell, ``(1 + e^ε)·η(1/ε)``."""
    eta = discrete_laplace_table(budget.noise_scale).total_variation
    return (1 + math.exp(float(budget.epsilon))) * eta * (1 + 1e-12)


@dataclass(frozen=True)
class SetHistogramResult:
    released: list[tuple[tuple[int, ...], int]]  # (sorted item ids, copies), sorted
    stats: dict[str, int]  # internal diagnostics (data-dependent: never publish)


def cell_of(records: ItemSets) -> np.ndarray:
    """Each record's cell: the bit mask of its items (item ``i`` is bit ``i``)."""
    if len(records) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(np.left_shift(np.int64(1), records.items.astype(np.int64)), records.offsets[:-1])


def noisy_histogram(records: ItemSets, budget: SetHistogramBudget, generator: np.random.Generator) -> np.ndarray:
    """The ε-DP part: ``x̃`` indexed by cell (index 0, the empty set, is no cell and stays 0)."""
    if records.universe_size != budget.universe_size:
        raise SetHistogramParameterError(f"the records' universe has {records.universe_size} items, the budget's "
                                         f"{budget.universe_size}")
    n = 1 << budget.universe_size
    counts = np.bincount(cell_of(records), minlength=n).astype(np.int64)
    noisy = np.zeros(n, dtype=np.int64)
    noisy[1:] = counts[1:] + discrete_laplace_table(budget.noise_scale).sample(generator, n - 1)
    return noisy


def superset_sums(x: np.ndarray, universe_size: int) -> np.ndarray:
    """``f(Q) = Σ_{c ⊇ Q} x_c`` for every ``Q`` (the superset-sum transform), as floats."""
    f = x.astype(float)
    for b in range(universe_size):
        view = f.reshape(-1, 2, 1 << b)
        view[:, 0, :] += view[:, 1, :]
    return f


def trie_allocation(rest: np.ndarray, universe_size: int) -> np.ndarray:
    """Step 2: the noisy mass of ``rest`` (indexed by cell) shared down the binary trie of the cell index."""
    sums = [rest.astype(float)]
    for _ in range(universe_size):
        sums.append(sums[-1].reshape(-1, 2).sum(axis=1))
    mass = np.array([max(float(sums[-1][0]), 0.0)])
    for level in range(universe_size - 1, -1, -1):
        halves = np.maximum(sums[level].reshape(-1, 2), 0.0)
        total = halves.sum(axis=1, keepdims=True)
        share = np.where(total > 0, halves / np.where(total > 0, total, 1.0), 0.5)
        mass = (mass[:, None] * share).reshape(-1)
    return mass


def size_sums(x: np.ndarray, universe_size: int) -> np.ndarray:
    """``Σ x_c`` over the cells of each set size ``0..|I|`` (the cell's number of items), as floats."""
    return np.bincount(np.bitwise_count(np.arange(1 << universe_size, dtype=np.uint64)).astype(np.int64),
                       weights=x.astype(float), minlength=universe_size + 1)


def rake(estimate: np.ndarray, targets: np.ndarray, budget: SetHistogramBudget,
         size_targets: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Step 3: iterative proportional fitting of ``estimate`` (indexed by cell, ``≥ 0``) to noisy sums of ``x̃``:
    in each sweep the number of sets of each size (``size_targets``, if given: :func:`size_sums` of ``x̃``), then
    the containment counts ``targets`` (superset sums of ``x̃``) of every itemset of 1..``rake_order`` items. A
    target is raked to only where it and the estimate differ by more than :data:`RAKE_Z` of its standard
    deviations. Returns the estimate and the number of adjustments made."""
    U = budget.universe_size
    cells = np.arange(1 << U, dtype=np.int64)
    size = np.bitwise_count(cells.astype(np.uint64)).astype(np.int64)
    out = estimate.astype(float).copy()
    out[0] = 0.0
    total = float(out.sum())
    scale = 1.0  # the cells' values are out·scale (the complement's scaling, applied lazily)
    eps = float(budget.epsilon)
    # every constraint: (is it a size, its key: the size or the itemset's mask, target, standard deviation)
    constraints = []
    if size_targets is not None:
        constraints += [(True, s, float(size_targets[s]), math.sqrt(2 * math.comb(U, s)) / eps)
                        for s in range(1, U + 1)]
    for k in range(1, budget.rake_order + 1):
        sd = math.sqrt(2 * (1 << (U - k))) / eps
        constraints += [(False, m, float(targets[m]), sd)
                        for m in (sum(1 << i for i in q) for q in itertools.combinations(range(U), k))]
    adjusted = 0
    if total <= 0:
        return out, adjusted
    for _ in range(RAKE_SWEEPS):
        for is_size, key, target, sd in constraints:
            want = min(max(target, 0.0), total)
            inside = np.flatnonzero(size == key) if is_size else np.flatnonzero((cells & key) == key)
            have = float(out[inside].sum()) * scale
            if abs(want - have) <= RAKE_Z * sd or have <= 0 or have >= total:
                continue
            outside = (total - want) / (total - have)
            if outside <= 0:  # the noisy sum holds the whole total: the cells outside the constraint get none
                out *= scale
                scale = 1.0
                keep = out[inside] * (want / have)
                out[:] = 0.0
                out[inside] = keep
            else:
                scale *= outside
                out[inside] *= (want / have) / outside
            adjusted += 1
    return out * scale, adjusted


def estimate_sets(noisy: np.ndarray, budget: SetHistogramBudget, generator: np.random.Generator) -> SetHistogramResult:
    """Steps 1–4 (post-processing of ``noisy``): the released ``(set, copies)``, sorted by item ids."""
    U = budget.universe_size
    head = noisy >= budget.head_threshold
    head[0] = False
    estimate = np.where(head, noisy, 0).astype(float)
    estimate += trie_allocation(np.where(head, 0, noisy), U)
    estimate[0] = 0.0
    estimate, adjusted = rake(estimate, superset_sums(noisy, U), budget, size_sums(noisy, U))
    copies = np.floor(estimate + generator.random(estimate.size)).astype(np.int64)
    copies[0] = 0
    cells = np.flatnonzero(copies > 0)
    bits = (cells[:, None] >> np.arange(U)) & 1
    released = sorted((tuple(np.flatnonzero(row).tolist()), int(c)) for row, c in zip(bits, copies[cells].tolist()))
    stats = {"head_cells": int(head.sum()), "cells_released": int(cells.size), "rake_adjustments": adjusted}
    return SetHistogramResult(released, stats)


def sanitize_set_histogram(records: ItemSets, budget: SetHistogramBudget,
                           generator: np.random.Generator) -> SetHistogramResult:
    """The ε-DP release of ``records`` as (itemset, copies), sorted: the noisy histogram, then its
    post-processing."""
    return estimate_sets(noisy_histogram(records, budget, generator), budget, generator)
