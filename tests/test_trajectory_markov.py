"""The factored Markov model of trajectories (days, stations, hours of the day): budget, cells, sampling."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from transit_release.mechanisms import ngram
from transit_release.mechanisms import trajectory_markov as tm
from transit_release.mechanisms.prefix_tree import Sequences
from transit_release.mechanisms.safepath import Trajectories
from transit_release.noise import NoiseSource

SEED = 20250101


@settings(max_examples=100, deadline=None)
@given(st.fractions(min_value=Fraction(1, 10), max_value=50), st.integers(1, 12), st.integers(2, 5))
def test_the_three_releases_spend_exactly_epsilon(eps, h, nmax):
    assume(nmax <= h + 2)  # ℓmax = h + 1: no longer gram
    b = tm.MarkovBudget(eps, h, nmax, 68)
    assert b.day_epsilon + b.station_epsilon + b.hour_epsilon == b.path_spend() == eps
    assert b.day_epsilon == eps / 10 and b.station_epsilon == b.hour_epsilon
    assert b.station_budget().epsilon == b.station_epsilon and b.station_budget().n_locations == 68 + h
    assert b.hour_budget().n_locations == 24 + h and b.hour_budget().max_length == h + 1
    assert b.day_cells == math.comb(h + 7, 7) - 1
    assert b.day_threshold == max(1, math.ceil(math.log(b.day_cells) / float(eps / 10)))


def test_day_cells_rank_every_non_decreasing_day_sequence_once():
    h = 4
    offsets = tm._offsets(h)
    cells = [c for k in range(1, h + 1) for c in itertools.combinations_with_replacement(range(7), k)]
    days = np.full((len(cells), h), -1)
    for i, c in enumerate(cells):
        days[i, :len(c)] = c
    ranks = tm.day_cell(days, offsets, h)
    assert sorted(ranks.tolist()) == list(range(offsets[-1])) == list(range(len(cells)))
    assert all(tm.day_sequence(int(r), offsets, h) == c for r, c in zip(ranks, cells))


def test_sampling_follows_the_model_its_lengths_and_its_floor():
    seqs = Sequences.from_lists([(5, 0, 1, 2), (5, 0, 1, 2), (4, 3, 3)] * 200, 6)
    tree = ngram.build_exploration_tree(seqs, ngram.NGramBudget.of(50, 4, 3, 6), NoiseSource(seed=SEED).stream("t"))
    ngram.enforce_consistency(tree)
    gen = NoiseSource(seed=SEED).stream("s")
    out = ngram.sample_from_tree(tree, np.array([5] * 50 + [4] * 50), np.array([3] * 50 + [2] * 50), gen, 4)
    assert {tuple(r) for r in out[:50, 1:].tolist()} == {(0, 1, 2)}
    assert {tuple(r) for r in out[50:].tolist()} == {(4, 3, 3, -1)}
    floor = lambda rows, i, seq: np.full(rows.size, 3)  # noqa: E731
    low = ngram.sample_from_tree(tree, np.array([5] * 20), np.array([2] * 20), gen, 4, floor=floor)
    assert (low[:, 1:] >= 3).all()


def test_the_release_keeps_lengths_days_and_monotone_hours_and_ignores_the_input_order():
    from transit_release.synth.trajectories import synthesize_commuter_week

    trajs, _ = synthesize_commuter_week(4000, seed=1)
    b = tm.MarkovBudget.of(3, 6, 68)
    out = tm.sanitize_markov(trajs, b, NoiseSource(seed=SEED).stream("m"))
    again = tm.sanitize_markov(Trajectories.from_lists(trajs.to_lists()[::-1], 68), b,
                               NoiseSource(seed=SEED).stream("m"))
    assert out == again and out.released
    for traj, copies in out.released:
        hours = [h for _, h in traj]
        assert 1 <= len(traj) <= 6 and hours == sorted(hours) and copies >= 1
    lengths = np.bincount([len(t) for t, c in out.released for _ in range(c)], minlength=7)
    assert lengths[[1, 3, 5]].sum() == 0  # the commuters' lengths are even; the day histogram keeps them
    assert abs(lengths.sum() - len(trajs)) < 0.05 * len(trajs)


def test_refusals_before_any_noise():
    with pytest.raises(tm.MarkovParameterError, match="use a height of at most 22"):
        tm.MarkovBudget.of(1, 23, 68)
    with pytest.raises(tm.MarkovParameterError, match="epsilon must be positive"):
        tm.MarkovBudget.of(0, 6, 68)
    with pytest.raises(tm.MarkovParameterError, match="exceeds ℓmax"):
        tm.MarkovBudget.of(1, 2, 68, max_gram=5)
    trajs = Trajectories.from_lists([((0, 1),)], 3)
    with pytest.raises(tm.MarkovParameterError, match="the model needs 68"):
        tm.sanitize_markov(trajs, tm.MarkovBudget.of(1, 6, 68), NoiseSource(seed=SEED).stream("x"))


@pytest.mark.parametrize("seed", range(4))
def test_a_release_whose_kept_day_sequences_are_all_shorter_than_h_is_drawn(seed):
    """No kept cell of length h (here: every passenger taps twice, h = 3): the drawn rows are as long as the
    longest kept cell, and the release is made, not refused after its noise was drawn."""
    b = tm.MarkovBudget.of(4.0, 3, 10)
    data = Trajectories.from_lists([[(1, 8), (2, 17)]] * 300, 10)
    out = tm.sanitize_markov(data, b, NoiseSource(seed=seed).stream("t", "x"))
    assert all(1 <= len(t) <= 3 for t, _ in out.released)


def test_a_release_that_keeps_no_day_sequence_is_empty():
    b = tm.MarkovBudget.of(2.0, 6, 10)
    out = tm.sanitize_markov(Trajectories.from_lists([[(1, 8), (2, 17)]], 10), b, NoiseSource(seed=1).stream("t", "x"))
    assert out.released == [] or all(len(t) <= 6 for t, _ in out.released)


# ---- the vectorised generation draws what the former per-row sampler drew ----------------------------------

def _random_tree(seed: int, n_symbols: int, markers: int, height: int):
    rng = np.random.default_rng(seed)
    lists = [(n_symbols + (k - 1),) + tuple(rng.integers(0, n_symbols, k).tolist())
             for k in rng.integers(1, height + 1, 3000)]
    seqs = Sequences.from_lists(lists, n_symbols + markers)
    tree = ngram.build_exploration_tree(seqs, ngram.NGramBudget.of(2, height + 1, 3, n_symbols + markers),
                                        NoiseSource(seed=seed).stream("tree"))
    ngram.enforce_consistency(tree)
    return tree


@pytest.mark.parametrize("seed", range(3))
def test_the_vectorised_sampler_draws_exactly_what_the_per_row_sampler_drew(seed):
    """Same tree, same seeded stream: the binary search per row makes the same comparisons as the former
    rows × symbols table, so every symbol is the same, with and without a floor."""
    from tests.markov_reference import reference_sample_from_tree

    tree = _random_tree(seed, 24, 6, 6)
    rng = np.random.default_rng(seed + 10)
    lengths = rng.integers(1, 7, 5000)
    starts = 24 + lengths - 1

    def floor(rows, i, seq):
        return np.where(rows % 3 == 0, seq[rows, i - 1], 0) if i > 1 else np.zeros(rows.size, dtype=np.int64)

    for f in (None, floor):
        new = ngram.sample_from_tree(tree, starts, lengths, NoiseSource(seed=seed).stream("g"), 24, floor=f)
        old = reference_sample_from_tree(tree, starts, lengths, NoiseSource(seed=seed).stream("g"), 24, floor=f)
        assert np.array_equal(new, old)


def test_the_release_is_the_one_the_former_generation_made(monkeypatch):
    """The whole Markov release (model, generation, distinct rows and their order) under one test seed, with the
    new generation and with the former one patched in: identical."""
    from tests.markov_reference import reference_count_distinct, reference_sample_from_tree
    from transit_release.synth.trajectories import synthesize_metro_trajectories

    trajs, _ = synthesize_metro_trajectories(6000, seed=2)
    b = tm.MarkovBudget.of(2, 6, trajs.n_locations)
    new = tm.sanitize_markov(trajs, b, NoiseSource(seed=SEED).stream("m"))
    monkeypatch.setattr(ngram, "sample_from_tree", reference_sample_from_tree)
    monkeypatch.setattr(tm, "_count_distinct", reference_count_distinct)
    old = tm.sanitize_markov(trajs, b, NoiseSource(seed=SEED).stream("m"))
    assert new == old and len(new.released) > 100


def test_distinct_rows_come_out_in_the_published_order():
    from tests.markov_reference import reference_count_distinct

    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 5, 4000)
    loc = np.where(np.arange(4)[None, :] < lengths[:, None], rng.integers(0, 3, (4000, 4)), -1)
    hour = np.where(loc >= 0, rng.integers(0, 168, (4000, 4)), -1)
    out = tm._count_distinct(loc, hour, lengths)
    assert out == reference_count_distinct(loc, hour, lengths) == sorted(out)
    assert tm._count_distinct(loc[:0], hour[:0], lengths[:0]) == []
