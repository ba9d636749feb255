"""A factored Markov model of passenger trajectories: stations, hours of the day and days, each ε-DP.

A trajectory ``L1.T1 → … → Lℓ.Tℓ`` (hours of the week, never decreasing; the
first ``h`` points kept) is split into three sequences of the same length ``ℓ``:
its stations ``L1 … Lℓ``, its hours of the day ``T1 mod 24 … Tℓ mod 24`` and its
days ``⌊T1/24⌋ ≤ … ≤ ⌊Tℓ/24⌋``. Each is released under its share of ε, and the
published trajectories are drawn from the three releases:

1. **Days** (``ε_d = ε/10``): a noisy histogram over *every* non-decreasing
   day sequence of length 1..h (a public domain of ``C(h + 7, 7) − 1`` cells,
   sensitivity 1: one passenger is one cell), integer discrete Laplace noise
   at scale ``1/ε_d`` on every cell; cells below ``θ_d = ⌈ln(cells)/ε_d⌉`` are
   set to 0 (about ½ empty cell passes in all). The kept cells fix how many
   trajectories of each day sequence, hence of each length, are published.
2. **Stations** (``ε_s = (ε − ε_d)/2``): the variable-length n-gram sanitizer
   (:mod:`transit_release.mechanisms.ngram`) over the station sequences, each
   prefixed with a *length marker* (one symbol per length 1..h: universe
   ``|L| + h``, ``ℓmax = h + 1``), so that the model knows where a trajectory
   starts and how long it is.
3. **Hours of the day** (``ε_t = ε_s``): the same over the 24 hours, with the
   same markers (universe ``24 + h``).

Generation (post-processing, from the generator of the noise). For each kept
day sequence, one trajectory per count: the stations are drawn from the
station model's variable-order Markov chain starting at the length marker
(:func:`~transit_release.mechanisms.ngram.sample_from_tree`), the hours of the
day likewise, an hour never below the previous one on the same day; point
``i`` is ``station_i @ 24·day_i + hour_i``. The draw is vectorised over the trajectories (a loop over
the ``≤ h`` positions, never one per trajectory: :func:`draw_trajectories`), and its randomness is the
release's secure stream, like the noise. Stations, hours of the day and days
are drawn independently of one another given the length: a regularity that
ties them together beyond it (e.g. one station in the morning, another at
night) is kept only as far as the position in the trajectory carries it.

Privacy. Neighbours add or remove one passenger's trajectory. Its day sequence
is one cell of the histogram (L1 sensitivity 1): ``ε_d``-DP. Its station and
hour sequences are one sequence each of the two n-gram inputs, each sanitizer
``ε_s``- and ``ε_t``-DP for adding or removing one sequence (its own proof).
Sequential composition over the three releases: ``ε_d + ε_s + ε_t = ε``
exactly (:meth:`MarkovBudget.path_spend`, exact fractions); the thresholds, the
consistency steps and the generation are post-processing. δ is the samplers'
exact total variation only (:func:`delta_slack`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from transit_release.mechanisms import ngram
from transit_release.mechanisms.empty_candidates import candidate_total_variation
from transit_release.mechanisms.prefix_tree import Sequences
from transit_release.mechanisms.safepath import HOURS_PER_WEEK, Trajectories
from transit_release.noise import check_scale, discrete_laplace_table, exact_fraction

MECHANISM_NAME = "trajectory-markov"
HOURS_PER_DAY = 24
DAYS_PER_WEEK = HOURS_PER_WEEK // HOURS_PER_DAY
#: the days' share of ε (their histogram has large counts and few cells)
DAY_SHARE = Fraction(1, 10)
DEFAULT_MAX_GRAM = 3
#: refuse a day histogram with more cells than this (``C(h + 7, 7) − 1``: h ≤ 22)
MAX_DAY_CELLS = 2_000_000

__all__ = ["DEFAULT_MAX_GRAM", "MarkovBudget", "MarkovModel", "MarkovRelease", "day_cell", "day_sequence",
           "delta_slack", "draw_trajectories", "fit_markov", "sanitize_markov"]


class MarkovParameterError(ValueError):
    """Parameters the factored Markov model cannot run with (checked before any noise is drawn)."""


def _cells_of_length(length: int) -> int:
    """Non-decreasing sequences of ``length`` days over a week: ``C(length + 6, 6)``."""
    return math.comb(length + DAYS_PER_WEEK - 1, DAYS_PER_WEEK - 1)


def max_day_height() -> int:
    """The largest height whose day histogram has at most :data:`MAX_DAY_CELLS` cells."""
    h = 1
    while math.comb(h + 1 + DAYS_PER_WEEK, DAYS_PER_WEEK) - 1 <= MAX_DAY_CELLS:
        h += 1
    return h


@dataclass(frozen=True)
class MarkovBudget:
    """Public parameters and the exact split ``ε = ε_d + ε_s + ε_t``."""

    epsilon: Fraction
    height: int  # h: points kept per trajectory
    max_gram: int  # nmax of both n-gram models
    n_locations: int

    @classmethod
    def of(cls, epsilon: float | Fraction, height: int, n_locations: int,
           max_gram: int = DEFAULT_MAX_GRAM) -> "MarkovBudget":
        eps = exact_fraction(epsilon)
        if eps <= 0:
            raise MarkovParameterError(f"epsilon must be positive. Found {float(eps)}.")
        if int(height) != height or height < 1:
            raise MarkovParameterError(f"height must be a positive integer. Found {height}.")
        if n_locations < 1:
            raise MarkovParameterError(f"the location universe needs at least one item. Found {n_locations}.")
        budget = cls(eps, int(height), int(max_gram), int(n_locations))
        if budget.day_cells > MAX_DAY_CELLS:
            raise MarkovParameterError(
                f"the day histogram of trajectories of up to {height} points has {budget.day_cells:,} cells (limit "
                f"{MAX_DAY_CELLS:,}); use a height of at most {max_day_height()}")
        check_scale(1 / budget.day_epsilon, epsilon=eps, where="trajectory Markov model, day histogram (scale 10/ε)")
        try:
            budget.station_budget()
            budget.hour_budget()
        except ngram.NGramParameterError as exc:
            raise MarkovParameterError(str(exc)) from None
        return budget

    @property
    def day_epsilon(self) -> Fraction:
        return self.epsilon * DAY_SHARE

    @property
    def station_epsilon(self) -> Fraction:
        return (self.epsilon - self.day_epsilon) / 2

    @property
    def hour_epsilon(self) -> Fraction:
        return self.epsilon - self.day_epsilon - self.station_epsilon

    def path_spend(self) -> Fraction:
        """``ε_d + ε_s + ε_t``: sequential composition of the three releases (exactly ε)."""
        return self.day_epsilon + self.station_epsilon + self.hour_epsilon

    def station_budget(self) -> ngram.NGramBudget:
        """Stations and ``h`` length markers, ``ℓmax = h + 1`` (the marker and up to ``h`` stations)."""
        return ngram.NGramBudget.of(self.station_epsilon, self.height + 1, self.max_gram, self.n_locations + self.height)

    def hour_budget(self) -> ngram.NGramBudget:
        return ngram.NGramBudget.of(self.hour_epsilon, self.height + 1, self.max_gram, HOURS_PER_DAY + self.height)

    @property
    def day_cells(self) -> int:
        return sum(_cells_of_length(k) for k in range(1, self.height + 1))

    @property
    def day_threshold(self) -> int:
        """``⌈ln(cells)/ε_d⌉``: ``cells·½e^{−ε_d·θ} ≤ ½`` empty cells pass on average."""
        return max(1, math.ceil(math.log(self.day_cells) / float(self.day_epsilon)))


def delta_slack(budget: MarkovBudget) -> float:
    """δ for the samplers' exact error: the day histogram's one changed cell, ``(1 + e^{ε_d})·η(1/ε_d)``, plus each
    n-gram sanitizer's own (:func:`~transit_release.mechanisms.ngram.noise_delta`)."""
    eps_d = budget.day_epsilon
    days = (1 + math.exp(float(eps_d))) * candidate_total_variation(1 / eps_d)
    return (days + ngram.noise_delta(budget.station_budget()) + ngram.noise_delta(budget.hour_budget())) * (1 + 1e-12)


# ---- the day histogram's cells: non-decreasing day sequences, ranked ----------------------------------------

def _binomials(top: int) -> np.ndarray:
    out = np.zeros((top + 1, top + 1), dtype=np.int64)
    for n in range(top + 1):
        for k in range(n + 1):
            out[n, k] = math.comb(n, k)
    return out


def _offsets(height: int) -> np.ndarray:
    """First cell of each length ``1..height`` (index ``length − 1``), and the total at the end."""
    return np.concatenate([[0], np.cumsum([_cells_of_length(k) for k in range(1, height + 1)])]).astype(np.int64)


def day_cell(days: np.ndarray, offsets: np.ndarray, height: int) -> np.ndarray:
    """Cell of every row of ``days`` (non-decreasing, ``-1`` past the end; at least one day per row).

    A sequence ``d_1 ≤ … ≤ d_ℓ`` is the combination ``c_i = d_i + i − 1`` of ``{0..ℓ + 5}``; its colex rank
    ``Σ_i C(c_i, i)`` is its place among the cells of length ``ℓ``.
    """
    binom = _binomials(height + DAYS_PER_WEEK)
    length = (days >= 0).sum(axis=1)
    rank = np.zeros(days.shape[0], dtype=np.int64)
    for i in range(days.shape[1]):
        has = days[:, i] >= 0
        rank[has] += binom[days[has, i] + i, i + 1]
    return offsets[length - 1] + rank


def day_sequence(cell: int, offsets: np.ndarray, height: int) -> tuple[int, ...]:
    """The day sequence of a cell (inverse of :func:`day_cell`)."""
    length = int(np.searchsorted(offsets, cell, side="right"))
    rank = int(cell - offsets[length - 1])
    out = []
    for i in range(length, 0, -1):  # the largest c with C(c, i) ≤ rank
        c = i - 1
        while math.comb(c + 1, i) <= rank:
            c += 1
        rank -= math.comb(c, i)
        out.append(c - (i - 1))
    return tuple(reversed(out))


# ---- the mechanism ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MarkovRelease:
    """The released ``(trajectory, copies)``, sorted, internal figures (never published) and the noisy models."""

    released: list[tuple[tuple[tuple[int, int], ...], int]]
    stats: dict[str, int]
    models: "MarkovModel | None" = field(default=None, compare=False)  # what the release drew from


def _with_marker(symbols: np.ndarray, offsets: np.ndarray, marker_base: int, height: int) -> Sequences:
    """Each sequence prefixed by its length marker ``marker_base + ℓ − 1`` (universe ``marker_base + height``)."""
    lengths = np.diff(offsets)
    off = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=off[1:])
    out = np.empty(int(off[-1]), dtype=np.int64)
    out[off[:-1]] = marker_base + lengths - 1
    body = np.ones(out.size, dtype=bool)
    body[off[:-1]] = False
    out[body] = symbols
    return Sequences(out, off, marker_base + height)


def _model(seqs: Sequences, budget: ngram.NGramBudget, generator: np.random.Generator) -> ngram.NGramTree:
    tree = ngram.build_exploration_tree(seqs, budget, generator)
    ngram.enforce_consistency(tree)
    return tree


@dataclass(frozen=True)
class MarkovModel:
    """The three noisy releases (the ε-DP part): the kept day-sequence counts (``0`` where dropped) and the two
    consistent n-gram trees. Everything drawn from it is post-processing."""

    budget: MarkovBudget
    day_counts: np.ndarray
    stations: ngram.NGramTree
    hours: ngram.NGramTree


def fit_markov(trajs: Trajectories, budget: MarkovBudget, generator: np.random.Generator) -> MarkovModel:
    """The three noisy models, their noise drawn in a fixed order: days, stations, hours of the day."""
    if trajs.n_locations != budget.n_locations or trajs.n_hours != HOURS_PER_WEEK:
        raise MarkovParameterError(f"the trajectories use {trajs.n_locations} locations × {trajs.n_hours} hours; the "
                                   f"model needs {budget.n_locations} × {HOURS_PER_WEEK} (hours of the week)")
    h = budget.height
    cut = trajs.truncated(h)
    cut = cut.select(cut.lengths > 0)
    lengths = cut.lengths
    # 1. the day histogram
    offsets = _offsets(h)
    days = np.full((len(cut), h), -1, dtype=np.int64)
    who = np.repeat(np.arange(len(cut)), lengths)
    pos = np.arange(who.size) - cut.offsets[who]
    days[who, pos] = cut.hours // HOURS_PER_DAY
    counts = np.bincount(day_cell(days, offsets, h), minlength=int(offsets[-1]))
    noisy = counts + discrete_laplace_table(1 / budget.day_epsilon).sample(generator, counts.size)
    kept = np.where(noisy >= budget.day_threshold, noisy, 0)
    # 2. and 3. the station and hour-of-day models
    stations = _model(_with_marker(cut.locations, cut.offsets, budget.n_locations, h), budget.station_budget(),
                      generator)
    hours = _model(_with_marker(cut.hours % HOURS_PER_DAY, cut.offsets, HOURS_PER_DAY, h), budget.hour_budget(),
                   generator)
    return MarkovModel(budget, kept, stations, hours)


def draw_trajectories(model: MarkovModel, generator: np.random.Generator) -> MarkovRelease:
    """Post-processing of the model: one trajectory per kept day-sequence count, its days from its cell, its
    stations and hours of the day drawn from the two trees (an hour never below the previous one on the same day).
    Vectorised over the trajectories (a loop over the ≤ h positions, never one per trajectory); the randomness is
    ``generator``'s (the release's secure stream)."""
    budget, kept = model.budget, model.day_counts
    h = budget.height
    offsets = _offsets(h)
    cells = np.flatnonzero(kept)
    seq_days = np.full((cells.size, h), -1, dtype=np.int64)
    for r, c in enumerate(cells.tolist()):  # one per kept cell (at most C(h + 7, 7) − 1 of them)
        d = day_sequence(c, offsets, h)
        seq_days[r, :len(d)] = d
    rows = np.repeat(np.arange(cells.size), kept[cells])
    out_days = seq_days[rows]
    out_len = (out_days >= 0).sum(axis=1)
    st = ngram.sample_from_tree(model.stations, budget.n_locations + out_len - 1, out_len, generator,
                                budget.n_locations)

    def same_day_floor(r: np.ndarray, i: int, seq: np.ndarray) -> np.ndarray:
        if i == 1:
            return np.zeros(r.size, dtype=np.int64)
        same = out_days[r, i - 1] == out_days[r, i - 2]
        return np.where(same, seq[r, i - 1], 0)

    hr = ngram.sample_from_tree(model.hours, HOURS_PER_DAY + out_len - 1, out_len, generator, HOURS_PER_DAY,
                                floor=same_day_floor)
    width = st.shape[1] - 1  # the longest generated row, which may be shorter than h
    released = _count_distinct(st[:, 1:], out_days[:, :width] * HOURS_PER_DAY + hr[:, 1:], out_len)
    stats = {"day_cells_kept": int(cells.size), "station_grams": model.stations.n_nodes,
             "hour_grams": model.hours.n_nodes}
    return MarkovRelease(released, stats, model)


def sanitize_markov(trajs: Trajectories, budget: MarkovBudget, generator: np.random.Generator) -> MarkovRelease:
    """The ε-DP release: the three noisy models (days, stations, hours of the day), then the trajectories drawn
    from them. Noise is drawn in a fixed order (days, stations, hours), then the generation's randomness."""
    return draw_trajectories(fit_markov(trajs, budget, generator), generator)


def _count_distinct(locations: np.ndarray, hours: np.ndarray, lengths: np.ndarray) -> list:
    """``(trajectory, copies)`` of the generated rows (``-1``-padded arrays), sorted by trajectory.

    Each point is the key ``station·168 + hour`` (``-1`` past a row's end), so the rows' lexicographic order
    is the trajectories' (a shorter trajectory before its continuations): one ``lexsort`` gives the distinct
    rows in the published order. Only the distinct rows become Python tuples, built column by column for the
    rows of each length (``zip`` in C, no loop per row).
    """
    if lengths.size == 0:
        return []
    width = locations.shape[1]
    key = np.where(np.arange(width)[None, :] < lengths[:, None], locations * HOURS_PER_WEEK + hours, -1)
    key = key[np.lexsort(key.T[::-1])]
    first = np.ones(key.shape[0], dtype=bool)
    first[1:] = (key[1:] != key[:-1]).any(axis=1)
    starts = np.flatnonzero(first)
    copies = np.diff(np.append(starts, key.shape[0]))
    uniq = key[starts]
    size = (uniq >= 0).sum(axis=1)
    point_of = [(k // HOURS_PER_WEEK, k % HOURS_PER_WEEK) for k in range(int(uniq.max()) + 1)]
    out = np.empty(uniq.shape[0], dtype=object)
    for n in np.unique(size).tolist():
        sel = np.flatnonzero(size == n)
        columns = [list(map(point_of.__getitem__, uniq[sel, j].tolist())) for j in range(n)]
        pairs = zip(zip(*columns), copies[sel].tolist())
        out[sel] = np.fromiter(pairs, dtype=object, count=sel.size)
    return out.tolist()
