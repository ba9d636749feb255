"""SafePath, the (location, hour) prefix tree for trajectories (plain library; issue 16, first part)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transit_release.mechanisms.safepath import (HOURS_PER_WEEK, Hierarchy, NoisySafePathTree, SafePathBudget,
                                                 TaxonomyBudgetError, Thresholds, TrajectoryLevel, Trajectories,
                                                 TreeTooLargeError, _sublevel, build_safepath_tree,
                                                 candidate_total_variation,
                                                 check_tree_size, consistent_counts, delta_slack, expand_release,
                                                 release_trajectories, sanitize_trajectories, thresholds_for)
from transit_release.mechanisms import safepath
from transit_release.noise import NoiseSource, discrete_laplace_table

TEST_SEED = 20250101


# ---- budget: exact -----------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2000), st.integers(1, 400), st.integers(0, 20), st.integers(0, 12), st.integers(1, 30),
       st.fractions(min_value=Fraction(1, 100), max_value=10))
def test_every_root_to_leaf_path_spends_exactly_epsilon(n_loc, n_hours, h_loc, h_time, h, eps):
    if h_loc * (h_loc + 1) >= n_loc or h_time * (h_time + 1) >= n_hours:
        with pytest.raises(TaxonomyBudgetError):
            SafePathBudget.split(eps, h, n_loc, h_loc, h_time, n_hours)
        return
    b = SafePathBudget.split(eps, h, n_loc, h_loc, h_time, n_hours)  # the arithmetic (``of`` adds scale checks)
    assert b.path_spend() == eps
    eps_s = eps / h / 2
    assert b.sublevel_epsilon == eps_s
    for sub, size, H in ((b.location, n_loc, h_loc), (b.time, n_hours, h_time)):
        assert sub.path_spend() == eps_s
        assert [sub.general(j) for j in range(1, H + 1)] == [j * 2 * eps_s / size for j in range(1, H + 1)]
        assert sub.nongeneral == eps_s * (1 - Fraction(H * (H + 1), size)) > 0
        assert all(isinstance(x, Fraction) for x in sub.per_step)


@pytest.mark.parametrize("n_loc,h_loc,fanout", [(68, 6, 2), (68, 0, 2), (68, 7, 2), (20, 2, 3), (893, 6, 2)])
def test_the_path_through_every_location_and_hour_sums_to_epsilon(n_loc, h_loc, fanout):
    locations = Hierarchy.from_fanout(n_loc, fanout, h_loc)
    hours = Hierarchy.from_fanout(HOURS_PER_WEEK, 2, 6, "time")
    b = SafePathBudget.of(0.7, 9, n_loc, h_loc, 6)
    assert b.item_path_spends(locations, hours) == {Fraction(7, 10)}


def test_height_zero_taxonomy_gives_the_whole_sublevel_to_the_leaves():
    b = SafePathBudget.of(1, 4, 68, 0, 0)
    assert b.location.per_step == (Fraction(1, 8),) and b.time.per_step == (Fraction(1, 8),)
    assert b.path_spend() == 1


def test_the_guard_names_the_universe_its_size_and_the_height():
    with pytest.raises(TaxonomyBudgetError) as err:
        SafePathBudget.of(1, 12, 68, 8, 6)
    msg = str(err.value)
    assert "location universe (|U| = 68)" in msg and "height H = 8" in msg and "1 − 72/68" in msg
    assert "height at most 7" in msg
    with pytest.raises(TaxonomyBudgetError, match=r"time universe \(\|U\| = 168\).*H = 13.*at most 12"):
        SafePathBudget.of(1, 12, 68, 6, 13)
    SafePathBudget.of(1, 12, 68, 7, 12)  # the largest that fit


def test_budget_errors():
    with pytest.raises(ValueError, match="height must be at least 1"):
        SafePathBudget.of(1, 0, 68, 6, 6)
    with pytest.raises(ValueError, match="epsilon must be positive"):
        SafePathBudget.of(0, 12, 68, 6, 6)


def test_thresholds_of_both_rules():
    locations, hours = Hierarchy.from_fanout(68, 2, 6), Hierarchy.from_fanout(168, 2, 6, "time")
    b = SafePathBudget.of(1, 12, 68, 6, 6)
    paper = thresholds_for(b, "paper", locations, hours)
    assert paper.location == (math.ceil(4 * math.sqrt(2) * 12),) * 6 + (math.ceil(2 * math.sqrt(2) * 12),)
    assert paper.location == paper.time == (68,) * 6 + (34,)
    node = thresholds_for(b, "node", locations, hours)
    # θ = ln(siblings)/ε_node: the root of the hours has 3 children (0-63, 64-127, 128-167) at ε_g(1) = 1/2016
    assert hours.sibling_candidates() == (3, 2, 2, 2, 2, 2, 2)
    assert node.time[0] == math.ceil(math.log(3) * 2016)
    assert node.time[-1] == math.ceil(math.log(2) * 32)  # ε_ng = (1/24)(1 − 42/168) = 1/32
    with pytest.raises(ValueError, match="threshold rule must be one of"):
        thresholds_for(b, "median", locations, hours)


def test_delta_slack_sums_the_tables_error_over_the_counts_one_trajectory_changes():
    b = SafePathBudget.of(1, 3, 12, 1, 1, 24)
    want = 0.0
    for sub in (b.location, b.time):
        for e in sub.per_step:
            want += (1 + math.exp(float(e))) * candidate_total_variation(1 / e)
            assert candidate_total_variation(1 / e) >= discrete_laplace_table(1 / e).total_variation > 0
    assert 3 * want <= delta_slack(b) <= 3 * want * (1 + 2e-12)
    assert 0 < delta_slack(b) < 1e-12


# ---- taxonomies --------------------------------------------------------------------------------------

def test_fanout_taxonomy_is_built_bottom_up_in_intervals():
    hours = Hierarchy.from_fanout(168, 2, 6, "time")
    assert [hours.n_nodes(j) for j in range(8)] == [1, 3, 6, 11, 21, 42, 84, 168]
    assert hours.is_intervals
    assert hours.node_at[-1][:6].tolist() == [0, 0, 1, 1, 2, 2]
    chain = Hierarchy.from_fanout(5, 2, 4)  # more levels than needed: a single node repeats
    assert [chain.n_nodes(j) for j in range(6)] == [1, 1, 2, 3, 5, 5][:1] + [1, 1, 2, 3] + [5]
    assert Hierarchy.flat(7).height == 0 and Hierarchy.from_fanout(7, 2, 0).sibling_candidates() == (7,)


def test_labels_give_the_same_tree_whatever_their_order_and_names():
    line = np.array(["b", "a", "b", "a", "c"])
    group = np.array(["x", "x", "y", "y", "x"])  # "x" under two lines: two different nodes
    t1 = Hierarchy.from_labels([line, group])
    t2 = Hierarchy.from_labels([np.array(["B", "A", "B", "A", "C"]), np.array(["p", "p", "q", "q", "p"])])
    for a, b in zip(t1.node_at, t2.node_at):
        assert a.tolist() == b.tolist()
    assert t1.node_at[0].tolist() == [0, 1, 0, 1, 2]  # ordered by smallest item
    assert t1.node_at[1].tolist() == [0, 2, 1, 3, 4]
    assert not t1.is_intervals


# ---- building ----------------------------------------------------------------------------------------

def _explicit_sublevel(gen, tax, sub, thresholds, group, item, n_groups, floor):
    """Reference: every candidate of every group gets its own noise, one by one."""
    out = []
    for g in range(n_groups):
        mine = item[group == g]
        kept = [0]
        for s, (st_, eps, theta) in enumerate(zip(tax.steps, sub.per_step, thresholds)):
            table = discrete_laplace_table(1 / eps)
            new = []
            for node in kept:
                n = int(st_.n_children[node])
                for pos in range(n):
                    if floor is not None and st_.last_item[node, pos] < floor[g]:
                        continue
                    child = int(st_.member[node, pos])
                    true = int(np.sum(st_.child_of_item[mine] == child)) if mine.size else 0
                    noisy = true + int(table.sample(gen, 1)[0])
                    if noisy >= theta:
                        new.append((child, noisy, true))
            kept = [c for c, _, _ in new]
            last = new
        out.extend((g, c, noisy, true) for c, noisy, true in last)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("with_floor", [False, True])
def test_sampled_empty_candidates_match_explicit_per_candidate_noise(with_floor):
    from scipy import stats

    tax = Hierarchy.from_fanout(12, 2, 2, "time")
    sub = SafePathBudget.of(Fraction(1, 2), 1, 12, 2, 2, 12).time  # ε_s = 1/4: ε_g = 1/24, 1/12; ε_ng = 1/8
    thresholds = (2, 4, 9)  # empty leaves pass now and then; populated ones mostly
    group = np.array([0] * 30 + [1] * 12, dtype=np.int64)
    item = np.array([3] * 20 + [7] * 10 + [9] * 12, dtype=np.int64)
    floor = np.array([2, 5], dtype=np.int64) if with_floor else None
    trials = 3000
    gen_a, gen_b = NoiseSource(seed=5).stream("sampled"), NoiseSource(seed=5).stream("explicit")
    sampled, explicit = [], []
    for _ in range(trials):
        g, it, cnt, _ = _sublevel(gen_a, tax, sub, thresholds, group, item, 2, floor)
        sampled.append(list(zip(g.tolist(), it.tolist(), cnt.tolist())))
        explicit.append([(a, b, c) for a, b, c, _ in _explicit_sublevel(gen_b, tax, sub, thresholds, group, item,
                                                                       2, floor)])
    n_a = np.array([len(x) for x in sampled])
    n_b = np.array([len(x) for x in explicit])
    assert stats.ks_2samp(n_a, n_b).pvalue > 1e-3
    # which (group, item) pairs are kept: the same frequencies
    freq_a = np.zeros((2, 12))
    freq_b = np.zeros((2, 12))
    for run in sampled:
        for g, it, _ in run:
            freq_a[g, it] += 1
    for run in explicit:
        for g, it, _ in run:
            freq_b[g, it] += 1
    if with_floor:
        assert freq_a[0, :2].sum() == 0 and freq_a[1, :5].sum() == 0  # never before the floor
    seen = (freq_a + freq_b) > 20
    table = np.stack([freq_a[seen], freq_b[seen]])
    assert stats.chi2_contingency(table).pvalue > 1e-3
    # the counts of empty nodes that pass: the same tail
    empty_items = {(0, 3), (0, 7), (1, 9)}
    ca = [c for run in sampled for g, it, c in run if (g, it) not in empty_items]
    cb = [c for run in explicit for g, it, c in run if (g, it) not in empty_items]
    assert len(ca) > 200 and stats.ks_2samp(ca, cb).pvalue > 1e-3
    # the populated nodes' counts too
    pa = [c for run in sampled for g, it, c in run if (g, it) == (0, 3)]
    pb = [c for run in explicit for g, it, c in run if (g, it) == (0, 3)]
    assert stats.ks_2samp(pa, pb).pvalue > 1e-3
    if not with_floor:  # negative control: the explicit test with the leaf threshold one lower is told apart
        gen_c = NoiseSource(seed=5).stream("control")
        cc = [c for _ in range(trials)
              for g, it, c, true in _explicit_sublevel(gen_c, tax, sub, (2, 4, 8), group, item, 2, None) if true == 0]
        assert stats.ks_2samp(ca, cc).pvalue < 1e-3


def _random_trajectories(n, n_loc, seed=0, n_hours=HOURS_PER_WEEK):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 6))
        out.append(list(zip(rng.integers(0, n_loc, k).tolist(), np.sort(rng.integers(0, n_hours, k)).tolist())))
    return out


def _setup(n_loc=10, h_loc=2, h_time=4, eps=1.0, h=3):
    locations = Hierarchy.from_fanout(n_loc, 2, h_loc)
    hours = Hierarchy.from_fanout(HOURS_PER_WEEK, 2, h_time, "time")
    return locations, hours, SafePathBudget.of(eps, h, n_loc, h_loc, h_time)


def test_high_budget_release_reproduces_the_data():
    trajs = [[(1, 8), (4, 17)]] * 300 + [[(2, 9)]] * 200 + [[(1, 8), (4, 17), (1, 20)]] * 250
    t = Trajectories.from_lists(trajs, 6)
    locations, hours, budget = Hierarchy.from_fanout(6, 2, 1), Hierarchy.from_fanout(168, 2, 1, "time"), None
    budget = SafePathBudget.of(40, 3, 6, 1, 1)  # ε_s = 20/3: small noise, thresholds about 1
    tree, release = sanitize_trajectories(t, budget, locations, hours, NoiseSource(seed=1).stream("t"),
                                          rule="paper")
    got = dict(release)
    data = {((1, 8), (4, 17)): 300, ((2, 9),): 200, ((1, 8), (4, 17), (1, 20)): 250}
    assert all(abs(got[t] - c) <= 5 for t, c in data.items())
    assert sum(c for t, c in got.items() if t not in data) <= 10  # a few empty nodes may pass, with tiny counts
    literal = release_trajectories(tree, consistent_counts(tree), "literal")
    lit = dict(literal)
    assert abs(lit[((1, 8),)] - 550) <= 5 and abs(lit[((1, 8), (4, 17))] - 550) <= 5  # every prefix counted


def test_same_seed_same_release_regardless_of_input_order():
    raw = _random_trajectories(3000, 10, seed=3)
    raw += [[(1, 8), (2, 17)]] * 400 + [[(3, 7)]] * 300
    locations, hours, budget = _setup()
    a = sanitize_trajectories(Trajectories.from_lists(raw, 10), budget, locations, hours,
                              NoiseSource(seed=TEST_SEED).stream("t"))[1]
    shuffled = [raw[i] for i in np.random.default_rng(9).permutation(len(raw))]
    b = sanitize_trajectories(Trajectories.from_lists(shuffled, 10), budget, locations, hours,
                              NoiseSource(seed=TEST_SEED).stream("t"))[1]
    assert a == b and len(a) > 0
    assert a == sorted(a)


@pytest.mark.parametrize("rule", ["paper", "node"])
def test_released_trajectories_are_valid_and_monotone(rule):
    raw = _random_trajectories(4000, 10, seed=4) + [[(1, 8), (2, 17), (3, 18)]] * 500
    locations, hours, budget = _setup(eps=2.0, h=4)
    tree, release = sanitize_trajectories(Trajectories.from_lists(raw, 10), budget, locations, hours,
                                          NoiseSource(seed=2).stream("t"), rule=rule)
    for traj, copies in release:
        assert 1 <= len(traj) <= 4 and copies > 0
        assert all(0 <= loc < 10 and 0 <= hr < 168 for loc, hr in traj)
        assert all(a[1] <= b[1] for a, b in zip(traj, traj[1:]))
    for d, lv in enumerate(tree.levels[1:], start=1):
        assert np.all(lv.hour >= tree.levels[d - 1].hour[lv.parent])  # children never before the parent


def test_decreasing_hours_are_cut_before_the_first_decrease():
    t = Trajectories.from_lists([[(0, 5), (1, 9), (2, 3), (3, 20)], [(0, 1)], [(1, 7), (1, 7), (0, 6)]], 4)
    assert t.monotone_lengths().tolist() == [2, 1, 2]
    assert t.lengths.tolist() == [4, 1, 3]


def test_an_impossible_tree_is_refused_before_any_noise_is_drawn():
    locations, hours = Hierarchy.flat(893), Hierarchy.flat(168, "time")
    budget = SafePathBudget.of(1, 12, 893, 0, 0)
    thresholds = thresholds_for(budget, "paper", locations, hours)
    gen = NoiseSource(seed=1).stream("t")
    trajs = Trajectories.from_lists([[(1, 2)]] * 10, 893)
    with pytest.raises(TreeTooLargeError, match="893 locations × 168 hours.*empty nodes"):
        build_safepath_tree(trajs, budget, locations, hours, thresholds, gen)
    assert gen.bit_generator.random_raw() == NoiseSource(seed=1).stream("t").bit_generator.random_raw()
    check_tree_size(*_setup()[2:], thresholds_for(_setup()[2], "paper", *_setup()[:2]))  # a feasible one passes


def test_inputs_must_match_the_public_universe():
    locations, hours, budget = _setup()
    th = thresholds_for(budget, "paper", locations, hours)
    with pytest.raises(ValueError, match="location universe has 11 items"):
        build_safepath_tree(Trajectories.from_lists([[(1, 2)]], 11), budget, locations, hours, th,
                            NoiseSource(seed=1).stream("t"))
    with pytest.raises(ValueError, match="locations must be in 0..9"):
        Trajectories.from_lists([[(10, 2)]], 10)
    with pytest.raises(ValueError, match="hours must be in 0..167"):
        Trajectories.from_lists([[(1, 168)]], 10)
    odd = Hierarchy.from_labels([np.arange(168) % 2], "time")  # not intervals
    b2 = SafePathBudget.of(1, 3, 10, 2, 1)
    with pytest.raises(ValueError, match="intervals of hours"):
        build_safepath_tree(Trajectories.from_lists([[(1, 2)]], 10), b2, locations, odd,
                            thresholds_for(b2, "paper", locations, odd), NoiseSource(seed=1).stream("t"))


# ---- consistency and release -------------------------------------------------------------------------

@st.composite
def noisy_trees(draw):
    levels = []
    n_prev = 1
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 8))
        parent = np.sort(np.array(draw(st.lists(st.integers(0, n_prev - 1), min_size=n, max_size=n)), dtype=np.int64))
        count = np.array(draw(st.lists(st.integers(-20, 400), min_size=n, max_size=n)), dtype=np.int64)
        levels.append(TrajectoryLevel(parent, np.arange(n, dtype=np.int64) % 5, np.arange(n, dtype=np.int64),
                                      count))
        n_prev = n
    return NoisySafePathTree(levels, SafePathBudget.of(1, 4, 5, 0, 0), Thresholds("paper", (1,), (1,)), False)


@settings(max_examples=300, deadline=None)
@given(noisy_trees())
def test_consistency_holds_on_every_tree_and_follows_the_formula(tree):
    bar = consistent_counts(tree)
    assert np.array_equal(bar[0], np.maximum(tree.levels[0].count, 0))
    for d in range(1, len(bar)):
        parent = tree.levels[d].parent
        assert np.all(bar[d] >= 0)
        sums = np.bincount(parent, weights=bar[d], minlength=bar[d - 1].size)
        assert np.all(sums <= bar[d - 1] + 1e-6)
        raw = tree.levels[d].count.astype(float)
        size = np.bincount(parent, minlength=bar[d - 1].size)
        deficit = bar[d - 1] - np.bincount(parent, weights=raw, minlength=bar[d - 1].size)
        formula = raw + np.minimum(0, deficit / np.maximum(size, 1))[parent]
        clean = ~np.isin(parent, parent[formula < 0])  # families where no child would go negative
        assert np.allclose(bar[d][clean], formula[clean])


def test_terminating_and_literal_release_of_a_small_tree():
    lv1 = TrajectoryLevel(np.array([0, 0]), np.array([1, 2]), np.array([8, 9]), np.array([100, 30]))
    lv2 = TrajectoryLevel(np.array([0, 0]), np.array([3, 4]), np.array([17, 18]), np.array([50, 80]))
    tree = NoisySafePathTree([lv1, lv2], SafePathBudget.of(1, 2, 5, 0, 0), Thresholds("paper", (1,), (1,)), True)
    bar = consistent_counts(tree)
    assert bar[1].tolist() == [35.0, 65.0]  # 50 + (100 − 130)/2, 80 + (100 − 130)/2
    assert release_trajectories(tree, bar) == [(((1, 8), (3, 17)), 35), (((1, 8), (4, 18)), 65), (((2, 9),), 30)]
    assert release_trajectories(tree, bar, "literal") == [(((1, 8),), 100), (((1, 8), (3, 17)), 35),
                                                          (((1, 8), (4, 18)), 65), (((2, 9),), 30)]
    with pytest.raises(ValueError, match="release must be one of"):
        release_trajectories(tree, bar, "all")
    data = expand_release(release_trajectories(tree, bar), 5)
    assert len(data) == 130 and data.to_lists()[0] == ((1, 8), (3, 17))


@pytest.mark.skipif(safepath.check_scale is None, reason="needs the samplers' bounded noise scales")
def test_unsupported_noise_scales_are_refused_at_plan_time():
    # depth-1 location blocks over 893 stops at ε = 0.01, h = 20: scale 893/(2ε_s) = 1,786,000
    with pytest.raises(Exception, match=r"SafePath \(height 20, location sub-level, general nodes at depth 1\)"):
        SafePathBudget.of(0.01, 20, 893, 6, 6)
    SafePathBudget.split(0.01, 20, 893, 6, 6)  # the arithmetic alone is fine


def test_unique_counts_matches_numpy():
    from transit_release.mechanisms.safepath import unique_counts

    x = np.random.default_rng(0).integers(0, 50, 1000)
    u, c = unique_counts(x)
    nu, nc = np.unique(x, return_counts=True)
    assert u.tolist() == nu.tolist() and c.tolist() == nc.tolist()
    assert unique_counts(np.zeros(0, dtype=np.int64))[0].size == 0


# ---- the joint budget rule -----------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2000), st.integers(1, 400), st.integers(1, 30), st.fractions(min_value=Fraction(1, 100),
                                                                                    max_value=400))
def test_joint_rule_every_root_to_leaf_path_spends_at_most_epsilon_exactly(n_loc, n_hours, h, eps):
    b = safepath.JointBudget(eps, h, n_loc, n_hours)  # the arithmetic (``of`` adds the scale check)
    assert b.level_epsilon == min(eps / h, Fraction(16))
    assert b.path_spend() == h * b.level_epsilon <= eps
    if eps / h <= 16:
        assert b.path_spend() == eps
    assert b.threshold == math.ceil(math.log(n_loc * n_hours) / float(b.level_epsilon))


def test_joint_rule_tests_each_pair_once_per_level_and_reproduces_the_data_at_large_epsilon():
    data = [((0, 7), (1, 17)), ((0, 7), (1, 17)), ((2, 30),), ((0, 7), (3, 40), (3, 41))] * 3
    trajs = Trajectories.from_lists(data, 4)
    b = safepath.JointBudget.of(90, 3, 4)
    assert b.level_epsilon == 16 and b.threshold == 1 and safepath.joint_delta_slack(b) < 1e-10
    tree, release = safepath.sanitize_joint(trajs, b, NoiseSource(seed=TEST_SEED).stream("joint"))
    assert dict(release) == {((0, 7), (1, 17)): 6, ((2, 30),): 3, ((0, 7), (3, 40), (3, 41)): 3}
    assert [lv.count.size for lv in tree.levels] == [2, 2, 1]


def test_joint_rule_release_does_not_depend_on_the_input_order_and_is_monotone():
    from transit_release.synth.trajectories import synthesize_commuter_week

    trajs, _ = synthesize_commuter_week(3000, seed=2)
    lists = trajs.to_lists()
    shuffled = Trajectories.from_lists(lists[::-1], 68)
    b = safepath.JointBudget.of(2, 4, 68)
    a = safepath.sanitize_joint(trajs, b, NoiseSource(seed=TEST_SEED).stream("j"))[1]
    assert a == safepath.sanitize_joint(shuffled, b, NoiseSource(seed=TEST_SEED).stream("j"))[1]
    assert a and all([h for _, h in t] == sorted(h for _, h in t) and len(t) <= 4 for t, _ in a)


def test_joint_rule_refusals():
    with pytest.raises(ValueError, match="height must be at least 1"):
        safepath.JointBudget.of(1, 0, 68)
    with pytest.raises(ValueError, match="above the largest supported scale"):
        safepath.JointBudget.of(1e-6, 6, 68)
    assert safepath.joint_false_nodes(safepath.JointBudget.of(1, 6, 68)) < 5_000_000
