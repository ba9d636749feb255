"""SafePath: a noisy (location, time) prefix tree for passenger trajectories.

Al-Hussaeni, Fung et al., "SafePath: Differentially-private publishing of
passenger trajectories in transportation systems" (Computer Networks 2018),
§4 (Algorithm 1, Procedures 1–2, §4.3); spec ``../shared/specs/safepath.md``.
Pure ε-DP (up to the samplers' exact table error, see :func:`delta_slack`); one
record is one passenger's whole trajectory; neighbours add or remove one.

Data. A trajectory is ``L1.T1 → L2.T2 → …`` with locations from a public
universe ``0..|L|-1`` and times from the hours of the week ``0..167`` (Monday
00:00 = 0). Two public taxonomies (:class:`Hierarchy`), one over locations and
one over hours, each a tree whose levels partition the universe; its *height*
``H`` is the number of levels of general (inner) nodes, the leaves are the
universe's items ("non-general" nodes). ``H = 0`` (no general nodes) works.

Budget (§4.1, exact :class:`~fractions.Fraction`\\ s). ``ε_ℓ = ε/h`` per prefix-tree
level, two sub-levels (location, then time) of ``ε_s = ε_ℓ/2`` each. Inside a
sub-level with universe ``U`` and taxonomy height ``H``, a general node at
depth ``j`` (1 = just below the taxonomy's root) gets ``ε_g(j) = j·2ε_s/|U|``,
the non-general nodes ``ε_ng = ε_s(1 − H(H+1)/|U|)``; along every taxonomy
path these add to ``ε_s`` (sequential composition; nodes of one depth hold
disjoint trajectories: parallel composition), so every root-to-leaf path of the
prefix tree spends ``2ε_s·h = ε``. ``ε_ng > 0`` needs ``H(H+1) < |U|``; a
configuration that fails is refused (:class:`TaxonomyBudgetError`) naming the
universe, ``|U|`` and ``H``. The paper writes ``ε_ng = (|U| − 2Σ_g ε_g)ε_s/|U|``
in §4.1, which mixes budgets with a count; its privacy analysis (§4.4) has
``(|U| − 2Σ_{x=1..H} x)ε_s/|U|``, which is what we follow.

Noise and thresholds. Each count gets integer discrete Laplace noise at scale
``1/ε_node`` (sensitivity 1); a node is kept when its noisy count is at least
its threshold (an integer: ``c ≥ θ`` is ``c ≥ ⌈θ⌉``). Two public rules
(:data:`THRESHOLD_RULES`):

* ``paper`` (§4.2): ``θ_ng = 2√2/ε_ℓ`` and ``θ_g = 4√2/ε_ℓ`` from the *level*
  budget, for every node. The noise, however, is drawn at the node's own much
  smaller budget (at ε = 1, h = 12 a depth-1 hour block has scale 2016 against
  ``θ_g = 68``), so every general test is close to a coin flip for empty and
  populated nodes alike.
* ``node``: ``θ = ln(m)/ε_node`` from the node's own budget, ``m`` the number of
  sibling candidates tested together (the largest number of children of one
  taxonomy node at that depth): the expected number of empty siblings that
  pass is about ``m·½e^{−ln m} = ½`` per tested group, whatever the depth.

Both are measured in ``benchmarks/experiment_safepath.py``; ``paper`` is the default.

Where the paper's split loses the journeys. A general node at depth ``j`` gets
``2jε_s/|U|``: along one level a trajectory passes ``H_L + H_T + 2`` tests, most
of them at scales of hundreds or thousands (``|U|/(2jε_s)``), each of which can
cut it. A node held by a few passengers survives a level only by luck, even at a
large ε, and the mass of a cut child is released as trajectories ending at its
parent (the terminating release): the release fills with single points. The
same tree with exact counts releases the same thing (its node set is the loss,
not the noise on its counts). ``benchmarks/experiment_trajectories.py`` shows it
in numbers.

Joint rule (``JointBudget``, :func:`build_joint_tree`). No taxonomies and one
test per level: every candidate (location, hour) pair under a node gets one
noisy count at ``ε_ℓ = min(ε/h, 16)`` (16: the samplers' finest scale), kept
when it reaches ``θ = ⌈ln(|L|·|T|)/ε_ℓ⌉`` (about ``½`` empty child per tested
node: ``m·½e^{−ε_ℓθ} ≤ ½``). Privacy: a trajectory adds 1 to exactly one
candidate per level (the pair it takes there; none once it has ended or been
cut), so its neighbours' histograms differ by 1 in one count per level — L1
sensitivity 1 — and the counts of one level are one discrete Laplace histogram
at ``1/ε_ℓ`` (the empty candidates' sampler is equal in distribution); the
candidates of a level depend only on the noisy counts of the levels above
(adaptive sequential composition over ``h`` levels). Every root-to-leaf path
spends ``h·ε_ℓ ≤ ε``, and exactly ``ε`` when ``ε/h ≤ 16``
(:meth:`JointBudget.path_spend`, exact fractions). Consistency and release as
below, both post-processing.

Time rule (public, costs no privacy). The paper's Definition 3.3 has
non-decreasing timestamps; with ``monotone=True`` (the default) the children of
a node at hour ``t`` are only the hours ``≥ t``: hour blocks wholly before ``t``
are not candidates, and the candidates counted for the empty-node sampling are
the hours ``≥ t`` only. It needs a time taxonomy whose nodes are intervals of
hours (:meth:`Hierarchy.from_fanout` builds one). A trajectory whose hours
decrease is cut before the first decrease (the readers quarantine such lines).

Empty candidates. Candidates with true count 0 are never visited one by one:
per tested group the number that pass is drawn as a binomial and their counts
from the noise tail (:mod:`transit_release.mechanisms.empty_candidates`), the
same distribution as testing each (slow-marked test).

Consistency (§4.3). The paper's formula uses the consistent counts of the
siblings on its right-hand side (circular); we use the raw children, top-down:
level-1 nodes keep ``c(v)``; otherwise ``c̄(v) = c(v) + min(0, (c̄(w) − Σ_u c(u))/|children(w)|)``
— except that a child never goes below 0: when some would, the deficit is
shared among the others (water-filling, ``max(0, c(u) − λ)`` with the
children summing to ``c̄(w)``), as in the prefix tree. Where no child would go
negative this is exactly the formula, and with the floor ``c̄(v) ≥ Σ children``
holds for every tree.

Release. The paper appends ``c̄(v)`` copies of ``prefix(v)`` for every node,
which counts a journey once for each of its prefixes. We emit the trajectories
that terminate at ``v``: ``round(c̄(v) − Σ_children c̄)`` copies (half to even,
at least 0; all of ``c̄(v)`` at a node without children), so that the release's
prefix counts match the tree. ``release="literal"`` gives the paper's reading
(``round(c̄(v))`` copies of every prefix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from transit_release.mechanisms.empty_candidates import free_items, sample_passing_empties
from transit_release.mechanisms.prefix_tree import (MAX_ESTIMATED_FALSE_NODES, Sequences, TreeTooLargeError,
                                                    _water_fill_groups)
from transit_release.noise import discrete_laplace_table, exact_fraction

from transit_release.mechanisms.empty_candidates import candidate_total_variation
from transit_release.noise import MIN_SCALE, check_scale

MECHANISM_NAME = "safepath"
HOURS_PER_WEEK = 168
THRESHOLD_RULES = ("paper", "node")
#: How ε is split along a root-to-leaf path: ``paper`` (§4.1, taxonomies) or ``joint`` (one test per level).
BUDGET_RULES = ("paper", "joint")
#: The largest budget one noisy count of the ``joint`` rule gets: the samplers' finest scale (``1/MIN_SCALE``).
MAX_COUNT_EPSILON = 1 / MIN_SCALE
#: The default threshold rule (see the module docstring and ``benchmarks/experiment_safepath.py``).
DEFAULT_RULE = "paper"
RELEASES = ("terminating", "literal")

__all__ = ["BUDGET_RULES", "DEFAULT_RULE", "HOURS_PER_WEEK", "Hierarchy", "JointBudget", "NoisySafePathTree",
           "SafePathBudget", "SubLevelBudget", "TaxonomyBudgetError", "Thresholds", "Trajectories", "TreeTooLargeError",
           "build_joint_tree", "build_safepath_tree", "candidate_total_variation", "check_joint_size",
           "check_tree_size", "consistent_counts", "delta_slack", "estimated_false_nodes", "joint_delta_slack",
           "joint_false_nodes", "release_trajectories", "sanitize_joint", "sanitize_trajectories", "thresholds_for"]


class TaxonomyBudgetError(ValueError):
    """A taxonomy too tall for its universe: the non-general nodes would get ``ε_ng ≤ 0``."""


# ---- data --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trajectories:
    """Trajectories of (location, hour) pairs in compressed form (one per passenger)."""

    locations: np.ndarray  # int64, all trajectories concatenated
    hours: np.ndarray  # int64, same length
    offsets: np.ndarray  # int64, len = n + 1
    n_locations: int
    n_hours: int = HOURS_PER_WEEK

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, trajs, n_locations: int, n_hours: int = HOURS_PER_WEEK) -> "Trajectories":
        trajs = list(trajs)
        lengths = np.fromiter((len(t) for t in trajs), dtype=np.int64, count=len(trajs))
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.array([p for t in trajs for p in t], dtype=np.int64).reshape(-1, 2)
        out = cls(flat[:, 0].copy(), flat[:, 1].copy(), offsets, int(n_locations), int(n_hours))
        out.check()
        return out

    def check(self) -> None:
        if self.locations.size and (self.locations.min() < 0 or self.locations.max() >= self.n_locations):
            raise ValueError(f"locations must be in 0..{self.n_locations - 1}")
        if self.hours.size and (self.hours.min() < 0 or self.hours.max() >= self.n_hours):
            raise ValueError(f"hours must be in 0..{self.n_hours - 1}")

    def to_lists(self) -> list[tuple[tuple[int, int], ...]]:
        loc, hr = self.locations.tolist(), self.hours.tolist()
        return [tuple(zip(loc[a:b], hr[a:b])) for a, b in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist())]

    def pairs(self) -> Sequences:
        """The same trajectories as sequences of pair ids ``location·n_hours + hour``."""
        return Sequences(self.locations * self.n_hours + self.hours, self.offsets, self.n_locations * self.n_hours)

    def truncated(self, height: int) -> "Trajectories":
        """Each trajectory's first ``height`` points, up to (not including) its first decrease of the hour: what a
        release of height ``height`` can hold."""
        keep = np.minimum(self.monotone_lengths(), height)
        offsets = np.zeros(keep.size + 1, dtype=np.int64)
        np.cumsum(keep, out=offsets[1:])
        pos = np.repeat(self.offsets[:-1], keep) + (np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], keep))
        return Trajectories(self.locations[pos], self.hours[pos], offsets, self.n_locations, self.n_hours)

    def select(self, rows: np.ndarray) -> "Trajectories":
        """The trajectories of ``rows`` (indices or a boolean mask), in that order."""
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        offsets = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        pos = np.repeat(self.offsets[rows], lengths) + (np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths))
        return Trajectories(self.locations[pos], self.hours[pos], offsets, self.n_locations, self.n_hours)

    def monotone_lengths(self) -> np.ndarray:
        """Each trajectory's length up to (not including) its first decrease of the hour."""
        n = len(self)
        lengths = self.lengths.copy()
        if self.hours.size < 2:
            return lengths
        who = np.repeat(np.arange(n), lengths)
        drop = np.flatnonzero((self.hours[1:] < self.hours[:-1]) & (who[1:] == who[:-1])) + 1
        if drop.size:
            first = np.full(n, np.iinfo(np.int64).max)
            np.minimum.at(first, who[drop], drop - self.offsets[who[drop]])
            lengths = np.minimum(lengths, first)
        return lengths


# ---- taxonomies --------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _Step:
    """From the nodes at depth ``s − 1`` to their children at depth ``s`` (the items at depth ``H + 1``)."""

    child_of_item: np.ndarray  # item -> child node id at depth s
    position: np.ndarray  # child id -> position among its parent's children (ordered by smallest item)
    member: np.ndarray  # (n_parents, width): child id at each position, -1 past the last
    n_children: np.ndarray  # per parent
    first_item: np.ndarray  # (n_parents, width): smallest item of each child, ``size`` past the last
    last_item: np.ndarray  # (n_parents, width): largest item of each child, ``size`` past the last

    @cached_property
    def position_of_item(self) -> np.ndarray:
        """Each item's position among the children of its ancestor's parent at this step."""
        return self.position[self.child_of_item]

    @property
    def width(self) -> int:
        return int(self.member.shape[1])

    def before(self, parent: np.ndarray, floor: np.ndarray) -> np.ndarray:
        """How many children of each ``parent`` end before ``floor`` (their first positions: interval taxonomies)."""
        if parent.size == 0:
            return np.zeros(0, dtype=np.int64)
        if self.last_item.shape[0] == 1:  # one parent (a flat universe): its children's last items ascend
            return np.searchsorted(self.last_item[0], floor, side="left").astype(np.int64)
        return (self.last_item[parent] < floor[:, None]).sum(axis=1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Hierarchy:
    """A public taxonomy tree over the items ``0..size-1`` with ``height`` levels of general nodes.

    ``node_at[j-1][item]`` is the item's general node at depth ``j`` (1 = just below the
    root); node ids at each depth are ordered by (parent, smallest item), so they never
    depend on the order in which a file lists them.
    """

    size: int
    node_at: tuple[np.ndarray, ...]
    universe: str = "location"

    @property
    def height(self) -> int:
        return len(self.node_at)

    @classmethod
    def flat(cls, size: int, universe: str = "location") -> "Hierarchy":
        """Height 0: no general nodes, every item a child of the root."""
        return cls(int(size), (), universe)

    @classmethod
    def from_labels(cls, levels, universe: str = "location", size: int | None = None) -> "Hierarchy":
        """From one label per item and level, top level first (e.g. ``[line_of, group_of]`` for stations).

        A node is identified by its label *and* its parent, so each level refines the one above.
        """
        levels = [np.asarray(v) for v in levels]
        if size is None:
            if not levels:
                raise ValueError("a taxonomy without levels needs its universe size")
            size = int(levels[0].size)
        parent = np.zeros(size, dtype=np.int64)
        node_at = []
        items = np.arange(size, dtype=np.int64)
        for labels in levels:
            if labels.size != size:
                raise ValueError("every level of a taxonomy needs one label per item")
            _, code = np.unique(labels, return_inverse=True)
            key = parent * (int(code.max()) + 1 if size else 1) + code.astype(np.int64)
            uniq, inv = np.unique(key, return_inverse=True)
            first = np.full(uniq.size, size, dtype=np.int64)
            np.minimum.at(first, inv, items)
            order = np.lexsort((first, uniq // (int(code.max()) + 1)))
            rank = np.empty(uniq.size, dtype=np.int64)
            rank[order] = np.arange(uniq.size)
            parent = rank[inv]
            node_at.append(parent)
        return cls(size, tuple(node_at), universe)

    @classmethod
    def from_fanout(cls, size: int, fanout: int, height: int, universe: str = "location") -> "Hierarchy":
        """Bottom up: ``fanout`` consecutive items per general node at depth ``height``, ``fanout``
        consecutive nodes per node above, up to depth 1 (the root then has whatever is left).
        Every node is an interval of items. A level of a single node repeats as a chain."""
        if height < 0:
            raise ValueError(f"taxonomy height must be at least 0. Found {height}.")
        if height > 0 and fanout < 2:
            raise ValueError(f"fan-out must be at least 2. Found {fanout}.")
        items = np.arange(int(size), dtype=np.int64)
        return cls.from_labels([items // fanout ** (height - j + 1) for j in range(1, height + 1)], universe,
                               int(size))

    @classmethod
    def from_groups(cls, group_of_item, universe: str = "location") -> "Hierarchy":
        """Height 1: one group (e.g. a line) per item."""
        return cls.from_labels([group_of_item], universe)

    def n_nodes(self, depth: int) -> int:
        """Number of nodes at ``depth`` (0: the root; ``height + 1``: the items)."""
        if depth == 0:
            return 1
        if depth == self.height + 1:
            return self.size
        return int(self.node_at[depth - 1].max()) + 1 if self.size else 0

    @cached_property
    def steps(self) -> tuple[_Step, ...]:
        out = []
        items = np.arange(self.size, dtype=np.int64)
        parent_of_item = np.zeros(self.size, dtype=np.int64)
        for s in range(1, self.height + 2):
            child_of_item = self.node_at[s - 1] if s <= self.height else items
            n_child = self.n_nodes(s)
            n_par = self.n_nodes(s - 1)
            parent_of_child = np.zeros(n_child, dtype=np.int64)
            parent_of_child[child_of_item] = parent_of_item
            first = np.full(n_child, self.size, dtype=np.int64)
            last = np.full(n_child, -1, dtype=np.int64)
            np.minimum.at(first, child_of_item, items)
            np.maximum.at(last, child_of_item, items)
            order = np.lexsort((first, parent_of_child))
            n_children = np.bincount(parent_of_child, minlength=n_par)
            start = np.concatenate([[0], np.cumsum(n_children)[:-1]])
            position = np.empty(n_child, dtype=np.int64)
            position[order] = np.arange(n_child) - start[parent_of_child[order]]
            width = int(n_children.max()) if n_par else 0
            member = np.full((n_par, width), -1, dtype=np.int64)
            member[parent_of_child, position] = np.arange(n_child)
            first_at = np.full((n_par, width), self.size, dtype=np.int64)
            last_at = np.full((n_par, width), self.size, dtype=np.int64)
            first_at[parent_of_child, position] = first
            last_at[parent_of_child, position] = last
            out.append(_Step(child_of_item, position, member, n_children, first_at, last_at))
            parent_of_item = child_of_item
        return tuple(out)

    def sibling_candidates(self) -> tuple[int, ...]:
        """Per step (depth 1..H, then the items): the most children of one node — the candidates tested together."""
        return tuple(st.width for st in self.steps)

    @property
    def is_intervals(self) -> bool:
        """Every node covers consecutive items (needed by the monotone time rule)."""
        for st in self.steps:
            real = st.member >= 0
            size = np.bincount(st.child_of_item, minlength=st.position.size)
            span = st.last_item[real] - st.first_item[real] + 1
            if not np.array_equal(span, size[st.member[real]]):
                return False
        return True


# ---- budget ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SubLevelBudget:
    """``ε_s`` of one sub-level over its taxonomy: ``ε_g(j) = j·2ε_s/|U|``, ``ε_ng = ε_s(1 − H(H+1)/|U|)``."""

    universe: str  # "location" or "time"
    size: int  # |U|
    taxonomy_height: int  # H
    epsilon: Fraction  # ε_s

    def general(self, depth: int) -> Fraction:
        if not 1 <= depth <= self.taxonomy_height:
            raise ValueError(f"depth must be in 1..{self.taxonomy_height}. Found {depth}.")
        return depth * 2 * self.epsilon / self.size

    @property
    def nongeneral(self) -> Fraction:
        H = self.taxonomy_height
        return self.epsilon * (1 - Fraction(H * (H + 1), self.size))

    @property
    def per_step(self) -> tuple[Fraction, ...]:
        """Budget of each test along a taxonomy path: depths 1..H, then the non-general node."""
        return (*(self.general(j) for j in range(1, self.taxonomy_height + 1)), self.nongeneral)

    def path_spend(self) -> Fraction:
        return sum(self.per_step, Fraction(0))


@dataclass(frozen=True)
class SafePathBudget:
    """How ε is spent along every root-to-leaf path, exactly (built from public parameters only)."""

    epsilon: Fraction
    height: int  # h, levels of the prefix tree
    location: SubLevelBudget
    time: SubLevelBudget

    @classmethod
    def of(cls, epsilon: float | Fraction, height: int, n_locations: int, location_height: int,
           time_height: int, n_hours: int = HOURS_PER_WEEK) -> "SafePathBudget":
        """The split (:meth:`split`), refused if a noise scale is outside what the samplers support."""
        budget = cls.split(epsilon, height, n_locations, location_height, time_height, n_hours)
        budget.check_noise_scales()
        return budget

    @classmethod
    def split(cls, epsilon: float | Fraction, height: int, n_locations: int, location_height: int,
              time_height: int, n_hours: int = HOURS_PER_WEEK) -> "SafePathBudget":
        """The exact split of §4.1, with the ``ε_ng > 0`` guard (no check of the noise scales)."""
        if height < 1:
            raise ValueError(f"height must be at least 1. Found {height}.")
        eps = exact_fraction(epsilon)
        if eps <= 0:
            raise ValueError(f"epsilon must be positive. Found {float(eps)}.")
        eps_s = eps / height / 2
        subs = []
        for name, size, H in (("location", n_locations, location_height), ("time", n_hours, time_height)):
            if size < 1:
                raise ValueError(f"the {name} universe must have at least one item. Found {size}.")
            if H < 0:
                raise ValueError(f"the {name} taxonomy height must be at least 0. Found {H}.")
            if H * (H + 1) >= size:
                top = max(k for k in range(0, H + 1) if k * (k + 1) < size)
                raise TaxonomyBudgetError(
                    f"the {name} universe (|U| = {size}) cannot carry a taxonomy of height H = {H}: its non-general "
                    f"nodes would get ε_ng = ε_s·(1 − H(H+1)/|U|) = ε_s·(1 − {H * (H + 1)}/{size}) ≤ 0. "
                    f"Use a {name} taxonomy of height at most {top}.")
            subs.append(SubLevelBudget(name, int(size), int(H), eps_s))
        return cls(eps, int(height), subs[0], subs[1])

    def check_noise_scales(self) -> None:
        """Refuse (before any spend or draw) a test whose noise scale the samplers do not support."""
        tests = [(1 / e, sub.universe, f"general nodes at depth {j + 1}" if j < sub.taxonomy_height
                  else "non-general nodes") for sub in (self.location, self.time) for j, e in enumerate(sub.per_step)]
        for scale, universe, what in sorted(tests, key=lambda t: -t[0]):  # the largest scale binds first
            check_scale(scale, epsilon=self.epsilon,
                        where=f"SafePath (height {self.height}, {universe} sub-level, {what})")

    @property
    def level_epsilon(self) -> Fraction:
        return self.epsilon / self.height

    @property
    def sublevel_epsilon(self) -> Fraction:
        return self.level_epsilon / 2

    def path_spend(self) -> Fraction:
        """ε spent along any root-to-leaf path of full height (every taxonomy path sums to ``ε_s``)."""
        return self.height * (self.location.path_spend() + self.time.path_spend())

    def item_path_spends(self, locations: "Hierarchy", hours: "Hierarchy") -> set[Fraction]:
        """The spend of the root-to-leaf path of full height through every (location, hour), walking
        each item's own chain of taxonomy ancestors (so a tree whose levels did not partition the
        universe would show up here)."""
        spends = []
        for sub, tax in ((self.location, locations), (self.time, hours)):
            per_item = []
            for item in range(tax.size):
                ancestors = [int(tax.node_at[j][item]) for j in range(tax.height)]
                per_item.append(sum((sub.general(j + 1) for j, _ in enumerate(ancestors)), Fraction(0))
                                + sub.nongeneral)
            spends.append(set(per_item))
        return {self.height * (a + b) for a in spends[0] for b in spends[1]}


@dataclass(frozen=True)
class Thresholds:
    """Integer thresholds of every test along a taxonomy path (depths 1..H, then the non-general node)."""

    rule: str
    location: tuple[int, ...]
    time: tuple[int, ...]


def thresholds_for(budget: SafePathBudget, rule: str, locations: Hierarchy, hours: Hierarchy) -> Thresholds:
    """The public thresholds of ``rule`` (see the module docstring)."""
    if rule not in THRESHOLD_RULES:
        raise ValueError(f"threshold rule must be one of {THRESHOLD_RULES}. Found {rule!r}.")
    out = []
    for sub, tax in ((budget.location, locations), (budget.time, hours)):
        if rule == "paper":
            eps_l = float(budget.level_epsilon)
            g = math.ceil(4 * math.sqrt(2) / eps_l)
            ng = math.ceil(2 * math.sqrt(2) / eps_l)
            out.append((g,) * sub.taxonomy_height + (ng,))
        else:
            out.append(tuple(math.ceil(math.log(max(m, 1)) / float(e))
                             for m, e in zip(tax.sibling_candidates(), sub.per_step)))
    return Thresholds(rule, out[0], out[1])


def delta_slack(budget: SafePathBudget) -> float:
    """δ to charge for the samplers' exact error: ``h · Σ (1 + e^{ε'})·η(1/ε')`` over the noisy counts one
    trajectory can change in a level (``H_L + 1`` location counts and ``H_T + 1`` time counts, empty or
    not), ``η`` the candidate sampler's exact total variation at that scale
    (:func:`~transit_release.mechanisms.empty_candidates.candidate_total_variation`). Rounded up by a
    relative 1e-12."""
    per_level = 0.0
    for sub in (budget.location, budget.time):
        for eps in sub.per_step:
            per_level += (1 + math.exp(float(eps))) * candidate_total_variation(1 / eps)
    return budget.height * per_level * (1.0 + 1e-12)


# ---- size check --------------------------------------------------------------------------------------

def _sublevel_growth(sub: SubLevelBudget, thresholds: tuple[int, ...]) -> float:
    """Expected kept non-general nodes under one parent with no trajectories: ``|U|·Π_j P(Z_j ≥ θ_j)``."""
    p = float(sub.size)
    for eps, theta in zip(sub.per_step, thresholds):
        p *= discrete_laplace_table(1 / eps).upper_tail(int(theta))
    return p


def false_node_growth(budget: SafePathBudget, thresholds: Thresholds) -> float:
    """Expected kept empty children of one kept empty node (ignoring the monotone time rule: an upper bound)."""
    return _sublevel_growth(budget.location, thresholds.location) * _sublevel_growth(budget.time, thresholds.time)


def estimated_false_nodes(budget: SafePathBudget, thresholds: Thresholds) -> float:
    """A data-independent size estimate: ``|L|·|T|`` chains of empty descendants, ``Σ_{i=1..h} g^i`` each."""
    g = false_node_growth(budget, thresholds)
    chain = sum(g ** i for i in range(1, budget.height + 1))
    return budget.location.size * budget.time.size * chain


def check_tree_size(budget: SafePathBudget, thresholds: Thresholds) -> None:
    """Raise ``TreeTooLargeError`` before any noise is drawn if the empty nodes alone could not be built."""
    estimate = estimated_false_nodes(budget, thresholds)
    if estimate > MAX_ESTIMATED_FALSE_NODES:
        raise TreeTooLargeError(
            f"SafePath over {budget.location.size} locations × {budget.time.size} hours (taxonomy heights "
            f"{budget.location.taxonomy_height} and {budget.time.taxonomy_height}, {thresholds.rule} thresholds) "
            f"at height {budget.height} would grow about {estimate:.2g} empty nodes (each kept empty node keeps on "
            f"average {false_node_growth(budget, thresholds):.3g} empty children; limit "
            f"{MAX_ESTIMATED_FALSE_NODES:,}). Use taller taxonomies, a lower height or higher thresholds.")


# ---- the joint rule: one test of the (location, hour) pair per level ---------------------------------------

@dataclass(frozen=True)
class JointBudget:
    """The ``joint`` rule: every level tests its candidate (location, hour) pairs once, at
    ``ε_ℓ = min(ε/h, MAX_COUNT_EPSILON)``, against ``θ = ⌈ln(|L|·|T|)/ε_ℓ⌉`` (module docstring)."""

    epsilon: Fraction
    height: int
    n_locations: int
    n_hours: int = HOURS_PER_WEEK

    @classmethod
    def of(cls, epsilon: float | Fraction, height: int, n_locations: int,
           n_hours: int = HOURS_PER_WEEK) -> "JointBudget":
        """Public parameters only; refuses a scale the samplers do not support."""
        if height < 1:
            raise ValueError(f"height must be at least 1. Found {height}.")
        eps = exact_fraction(epsilon)
        if eps <= 0:
            raise ValueError(f"epsilon must be positive. Found {float(eps)}.")
        if n_locations < 1 or n_hours < 1:
            raise ValueError(f"the universes need at least one item. Found {n_locations} locations, {n_hours} hours.")
        budget = cls(eps, int(height), int(n_locations), int(n_hours))
        check_scale(1 / budget.level_epsilon, epsilon=eps, where=f"SafePath, joint rule (height {height}, scale h/ε)")
        return budget

    @property
    def level_epsilon(self) -> Fraction:
        """``ε_ℓ``: the budget of every noisy count (one per level on a trajectory's path)."""
        return min(self.epsilon / self.height, Fraction(MAX_COUNT_EPSILON))

    @property
    def candidates(self) -> int:
        """``m = |L|·|T|``: the (location, hour) pairs a node's children are drawn from."""
        return self.n_locations * self.n_hours

    @property
    def threshold(self) -> int:
        """``⌈ln(m)/ε_ℓ⌉``: about ``½`` empty child passes per tested node (``m·½e^{−ε_ℓθ} ≤ ½``)."""
        return math.ceil(math.log(max(self.candidates, 1)) / float(self.level_epsilon))

    def path_spend(self) -> Fraction:
        """ε spent along any root-to-leaf path of full height: ``h·ε_ℓ ≤ ε``."""
        return self.height * self.level_epsilon

    def thresholds(self) -> Thresholds:
        return Thresholds("joint", (self.threshold,), ())


def joint_delta_slack(budget: JointBudget) -> float:
    """δ for the samplers' exact error: ``h·(1 + e^{ε_ℓ})·η(1/ε_ℓ)`` (one noisy count per level), rounded up."""
    eps = budget.level_epsilon
    return budget.height * (1 + math.exp(float(eps))) * candidate_total_variation(1 / eps) * (1.0 + 1e-12)


def joint_false_nodes(budget: JointBudget) -> float:
    """A data-independent size estimate: ``m`` chains of empty descendants, ``Σ_{i=1..h} g^i`` each, with
    ``g = m·P(Z ≥ θ)`` the kept empty children of one kept empty node."""
    g = budget.candidates * discrete_laplace_table(1 / budget.level_epsilon).upper_tail(budget.threshold)
    return budget.candidates * sum(g ** i for i in range(1, budget.height + 1))


def check_joint_size(budget: JointBudget) -> None:
    """Raise ``TreeTooLargeError`` before any noise is drawn if the empty nodes alone could not be built."""
    estimate = joint_false_nodes(budget)
    if estimate > MAX_ESTIMATED_FALSE_NODES:
        raise TreeTooLargeError(
            f"SafePath (joint rule) over {budget.n_locations} locations × {budget.n_hours} hours at height "
            f"{budget.height} would grow about {estimate:.2g} empty nodes (limit {MAX_ESTIMATED_FALSE_NODES:,}).")


# ---- building (Algorithm 1, Procedures 1–2) -----------------------------------------------------------

def unique_counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and their counts (a sort and a diff: NumPy 2.4's ``np.unique`` took 30 s
    on 2.8 million int64 keys here)."""
    s = np.sort(keys)
    if s.size == 0:
        return s, np.zeros(0, dtype=np.int64)
    start = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    return s[start], np.diff(np.r_[start, s.size]).astype(np.int64)


@dataclass(frozen=True)
class TrajectoryLevel:
    """Nodes of one level, sorted by (parent, location, hour)."""

    parent: np.ndarray  # int64 index into the previous level (0 = the root for level 1)
    location: np.ndarray  # int64
    hour: np.ndarray  # int64
    count: np.ndarray  # int64 noisy count


@dataclass(frozen=True)
class NoisySafePathTree:
    levels: list[TrajectoryLevel]
    budget: "SafePathBudget | JointBudget"
    thresholds: Thresholds
    monotone: bool

    @property
    def n_nodes(self) -> int:
        return sum(lv.location.size for lv in self.levels)


def _sublevel(generator: np.random.Generator, tax: Hierarchy, sub: SubLevelBudget, thresholds: tuple[int, ...],
              group: np.ndarray, item: np.ndarray, n_groups: int, floor: np.ndarray | None):
    """Procedures 1–2 under ``n_groups`` parents at once.

    ``group``/``item``: each live record's parent (0..n_groups-1) and next item. ``floor`` (per
    group, or None): only items ``≥ floor`` are candidates. Returns the kept non-general nodes
    ``(group, item, noisy count)`` sorted by (group, item), and each record's kept node (−1 if none).
    """
    kept_group = np.arange(n_groups, dtype=np.int64)
    kept_node = np.zeros(n_groups, dtype=np.int64)  # the taxonomy's root under every group
    ids = np.flatnonzero(group >= 0)  # the records still in play (compacted as they drop out)
    rec, item = group[ids].astype(np.int64), item[ids]  # each record's kept node at the previous depth
    for st, eps, theta in zip(tax.steps, sub.per_step, thresholds):
        W = st.width
        key = rec * W + st.position_of_item[item]
        n_keys = kept_node.size * W  # candidate children of the kept nodes
        dense = n_keys <= 4 * key.size + 4096  # count by bincount (linear) when the key space is small
        if dense:
            full = np.bincount(key, minlength=n_keys)
            uniq = np.flatnonzero(full)
            cnt = full[uniq]
        else:
            uniq, cnt = unique_counts(key)
        scale = 1 / eps
        noisy = cnt + discrete_laplace_table(scale).sample(generator, uniq.size)
        keep = noisy >= theta
        cut = (st.before(kept_node, floor[kept_group]) if floor is not None
               else np.zeros(kept_node.size, dtype=np.int64))
        n_empty = st.n_children[kept_node] - cut - np.bincount(uniq // W, minlength=kept_node.size)
        empties = sample_passing_empties(generator, n_empty, scale, int(theta))
        pos = free_items(empties.group, empties.rank + cut[empties.group], W, uniq)
        new_key = np.concatenate([uniq[keep], empties.group * W + pos])
        new_cnt = np.concatenate([noisy[keep], empties.count])
        order = np.argsort(new_key, kind="stable")
        new_key, new_cnt = new_key[order], new_cnt[order]
        parent_idx = new_key // W
        kept_group = kept_group[parent_idx]
        kept_node = st.member[kept_node[parent_idx], new_key % W]
        if dense:
            slot = np.full(n_keys, -1, dtype=np.int64)
            slot[new_key] = np.arange(new_key.size)
            rec = slot[key]
        else:
            rec = np.full(key.size, -1, dtype=np.int64)
            if new_key.size:
                at = np.searchsorted(new_key, key).clip(0, new_key.size - 1)
                hit = new_key[at] == key
                rec[hit] = at[hit]
        cnt_out = new_cnt
        gone = rec < 0
        if gone.any():
            stay = ~gone
            ids, rec, item = ids[stay], rec[stay], item[stay]
    order = np.lexsort((kept_node, kept_group))
    where = np.empty(order.size, dtype=np.int64)
    where[order] = np.arange(order.size)
    out = np.full(group.size, -1, dtype=np.int64)
    out[ids] = where[rec]
    return kept_group[order], kept_node[order], cnt_out[order], out


def build_safepath_tree(trajs: Trajectories, budget: SafePathBudget, locations: Hierarchy, hours: Hierarchy,
                        thresholds: Thresholds, generator: np.random.Generator, *,
                        monotone: bool = True) -> NoisySafePathTree:
    """Algorithm 1, lines 1–12, level by level, vectorised over all nodes of a level."""
    _check_inputs(trajs, budget, locations, hours, thresholds, monotone)
    check_tree_size(budget, thresholds)
    lengths = trajs.monotone_lengths() if monotone else trajs.lengths
    live = np.flatnonzero(lengths > 0)
    node = np.zeros(live.size, dtype=np.int64)  # each live trajectory's node at the previous level (root 0)
    start, lengths = trajs.offsets[live], lengths[live]
    parent_hour = np.zeros(1, dtype=np.int64)
    n_parents = 1
    levels: list[TrajectoryLevel] = []
    for depth in range(budget.height):
        go = np.flatnonzero(lengths > depth)
        node, start, lengths = node[go], start[go], lengths[go]
        loc = trajs.locations[start + depth]
        hr = trajs.hours[start + depth]
        lg, litem, _, lrec = _sublevel(generator, locations, budget.location, thresholds.location,
                                       node, loc, n_parents, None)
        floor = parent_hour[lg] if monotone else None
        tg, titem, tcnt, trec = _sublevel(generator, hours, budget.time, thresholds.time,
                                          lrec, hr, lg.size, floor)
        if tg.size == 0:
            break
        levels.append(TrajectoryLevel(lg[tg], litem[tg], titem, tcnt))
        keep = np.flatnonzero(trec >= 0)
        node, start, lengths = trec[keep], start[keep], lengths[keep]
        parent_hour = titem
        n_parents = tg.size
    return NoisySafePathTree(levels, budget, thresholds, monotone)


def build_joint_tree(trajs: Trajectories, budget: JointBudget, generator: np.random.Generator, *,
                     monotone: bool = True) -> NoisySafePathTree:
    """The joint rule's tree: at each level one noisy count per candidate (location, hour) pair.

    The pairs are one flat universe of ``|L|·|T|`` items numbered hour-major (``hour·|L| + location``),
    so the monotone time rule is "items ≥ parent hour·|L|"; empty candidates go through the shared
    sampler as in Procedures 1–2.
    """
    if trajs.n_locations != budget.n_locations or trajs.n_hours != budget.n_hours:
        raise ValueError(f"the trajectories use {trajs.n_locations} locations × {trajs.n_hours} hours but the budget "
                         f"was planned for {budget.n_locations} × {budget.n_hours}")
    check_joint_size(budget)
    n_loc = budget.n_locations
    pairs = Hierarchy.flat(budget.candidates, "pair")
    level = SubLevelBudget("pair", budget.candidates, 0, budget.level_epsilon)
    theta = (budget.threshold,)
    lengths = trajs.monotone_lengths() if monotone else trajs.lengths
    live = np.flatnonzero(lengths > 0)
    node = np.zeros(live.size, dtype=np.int64)
    start, lengths = trajs.offsets[live], lengths[live]
    parent_hour = np.zeros(1, dtype=np.int64)
    n_parents = 1
    levels: list[TrajectoryLevel] = []
    for depth in range(budget.height):
        go = np.flatnonzero(lengths > depth)
        node, start, lengths = node[go], start[go], lengths[go]
        item = trajs.hours[start + depth] * n_loc + trajs.locations[start + depth]
        g, kept, cnt, rec = _sublevel(generator, pairs, level, theta, node, item, n_parents,
                                      parent_hour * n_loc if monotone else None)
        if g.size == 0:
            break
        levels.append(TrajectoryLevel(g, kept % n_loc, kept // n_loc, cnt))
        keep = np.flatnonzero(rec >= 0)
        node, start, lengths = rec[keep], start[keep], lengths[keep]
        parent_hour = kept // n_loc
        n_parents = g.size
    return NoisySafePathTree(levels, budget, budget.thresholds(), monotone)


def _check_inputs(trajs: Trajectories, budget: SafePathBudget, locations: Hierarchy, hours: Hierarchy,
                  thresholds: Thresholds, monotone: bool) -> None:
    if locations.size != trajs.n_locations or budget.location.size != trajs.n_locations:
        raise ValueError(f"the location universe has {trajs.n_locations} items but the taxonomy/budget has "
                         f"{locations.size}/{budget.location.size}")
    if hours.size != trajs.n_hours or budget.time.size != trajs.n_hours:
        raise ValueError(f"the time universe has {trajs.n_hours} hours but the taxonomy/budget has "
                         f"{hours.size}/{budget.time.size}")
    if (locations.height, hours.height) != (budget.location.taxonomy_height, budget.time.taxonomy_height):
        raise ValueError("the budget was made for other taxonomy heights")
    if len(thresholds.location) != locations.height + 1 or len(thresholds.time) != hours.height + 1:
        raise ValueError("the thresholds were made for other taxonomy heights")
    if monotone and not hours.is_intervals:
        raise ValueError("the monotone time rule needs a time taxonomy of intervals of hours (e.g. from a fan-out)")


# ---- consistency and release (§4.3) ------------------------------------------------------------------

def consistent_counts(tree: NoisySafePathTree) -> list[np.ndarray]:
    """EnhanceConsistency on the raw children counts, top-down, with a floor at 0 (module docstring)."""
    levels = tree.levels
    if not levels:
        return []
    bar = [np.maximum(levels[0].count.astype(float), 0.0)]
    for d in range(1, len(levels)):
        parent = levels[d].parent
        raw = levels[d].count.astype(float)
        n_prev = levels[d - 1].count.size
        size = np.bincount(parent, minlength=n_prev)
        deficit = bar[d - 1] - np.bincount(parent, weights=raw, minlength=n_prev)
        out = raw + np.minimum(0.0, deficit / np.maximum(size, 1))[parent]
        negative = out < 0
        if negative.any():  # share the deficit among the children that stay above 0 (water-filling)
            groups = np.unique(parent[negative])
            kids = np.flatnonzero(np.isin(parent, groups))
            out[kids] = _water_fill_groups(raw[kids], parent[kids], bar[d - 1])
        bar.append(out)
    return bar


def release_trajectories(tree: NoisySafePathTree, bar: list[np.ndarray], release: str = "terminating"
                         ) -> list[tuple[tuple[tuple[int, int], ...], int]]:
    """(trajectory, copies) for every node with copies > 0, sorted by trajectory."""
    if release not in RELEASES:
        raise ValueError(f"release must be one of {RELEASES}. Found {release!r}.")
    levels = tree.levels
    out = []
    for d, lv in enumerate(levels):
        if release == "terminating" and d + 1 < len(levels):
            child_sum = np.bincount(levels[d + 1].parent, weights=bar[d + 1], minlength=lv.count.size)
        else:
            child_sum = np.zeros(lv.count.size)
        copies = np.maximum(np.rint(bar[d] - child_sum), 0).astype(np.int64)
        nodes = np.flatnonzero(copies)
        if nodes.size == 0:
            continue
        cols = [nodes]
        for up in range(d, 0, -1):
            cols.append(levels[up].parent[cols[-1]])
        cols.reverse()
        loc = np.stack([levels[k].location[j] for k, j in enumerate(cols)], axis=1).tolist()
        hr = np.stack([levels[k].hour[j] for k, j in enumerate(cols)], axis=1).tolist()
        out.extend((tuple(zip(a, b)), c) for a, b, c in zip(loc, hr, copies[nodes].tolist()))
    return sorted(out)


def sanitize_trajectories(trajs: Trajectories, budget: SafePathBudget, locations: Hierarchy, hours: Hierarchy,
                          generator: np.random.Generator, *, rule: str = DEFAULT_RULE, monotone: bool = True,
                          release: str = "terminating"):
    """The whole ε-DP pipeline: noisy tree, consistency, release. Returns ``(tree, release)``."""
    if release not in RELEASES:
        raise ValueError(f"release must be one of {RELEASES}. Found {release!r}.")
    thresholds = thresholds_for(budget, rule, locations, hours)
    tree = build_safepath_tree(trajs, budget, locations, hours, thresholds, generator, monotone=monotone)
    return tree, release_trajectories(tree, consistent_counts(tree), release)


def sanitize_joint(trajs: Trajectories, budget: JointBudget, generator: np.random.Generator, *,
                   monotone: bool = True, release: str = "terminating"):
    """The joint rule's ε-DP pipeline: noisy tree, consistency, release. Returns ``(tree, release)``."""
    if release not in RELEASES:
        raise ValueError(f"release must be one of {RELEASES}. Found {release!r}.")
    tree = build_joint_tree(trajs, budget, generator, monotone=monotone)
    return tree, release_trajectories(tree, consistent_counts(tree), release)


def expand_release(release, n_locations: int, n_hours: int = HOURS_PER_WEEK) -> Trajectories:
    """The released (trajectory, copies) pairs as a data set of trajectories."""
    lengths = np.array([len(t) for t, _ in release], dtype=np.int64)
    copies = np.array([c for _, c in release], dtype=np.int64)
    flat = np.array([p for t, _ in release for p in t], dtype=np.int64).reshape(-1, 2)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else np.zeros(0, dtype=np.int64)
    # repeat each trajectory ``copies`` times
    idx = np.repeat(np.arange(lengths.size), copies)
    rep_len = lengths[idx]
    offsets = np.zeros(idx.size + 1, dtype=np.int64)
    np.cumsum(rep_len, out=offsets[1:])
    pos = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], rep_len) + np.repeat(starts[idx], rep_len)
    return Trajectories(flat[pos, 0] if flat.size else np.zeros(0, dtype=np.int64),
                        flat[pos, 1] if flat.size else np.zeros(0, dtype=np.int64), offsets, n_locations, n_hours)
