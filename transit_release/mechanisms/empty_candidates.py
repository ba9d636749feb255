"""Empty candidates: which of them pass a noisy threshold test, without visiting them one by one.

Every tree- or partition-growing mechanism of the project (prefix tree, n-gram
exploration, SafePath, DiffPart) gives *every possible* child a noisy count and
keeps those at or above a threshold: children absent from the data must be able
to appear, or the mechanism is not differentially private. Most possible
children are empty (true count 0), and testing each of them would be too slow.

The reference ("explicit testing"): every empty candidate gets its own draw
``Z`` from the discrete Laplace table at ``scale`` (:mod:`transit_release.noise`)
and passes, with noisy count ``Z``, when ``Z ≥ T``. Its outcomes are independent,
each passes with ``p̂ = P̂(Z ≥ T) = K/2^64`` (exact, from the table) and the
count of a passing one has the law ``P̂(Z = z | Z ≥ T)``.

This module draws *exactly that law* for many groups at once:

1. **Which pass.** The candidates of all groups are laid end to end (``N = Σ m_g``
   slots) and each slot is an independent Bernoulli(``p̂``) trial; the successes
   are found by geometric gaps (failures before the next success,
   ``P(G ≥ j) = (1 - p̂)^j``), drawn exactly by :func:`~transit_release.noise.geometric_gaps`.
   A success at global slot ``s`` belongs to the group ``g`` whose slots
   ``[start_g, start_g + m_g)`` hold ``s``, with rank ``s - start_g``. Given the
   number ``k`` of successes in a group, every set of ``k`` slots is equally
   likely, so this *is* ``k ~ Binomial(m_g, p̂)`` ranks chosen uniformly without
   replacement: no separate choice step, no rejection.
2. **Their counts.** The table's own noise conditioned on ``Z ≥ T``
   (:meth:`~transit_release.noise.DiscreteLaplaceTable.sample_at_least`: a word
   uniform on ``[C[T-1], 2^64)`` inverted through the same cut points), drawn
   independently of step 1, as in the reference.

Consequence for privacy accounting: an empty candidate's outcome has exactly the
law of a non-empty candidate's outcome at true count 0 (same table, same test),
so the empties add nothing to δ beyond the table's own ``η``: a mechanism
charges ``(1 + e^ε')·η`` per noisy count that one record can change, whether
that count is sampled here or explicitly (:func:`candidate_total_variation`).

The result lists, for each passing candidate, its group, its *rank* among the
group's empty candidates in ascending order, and its noisy count, sorted by
(group, rank). :func:`free_items` turns ranks into item ids when a group's
candidates are ``0..U-1`` minus the non-empty ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from transit_release.noise import MAX_TRIALS, bernoulli_successes, discrete_laplace_table, exact_fraction

#: Total-variation distance between the passing set drawn here and explicit testing with the
#: table: 0, both steps are exact (see the module docstring and :func:`~transit_release.noise.geometric_gaps`).
GAP_SAMPLER_TOTAL_VARIATION = 0.0


@dataclass(frozen=True)
class PassingEmpties:
    """The empty candidates that passed, sorted by (group, rank)."""

    group: np.ndarray  # int64 index into the groups given to :func:`sample_passing_empties`
    rank: np.ndarray  # int64 index among the group's empty candidates (ascending order)
    count: np.ndarray  # int64 noisy count, ≥ the threshold

    @property
    def size(self) -> int:
        return int(self.group.size)


def pass_probability(scale: Fraction | float, threshold: int) -> float:
    """``P̂(Z ≥ T)`` of the discrete Laplace table at ``scale``: how likely one empty candidate passes."""
    return discrete_laplace_table(exact_fraction(scale, "scale")).upper_tail(int(threshold))


def candidate_total_variation(scale: Fraction | float) -> float:
    """The sampler error to charge per noisy count a record can change, at this ``scale``.

    TV distance between the law of one candidate's outcome (passes or not, and its count),
    empty (sampled here) or not (the table's noise), and the ideal discrete Laplace test:
    the table's exact ``η`` plus :data:`GAP_SAMPLER_TOTAL_VARIATION` (0). A mechanism's δ
    slack is ``Σ (1 + e^ε')·candidate_total_variation(scale)`` over the counts one record
    can change.
    """
    return discrete_laplace_table(exact_fraction(scale, "scale")).total_variation + GAP_SAMPLER_TOTAL_VARIATION


def sample_passing_empties(generator: np.random.Generator, n_empty: np.ndarray, scale: Fraction | float,
                           threshold: int) -> PassingEmpties:
    """For each group ``g`` with ``n_empty[g]`` empty candidates, the ones whose noisy count passes ``threshold``.

    Exactly the law of drawing the table's noise for every empty candidate and keeping
    those with ``Z ≥ threshold`` (module docstring). Cost: about ``2·N·p̂`` random words
    plus one per passing candidate, none per failing one.
    """
    table = discrete_laplace_table(exact_fraction(scale, "scale"))
    m = np.asarray(n_empty, dtype=np.int64).reshape(-1)
    if m.size and m.min() < 0:
        raise ValueError("the number of empty candidates cannot be negative")
    if m.size and int(m.max()) > MAX_TRIALS // m.size:  # the int64 cumsum below could overflow
        raise ValueError(f"too many empty candidates in one call (more than 2^58 = {MAX_TRIALS:,})")
    ends = np.cumsum(m)
    total = int(ends[-1]) if m.size else 0
    if total > MAX_TRIALS:
        raise ValueError(f"too many empty candidates in one call (more than 2^58 = {MAX_TRIALS:,})")
    slot = bernoulli_successes(generator, total, table.upper_tail_words(int(threshold)))
    group = np.searchsorted(ends, slot, side="right").astype(np.int64)
    rank = slot - (ends[group] - m[group])
    count = table.sample_at_least(generator, int(threshold), slot.size) if slot.size else np.zeros(0, np.int64)
    return PassingEmpties(group, rank, count)


def free_items(group_key: np.ndarray, rank: np.ndarray, universe_size: int, taken_keys: np.ndarray) -> np.ndarray:
    """The item id of the ``rank``-th empty candidate of each group.

    A group with key ``g`` has candidates ``0..universe_size-1``; the non-empty
    ones are given as ``taken_keys`` (``g * universe_size + item``, any order).
    The ``r``-th free key of the whole key space is ``r + #{i : t_i − i ≤ r}``
    for the sorted taken keys ``t``; a group's free ranks start at
    ``g·U − #{taken keys below g·U}``.
    """
    group_key = np.asarray(group_key, dtype=np.int64)
    rank = np.asarray(rank, dtype=np.int64)
    if group_key.size == 0:
        return np.zeros(0, dtype=np.int64)
    U = int(universe_size)
    taken = np.unique(np.asarray(taken_keys, dtype=np.int64))
    start = group_key * U
    below = np.searchsorted(taken, start)  # taken keys before the group's first key
    in_group = np.searchsorted(taken, start + U) - below
    if np.any(rank >= U - in_group) or np.any(rank < 0):
        raise ValueError("a rank is outside its group's empty candidates")
    global_rank = start - below + rank
    shifted = taken - np.arange(taken.size, dtype=np.int64)  # non-decreasing
    key = global_rank + np.searchsorted(shifted, global_rank, side="right")
    return key - start
