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
