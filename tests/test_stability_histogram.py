import math

import numpy as np
import pytest

from transit_release.mechanisms.stability_histogram import (bad_event_bound, sbh_scale, sbh_threshold,
                                                            stability_histogram)
from transit_release.noise import NoiseSource

DELTA = 1 / 8_000_000


def spec_threshold(eps: float, delta: float) -> int:
    """The spec's closed form for the ideal discrete Laplace: T = 1 + ceil(t ln(2 / (δ(1+a))))."""
    t = 2 / eps
    a = math.exp(-1 / t)
    return 1 + math.ceil(t * math.log(2 / (delta * (1 + a))))


def test_thresholds_of_the_opal_release_are_exact():
    assert sbh_threshold(1.0, DELTA) == 34
    assert sbh_threshold(2.0, DELTA) == 18


@pytest.mark.parametrize("eps", [0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 4.0])
@pytest.mark.parametrize("delta", [1e-9, DELTA, 1e-5])
def test_threshold_matches_the_spec_formula(eps, delta):
    assert sbh_threshold(eps, delta) == spec_threshold(eps, delta)


def test_threshold_is_the_smallest_that_bounds_the_bad_event():
    for eps in (1.0, 2.0, 0.5):
        t = sbh_threshold(eps, DELTA)
        assert bad_event_bound(eps, t) <= DELTA / 2
        assert bad_event_bound(eps, t - 1) > DELTA / 2


@pytest.mark.parametrize("eps,scale,threshold", [(1.0, 2.0, 34), (2.0, 1.0, 18)])
def test_delta_against_opendp_privacy_map(eps, scale, threshold):
    """OpenDP releases a key when noisy > threshold, so its threshold is ours minus one."""
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    m = dp.m.make_laplace_threshold(
        dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int)),
        dp.l01inf_distance(dp.absolute_distance(T=int)), scale=scale, threshold=threshold - 1)
    assert float(sbh_scale(eps)) == scale
    opendp_eps, opendp_delta = m.map((1, 1, 1))  # one changed key under add/remove
    assert opendp_eps == pytest.approx(eps / 2)
    ours = bad_event_bound(eps, threshold)
    assert ours == pytest.approx(opendp_delta, rel=1e-6)
    assert opendp_delta <= DELTA / 2
    if eps == 1.0:
        assert opendp_delta == pytest.approx(4.25e-8, rel=1e-3)


def test_only_present_points_are_sanitized():
    with pytest.raises(ValueError, match="only points present in the data"):
        stability_histogram(np.array([3, 0, 5]), 1.0, DELTA, NoiseSource(seed=1).stream("x"))


def test_output_is_a_subset_of_the_input_and_above_threshold():
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 200, 5000)
    res = stability_histogram(counts, 1.0, DELTA, NoiseSource(seed=2).stream("x"))
    assert res.threshold == 34
    assert np.all(np.diff(res.kept) > 0)
    assert res.kept.min() >= 0 and res.kept.max() < counts.size
    assert res.counts.min() >= 34
    # a count of 1 essentially never passes (bad event ~4e-8)
    ones = stability_histogram(np.ones(100_000, dtype=np.int64), 1.0, DELTA, NoiseSource(seed=3).stream("y"))
    assert ones.kept.size == 0


def test_empty_histogram():
    res = stability_histogram(np.zeros(0, dtype=np.int64), 1.0, DELTA, NoiseSource(seed=1).stream("x"))
    assert res.kept.size == 0 and res.counts.size == 0


def test_too_small_delta_is_refused_with_a_message():
    with pytest.raises(ValueError, match="delta must be in"):
        sbh_threshold(1.0, 0.0)


@pytest.mark.parametrize("eps,match", [
    (1e-5, r"stability histogram \(noise scale 2/ε\): ε = 1e-05 gives noise scale 200000, above the largest "
           r"supported scale 100,000 .*Use ε ≥ 2e-05\."),
    (1e308, r"ε = 1e\+308 gives noise scale 2e-308, below the smallest supported scale 1/16 .*Use ε ≤ 32\."),
    (33.0, r"below the smallest supported scale 1/16 .*Use ε ≤ 32\."),
    (float("inf"), r"epsilon must be a finite number. Found inf."),
    (float("nan"), r"epsilon must be a finite number. Found nan."),
    (0.0, r"epsilon must be positive. Found 0.0."),
])
def test_extreme_epsilons_are_refused_at_once(eps, match):
    import time

    from transit_release.errors import NoiseParameterError

    start = time.process_time()
    with pytest.raises(NoiseParameterError, match=match):
        sbh_threshold(eps, DELTA)
    assert time.process_time() - start < 1.0
    gen, twin = NoiseSource(seed=4).stream("x"), NoiseSource(seed=4).stream("x")
    with pytest.raises(NoiseParameterError):
        stability_histogram(np.array([5, 9]), eps, DELTA, gen)
    assert gen.integers(0, 2**62, 4).tolist() == twin.integers(0, 2**62, 4).tolist()  # nothing drawn


def test_the_limits_themselves_are_accepted():
    assert sbh_scale(2e-5) == 100_000  # the largest table (built in the slow noise tests)
    assert sbh_threshold(32.0, DELTA) >= 2
    assert bad_event_bound(32.0, sbh_threshold(32.0, DELTA)) <= DELTA / 2


# ---- card level (user-level SBH) --------------------------------------------------------------------

from fractions import Fraction  # noqa: E402

from transit_release.mechanisms.stability_histogram import (CardLevelBudget, card_level_stability_histogram,  # noqa: E402
                                                            card_sensitivity, user_level_bad_event,
                                                            user_level_scale, user_level_threshold)


def ideal_user_threshold(eps, delta, l0, l1, linf):
    """Closed form for ideal noise: T = l∞ + ceil(t ln(l0 / (δ(1+a)))), t = l1/ε."""
    t = l1 / eps
    a = math.exp(-1 / t)
    return linf + math.ceil(t * math.log(l0 / (delta * (1 + a))))


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("delta", [1e-9, DELTA, 1e-5])
def test_trip_level_is_the_replace_one_case_with_k_1(eps, delta):
    assert card_sensitivity(1, "replace-one") == (2, 2, 1)
    assert user_level_threshold(eps, delta, 2, 2, 1) == sbh_threshold(eps, delta)
    assert user_level_scale(eps, 2) == sbh_scale(eps)
    b = CardLevelBudget(eps, delta, 1, "replace-one")
    assert b.threshold == sbh_threshold(eps, delta) and b.scale == sbh_scale(eps)
    assert b.bad_event == pytest.approx(2 * bad_event_bound(eps, b.threshold))


def test_k_1_replace_one_reproduces_34_and_18():
    assert CardLevelBudget(1.0, DELTA, 1, "replace-one").threshold == 34
    assert CardLevelBudget(2.0, DELTA, 1, "replace-one").threshold == 18


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("eps", [0.25, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-9, DELTA])
def test_card_level_threshold_is_minimal_and_matches_the_closed_form(k, eps, delta):
    b = CardLevelBudget(eps, delta, k)
    assert b.sensitivity == (k, k, k)
    assert b.scale == Fraction(k) / Fraction(repr(eps))
    t = b.threshold
    assert user_level_bad_event(eps, t, k, k, k) <= delta
    assert user_level_bad_event(eps, t - 1, k, k, k) > delta
    assert t == ideal_user_threshold(eps, delta, k, k, k)


def opendp_map(scale, threshold_ours, d_in):
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    m = dp.m.make_laplace_threshold(
        dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int)),
        dp.l01inf_distance(dp.absolute_distance(T=int)), scale=scale, threshold=threshold_ours - 1)
    return m.map(d_in)


@pytest.mark.parametrize("eps,delta,k", [(1.0, DELTA, 1), (1.0, DELTA, 2), (0.5, 1e-9, 2), (1.0, 1e-9, 3),
                                         (2.0, 1e-9, 3), (0.25, 1e-10, 4), (1.0, 1e-8, 5), (0.5, DELTA, 8)])
def test_card_level_against_opendp_privacy_map(eps, delta, k):
    """OpenDP's make_laplace_threshold at (l0, l1, l∞) = (k, k, k), its threshold = ours − 1: same ε, same δ
    (to 1e-6 relative: it uses 1 − (1 − p)^l0, we the union bound l0·p plus the sampler's TV), and our T is
    the smallest threshold OpenDP also accepts."""
    b = CardLevelBudget(eps, delta, k)
    t = b.threshold
    o_eps, o_delta = opendp_map(float(b.scale), t, (k, k, k))
    assert o_eps == pytest.approx(eps, rel=1e-12)
    assert b.bad_event == pytest.approx(o_delta, rel=1e-6)
    assert b.bad_event >= o_delta * (1 - 1e-6)  # OpenDP rounds its tail up (conservative float)
    assert o_delta <= delta
    _, o_delta_lower = opendp_map(float(b.scale), t - 1, (k, k, k))
    assert o_delta_lower > delta


def test_card_level_sanitizer_uses_the_card_scale_and_threshold():
    b = CardLevelBudget(1.0, 1e-9, 3)
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 300, 20_000)
    res = card_level_stability_histogram(counts, b, NoiseSource(seed=4).stream("x"))
    assert res.threshold == b.threshold
    assert res.counts.min() >= b.threshold
    # counts of k never pass (bad event ~ 1e-9 / k per key)
    small = card_level_stability_histogram(np.full(100_000, 3), b, NoiseSource(seed=5).stream("y"))
    assert small.kept.size == 0


@pytest.mark.parametrize("bad", [(0, 1, 1), (1, 2, 1), (2, 1, 2)])
def test_inconsistent_sensitivity_is_refused(bad):
    with pytest.raises(ValueError, match="sensitivity"):
        user_level_threshold(1.0, DELTA, *bad)


def test_unknown_neighbouring_is_refused():
    with pytest.raises(ValueError, match="neighbouring"):
        card_sensitivity(2, "swap")


def test_card_level_defaults():
    from transit_release.mechanisms.stability_histogram import CARD_LEVEL_DEFAULTS, card_level_default_budgets

    eps, deltas = card_level_default_budgets()
    assert eps == (0.1, 0.1, 0.1, 0.1, 0.2, 0.2) and deltas == (1e-10,) * 6
    k = CARD_LEVEL_DEFAULTS["k"]
    assert [CardLevelBudget(e, d, k).threshold for e, d in zip(eps, deltas)] == [464] * 4 + [233] * 2
    assert [CardLevelBudget(e, d, k).scale for e, d in zip(eps, deltas)] == [Fraction(20)] * 4 + [Fraction(10)] * 2
