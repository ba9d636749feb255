"""The variable-length n-gram sanitizer (thesis §6.4; issue 15, plain library)."""

from __future__ import annotations

import collections
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transit_release.mechanisms.ngram import (END, GramLevel, NGramBudget, NGramParameterError, NGramTree,
                                              _extend_by_joins, _extend_leaves_by_joins, _peel, _Trie,
                                              build_exploration_tree, check_tree_size, child_budget, enforce_consistency, noise_delta, released_ngrams,
                                              sanitize, subtree_heights, synthetic_database, true_counts)
from transit_release.mechanisms.prefix_tree import Sequences, TreeTooLargeError
from transit_release.noise import NoiseSource, discrete_laplace_table

# Table 6.2 of the thesis, with L1, L2, L3 as 0, 1, 2
TABLE_6_2 = [(1, 2, 0), (1, 2), (2, 1), (1, 2, 0), (2, 1, 0), (1, 2, 0, 1, 2), (2, 1), (2, 0, 1, 2)]


# ---- budget: exact ---------------------------------------------------------------------------------

def test_node_budgets_are_every_reachable_split():
    b = NGramBudget.of(1.0, 20, 5, 68)
    assert b.root_epsilon == Fraction(1, 5)
    got = set(b.node_budgets())
    # level 1 nodes have 4/5 left and pick h in 1..4; level 2 nodes (h1 ≥ 2) pick h in 1..3; and so on
    assert {Fraction(4, 5), Fraction(2, 5), Fraction(4, 15), Fraction(1, 5)} <= got
    assert Fraction(1, 10) == min(got) and len(got) == 12
    assert NGramBudget.of(1.0, 20, 1, 68).node_budgets() == (Fraction(1),)


def test_threshold_comes_from_the_budget_that_produced_the_count():
    b = NGramBudget.of(1.0, 20, 5, 68)
    assert b.threshold(Fraction(1, 5)) == pytest.approx(20 * math.log(34) / 0.2)
    assert b.integer_threshold(Fraction(1, 5)) == math.ceil(20 * math.log(34) / 0.2) == 353
    assert b.noise_scale(Fraction(1, 5)) == 100


@pytest.mark.parametrize("count,theta,p_max,level,nmax,want", [
    (10_000, 100, 0.1, 1, 5, 2),  # log_0.1(0.01) = 2
    (10_001, 100, 0.1, 1, 5, 3),  # just above: ceiling
    (10**9, 100, 0.5, 1, 5, 4),  # capped at nmax − i
    (100, 100, 0.3, 2, 5, 1),  # c = θ: log = 0 → 1
    (101, 100, 0.001, 2, 5, 1),  # c·p_max < θ: log < 1 → 1
    (500, 100, 1.0, 2, 5, 3),  # p_max = 1: nmax − i
    (500, 100, 0.0, 1, 5, 1),  # p_max = 0 (no context mass): 1
    (500, 100, 0.9, 4, 5, 1),  # the last level expands with h = 1
])
def test_subtree_height_is_clamped(count, theta, p_max, level, nmax, want):
    assert subtree_heights(np.array([count]), theta, p_max, level, nmax).tolist() == [want]


@settings(max_examples=300, deadline=None)
@given(eps=st.sampled_from([0.1, 0.5, 1.0, 3.0]), nmax=st.integers(1, 6),
       steps=st.lists(st.tuples(st.floats(1.0, 1e6), st.sampled_from([0.0, 1.0, 0.05, 0.3, 0.7, 0.99])),
                      min_size=0, max_size=6))
def test_any_path_spends_at_most_epsilon_and_exactly_epsilon_at_nmax(eps, nmax, steps):
    """Walk one root-to-leaf path with arbitrary noisy counts and p_max (including 0 and 1)."""
    b = NGramBudget.of(eps, 20, nmax, 10)
    spent = b.root_epsilon
    level = 1
    for ratio, p_max in steps:
        if level >= nmax or spent >= b.epsilon:
            break
        theta = b.threshold(spent)  # any positive threshold will do here
        h = int(subtree_heights(np.array([theta * ratio]), theta, p_max, level, nmax)[0])
        assert 1 <= h <= nmax - level
        eps_v = child_budget(b.epsilon, spent, h)
        assert eps_v > 0 and eps_v in b.node_budgets()
        spent += eps_v
        level += 1
        if h == 1:
            assert spent == b.epsilon  # nothing left: the children are final
    assert spent <= b.epsilon
    if level == nmax:
        assert spent == b.epsilon


def _random_data(rng: random.Random, n_locations: int, n: int, max_len: int) -> Sequences:
    pattern = [rng.randrange(n_locations) for _ in range(max_len)]
    seqs = []
    for _ in range(n):  # a common pattern with noise, so that deep grams pass sometimes
        k = rng.randint(1, max_len)
        seqs.append(tuple(x if rng.random() < 0.7 else rng.randrange(n_locations) for x in pattern[:k]))
    return Sequences.from_lists(seqs, n_locations)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n_locations=st.integers(3, 5), eps=st.sampled_from([0.3, 3.0, 10.0]),
       max_length=st.integers(1, 6), nmax=st.integers(1, 5), n=st.integers(1, 300))
def test_every_root_to_leaf_path_of_a_built_tree_spends_at_most_epsilon(seed, n_locations, eps, max_length, nmax, n):
    nmax = min(nmax, max_length + 1)
    data = _random_data(random.Random(seed), n_locations, n, 8)
    b = NGramBudget.of(eps, max_length, nmax, n_locations)
    tree = build_exploration_tree(data, b, NoiseSource(seed=seed).stream("t"))
    L = n_locations
    assert tree.levels[0].size == L and (tree.levels[0].symbol < L).all()  # no root & child
    for d, lv in enumerate(tree.levels, start=1):
        eps_used = [tree.budgets[c] for c in lv.spent.tolist()]
        assert all(e in b.node_budgets() for e in eps_used)
        # thresholds from the budget that produced each count
        assert lv.passed.tolist() == [c >= math.ceil(b.threshold(e)) for c, e in zip(lv.noisy.tolist(), eps_used)]
        paths = [tree.path_sums[c] for c in lv.path.tolist()]
        assert all(p <= b.epsilon for p in paths)
        if d == 1:
            assert all(p == b.root_epsilon for p in paths)
        else:
            parent = tree.levels[d - 2]
            for i, par in enumerate(lv.parent.tolist()):
                h = int(parent.height[par])
                assert parent.expanded[par] and 1 <= h <= nmax - (d - 1)
                assert eps_used[i] == (b.epsilon - tree.path_sums[parent.path[par]]) / h
                assert paths[i] == tree.path_sums[parent.path[par]] + eps_used[i]
                if h == 1:
                    assert paths[i] == b.epsilon and not lv.expanded[i]
        # expanded nodes passed, are no end marker and have budget left
        for i in np.flatnonzero(lv.expanded).tolist():
            assert lv.passed[i] and lv.symbol[i] != L and paths[i] < b.epsilon
    for level, spent in tree.leaf_path_spends():
        assert spent <= b.epsilon
        if level == nmax:
            assert spent == b.epsilon


def test_root_has_no_end_child_and_children_count_the_end():
    data = Sequences.from_lists(TABLE_6_2, 3)
    tree = build_exploration_tree(data, NGramBudget.of(96, 5, 6, 3), NoiseSource(seed=1).stream("t"))
    counts = true_counts(tree, data)
    assert tree.levels[0].size == 3 and counts[0].tolist() == [5, 9, 10]  # Table 6.3, no & unigram
    B = 4
    two = {tuple(g): c for g, c in zip(tree.grams(2).tolist(), counts[1].tolist())}
    # Table 6.4: with multiplicity (L2 L3 = 6, not 5) and the end marker
    assert two[(1, 2)] == 6 and two[(0, 1)] == 2 and two[(0, B - 1)] == 3 and two[(2, 0)] == 4
    assert two[(2, 1)] == 3 and two[(2, B - 1)] == 3 and two[(1, B - 1)] == 2 and two[(1, 0)] == 1
    enforce_consistency(tree)
    assert all(g != (END,) for g, _ in released_ngrams(tree))


def test_the_thesis_database_is_rebuilt_from_its_exact_grams():
    """Theorem 6.5: from every gram up to ℓmax with exact counts, the (truncated) database itself."""
    data = Sequences.from_lists(TABLE_6_2, 3)
    tree = build_exploration_tree(data, NGramBudget.of(96, 5, 6, 3), NoiseSource(seed=1).stream("t"))
    for lv, c in zip(tree.levels, true_counts(tree, data)):
        lv.count = c
    assert synthetic_database(tree) == sorted(collections.Counter(TABLE_6_2).items())


# ---- consistency -----------------------------------------------------------------------------------

def _level(parent, noisy, passed, expanded, ctx=None, B=4):
    n = len(noisy)
    ctx = ctx or [(0, -1)] * n
    return GramLevel(parent=np.array(parent, dtype=np.int64),
                     symbol=np.array([i % B for i in range(n)], dtype=np.int64),
                     noisy=np.array(noisy, dtype=np.int64), spent=np.zeros(n, dtype=np.int64),
                     path=np.zeros(n, dtype=np.int64), passed=np.array(passed), expanded=np.array(expanded),
                     height=np.where(expanded, 1, 0), context_level=np.array([c[0] for c in ctx]),
                     context_index=np.array([c[1] for c in ctx]))


def _hand_tree():
    """Three locations (B = 4 children per expanded node, the last one ``&``)."""
    T, F = True, False
    lv1 = _level([0, 0, 0], [100, 40, -3], [T, T, F], [T, T, F], B=3)
    lv2 = _level([0] * 4 + [1] * 4,
                 [50, 5, 3, 10,  # children of "0", c = 100: case 3a
                  50, 30, 1, 2],  # children of "1", c = 40: case 3b
                 [T, F, F, F, T, T, F, F],
                 [T, T, F, F, T, F, F, F],  # "0 0" (context "0"), "0 1" (context "1"), "1 0" (context "0")
                 ctx=[(1, 0), (1, 1), (0, -1), (0, -1), (1, 0), (0, -1), (0, -1), (0, -1)])
    lv3 = _level([0] * 4 + [1] * 4 + [4] * 4,
                 [20, 2, 30, 1,  # "0 0 ·": case 2 with C(u) = "0 u"
                  0, 0, 9, 4,  # "0 1 ·": the context's V⁺ have count 0 → case 3
                  1, 2, 0, 1],  # "1 0 ·": nobody passes → case 1
                 [T, F, T, F, F, F, T, T, F, F, F, F], [F] * 12)
    b = NGramBudget.of(1.0, 5, 3, 3)
    return NGramTree([lv1, lv2, lv3], b, b.node_budgets(), [Fraction(1)])


def test_consistency_cases_on_a_hand_built_tree_the_thesis_way():
    tree = _hand_tree()
    enforce_consistency(tree, missing="thesis")
    c1, c2, c3 = (lv.count for lv in tree.levels)
    assert c1.tolist() == [100, 40, 0]  # the root's children: raw, negatives to 0, not renormalised
    assert c2[:4] == pytest.approx([50, 50 / 3, 50 / 3, 50 / 3])  # 3a: the parent's rest shared uniformly
    assert c2[4:] == pytest.approx([25, 15, 0, 0])  # 3b: nothing left, then renormalised to 40
    # case 2: A(u) = c("0 u") / Σ_{V⁺} c("0 w") · Σ_{V⁺} A = (50/3)/(50 + 50/3) · 50 = 12.5, then to c = 50
    assert c3[:4] == pytest.approx(np.array([20, 12.5, 30, 12.5]) * 50 / 75)
    # the context's V⁺ counts are 0 → case 3 with the parent's rest: 50/3 − 13 over two children
    rest = (50 / 3 - 13) / 2
    assert c3[4:8] == pytest.approx([rest, rest, 9, 4])
    assert c3[8:].tolist() == [0, 0, 0, 0]  # case 1
    for blk, parent in ((c2[:4], 100), (c2[4:], 40), (c3[:4], 50), (c3[4:8], 50 / 3)):
        assert blk.sum() == pytest.approx(parent)


def test_consistency_case_2_shares_the_parents_rest_in_markov_proportions():
    tree = _hand_tree()
    tree.levels[2].noisy[:4] = [20, 2, 10, 1]  # "0 0 ·": Σ_{V⁺} A = 30 under c("0 0") = 50
    enforce_consistency(tree)
    c1, c2, c3 = (lv.count for lv in tree.levels)
    assert c1.tolist() == [100, 40, 0] and c2[:4] == pytest.approx([50, 50 / 3, 50 / 3, 50 / 3])
    # the rest 50 − 30 = 20 goes to "0 0 1" and "0 0 &" in the ratio of c("0 1") : c("0 &") = 1 : 1;
    # the children that passed keep their noisy counts (nothing to renormalise)
    assert c3[:4] == pytest.approx([20, 10, 10, 10])
    # "0 1 ·" (context "1"): the rest 50/3 − 13 in the ratio c("1 0") : c("1 1") = 25 : 15
    rest = 50 / 3 - 13
    assert c3[4:8] == pytest.approx([rest * 25 / 40, rest * 15 / 40, 9, 4])
    assert c3[8:].tolist() == [0, 0, 0, 0]  # case 1
    # the thesis rule on the same tree: the context sets the missing total, r_u·Σ_{V⁺} A = 30/4 each
    thesis = _hand_tree()
    thesis.levels[2].noisy[:4] = [20, 2, 10, 1]
    enforce_consistency(thesis, missing="thesis")
    assert thesis.levels[2].count[:4] == pytest.approx(np.array([20, 7.5, 10, 7.5]) * 50 / 45)
    # no rest (Σ_{V⁺} A ≥ c(v)): the missing children get 0 and those that passed are scaled to c(v)
    full = _hand_tree()
    enforce_consistency(full)
    assert full.levels[2].count[:4] == pytest.approx([20, 0, 30, 0])
    with pytest.raises(ValueError, match="missing must be one of"):
        enforce_consistency(_hand_tree(), missing="markov")


def test_no_approx_variant_sets_failing_children_to_zero():
    tree = _hand_tree()
    enforce_consistency(tree, approximate=False)
    assert tree.levels[1].count[:4].tolist() == [100, 0, 0, 0]
    assert tree.levels[2].count[:4] == pytest.approx([100 * 20 / 50, 0, 100 * 30 / 50, 0])  # "0 0" now holds 100


# ---- synthetic database ----------------------------------------------------------------------------

def _example_trie():
    """The grams of Example 6.4.4 (L1, L2, L3 = 0, 1, 2; ``&`` = 3)."""
    trie = _Trie([], [], [], [], 4)
    trie.add(np.zeros(3, dtype=np.int64), np.arange(3), np.array([5.0, 9.0, 10.0]))
    trie.add(np.array([1, 2]), np.array([2, 0]), np.array([6.0, 4.0]))  # L2 L3, L3 L1
    # L2 L3 L1, L3 L1 L1, L3 L1 L2, L3 L1 &
    trie.add(np.array([0, 1, 1, 1]), np.array([0, 0, 1, 3]), np.array([4.0, 1.0, 2.0, 1.0]))
    return trie


def test_joins_of_example_6_4_4():
    trie = _example_trie()
    _extend_by_joins(trie, end=3, max_length=5)
    assert len(trie.count) == 4  # nothing joins at level 4
    grams = trie.grams(4, np.arange(trie.count[3].size)).tolist()
    assert dict(zip(map(tuple, grams), trie.count[3].tolist())) == {(1, 2, 0, 0): 1.0, (1, 2, 0, 1): 4 * 2 / 4}


def _trie_grams(trie):
    """Every gram of the trie as {gram: count} per level; checks that each is found where it is."""
    out = []
    for n in range(1, len(trie.count) + 1):
        idx = np.arange(trie.count[n - 1].size)
        grams = trie.grams(n, idx)
        assert np.all(np.diff(trie.keys[n - 1]) > 0)  # sorted and unique
        assert trie.lookup(grams).tolist() == idx.tolist()
        out.append(dict(zip(map(tuple, grams.tolist()), trie.count[n - 1].tolist())))
    return out


def test_joins_extend_every_leaf_not_only_level_h():
    """A bigram leaf "0 1" and the 4-gram "1 2 0 1" added to Example 6.4.4's grams: the leaves of
    levels 2 and 3 are joined too, the new nodes are merged into their level in order and the next
    level's parents follow."""
    trie = _Trie([], [], [], [], 4)
    trie.add(np.zeros(3, dtype=np.int64), np.arange(3), np.array([5.0, 9.0, 10.0]))
    trie.add(np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([3.0, 6.0, 4.0]))  # 0 1 (a leaf), 1 2, 2 0
    trie.add(np.array([1, 2, 2, 2]), np.array([0, 0, 1, 3]), np.array([4.0, 1.0, 2.0, 1.0]))
    trie.add(np.array([0]), np.array([1]), np.array([2.0]))  # 1 2 0 1
    _extend_leaves_by_joins(trie, end=3, max_length=5)
    levels = _trie_grams(trie)
    assert levels[2] == pytest.approx({(0, 1, 2): 3 * 6 / 9, (1, 2, 0): 4, (2, 0, 0): 1, (2, 0, 1): 2, (2, 0, 3): 1})
    # "1 2 0" has a child: not extended; "2 0 0" has no overlap "0 0"; "2 0 1" joins the new "0 1 2"
    assert levels[3] == pytest.approx({(0, 1, 2, 0): 2 * 4 / 6, (1, 2, 0, 1): 2, (2, 0, 1, 2): 2 * 2 / 3})
    assert levels[4] == pytest.approx({(0, 1, 2, 0, 1): (4 / 3) * 2 / 4, (1, 2, 0, 1, 2): 2 * (4 / 3) / 2,
                                       (2, 0, 1, 2, 0): (4 / 3) * (4 / 3) / 2})
    # the thesis's joins start at level h = 4: "0 1" stays a leaf and only "1 2 0 1" is extended
    thesis = _Trie([], [], [], [], 4)
    thesis.add(np.zeros(3, dtype=np.int64), np.arange(3), np.array([5.0, 9.0, 10.0]))
    thesis.add(np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([3.0, 6.0, 4.0]))
    thesis.add(np.array([1, 2, 2, 2]), np.array([0, 0, 1, 3]), np.array([4.0, 1.0, 2.0, 1.0]))
    thesis.add(np.array([0]), np.array([1]), np.array([2.0]))
    _extend_by_joins(thesis, end=3, max_length=5)
    assert (0, 1, 2) not in _trie_grams(thesis)[2] and len(thesis.count) == 4  # "2 0 1 ·" has no level 4


def test_peeling_subtracts_occurrences_with_multiplicity():
    trie = _example_trie()
    _extend_by_joins(trie, end=3, max_length=5)
    out = dict(_peel(trie, end=3))
    # Example 6.4.5: two copies of L2 L3 L1 L2; then the residuals, e.g. L2 L3 L1: 4 − 1 − 2 = 1
    assert out[(1, 2, 0, 1)] == 2 and out[(1, 2, 0, 0)] == 1 and out[(1, 2, 0)] == 1
    # every unigram is emitted at most as often as its count
    emitted = collections.Counter()
    for s, c in out.items():
        for x in s:
            emitted[x] += c
    assert all(emitted[x] <= n for x, n in enumerate([5, 9, 10]))
    # a repeated location counts twice: "0 0" uses both occurrences of "0"
    trie = _Trie([], [], [], [], 3)
    trie.add(np.zeros(2, dtype=np.int64), np.arange(2), np.array([2.0, 0.0]))
    trie.add(np.array([0]), np.array([0]), np.array([1.0]))
    assert _peel(trie, end=2) == [((0, 0), 1)]


def test_peeling_scales_down_grams_that_ask_for_more_than_a_shorter_gram_holds():
    trie = _Trie([], [], [], [], 3)
    trie.add(np.zeros(2, dtype=np.int64), np.arange(2), np.array([2.0, 4.0]))
    trie.add(np.array([0, 1]), np.array([1, 0]), np.array([2.0, 2.0]))  # "0 1" and "1 0" both want a "0"
    out = _peel(trie, end=2)
    emitted = collections.Counter()
    for s, c in out:
        for x in s:
            emitted[x] += c
    assert emitted[0] <= 2 and out == [((0, 1), 1), ((1,), 2), ((1, 0), 1)]


# ---- the whole mechanism ---------------------------------------------------------------------------

def test_same_seed_same_release_regardless_of_input_order():
    rng = random.Random(3)
    data = _random_data(rng, 6, 400, 7).to_lists()
    shuffled = data[:]
    rng.shuffle(shuffled)
    b = NGramBudget.of(5.0, 6, 4, 6)
    a = sanitize(Sequences.from_lists(data, 6), b, NoiseSource(seed=9).stream("x"))
    c = sanitize(Sequences.from_lists(shuffled, 6), b, NoiseSource(seed=9).stream("x"))
    assert a.ngrams == c.ngrams and a.sequences == c.sequences
    assert a.sequences == sorted(a.sequences) and a.ngrams == sorted(a.ngrams)
    assert all(len(s) <= 6 and c > 0 for s, c in a.sequences)
    assert all(END not in g[:-1] for g, _ in a.ngrams) and all(len(g) <= 4 for g, _ in a.ngrams)


def test_impossible_parameters_are_refused_before_any_noise_is_drawn():
    with pytest.raises(NGramParameterError, match="more than 2 locations. Found 2"):
        NGramBudget.of(1.0, 20, 5, 2)
    with pytest.raises(NGramParameterError, match="epsilon must be positive"):
        NGramBudget.of(0, 20, 5, 10)
    with pytest.raises(NGramParameterError, match="exceeds ℓmax"):
        NGramBudget.of(1.0, 3, 5, 10)
    gen, twin = NoiseSource(seed=11).stream("t"), NoiseSource(seed=11).stream("t")
    with pytest.raises(TreeTooLargeError, match="5000 locations"):
        build_exploration_tree(Sequences.from_lists([(1, 2)], 5000), NGramBudget.of(1.0, 20, 5, 5000), gen)
    with pytest.raises(NGramParameterError, match="universe of 4 locations"):
        build_exploration_tree(Sequences.from_lists([(1, 2)], 4), NGramBudget.of(1.0, 20, 5, 5), gen)
    assert gen.bit_generator.random_raw() == twin.bit_generator.random_raw()
    check_tree_size(NGramBudget.of(1.0, 20, 5, 944))  # the wide benchmark universe is affordable


def test_noise_delta_charges_every_count_one_record_changes():
    b = NGramBudget.of(1.0, 20, 5, 68)
    eta = max(discrete_laplace_table(b.noise_scale(e)).total_variation for e in b.node_budgets())
    assert noise_delta(b) == 20 * 5 * (1 + math.e) * eta
    assert 0 < noise_delta(b) < 1e-10


def test_the_table_is_written_as_csv_with_the_end_marker():
    from transit_release.inputs.sequences import format_ngrams

    text = format_ngrams([((0,), 5.0), ((0, END), 2.5), ((1, 0), 1.0 / 3)], ("Berri,UQAM", "Snowdon"))
    assert text == 'gram,count\n"Berri,UQAM",5.00\n"Berri,UQAM &",2.50\nSnowdon Berri,UQAM,0.33\n'.replace(
        "Snowdon Berri,UQAM", '"Snowdon Berri,UQAM"')


@pytest.mark.parametrize("eps,message", [(1e-4, "Use ε ≥ 0.0"), (1e5, "Use ε ≤ ")])
def test_epsilons_the_samplers_cannot_honour_are_refused_at_plan_time(eps, message):
    from transit_release.errors import NoiseParameterError

    with pytest.raises(NoiseParameterError, match=f"n-gram sanitizer .*{message}"):
        NGramBudget.of(eps, 20, 5, 68)
