"""The noisy hybrid-granularity prefix tree (plain library; issue 5, first part)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transit_release.mechanisms.prefix_tree import (Level, NoisyPrefixTree, Sequences, Taxonomy, TreeBudget,
                                                    _isotonic_paths, _water_fill_groups,
                                                    constrained_inference, release_sequences, sanitize_sequences)
from transit_release.noise import NoiseSource, discrete_laplace, discrete_laplace_table


# ---- budget: exact ---------------------------------------------------------------------------------

@pytest.mark.parametrize("eps,h,f", [(1.0, 12, 17), (0.5, 6, 4), (1.5, 20, 3), (0.1, 16, 10)])
def test_spends_along_every_root_to_leaf_path_sum_to_epsilon(eps, h, f):
    tax = Taxonomy.from_fanout(f * 5, f)
    hybrid = TreeBudget.of(eps, h, "hybrid", tax)
    assert hybrid.path_spend() == Fraction(str(eps))
    assert hybrid.generalized_epsilon == 2 * Fraction(str(eps)) / h / f
    assert hybrid.station_epsilon == (f - 2) * Fraction(str(eps)) / h / f
    simple = TreeBudget.of(eps, h, "simple")
    assert simple.path_spend() == Fraction(str(eps)) and simple.generalized_epsilon == 0


def test_thresholds_of_the_paper():
    b = TreeBudget.of(1.0, 12, "hybrid", Taxonomy.from_fanout(68, 17))
    assert b.generalized_threshold == int(np.ceil(4 * np.sqrt(2) / (2 / 12 / 17)))
    assert b.station_threshold == int(np.ceil(2 * np.sqrt(2) / (15 / 12 / 17)))


def test_budget_errors():
    with pytest.raises(ValueError, match="fan-out must be greater than 2. Found 2"):
        Taxonomy.from_fanout(10, 2)
    with pytest.raises(ValueError, match="needs a taxonomy"):
        TreeBudget.of(1.0, 12, "hybrid")
    with pytest.raises(ValueError, match="variant must be one of"):
        TreeBudget.of(1.0, 12, "fancy")


# ---- constrained inference -----------------------------------------------------------------------

def brute_isotonic_nonincreasing(y):
    """Exhaustive check via the textbook pool-adjacent-violators algorithm."""
    blocks = []
    for v in map(float, y):
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            v2, n2 = blocks.pop()
            v1, n1 = blocks.pop()
            blocks.append([(v1 * n1 + v2 * n2) / (n1 + n2), n1 + n2])
    return np.concatenate([[v] * n for v, n in blocks])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-50, 500), min_size=1, max_size=14))
def test_path_fit_equals_brute_force_isotonic(values):
    got = _isotonic_paths(np.array([values]))[0]
    assert np.allclose(got, brute_isotonic_nonincreasing(values))
    assert np.all(np.diff(got) <= 1e-9)


@st.composite
def noisy_trees(draw):
    levels = []
    n_prev = 1
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 12))
        parent = np.sort(np.array(draw(st.lists(st.integers(0, n_prev - 1), min_size=n, max_size=n)), dtype=np.int64))
        count = np.array(draw(st.lists(st.integers(0, 400), min_size=n, max_size=n)), dtype=np.int64)
        levels.append(Level(parent, np.arange(n, dtype=np.int64), count))
        n_prev = n
    return NoisyPrefixTree(levels, TreeBudget.of(1.0, len(levels), "simple"), 12)


@settings(max_examples=300, deadline=None)
@given(noisy_trees())
def test_both_consistency_constraints_hold_on_random_noisy_trees(tree):
    bar = constrained_inference(tree)
    for d in range(1, len(tree.levels)):
        parent = tree.levels[d].parent
        assert np.all(bar[d] >= 0)
        # a node's count is at least the sum of its children's ...
        sums = np.bincount(parent, weights=bar[d], minlength=bar[d - 1].size)
        assert np.all(sums <= bar[d - 1] + 1e-6)
        # ... and counts never increase going down a path
        assert np.all(bar[d] <= bar[d - 1][parent] + 1e-6)
    release = release_sequences(tree, bar)
    assert all(c > 0 and 1 <= len(p) <= len(tree.levels) for p, c in release)
    # every released copy ends at a node: at most round(c̄) copies per level-1 subtree plus rounding
    assert sum(c for _, c in release) <= bar[0].sum() + sum(lv.count.size for lv in tree.levels)


# ---- end to end on small data --------------------------------------------------------------------

def test_released_sequences_have_length_at_most_h_and_use_known_locations():
    rng = np.random.default_rng(1)
    seqs = [list(rng.integers(0, 12, rng.integers(1, 9))) for _ in range(20_000)]
    data = Sequences.from_lists(seqs, 12)
    tax = Taxonomy.from_fanout(12, 4)
    for variant in ("simple", "hybrid"):
        tree, release = sanitize_sequences(data, 2.0, 4, variant, tax, NoiseSource(seed=5).stream(variant))
        assert release, variant
        assert all(1 <= len(p) <= 4 and all(0 <= x < 12 for x in p) and c > 0 for p, c in release)
        assert release == sorted(release)


def test_same_seed_same_release_regardless_of_input_order():
    rng = np.random.default_rng(2)
    seqs = [tuple(rng.integers(0, 8, rng.integers(1, 6)).tolist()) for _ in range(5_000)]
    a = sanitize_sequences(Sequences.from_lists(seqs, 8), 1.0, 3, "simple", None, NoiseSource(seed=7).stream("x"))[1]
    shuffled = [seqs[i] for i in rng.permutation(len(seqs))]
    b = sanitize_sequences(Sequences.from_lists(shuffled, 8), 1.0, 3, "simple", None,
                           NoiseSource(seed=7).stream("x"))[1]
    assert a == b


def test_sequences_round_trip_and_bounds():
    s = Sequences.from_lists([(1, 2, 3), (0,), (4, 4)], 5)
    assert s.to_lists() == [(1, 2, 3), (0,), (4, 4)]
    with pytest.raises(ValueError, match="locations must be in 0..4"):
        Sequences.from_lists([(5,)], 5)


def water_fill_reference(x, total):
    """Bisection on λ: the group's values max(0, x − λ) sum to ``total``."""
    lo, hi = 0.0, float(max(x))
    for _ in range(200):
        mid = (lo + hi) / 2
        if np.maximum(x - mid, 0).sum() > total:
            lo = mid
        else:
            hi = mid
    return np.maximum(x - hi, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 500)), min_size=1, max_size=40),
       st.lists(st.floats(0, 300), min_size=6, max_size=6))
def test_vectorised_water_filling_matches_a_reference(pairs, totals):
    group = np.array([g for g, _ in pairs])
    x = np.array([v for _, v in pairs])
    total = np.array(totals)
    sums = np.bincount(group, weights=x, minlength=6)
    over = sums > total + 1e-9
    sel = over[group]
    if not sel.any():
        return
    got = _water_fill_groups(x[sel], group[sel], total)
    for g in np.flatnonzero(over):
        mine = got[group[sel] == g]
        ref = water_fill_reference(x[group == g], total[g])
        assert np.allclose(mine, ref, atol=1e-6)
        assert mine.sum() == pytest.approx(total[g], abs=1e-6)


def test_an_impossible_simple_tree_is_refused_before_any_noise_is_drawn():
    from transit_release.mechanisms.prefix_tree import TreeTooLargeError, build_noisy_prefix_tree, false_node_growth

    budget = TreeBudget.of(1.0, 12, "simple")
    # Theorem 4.2: |L| P(Z ≥ θ) kept empty children per kept empty node, about 2 over 68 stations
    assert 1.9 < false_node_growth(budget, 68) < 2.2
    seqs = Sequences.from_lists([[1, 2, 3]], 944)
    gen = NoiseSource(seed=11).stream("t")
    twin = NoiseSource(seed=11).stream("t")
    with pytest.raises(TreeTooLargeError, match=r"the simple variant over 944 locations at height 12 would grow "
                                                r"about 3\.\de\+20 empty nodes .*Use the hybrid variant"):
        build_noisy_prefix_tree(seqs, budget, None, gen)
    assert gen.integers(0, 2**62, 4).tolist() == twin.integers(0, 2**62, 4).tolist()  # nothing drawn
    # the hybrid variant over the same universe is fine
    hybrid = TreeBudget.of(1.0, 12, "hybrid", Taxonomy.from_fanout(944, 16))
    assert false_node_growth(hybrid, 944) < 0.1
    build_noisy_prefix_tree(seqs, hybrid, Taxonomy.from_fanout(944, 16), gen)


# ---- δ slack and extreme ε (plan time, before any draw) --------------------------------------------

def test_delta_slack_charges_each_sub_level_tv_once_per_level():
    import math

    from transit_release.mechanisms.prefix_tree import delta_slack

    hybrid = TreeBudget.of(1.0, 12, "hybrid", Taxonomy.from_fanout(68, 17))
    expected = 12 * sum((1 + math.exp(float(e))) * discrete_laplace_table(1 / e).total_variation
                        for e in (hybrid.generalized_epsilon, hybrid.station_epsilon))
    assert expected <= delta_slack(hybrid) <= expected * (1 + 1e-11)
    simple = TreeBudget.of(1.0, 12, "simple")
    expected = 12 * (1 + math.exp(1 / 12)) * discrete_laplace_table(Fraction(12)).total_variation
    assert expected <= delta_slack(simple) <= expected * (1 + 1e-11)
    assert delta_slack(hybrid) < 1e-13 and delta_slack(simple) < 1e-14


@pytest.mark.parametrize("variant", ["simple", "hybrid"])
@pytest.mark.parametrize("eps,match", [
    (1e-5, r"ε = 1e-05 gives noise scale .*, above the largest supported scale 100,000 .*Use ε ≥ "),
    (1e308, r"ε = 1e\+308 gives noise scale .*, below the smallest supported scale 1/16 .*Use ε ≤ "),
    (float("inf"), r"epsilon must be a finite number. Found inf."),
    (float("nan"), r"epsilon must be a finite number. Found nan."),
])
def test_extreme_epsilons_are_refused_when_the_budget_is_built(variant, eps, match):
    import re
    import time

    from transit_release.errors import NoiseParameterError

    tax = Taxonomy.from_fanout(68, 17)
    start = time.process_time()
    with pytest.raises(NoiseParameterError, match=match) as info:
        TreeBudget.of(eps, 12, variant, tax)
    assert time.process_time() - start < 1.0
    suggestion = re.search(r"Use ε [≥≤] (\S+)\.$", str(info.value))
    if suggestion:  # the suggested ε is accepted: the message names the binding sub-level
        TreeBudget.of(float(suggestion.group(1)), 12, variant, tax)


def test_an_unsupported_epsilon_draws_nothing():
    from transit_release.errors import NoiseParameterError

    seqs = Sequences.from_lists([[1, 2, 3]], 8)
    gen, twin = NoiseSource(seed=12).stream("t"), NoiseSource(seed=12).stream("t")
    with pytest.raises(NoiseParameterError):
        sanitize_sequences(seqs, 1e-5, 4, "simple", None, gen)
    assert gen.integers(0, 2**62, 4).tolist() == twin.integers(0, 2**62, 4).tolist()
