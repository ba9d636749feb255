"""The set histogram (small universes) and the heavy-tailed set generator it is chosen and measured on."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from transit_release.errors import InputDataError, NoiseParameterError
from transit_release.mechanisms import set_histogram as sh
from transit_release.mechanisms.diffpart import ItemSets
from transit_release.noise import NoiseSource, discrete_laplace_table

SEED = 20260101


def test_budget_and_public_parameters():
    b = sh.SetHistogramBudget.of(1, 17)
    assert (b.cells, b.head_threshold, b.rake_order, b.noise_scale) == (131_071, 12, 3, 1)
    assert sh.SetHistogramBudget.of(0.5, 4).head_threshold == math.ceil(math.log(15) / 0.5) == 6
    assert sh.SetHistogramBudget.of(2, 2).rake_order == 2
    assert sh.SetHistogramBudget.of(Fraction(1, 3), 1).cells == 1
    assert 0 < sh.delta_slack(b) < 1e-15


def test_refusals_before_any_noise():
    with pytest.raises(sh.SetHistogramParameterError, match="21 items make 2,097,151 cells"):
        sh.SetHistogramBudget.of(1, 21)
    with pytest.raises(sh.SetHistogramParameterError, match="epsilon must be positive"):
        sh.SetHistogramBudget.of(0, 5)
    with pytest.raises(NoiseParameterError, match="Use ε ≤ 16"):
        sh.SetHistogramBudget.of(20, 5)


def test_the_rule_reads_the_universe_size_and_epsilon_only():
    """The histogram where 2^|I| ≤ 2^20·ε²: 20 items at ε ≥ 1, 18 at ε = 0.5, 16 at ε = 0.25."""
    histogram = {(17, 1), (20, 1), (20, 2), (18, 0.5), (16, 0.25), (12, 0.25), (6, 0.01), (1, 1)}
    diffpart = {(21, 16), (68, 2), (19, 0.5), (17, 0.25), (20, 0.99), (8, 0.01)}
    assert all(sh.choose_mechanism(u, e) == "set-histogram" for u, e in histogram)
    assert all(sh.choose_mechanism(u, e) == "diffpart" for u, e in diffpart)
    with pytest.raises(sh.SetHistogramParameterError):
        sh.choose_mechanism(0, 1)


def test_cells_and_superset_sums():
    records = ItemSets.from_lists([(0,), (1, 2), (0, 1, 2), (2,)], 3)
    assert sh.cell_of(records).tolist() == [1, 6, 7, 4]
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 9, 1 << 5)
    f = sh.superset_sums(x, 5)
    for q in range(1 << 5):
        assert f[q] == sum(x[c] for c in range(1 << 5) if c & q == q)


def test_every_cell_gets_one_noise_draw_in_cell_order():
    records = ItemSets.from_lists([(0,), (0,), (1, 2)], 3)
    b = sh.SetHistogramBudget.of(1, 3)
    noisy = sh.noisy_histogram(records, b, NoiseSource(seed=SEED).stream("h"))
    noise = discrete_laplace_table(Fraction(1)).sample(NoiseSource(seed=SEED).stream("h"), 7)
    counts = np.array([0, 2, 0, 0, 0, 0, 1, 0])
    assert noisy[0] == 0 and noisy[1:].tolist() == (counts[1:] + noise).tolist()


def test_trie_allocation_keeps_the_total_and_is_non_negative():
    rng = np.random.default_rng(2)
    rest = rng.integers(-4, 6, 1 << 8)
    rest[0] = 0
    mass = sh.trie_allocation(rest, 8)
    assert (mass >= 0).all() and mass.sum() == pytest.approx(max(rest.sum(), 0))
    assert sh.trie_allocation(-np.ones(1 << 3, dtype=np.int64), 3).sum() == 0


def test_raking_meets_the_clear_containment_counts_and_keeps_the_total():
    b = sh.SetHistogramBudget.of(1, 6)
    estimate = np.ones(1 << 6)
    estimate[0] = 0
    truth = np.zeros(1 << 6)
    truth[0b000011] = 900  # {0, 1}
    truth[0b000001] = 300
    truth[0b111100] = 200
    targets = sh.superset_sums(truth, 6)
    targets[0] = truth.sum()
    start = estimate * truth.sum() / estimate.sum()
    out, adjusted = sh.rake(start, targets, b)
    before, got = sh.superset_sums(start, 6), sh.superset_sums(out, 6)
    assert adjusted > 0 and out.sum() == pytest.approx(truth.sum()) and (out >= 0).all()
    for q in (0b1, 0b10, 0b11, 0b100):  # far from clear targets: pulled most of the way to them
        assert abs(got[q] - targets[q]) < 0.3 * abs(before[q] - targets[q]), q
    unclear = sh.SetHistogramBudget.of(Fraction(1, 100), 6)  # σ of f̃ of 1 item: 800; nothing is clear
    assert sh.rake(start, targets, unclear)[1] == 0


def test_the_release_is_sorted_non_negative_and_ignores_the_input_order():
    rng = np.random.default_rng(3)
    lists = [tuple(sorted(set(rng.integers(0, 6, rng.integers(1, 4)).tolist()))) for _ in range(3000)]
    b = sh.SetHistogramBudget.of(1, 6)
    a = sh.sanitize_set_histogram(ItemSets.from_lists(lists, 6), b, NoiseSource(seed=SEED).stream("r"))
    z = sh.sanitize_set_histogram(ItemSets.from_lists(lists[::-1], 6), b, NoiseSource(seed=SEED).stream("r"))
    assert a.released == z.released == sorted(a.released)
    assert all(c > 0 and s and list(s) == sorted(set(s)) and max(s) < 6 for s, c in a.released)
    assert abs(sum(c for _, c in a.released) - 3000) < 300


def test_with_little_noise_the_release_is_the_data():
    lists = [(0,)] * 50 + [(1, 2)] * 30 + [(0, 1, 2, 3)] * 20
    out = sh.sanitize_set_histogram(ItemSets.from_lists(lists, 4), sh.SetHistogramBudget.of(16, 4),
                                    NoiseSource(seed=SEED).stream("q")).released
    assert dict(out) == {(0,): 50, (1, 2): 30, (0, 1, 2, 3): 20}


@pytest.mark.slow
def test_on_heavy_tailed_data_it_keeps_the_rare_sets_passengers_that_diffpart_drops():
    """60,000 heavy-tailed sets over 17 items at ε = 1 (a twentieth of the benchmark's size, so both errors are
    larger): the containment counts of 1–3 items are far closer than DiffPart's at the rule's fan-out (the
    full-size comparison, where the histogram meets 0.12: docs/sets.md)."""
    from transit_release.mechanisms.diffpart import DiffPartBudget, fanout_for, sanitize_sets
    from transit_release.synth.sets import heavy_tailed_sets
    from transit_release.utility.sets import WeightedSets, count_query_error, query_workload, release_pairs

    sets = heavy_tailed_sets(60_000, seed=5)
    truth = WeightedSets.of(release_pairs(sets), 17)
    workload = query_workload(17, 3, per_subset=2000, seed=12, max_sizes=[3])
    hist = sh.sanitize_set_histogram(sets, sh.SetHistogramBudget.of(1, 17), NoiseSource(seed=SEED).stream("a"))
    diff = sanitize_sets(sets, DiffPartBudget.of(1, 17, fanout_for(17)), NoiseSource(seed=SEED).stream("b"))
    e_hist = count_query_error(truth, WeightedSets.of(hist.released, 17), workload)["max_q3"]
    e_diff = count_query_error(truth, WeightedSets.of(diff.released, 17), workload)["max_q3"]
    assert e_hist < 0.6 * e_diff, (e_hist, e_diff)


# ---- the release's choice of mechanism ------------------------------------------------------------

def _universe(n):
    from transit_release.inputs.universe import LocationUniverse

    return LocationUniverse(tuple(f"S{i:02d}" for i in range(n)), "test universe")


def test_the_release_picks_the_mechanism_from_public_inputs_and_keeps_diffparts_own_flag():
    from transit_release.releases import sets

    small, large = _universe(17), _universe(68)
    assert (sets.set_setup(small, 1).mechanism, sets.set_setup(small, 1).by_rule) == ("histogram", True)
    assert sets.set_setup(large, 1).mechanism == "diffpart" and sets.set_setup(large, 1).by_rule
    assert sets.set_setup(small, 1, fanout=4).mechanism == "diffpart"  # DiffPart's own flag keeps DiffPart
    assert sets.set_setup(small, 1, fanout=4).chosen == "given (--fanout)"
    assert sets.set_setup(_universe(20), 1, mechanism="histogram").mechanism == "histogram"
    with pytest.raises(InputDataError, match="--fanout goes with DiffPart"):
        sets.set_setup(small, 1, mechanism="histogram", fanout=4)
    with pytest.raises(InputDataError, match="at most 20 items"):
        sets.set_setup(_universe(25), 1, mechanism="histogram")


def test_only_a_rule_chosen_histogram_recognises_the_former_default_id():
    from datetime import date

    from transit_release.inputs.screening import Period
    from transit_release.releases import sets

    period = Period(date(2026, 1, 1), date(2026, 1, 31))
    assert sets.earlier_release_ids(period, sets.set_setup(_universe(17), 1)) == ("sets-diffpart-20260101-20260131",)
    assert sets.earlier_release_ids(period, sets.set_setup(_universe(17), 1, mechanism="histogram")) == ()
    assert sets.earlier_release_ids(period, sets.set_setup(_universe(68), 1)) == ()
    assert sets.default_release_id(period, "histogram") == "sets-histogram-20260101-20260131"


# ---- the generator -------------------------------------------------------------------------------

def test_the_heavy_tailed_generator_matches_the_msnbc_statistics_it_cites():
    """Thesis Table 4.2 (989,818 sets over 17 items, largest 17, average 1.72) and Table 6.9 / the UCI description
    (5.7 visits a user on average, the longest 14,795)."""
    from transit_release.synth.sets import MSNBC_STATISTICS, heavy_tailed_sets, set_statistics

    sets, visits = heavy_tailed_sets(with_visits=True)
    stats = set_statistics(sets)
    assert stats["records"] == MSNBC_STATISTICS["records"] and stats["items"] == MSNBC_STATISTICS["items"]
    assert stats["max_set_size"] == MSNBC_STATISTICS["max_set_size"]
    assert abs(stats["avg_set_size"] - MSNBC_STATISTICS["avg_set_size"]) < 0.01
    assert int(visits.max()) == MSNBC_STATISTICS["max_visits"] and abs(visits.mean() - 5.7) < 0.15
    sizes = np.bincount(sets.sizes, minlength=18)
    assert (sizes[1:] > 0).all()  # every size from 1 to 17 occurs: a heavy tail
    assert heavy_tailed_sets(5000, seed=4).to_lists() == heavy_tailed_sets(5000, seed=4).to_lists()


# ---- raking never divides by zero (atk40 M2) ------------------------------------------------------

def _shape(kind: str, items: int, n: int, rng) -> list[tuple[int, ...]]:
    if kind == "single station":  # each passenger one random station
        return [(int(rng.integers(0, items)),) for _ in range(n)]
    if kind == "hub":  # station 0 in every set
        return [tuple(sorted({0} | set(rng.choice(np.arange(1, items), rng.integers(0, 3), replace=False).tolist())))
                for _ in range(n)]
    if kind == "identical":
        return [(0,)] * n
    return [tuple(range(items))] * n  # every station


@pytest.mark.parametrize("kind", ["single station", "hub", "identical", "every station"])
def test_the_raking_survives_ordinary_data_over_many_seeds(kind):
    """A noisy size or containment count at or above the estimated total once divided by zero after the charge
    (12/60 runs of 30 one-station passengers over 8 stations at ε = 1); every shape, seed and size now gives a
    release that keeps the estimated total."""
    rng = np.random.default_rng(7)
    for items, n, eps in ((8, 30, 1), (12, 100, 0.5), (10, 50, 0.5), (5, 20, 1), (3, 10, 1)):
        b = sh.SetHistogramBudget.of(eps, items)
        for seed in range(40):
            records = ItemSets.from_lists(_shape(kind, items, n, rng), items)
            out = sh.sanitize_set_histogram(records, b, NoiseSource(seed=seed).stream("m2", kind))
            assert all(c > 0 for _, c in out.released)


def test_a_target_at_the_total_puts_everything_inside_the_constraint():
    b = sh.SetHistogramBudget.of(1, 3)
    estimate = np.array([0, 10, 10, 0, 10, 0, 0, 0], dtype=float)  # {0}, {1}, {2}
    targets = np.zeros(8)
    targets[0b001] = 1000  # every record contains item 0, by the noisy count: more than the total
    out, adjusted = sh.rake(estimate, targets, b)
    assert adjusted >= 1 and np.isfinite(out).all() and out.sum() == pytest.approx(30)
    assert out[[0b010, 0b100]].sum() == 0 and out[0b001] == pytest.approx(30)
