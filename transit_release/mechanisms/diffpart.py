"""DiffPart: set-valued data by probabilistic top-down partitioning.

Rui Chen's thesis, ch. 4 (= Chen, Mohammed, Fung, Desai & Xiong, VLDB 2011),
Algorithms 4.1 and 4.2; spec ``../shared/specs/diffpart.md``. A record is one
person's set of items (e.g. the stations one card used in a week). ε-DP with
**add/remove** neighbours (one record more or less); if neighbours replace a
record, the same run is 2ε-DP.

Taxonomy (public). Built from the universe size ``|I|`` and the fan-out ``f``
only: items ``0..|I|-1`` in the universe's fixed order are grouped ``f`` at a
time, level by level, until one root is left (a last group may be smaller).
Every leaf is at the same depth, so a node's height is its level; node ``j`` of
level ``k`` holds items ``j·f^k .. (j+1)·f^k − 1``. ``n(cut)`` is the number of
internal nodes of the subtrees rooted at the cut's nodes.

Partitioning. A partition is a multiset of records with a *hierarchy cut*; a
record fits a cut if each of its items lies under a cut node and each cut node
covers one of its items. Starting from all records under ``{root}``, each
partition ``p`` is split: ``u`` is drawn uniformly among the cut's non-leaf
nodes of largest height; the candidates are the ``2^l − 1`` cuts with ``u``
replaced by a *non-empty* subset of its ``l ≤ f`` children (the thesis's
"2^l sub-partitions" counts the impossible empty subset). Each record goes to
the candidate given by the bitmask of ``u``'s children that hold its items.
Every candidate gets a noisy size; those at or above the threshold are kept,
the others are dropped with their records. Candidates that hold no record
("empty") are tested as well, by the shared sampler
:mod:`~transit_release.mechanisms.empty_candidates` (binomial number that
pass, chosen uniformly without replacement, counts from the tail), which is
equal in distribution to testing each; a passing empty candidate becomes a
*phantom* partition that is split in turn (all its candidates are empty).

Budget (exact fractions). ``ε/2`` is reserved for the leaf counts; the other
``ε/2`` is the root's unspent split budget ``ε̃``. A split of ``p`` with
``n(p.cut) > 1`` tests its candidates at ``α_p = ε̃_p / n(p.cut)`` against
``θ = √2·C2·h(p.cut)/α_p`` and passes ``ε̃_p − α_p`` to every kept
sub-partition, real or phantom alike. (The authors' public C++ gives a child
``(B − ε/2)/(n − 1)``, ``B`` the parent's remaining budget *before* its test
for a real child and the child's, after it, for a phantom: a real child can
then spend more than its chain has left, eating the leaves' reserve, and a
partition's budget, so its noise, depends on whether it holds records. Not
followed; the tests show that rule failing.) The split of ``p`` with
``n(p.cut) = 1`` is the last: its candidates are leaf partitions and are
counted once, at ``ε/2 + ε̃_p``, against ``√2·C1/(ε/2 + ε̃_p)`` (the merged
form of Examples 4.3.2–4.3.3; Alg. 4.1 read literally tests leaves at ``α_p``
and then counts them at ``ε/2 + 0``, which also totals ε but wastes a test).
Along a record's chain ``ε̃_{k+1} = ε̃_k − α_k ≥ 0``, so the α's and the leaf
count telescope to exactly ``ε``; sibling sub-partitions hold disjoint records
(parallel composition). Budgets depend on the cuts only, never on counts.

Integer noise: each noisy size is ``|s| + Z`` with ``Z`` discrete Laplace at
scale ``1/α`` (or ``1/ε_leaf``) from :mod:`transit_release.noise`; ``Z`` is an
integer, so ``N ≥ θ`` is ``N ≥ ⌈θ⌉`` (computed exactly from ``θ²``, a
rational). Otherwise the mechanism is pure ε-DP; :func:`delta_slack` gives the
δ to charge for the tables' exact TV distance (one noisy count per split on a
record's chain, at most ``n(root)``, at the largest scale ``1/α_root``).

Size check: phantoms split again, so a configuration where one split keeps
more than about one phantom (small C, large fan-out) grows them exponentially
along a chain. :func:`check_partition_size` refuses it before any noise is
drawn, from public parameters only (:func:`expected_phantoms_per_split`).

C1 and C2 are fixed before any data is seen, from a data-independent
quantity: the expected number of phantom partitions a split keeps when all its
``2^f − 1`` candidates are empty, ``E ≈ (2^f − 1)·½e^{−√2·C·h}`` (exactly at
most ``(2^f − 1)·e^{−√2·C·h}/(1 + e^{−ε})``). By default
``C = ln((2^f − 1)/(2E))/√2`` at ``h = 1``, rounded up to 1/100, with
``E = 1/2`` phantom per split (C2: phantoms then breed fewer than one phantom
each, so their progeny stays bounded however deep the taxonomy) and ``E = 2``
phantom leaves per last split (C1). For ``f = 10`` that is C2 = 4.91 and
C1 = 3.93 (the public C++ has 6.75 and 2.75; the thesis's text "C2 a bit over
1" would keep about 125 phantoms per split at ``h = 1`` and explode). The two
targets were picked on the synthetic metro (seed 1, not the seed the
experiments report): queries of up to 3 stations at ε = 1, f = 10 had
errors 12.1%, 11.6%, 11.6%, 18.3% for ``E_leaf`` = 1/2, 1, 2, 4
(``E_split = 1/2``); ``E_split = 1/2`` was as good as 1/10 at f = 8, 10 and
better at f = 6 (8.8% against 10.8%). See :func:`c_for_phantoms`.
The thesis suggests trying values on the raw data; that would be unaccounted
privacy loss, so it is not done.

Release. Every kept leaf partition's cut is an itemset; it is released with
``N`` copies. The thesis rounds a continuous noisy count; here ``N`` is
already an integer (discrete Laplace), so rounding is the identity, and a kept
leaf has ``N ≥ ⌈√2·C1/ε_leaf⌉ ≥ 1``, so no clamping at 0 is ever needed (it is
applied anyway, defensively). ``|D̃|`` is noisy; there is no consistency step.

Vectorised: each split round handles every open partition at once; a
record's candidate is a ``bitwise_or.reduceat`` over its items' child bits.
The random choices are consumed in an order fixed by the partitions' keys
(parent, subset), never by the records' order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from transit_release.mechanisms.empty_candidates import free_items, sample_passing_empties
from transit_release.noise import MAX_SCALE, check_scale, discrete_laplace_table, exact_fraction

MECHANISM_NAME = "diffpart"
#: expected phantom partitions per split at height 1 with every candidate empty: fixes C2 (see ``c_for_phantoms``)
DEFAULT_PHANTOMS_PER_SPLIT = Fraction(1, 2)
#: expected phantom leaves per last split with every candidate empty: fixes C1
DEFAULT_PHANTOMS_PER_LEAF_SPLIT = Fraction(2)
MAX_FANOUT = 16
#: refuse configurations where one split is expected to spawn more phantom partitions than this
MAX_EXPECTED_PHANTOMS_PER_SPLIT = 1_000.0
#: The cut count :func:`_table_tv_bound` assumes, ``M = ⌈t·80·ln 2⌉ + 1``: more than noise.py's tables have (they stop
#: at the last cut with ``R_M ≥ 1``, ``M ≈ 64·ln 2·t``); the extra cuts' ``2^-64`` each cover the tails those tables
#: leave out (below ``2^-65`` a side) at every scale the samplers allow (``t ≥ 1/16``). A closed-form, conservative
#: bound (about 4× each table's exact ``η``; ``tests/test_diffpart.py`` checks it above the exact value).
_TAIL_BITS = 80


class PartitionTooLargeError(ValueError):
    """Phantom partitions alone would make the partitioning too large to run (checked before any noise)."""


# ---- records --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ItemSets:
    """A multiset of non-empty item sets over the universe ``0..universe_size-1``, in compressed form.

    Each record's items are distinct and ascending.
    """

    items: np.ndarray  # int64, all records concatenated
    offsets: np.ndarray  # int64, len = n + 1
    universe_size: int

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, records, universe_size: int) -> "ItemSets":
        """Records as iterables of item ids (order and repeats ignored)."""
        recs = [sorted(set(int(x) for x in r)) for r in records]
        sizes = np.fromiter((len(r) for r in recs), dtype=np.int64, count=len(recs))
        flat = np.fromiter((x for r in recs for x in r), dtype=np.int64, count=int(sizes.sum()))
        return cls.from_arrays(flat, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), universe_size,
                               canonical=True)

    @classmethod
    def from_arrays(cls, items: np.ndarray, offsets: np.ndarray, universe_size: int,
                    canonical: bool = False) -> "ItemSets":
        """From a flat item array and record offsets; unless ``canonical``, items are sorted and repeats dropped."""
        items = np.asarray(items, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        if universe_size < 1:
            raise ValueError(f"the universe must hold at least one item. Found {universe_size}.")
        if items.size and (items.min() < 0 or items.max() >= universe_size):
            raise ValueError(f"items must be in 0..{universe_size - 1}")
        n = offsets.size - 1
        if not canonical and items.size:
            rec = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
            key = np.sort(rec * universe_size + items)
            key = key[np.r_[True, key[1:] != key[:-1]]]
            rec, items = key // universe_size, key % universe_size
            offsets = np.searchsorted(rec, np.arange(n + 1)).astype(np.int64)
        if n and np.any(np.diff(offsets) <= 0):
            raise ValueError(f"{int((np.diff(offsets) <= 0).sum())} record(s) are empty; every record must hold "
                             "at least one item")
        return cls(items, offsets, int(universe_size))

    def to_lists(self) -> list[tuple[int, ...]]:
        return [tuple(self.items[a:b].tolist()) for a, b in zip(self.offsets[:-1], self.offsets[1:])]


# ---- taxonomy -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SetTaxonomy:
    """The context-free taxonomy of ``universe_size`` items with fan-out ``fanout`` (public).

    Node ids are level-major: level 0 (the items) first, the root last.
    """

    universe_size: int
    fanout: int
    level_sizes: tuple[int, ...]  # nodes per level, level 0 = items
    level_start: np.ndarray  # first node id of each level (+ total at the end)
    internal_below: np.ndarray  # per node: internal nodes of its subtree (itself included)
    n_children: np.ndarray  # per node

    @classmethod
    def of(cls, universe_size: int, fanout: int) -> "SetTaxonomy":
        if universe_size < 1:
            raise ValueError(f"the universe must hold at least one item. Found {universe_size}.")
        if not 2 <= fanout <= MAX_FANOUT:
            raise ValueError(f"fan-out must be between 2 and {MAX_FANOUT}. Found {fanout}.")
        sizes = [int(universe_size)]
        while sizes[-1] > 1:
            sizes.append(-(-sizes[-1] // fanout))
        start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        internal = np.zeros(start[-1], dtype=np.int64)
        children = np.zeros(start[-1], dtype=np.int64)
        for k in range(1, len(sizes)):
            below = internal[start[k - 1]:start[k]]
            group = np.arange(sizes[k - 1]) // fanout
            internal[start[k]:start[k + 1]] = 1 + np.bincount(group, weights=below, minlength=sizes[k]).astype(np.int64)
            children[start[k]:start[k + 1]] = np.bincount(group, minlength=sizes[k])
        return cls(int(universe_size), int(fanout), tuple(sizes), start, internal, children)

    @property
    def height(self) -> int:
        """Height of the root (0 when the universe is a single item)."""
        return len(self.level_sizes) - 1

    @property
    def root(self) -> int:
        return int(self.level_start[-1] - 1)

    @property
    def n_internal(self) -> int:
        """``n({root})``: every internal node."""
        return int(self.internal_below[self.root])

    def level_of(self, node: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.level_start, node, side="right") - 1

    def first_child(self, node: np.ndarray, level: np.ndarray) -> np.ndarray:
        """Node id of the first child of each (non-leaf) node."""
        return self.level_start[level - 1] + (node - self.level_start[level]) * self.fanout


# ---- budget ---------------------------------------------------------------------------------------

#: the fan-out rule's bounds (:func:`fanout_for`)
MIN_RULE_FANOUT, MAX_RULE_FANOUT = 4, 6


def fanout_for(universe_size: int) -> int:
    """The fan-out from the public universe size alone: ``f = round(log2 |I|)``, kept within 4..6.

    A split tests the ``2^f − 1`` non-empty subsets of a node's children: below 4 the taxonomy has many levels
    and each split a thin budget (``α = ε̃/n(cut)``, with ``n(root) ≈ (|I| − 1)/(f − 1)`` internal nodes); above
    6 the empty candidates (``2^f − 1`` per split) make C1 and C2, so the thresholds, large. In between, a
    small universe takes the smaller fan-outs (16 items: 4), larger ones 6. Measured on universes of 16 to
    1,012 items in ``benchmarks/experiment_fanout.py``.
    """
    if universe_size < 1:
        raise ValueError(f"the universe must have at least one item. Found {universe_size}.")
    return int(min(MAX_RULE_FANOUT, max(MIN_RULE_FANOUT, round(math.log2(max(universe_size, 2))))))


def c_for_phantoms(fanout: int, expected: Fraction | float) -> Fraction:
    """The threshold constant ``C`` at which a height-1 test of ``2^f − 1`` empty candidates keeps ``expected``.

    ``C = ln((2^f − 1)/(2E))/√2``, rounded up to a multiple of 1/100 (so at most ``E`` phantoms, up to the
    ``1/(1 + e^{−β}) ≈ 1/2`` factor of the integer noise's tail), and at least 1 (the thesis's lower end for
    C1; it matters only for fan-outs below 5). Depends on public parameters only.
    """
    e = float(expected)
    if e <= 0:
        raise ValueError(f"the expected number of phantoms must be positive. Found {e}.")
    c = math.log((2 ** fanout - 1) / (2 * e)) / math.sqrt(2)
    return Fraction(max(100, math.ceil(c * 100)), 100)


def _ceil_sqrt(q: Fraction) -> int:
    """``⌈√q⌉`` exactly, for a rational ``q ≥ 0``."""
    c = math.ceil(q)
    return 0 if c <= 0 else math.isqrt(c - 1) + 1


@dataclass(frozen=True)
class DiffPartBudget:
    """The public parameters and the exact budget rules (everything from public inputs only)."""

    epsilon: Fraction
    fanout: int
    universe_size: int
    c_split: Fraction  # C2
    c_leaf: Fraction  # C1

    @classmethod
    def of(cls, epsilon: float | Fraction, universe_size: int, fanout: int = 10,
           c_split: float | Fraction | None = None, c_leaf: float | Fraction | None = None) -> "DiffPartBudget":
        """Public parameters only; C2 and C1 default to :func:`c_for_phantoms` of the fan-out."""
        eps = exact_fraction(epsilon)
        if eps <= 0:
            raise ValueError(f"epsilon must be positive. Found {float(eps)}.")
        SetTaxonomy.of(universe_size, fanout)  # validates the universe and the fan-out
        c2 = c_for_phantoms(fanout, DEFAULT_PHANTOMS_PER_SPLIT) if c_split is None else exact_fraction(c_split)
        c1 = c_for_phantoms(fanout, DEFAULT_PHANTOMS_PER_LEAF_SPLIT) if c_leaf is None else exact_fraction(c_leaf)
        if c2 <= 0 or c1 <= 0:
            raise ValueError(f"C1 and C2 must be positive. Found C1={float(c1)}, C2={float(c2)}.")
        budget = cls(eps, int(fanout), int(universe_size), c2, c1)
        budget.check_noise_scales()
        return budget

    def check_noise_scales(self) -> None:
        """Refuse (:class:`~transit_release.errors.NoiseParameterError`, at plan time) an ε whose scales the exact
        samplers cannot honour.

        Every noisy count is drawn at ``1/β`` with ``α_root ≤ β < ε`` (α only grows going down a chain, and a
        leaf count ``ε/2 + ε̃`` is below ``ε`` unless the universe is one item, where it is ``ε``): the largest
        scale is ``1/α_root = 2·n(root)/ε``, and ``1/ε`` bounds the smallest from below (conservative by the
        part of ``ε/2`` a chain spends on its tests). The largest is checked first when it is out of range,
        so the message's suggestion is the binding one.
        """
        where = f"DiffPart (fan-out {self.fanout}, {self.universe_size} items"
        tests = "the root's tests (scale 2·n(root)/ε)" if self.taxonomy.n_internal > 1 else "its count (scale 1/ε)"
        largest = (1 / self.smallest_count_epsilon, f"{where}, {tests})")
        smallest = (1 / self.epsilon, f"{where}, the leaf counts (scale above 1/ε))")
        for scale, what in (largest, smallest) if largest[0] > MAX_SCALE else (smallest, largest):
            check_scale(scale, epsilon=self.epsilon, where=what)

    @property
    def taxonomy(self) -> SetTaxonomy:
        return SetTaxonomy.of(self.universe_size, self.fanout)

    @property
    def leaf_reserve(self) -> Fraction:
        return self.epsilon / 2

    @property
    def root_unspent(self) -> Fraction:
        """``ε̃`` of the root partition: the split budget."""
        return self.epsilon / 2

    @staticmethod
    def split_epsilon(unspent: Fraction, n_cut: int) -> Fraction:
        """``α_p = ε̃_p / n(p.cut)`` (for ``n(p.cut) > 1``)."""
        return unspent / n_cut

    @classmethod
    def child_unspent(cls, unspent: Fraction, n_cut: int) -> Fraction:
        """``ε̃_s = ε̃_p − α_p`` for every kept sub-partition ``s`` of ``p``, real or phantom."""
        return unspent - cls.split_epsilon(unspent, n_cut)

    def leaf_epsilon(self, unspent: Fraction) -> Fraction:
        """The last split's count budget ``ε/2 + ε̃_p``."""
        return self.leaf_reserve + unspent

    def split_threshold(self, alpha: Fraction, height: int) -> int:
        """``⌈√2·C2·h/α⌉``."""
        return _ceil_sqrt(2 * (self.c_split * height / alpha) ** 2)

    def leaf_threshold(self, leaf_eps: Fraction) -> int:
        """``⌈√2·C1/ε_leaf⌉``."""
        return _ceil_sqrt(2 * (self.c_leaf / leaf_eps) ** 2)

    def path_spend(self, n_cuts: list[int]) -> Fraction:
        """ε spent along a chain of splits whose cuts have ``n_1 > n_2 > … > n_m = 1`` internal nodes.

        Sequential composition: ``α_1 + … + α_{m−1}`` for the tests, plus the leaf count ``ε/2 + ε̃_m``.
        An empty chain is the one-item universe, whose root is a leaf counted at ``ε/2 + ε/2``.
        """
        if n_cuts and (n_cuts[-1] != 1 or any(a <= b for a, b in zip(n_cuts, n_cuts[1:]))):
            raise ValueError("a chain's n(cut) must decrease strictly and end at 1")
        unspent, spent = self.root_unspent, Fraction(0)
        for n in n_cuts[:-1]:
            spent += self.split_epsilon(unspent, n)
            unspent = self.child_unspent(unspent, n)
        return spent + self.leaf_epsilon(unspent)

    @property
    def smallest_count_epsilon(self) -> Fraction:
        """The smallest budget any noisy count gets: the root's ``α`` (α only grows going down, Thm 4.1 text)."""
        n = self.taxonomy.n_internal
        return self.split_epsilon(self.root_unspent, n) if n > 1 else self.leaf_epsilon(self.root_unspent)


# ---- data-independent size check and δ slack ----------------------------------------------------

def _pass_bound(c: Fraction, height: int, eps: Fraction) -> float:
    """Upper bound on ``P(Z ≥ ⌈√2·C·h/β⌉)`` at scale ``1/β`` for every budget ``β ≤ ε``.

    ``P(Z ≥ T) = a^T/(1 + a)``, ``a = e^{−β}``, and ``a^T ≤ e^{−√2·C·h}``, ``1 + a ≥ 1 + e^{−ε}``.
    """
    return math.exp(-math.sqrt(2) * float(c) * height) / (1 + math.exp(-float(eps)))


def expected_phantom_leaves(fanout: int, c_leaf: float | Fraction, epsilon: float | Fraction) -> float:
    """Data-independent: the expected number of *released* sets nobody had per last split, at most: each of the
    ``2^f − 1`` empty candidates of a split at the taxonomy's last level passes the leaf threshold
    ``⌈√2·C1/β⌉`` with probability at most ``e^{−√2·C1}/(1 + e^{−ε})`` (:func:`_pass_bound`, height 1). From
    the manifest's public parameters (fan-out, C1, ε): what the data card states."""
    return (2 ** int(fanout) - 1) * _pass_bound(Fraction(c_leaf), 1, Fraction(epsilon))


def expected_phantoms_per_split(budget: DiffPartBudget) -> dict[str, float]:
    """Data-independent: expected phantom partitions one split creates, at most.

    ``split``: a split at height 1 that is not the last (the loosest split threshold, ``h = 1``) with all
    ``2^f − 1`` candidates empty; ``leaf``: the same for the last split (phantom leaves, each released);
    ``growth``: the expected phantom descendants of one split, ``Σ_{k=1}^{n(root)} g^k`` with
    ``g = split`` (every phantom splits again, at most ``n(root)`` times along a chain), each chain
    ending in ``leaf`` phantom leaves.
    """
    m = 2 ** budget.fanout - 1
    g = m * _pass_bound(budget.c_split, 1, budget.epsilon)
    leaf = expected_phantom_leaves(budget.fanout, budget.c_leaf, budget.epsilon)
    n = budget.taxonomy.n_internal
    chain = sum(g ** k for k in range(1, n + 1)) if g < 1e6 else math.inf
    return {"split": g, "leaf": leaf, "growth": chain * (1 + leaf) + leaf}


def check_partition_size(budget: DiffPartBudget) -> None:
    """Raise :class:`PartitionTooLargeError` before any noise is drawn if phantoms would explode."""
    e = expected_phantoms_per_split(budget)
    if not e["growth"] <= MAX_EXPECTED_PHANTOMS_PER_SPLIT:
        raise PartitionTooLargeError(
            f"DiffPart with fan-out {budget.fanout} over {budget.universe_size} items, C2={float(budget.c_split):g} "
            f"and C1={float(budget.c_leaf):g}: one split would spawn about {e['growth']:.3g} phantom partitions "
            f"(each split keeps {e['split']:.3g} of its {2 ** budget.fanout - 1} empty candidates on average; limit "
            f"{MAX_EXPECTED_PHANTOMS_PER_SPLIT:g}). Use a larger C2 or C1, or a smaller fan-out.")


def _table_tv_bound(scale: Fraction) -> float:
    """Public upper bound on the TV distance of noise.py's tables at ``scale`` (both kinds).

    Each of a table's cut points is rounded to the nearest multiple of ``2^-64`` (so each probability is off by
    at most ``2^-64``), and the table stops at its last cut with ``R_M ≥ 1`` (the ideal tail beyond it below
    ``2^-65`` a side, :mod:`transit_release.noise`). Counting ``2M + 1`` cuts with ``M = ⌈t·80·ln 2⌉ + 1``, more than
    the table has, covers both: ``TV ≤ ((2M + 1)·2^-64 + 2·2^-80)/2`` (:data:`_TAIL_BITS`).
    """
    m = int(math.ceil(float(scale) * _TAIL_BITS * math.log(2))) + 1
    return ((2 * m + 1) * 2.0 ** -64 + 2 * 2.0 ** -80) / 2


def delta_slack(budget: DiffPartBudget) -> float:
    """δ to charge for sampling from tables instead of the ideal discrete Laplace.

    One record changes at most one noisy count per split along its chain, at most ``n(root)`` of them
    (the last one being its leaf count); each such count is drawn from a discrete Laplace table or, when
    empty, by the sampler (its tail from a geometric table), so its TV distance is at most
    ``η = η_DL + η_G`` at the largest scale ``1/α_root``. Coupling: ``δ = n(root)·(1 + e^ε)·η``.
    """
    tax = budget.taxonomy
    counts = max(tax.n_internal, 1)
    scale = 1 / budget.smallest_count_epsilon
    eta = 2 * _table_tv_bound(scale)
    return counts * (1 + math.exp(float(budget.epsilon))) * eta


# ---- the partitioning -----------------------------------------------------------------------------

@dataclass
class DiffPartTrace:
    """What every created partition spent (tests and diagnostics; holds no record)."""

    parent: list[int] = field(default_factory=list)  # index into this list, -1 for the root
    phantom: list[bool] = field(default_factory=list)
    n_cut: list[int] = field(default_factory=list)
    unspent: list[Fraction] = field(default_factory=list)  # ε̃ of the partition
    tested_at: list[Fraction] = field(default_factory=list)  # budget of the test that kept it (0 for the root)
    leaf: list[bool] = field(default_factory=list)
    record_spent: list[Fraction] | None = None  # per input record: Σ budgets of the counts it was in
    record_reserved: list[Fraction] | None = None  # per input record: ε/2 + ε̃ left where its chain ended


@dataclass(frozen=True)
class DiffPartResult:
    released: list[tuple[tuple[int, ...], int]]  # (sorted item ids, copies), sorted
    stats: dict[str, int]  # internal diagnostics (data-dependent: never publish)
    trace: DiffPartTrace | None = None


class _Budgets:
    """Interns the exact budget values so that arrays can carry small integer ids."""

    def __init__(self, budget: DiffPartBudget):
        self.budget = budget
        self.values: list[Fraction] = []
        self._index: dict[Fraction, int] = {}
        self._rules: dict[tuple[int, int], tuple[int, int, int]] = {}

    def id(self, value: Fraction) -> int:
        i = self._index.get(value)
        if i is None:
            i = self._index[value] = len(self.values)
            self.values.append(value)
        return i

    def rule(self, unspent_id: int, n_cut: int, height: int) -> tuple[int, int, int]:
        """(count budget id, threshold, child unspent id) of a split with this ε̃, n(cut) and height."""
        key = (unspent_id, n_cut)
        r = self._rules.get(key)
        if r is None:
            b, unspent = self.budget, self.values[unspent_id]
            if n_cut == 1:
                eps = b.leaf_epsilon(unspent)
                r = (self.id(eps), b.leaf_threshold(eps), -1)
            else:
                alpha = b.split_epsilon(unspent, n_cut)
                r = (self.id(alpha), b.split_threshold(alpha, height), self.id(b.child_unspent(unspent, n_cut)))
            self._rules[key] = r
        return r


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[i], starts[i] + lengths[i])``."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    rep = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return rep + np.arange(total, dtype=np.int64)


def _group(keys: np.ndarray, key_space: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True, return_counts=True)`` for keys in ``0..key_space-1``.

    A bincount over the key space when it is small enough, otherwise one sort.
    """
    if key_space <= 1 << 23:
        counts = np.bincount(keys, minlength=key_space)
        uniq = np.flatnonzero(counts)
        where = np.empty(key_space, dtype=np.int64)
        where[uniq] = np.arange(uniq.size)
        return uniq, where[keys], counts[uniq]
    order = np.argsort(keys)
    sk = keys[order]
    first = np.r_[True, sk[1:] != sk[:-1]]
    inverse = np.empty(keys.size, dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    return sk[starts], inverse, np.diff(np.r_[starts, keys.size])


def sanitize_sets(records: ItemSets, budget: DiffPartBudget, generator: np.random.Generator,
                  trace: bool = False) -> DiffPartResult:
    """Algorithms 4.1 + 4.2: the ε-DP release of ``records`` as (itemset, copies), sorted."""
    if records.universe_size != budget.universe_size:
        raise ValueError(f"the records' universe has {records.universe_size} items, the budget's "
                         f"{budget.universe_size}")
    check_partition_size(budget)
    run = _Partitioning(records, budget, generator, trace)
    parts, recs = run.start()
    if budget.taxonomy.height == 0:  # a one-item universe: the root is a leaf partition, counted at ε
        return run.count_the_root()
    while parts.count:
        parts, recs = run.split(parts, recs)
    return run.result()


@dataclass(frozen=True)
class _OpenPartitions:
    """The partitions still to split: their cuts as sorted node ids in CSR form (``nodes``, ``offsets``), their
    unspent budget ε̃ (interned id), ``n(cut)``, and their index in the trace."""

    nodes: np.ndarray
    offsets: np.ndarray
    unspent_id: np.ndarray
    n_cut: np.ndarray
    trace_id: np.ndarray

    @property
    def count(self) -> int:
        return self.offsets.size - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass(frozen=True)
class _OpenRecords:
    """The records still in an open partition: their index in the input, their partition, their size and their
    items (grouped by record)."""

    index: np.ndarray
    partition: np.ndarray
    size: np.ndarray
    items: np.ndarray


@dataclass(frozen=True)
class _Tests:
    """A round's split of each open partition: the node ``u`` replaced, its level and number of children, the
    budget (interned id) and threshold of the candidates' test, the unspent budget kept partitions carry on
    (interned id), and whether the split is the partition's last (its candidates are leaves)."""

    u: np.ndarray
    level: np.ndarray
    n_kids: np.ndarray
    count_bid: np.ndarray
    threshold: np.ndarray
    child_uid: np.ndarray
    last: np.ndarray


@dataclass(frozen=True)
class _Candidates:
    """The non-empty candidates of a round, as keys ``partition·2^f + subset`` (sorted), the candidate of each
    open record, and their true sizes."""

    key: np.ndarray
    of_record: np.ndarray
    true_size: np.ndarray
    full: int

    @property
    def partition(self) -> np.ndarray:
        return self.key // self.full

    @property
    def mask(self) -> np.ndarray:
        return self.key % self.full


@dataclass(frozen=True)
class _Kept:
    """The kept sub-partitions of a round, ordered by (parent, subset): parent, subset, noisy size, phantom or
    not, their cuts (CSR by sub-partition: ``nodes``, ``node_of``, ``sizes``), ``n(cut)`` and whether they are
    leaves."""

    parent: np.ndarray
    mask: np.ndarray
    noisy: np.ndarray
    phantom: np.ndarray
    nodes: np.ndarray
    node_of: np.ndarray
    sizes: np.ndarray
    n_cut: np.ndarray
    leaf: np.ndarray

    @property
    def count(self) -> int:
        return self.parent.size


def _empty_int() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


class _Partitioning:
    """One run of DiffPart: the public taxonomy's lookup tables, the interned budgets and their noise tables,
    and what the run releases, counts (internal) and traces. Randomness is drawn in a fixed order: the choice of
    ``u`` per round, then the non-empty candidates' noise by budget, then the empty candidates' by group."""

    def __init__(self, records: ItemSets, budget: DiffPartBudget, generator: np.random.Generator, trace: bool):
        self.records, self.budget, self.generator = records, budget, generator
        self.tax = budget.taxonomy
        self.full = 1 << self.tax.fanout
        self.budgets = _Budgets(budget)
        self.tables: dict[int, object] = {}
        self.trace = DiffPartTrace() if trace else None
        if self.trace is not None:
            self.trace.record_spent = [Fraction(0)] * len(records)
            self.trace.record_reserved = [Fraction(0)] * len(records)
        self.stats = {"splits": 0, "partitions": 1, "phantom_partitions": 0, "leaves": 0, "phantom_leaves": 0,
                      "rounds": 0}
        self.released: list[tuple[tuple[int, ...], int]] = []

    def table(self, bid: int):
        t = self.tables.get(bid)
        if t is None:
            t = self.tables[bid] = discrete_laplace_table(1 / self.budgets.values[bid])
        return t

    def start(self) -> tuple[_OpenPartitions, _OpenRecords]:
        """The root partition, holding every record, and the taxonomy's lookup tables."""
        tax, budget, tr = self.tax, self.budget, self.trace
        root = _OpenPartitions(np.array([tax.root], dtype=np.int64), np.array([0, 1], dtype=np.int64),
                               np.array([self.budgets.id(budget.root_unspent)], dtype=np.int64),
                               np.array([tax.n_internal], dtype=np.int64), np.array([0], dtype=np.int64))
        if tr is not None:
            tr.parent.append(-1), tr.phantom.append(False), tr.n_cut.append(tax.n_internal)
            tr.unspent.append(budget.root_unspent), tr.tested_at.append(Fraction(0)), tr.leaf.append(tax.height == 0)
        n = len(self.records)
        records = _OpenRecords(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                               self.records.sizes.astype(np.int64), self.records.items.astype(np.int32))
        # per (level k, item): the item's ancestor at level k and its bit among that ancestor's children
        f, U = tax.fanout, tax.universe_size
        anc = np.concatenate([tax.level_start[k] + np.arange(U) // f ** k for k in range(tax.height + 1)])
        bit = np.concatenate([np.zeros(U, dtype=np.int64)] +
                             [np.left_shift(1, (np.arange(U) // f ** (k - 1)) % f) for k in range(1, tax.height + 1)])
        self.ancestor, self.child_bit = anc.astype(np.int32), bit.astype(np.int32)
        return root, records

    def count_the_root(self) -> DiffPartResult:
        """A one-item universe: the root is a leaf partition, counted once at ε."""
        budget, n, tr = self.budget, len(self.records), self.trace
        eps = budget.leaf_epsilon(budget.root_unspent)
        noisy = n + int(discrete_laplace_table(1 / eps).sample(self.generator, 1)[0])
        if noisy >= budget.leaf_threshold(eps):
            self.released.append(((0,), noisy))
            self.stats["leaves"] = 1
        if tr is not None:
            tr.tested_at[0] = eps
            tr.record_spent = [eps] * n
            tr.record_reserved = [Fraction(0)] * n
        return DiffPartResult(self.released, self.stats, tr)

    def split(self, parts: _OpenPartitions, recs: _OpenRecords) -> tuple[_OpenPartitions, _OpenRecords]:
        """One round: every open partition is split once; the kept sub-partitions that are not leaves, and the
        records in them, are the next round's."""
        self.stats["rounds"] += 1
        self.stats["splits"] += parts.count
        tests = self.tests(parts)
        cands = self.candidates(parts, recs, tests)
        noisy, keep = self.noisy_sizes(cands, tests)
        kept = self.kept(parts, tests, cands, noisy, keep, self.passing_empties(parts.count, cands, tests))
        trace_ids = self.trace_round(parts, recs, tests, kept)
        self.stats["partitions"] += kept.count
        self.stats["phantom_partitions"] += int(kept.phantom.sum())
        self.release_leaves(kept)
        open_sub = np.flatnonzero(~kept.leaf)
        recs = self.move_records(recs, tests, cands, kept, open_sub)
        node_keep = ~kept.leaf[kept.node_of]
        parts = _OpenPartitions(kept.nodes[node_keep],
                                np.concatenate([[0], np.cumsum(kept.sizes[open_sub])]).astype(np.int64),
                                tests.child_uid[kept.parent[open_sub]], kept.n_cut[open_sub],
                                trace_ids[open_sub] if trace_ids is not None else parts.trace_id)
        return parts, recs

    def tests(self, parts: _OpenPartitions) -> _Tests:
        """Step 1: ``u`` uniform among each cut's nodes of the largest height; the budgets of the round's tests
        (exact, interned)."""
        tax, offsets = self.tax, parts.offsets
        owner = np.repeat(np.arange(parts.count, dtype=np.int64), parts.sizes)
        level = tax.level_of(parts.nodes)
        top = np.maximum.reduceat(level, offsets[:-1])
        cand = level == top[owner]
        n_cand = np.add.reduceat(cand.astype(np.int64), offsets[:-1])
        pick = self.generator.integers(0, n_cand)
        rank = np.cumsum(cand) - 1 - np.concatenate([[0], np.cumsum(n_cand)[:-1]])[owner]
        u = parts.nodes[cand & (rank == pick[owner])]
        rows, which = np.unique(np.stack([parts.unspent_id, parts.n_cut, top], axis=1), axis=0, return_inverse=True)
        table_rows = np.array([self.budgets.rule(*map(int, r)) for r in rows], dtype=np.int64).reshape(-1, 3)
        count_bid, threshold, child_uid = table_rows[which.ravel()].T
        return _Tests(u, top, tax.n_children[u], count_bid, threshold, child_uid, parts.n_cut == 1)

    def candidates(self, parts: _OpenPartitions, recs: _OpenRecords, tests: _Tests) -> _Candidates:
        """Step 2: route the records, by the bitmask of ``u``'s children holding their items."""
        if not recs.partition.size:
            return _Candidates(_empty_int(), _empty_int(), _empty_int(), self.full)
        U, part, size = self.tax.universe_size, recs.partition, recs.size
        flat = np.repeat((tests.level * U)[part], size) + recs.items
        under = self.ancestor[flat] == np.repeat(tests.u[part], size)
        bits = self.child_bit[flat] * under
        starts = np.concatenate([[0], np.cumsum(size[:-1])])
        mask = np.bitwise_or.reduceat(bits, starts).astype(np.int64)
        return _Candidates(*_group(part * self.full + mask, parts.count * self.full), self.full)

    def noisy_sizes(self, cands: _Candidates, tests: _Tests) -> tuple[np.ndarray, np.ndarray]:
        """Step 3: the non-empty candidates' noisy sizes, drawn by budget in a fixed order; which pass."""
        cand_part = cands.partition
        noisy = cands.true_size.copy()
        bids = tests.count_bid[cand_part]
        for bid in np.unique(bids):
            sel = np.flatnonzero(bids == bid)
            noisy[sel] += self.table(int(bid)).sample(self.generator, sel.size)
        return noisy, noisy >= tests.threshold[cand_part]

    def passing_empties(self, n_parts: int, cands: _Candidates,
                        tests: _Tests) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step 4: the empty candidates that pass, by the shared sampler, per (scale, threshold, number of
        children): their partition, subset and noisy size."""
        cand_part, cand_mask = cands.partition, cands.mask
        n_empty = (np.left_shift(1, tests.n_kids) - 1) - np.bincount(cand_part, minlength=n_parts)
        groups = np.unique(np.stack([tests.count_bid, tests.threshold, tests.n_kids], axis=1), axis=0)
        e_part, e_mask, e_count = [], [], []
        for bid, t, l in groups.tolist():
            members = np.flatnonzero((tests.count_bid == bid) & (tests.threshold == t) & (tests.n_kids == l))
            s = sample_passing_empties(self.generator, n_empty[members], 1 / self.budgets.values[bid], t)
            if s.size == 0:
                continue
            universe = (1 << l) - 1
            local = np.searchsorted(members, cand_part)
            is_member = (local < members.size) & (members[local.clip(0, members.size - 1)] == cand_part)
            taken = local[is_member] * universe + cand_mask[is_member] - 1
            ids = free_items(s.group, s.rank, universe, taken)
            e_part.append(members[s.group])
            e_mask.append(ids + 1)
            e_count.append(s.count)
        return tuple(np.concatenate(x) if x else _empty_int() for x in (e_part, e_mask, e_count))

    def kept(self, parts: _OpenPartitions, tests: _Tests, cands: _Candidates, noisy: np.ndarray, keep: np.ndarray,
             empties: tuple[np.ndarray, np.ndarray, np.ndarray]) -> _Kept:
        """Step 5: the kept sub-partitions, ordered by (parent, subset), and their cuts: the parent's cut without
        ``u``, plus ``u``'s children in the subset."""
        tax, f, sizes = self.tax, self.tax.fanout, parts.sizes
        e_part, e_mask, e_count = empties
        k_part = np.concatenate([cands.partition[keep], e_part])
        k_mask = np.concatenate([cands.mask[keep], e_mask])
        k_count = np.concatenate([noisy[keep], e_count])
        k_phantom = np.concatenate([np.zeros(int(keep.sum()), dtype=bool), np.ones(e_part.size, dtype=bool)])
        order = np.lexsort((k_mask, k_part))
        k_part, k_mask, k_count, k_phantom = k_part[order], k_mask[order], k_count[order], k_phantom[order]
        S = k_part.size
        idx = _ranges(parts.offsets[k_part], sizes[k_part])
        sub = np.repeat(np.arange(S, dtype=np.int64), sizes[k_part])
        not_u = parts.nodes[idx] != tests.u[k_part][sub]
        old_nodes, old_sub = parts.nodes[idx][not_u], sub[not_u]
        bit_s, bit_b = np.nonzero((k_mask[:, None] >> np.arange(f)) & 1)
        first = tax.first_child(tests.u[k_part], tests.level[k_part])
        new_nodes = np.concatenate([old_nodes, first[bit_s] + bit_b])
        new_sub = np.concatenate([old_sub, bit_s])
        o = np.lexsort((new_nodes, new_sub))
        new_sizes = sizes[k_part] - 1 + np.bincount(bit_s, minlength=S)
        new_n = parts.n_cut[k_part] - tax.internal_below[tests.u[k_part]] + np.bincount(
            bit_s, weights=tax.internal_below[first[bit_s] + bit_b], minlength=S).astype(np.int64)
        return _Kept(k_part, k_mask, k_count, k_phantom, new_nodes[o], new_sub[o], new_sizes, new_n,
                     tests.last[k_part])

    def trace_round(self, parts: _OpenPartitions, recs: _OpenRecords, tests: _Tests,
                    kept: _Kept) -> np.ndarray | None:
        """The kept sub-partitions' trace entries and what the records spent this round; their trace ids."""
        tr, values = self.trace, self.budgets.values
        if tr is None:
            return None
        ids = np.arange(len(tr.parent), len(tr.parent) + kept.count, dtype=np.int64)
        for s_, p_ in enumerate(kept.parent.tolist()):
            tr.parent.append(int(parts.trace_id[p_]))
            tr.phantom.append(bool(kept.phantom[s_]))
            tr.n_cut.append(int(kept.n_cut[s_]))
            tr.tested_at.append(values[tests.count_bid[p_]])
            tr.unspent.append(Fraction(0) if kept.leaf[s_] else values[tests.child_uid[p_]])
            tr.leaf.append(bool(kept.leaf[s_]))
        for r_, p_ in zip(recs.index.tolist(), recs.partition.tolist()):
            tr.record_spent[r_] += values[tests.count_bid[p_]]
        return ids

    def release_leaves(self, kept: _Kept) -> None:
        """Step 6: each kept leaf is released with its noisy size as copies (an integer: round(N) = N; clamped at
        0 defensively)."""
        leaf_rows = np.flatnonzero(kept.leaf)
        if not leaf_rows.size:
            return
        self.stats["leaves"] += leaf_rows.size
        self.stats["phantom_leaves"] += int(kept.phantom[leaf_rows].sum())
        nb = np.concatenate([[0], np.cumsum(kept.sizes)])
        items = kept.nodes  # level-0 node ids are item ids
        copies = np.maximum(kept.noisy, 0)
        for s_ in leaf_rows.tolist():
            if copies[s_] > 0:
                self.released.append((tuple(items[nb[s_]:nb[s_ + 1]].tolist()), int(copies[s_])))

    def move_records(self, recs: _OpenRecords, tests: _Tests, cands: _Candidates, kept: _Kept,
                     open_sub: np.ndarray) -> _OpenRecords:
        """Step 7: the records move to their kept, non-leaf sub-partition; the others are done."""
        new_index = np.full(kept.count, -1, dtype=np.int64)
        new_index[open_sub] = np.arange(open_sub.size)
        real_rows = np.flatnonzero(~kept.phantom)
        real_key = kept.parent[real_rows] * self.full + kept.mask[real_rows]  # sorted: ordered by (parent, subset)
        pos = np.searchsorted(real_key, cands.key)
        hit = pos < real_key.size
        hit[hit] = real_key[pos[hit]] == cands.key[hit]
        cand_to_new = np.full(cands.key.size, -1, dtype=np.int64)
        cand_to_new[hit] = new_index[real_rows[pos[hit]]]
        rec_new = cand_to_new[cands.of_record] if cands.of_record.size else cands.of_record
        if self.trace is not None:
            for r_, p_, nn in zip(recs.index.tolist(), recs.partition.tolist(), rec_new.tolist()):
                if nn < 0:  # done: at a leaf, or dropped at this test
                    self.trace.record_reserved[r_] = (Fraction(0) if tests.last[p_] else self.budget.leaf_reserve
                                                      + self.budgets.values[tests.child_uid[p_]])
        alive = rec_new >= 0
        return _OpenRecords(recs.index[alive], rec_new[alive], recs.size[alive],
                            recs.items[np.repeat(alive, recs.size)])

    def result(self) -> DiffPartResult:
        self.released.sort()
        return DiffPartResult(self.released, self.stats, self.trace)
