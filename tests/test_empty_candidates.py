"""Sampling the empty candidates that pass a threshold equals testing each of them (shared by every tree mechanism)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transit_release.mechanisms.empty_candidates import (candidate_total_variation, free_items, pass_probability,
                                                         sample_passing_empties)
from transit_release.noise import NoiseSource, discrete_laplace, discrete_laplace_table


def table_conditional_pmf(scale, threshold, width):
    """``P̂(Z = T + i | Z ≥ T)`` for ``i < width`` and the rest lumped, exactly from the table's tail words."""
    table = discrete_laplace_table(Fraction(scale))
    words = [table.upper_tail_words(threshold + i) for i in range(width + 1)]
    p = [(words[i] - words[i + 1]) / words[0] for i in range(width)]
    return np.array(p + [words[width] / words[0]])


@pytest.mark.slow
def test_sampling_equals_explicit_per_candidate_testing():
    from scipy import stats

    scale, threshold, m, trials = Fraction(4), 6, 60, 20_000
    z = discrete_laplace(NoiseSource(seed=3).stream("explicit"), scale, m * trials).reshape(trials, m)
    explicit_k = (z >= threshold).sum(axis=1)
    explicit_counts = z[z >= threshold]
    s = sample_passing_empties(NoiseSource(seed=3).stream("sampled"), np.full(trials, m), scale, threshold)
    sampled_k = np.bincount(s.group, minlength=trials)
    # how many pass: the same binomial, and exactly Binomial(m, p̂) with the table's p̂
    assert stats.ks_2samp(explicit_k, sampled_k).pvalue > 1e-3
    p_hat = discrete_laplace_table(scale).upper_tail_words(threshold) / 2 ** 64
    pmf = stats.binom.pmf(np.arange(m + 1), m, p_hat)
    top = int(np.flatnonzero(pmf * trials >= 5).max())
    obs = np.bincount(np.minimum(sampled_k, top), minlength=top + 1)
    assert stats.chisquare(obs, np.append(pmf[:top], pmf[top:].sum()) * trials).pvalue > 1e-3
    assert pass_probability(scale, threshold) == pytest.approx(explicit_k.mean() / m, rel=0.05)
    # their counts: the same tail, exactly the table's conditional law
    assert s.count.min() >= threshold
    assert stats.ks_2samp(explicit_counts, s.count).pvalue > 1e-3
    cond = table_conditional_pmf(scale, threshold, 20)
    obs = np.bincount(np.minimum(s.count - threshold, 20), minlength=21)
    assert stats.chisquare(obs, cond * s.size).pvalue > 1e-3
    # which ones: distinct within a group, uniform over the ranks
    assert len(set(zip(s.group.tolist(), s.rank.tolist()))) == s.size
    assert stats.chisquare(np.bincount(s.rank, minlength=m)).pvalue > 1e-3


def test_the_joint_law_of_the_passing_set_is_independent_testing():
    """Groups of 1 and 2 candidates, many replicates: the 8 patterns of 3 slots have the product law."""
    from scipy import stats

    scale, threshold, reps = Fraction(2), 1, 40_000
    p = discrete_laplace_table(scale).upper_tail_words(threshold) / 2 ** 64  # about 0.38
    s = sample_passing_empties(NoiseSource(seed=4).stream("joint"), np.tile([1, 2], reps), scale, threshold)
    slot = np.where(s.group % 2 == 0, 0, 1 + s.rank)  # 0: the single candidate; 1, 2: the pair
    pattern = np.zeros(reps, dtype=np.int64)
    np.add.at(pattern, s.group // 2, 1 << slot)
    observed = np.bincount(pattern, minlength=8)
    bits = (np.arange(8)[:, None] >> np.arange(3)) & 1
    expected = np.prod(np.where(bits == 1, p, 1 - p), axis=1) * reps
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_tiny_pass_probabilities_and_huge_gaps(monkeypatch):
    """p̂ ≈ 2^-44 over 2^46 candidates (the exact Decimal path draws every gap): a handful pass."""
    import transit_release.noise as noise

    calls = []
    exact = noise._gap_exact
    monkeypatch.setattr(noise, "_gap_exact", lambda *args: calls.append(1) or exact(*args))
    table = discrete_laplace_table(Fraction(1))
    threshold = next(k for k in range(1, table.support_max) if table.upper_tail_words(k) < 1 << 21)
    p_words = table.upper_tail_words(threshold)
    m = np.full(64, 1 << 40, dtype=np.int64)
    s = sample_passing_empties(NoiseSource(seed=5).stream("tiny"), m, Fraction(1), threshold)
    expected = int(m.sum()) * p_words / 2 ** 64
    assert 1 <= expected <= 64 and s.size <= expected + 10 * np.sqrt(expected) + 10
    assert np.all(s.rank < m[s.group]) and np.all(s.count >= threshold)
    assert len(calls) >= s.size + 1  # every gap drawn (the batch), by the Decimal path
    # the last value of the table: p̂ = R_M / 2^64, a few words in 2^64, and nothing passes in 10^9
    last = sample_passing_empties(NoiseSource(seed=5).stream("last"), np.full(1000, 10 ** 6), Fraction(1),
                                  table.support_max)
    assert last.size == 0


def test_thresholds_outside_the_table():
    table = discrete_laplace_table(Fraction(3))
    g = NoiseSource(seed=6).stream("outside")
    none = sample_passing_empties(g, np.array([5, 7]), Fraction(3), table.support_max + 1)
    assert none.size == 0
    every = sample_passing_empties(g, np.array([3, 0, 2]), Fraction(3), -table.support_max)
    assert every.group.tolist() == [0, 0, 0, 2, 2] and every.rank.tolist() == [0, 1, 2, 0, 1]
    assert np.all(np.abs(every.count) <= table.support_max)


def test_reproducible_with_a_seed_and_refuses_impossible_inputs():
    m = np.array([68] * 1000)
    a = sample_passing_empties(NoiseSource(seed=7).stream("r"), m, Fraction(12), 34)
    b = sample_passing_empties(NoiseSource(seed=7).stream("r"), m, Fraction(12), 34)
    c = sample_passing_empties(NoiseSource(seed=8).stream("r"), m, Fraction(12), 34)
    assert all(np.array_equal(x, y) for x, y in zip((a.group, a.rank, a.count), (b.group, b.rank, b.count)))
    assert not np.array_equal(a.rank, c.rank)
    empty = sample_passing_empties(NoiseSource(seed=7).stream("r"), np.zeros(0, dtype=np.int64), Fraction(12), 34)
    assert empty.size == 0
    with pytest.raises(ValueError, match="cannot be negative"):
        sample_passing_empties(NoiseSource(seed=7).stream("r"), np.array([-1]), Fraction(12), 34)
    with pytest.raises(ValueError, match="too many empty candidates"):
        sample_passing_empties(NoiseSource(seed=7).stream("r"), np.full(8, 1 << 57), Fraction(12), 34)


def test_the_slack_to_charge_is_the_tables_tv():
    assert candidate_total_variation(Fraction(12)) == discrete_laplace_table(Fraction(12)).total_variation
    assert candidate_total_variation(12.0) < 1e-16


def test_ranks_are_distinct_sorted_and_inside_each_group():
    m = np.array([0, 1, 5, 40, 3, 1000])
    s = sample_passing_empties(NoiseSource(seed=1).stream("r"), m, Fraction(20), 1)  # most candidates pass
    assert np.all(s.rank < m[s.group]) and np.all(s.rank >= 0)
    keys = s.group * 10_000 + s.rank
    assert np.all(np.diff(keys) > 0)  # sorted by (group, rank), no repeats
    assert np.bincount(s.group, minlength=m.size)[0] == 0


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.data())
def test_free_items_names_the_rank_th_empty_candidate(universe, data):
    n_groups = data.draw(st.integers(1, 4))
    taken = sorted(data.draw(st.sets(st.integers(0, n_groups * universe - 1))))
    free = {g: [x for x in range(universe) if g * universe + x not in taken] for g in range(n_groups)}
    pairs = [(g, r) for g in range(n_groups) for r in range(len(free[g]))]
    if not pairs:
        return
    chosen = data.draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=10))
    g = np.array([p[0] for p in chosen])
    r = np.array([p[1] for p in chosen])
    got = free_items(g, r, universe, np.array(taken[::-1], dtype=np.int64))  # any order
    assert got.tolist() == [free[a][b] for a, b in chosen]


def test_free_items_refuses_a_rank_beyond_the_group():
    with pytest.raises(ValueError, match="outside its group's empty candidates"):
        free_items(np.array([0]), np.array([2]), 3, np.array([0]))


def test_pass_probability_is_the_tables_upper_tail():
    assert pass_probability(Fraction(2), 5) == discrete_laplace_table(Fraction(2)).upper_tail(5)
