import math
from fractions import Fraction

import numpy as np
import pytest

from transit_release.accounting.pld import (DLapComponent, basic_loss, components_for_card_release,
                                            components_for_trip_release, cumulative_loss, pld_epsilon,
                                            to_dp_event, weekly_releases_loss)

OPAL_EPS = [1, 1, 1, 1, 2, 2]
OPAL_DELTA = [1 / 8_000_000] * 6


@pytest.mark.parametrize("scale,sens", [(Fraction(2), 1), (Fraction(2), 2), (Fraction(5), 3), (Fraction(10), 1)])
def test_one_mechanism_equals_the_closed_form(scale, sens):
    """Pure discrete Laplace: ε at δ = 0 is sensitivity/scale (up to the pessimistic 1e-4 discretisation)."""
    c = [DLapComponent(scale, sens)]
    assert pld_epsilon(c, 0.0, noise="ideal") == pytest.approx(sens / float(scale), abs=1.5e-4)
    assert pld_epsilon(c, 0.0, noise="ideal") >= sens / float(scale) - 1e-12
    # the sampler's table has an infinite-loss mass of about 2^-80: at any δ above it, the same ε
    assert pld_epsilon(c, 1e-15) == pytest.approx(sens / float(scale), abs=1.5e-4)


def test_sampler_and_ideal_agree():
    comps = components_for_card_release([0.25] * 4 + [0.5] * 2, [1e-9] * 6, 2, 5)
    a = pld_epsilon(comps, 1e-8, noise="ideal")
    b = pld_epsilon(comps, 1e-8, noise="sampler")
    assert b == pytest.approx(a, rel=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_pld_never_exceeds_basic(seed):
    rng = np.random.default_rng(seed)
    comps = [DLapComponent(Fraction(int(rng.integers(4, 40)), int(rng.integers(1, 4))), int(rng.integers(1, 4)),
                           int(rng.integers(1, 20)), 1e-9) for _ in range(int(rng.integers(1, 4)))]
    for delta in (1e-9, 1e-6):
        loss = cumulative_loss(comps, delta)
        assert loss.pld_epsilon <= loss.basic_epsilon + 1e-12
        # the raw PLD figure too, up to its pessimistic rounding (≤ 1e-4 per mechanism)
        assert pld_epsilon(comps, delta) <= basic_loss(comps)[0] + loss.mechanisms * 1e-4
        if loss.advanced_epsilon is not None:
            assert loss.advanced_epsilon < loss.basic_epsilon


def test_monotone_in_the_number_of_releases():
    eps = [0.05] * 4 + [0.1] * 2
    figures = [weekly_releases_loss(r, eps, [1e-10] * 6, 2, 4, 1e-7) for r in (1, 2, 4, 8, 16)]
    pld = [f.pld_epsilon for f in figures]
    basic = [f.basic_epsilon for f in figures]
    assert all(a < b for a, b in zip(pld, pld[1:]))
    assert all(a < b for a, b in zip(basic, basic[1:]))
    assert basic == pytest.approx([0.4 * 4 * r for r in (1, 2, 4, 8, 16)])
    assert all(p < b for p, b in zip(pld, basic))
    thr = [f.threshold_delta for f in figures]
    assert thr == pytest.approx([6 * 4 * r * 1e-10 for r in (1, 2, 4, 8, 16)])
    # many small mechanisms: PLD clearly beats basic composition
    assert pld[-1] < 0.6 * basic[-1]


def test_dp_accounting_event_gives_the_same_epsilon():
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    comps = components_for_card_release([0.5] * 4 + [1.0] * 2, [1e-9] * 6, 3, 2)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(to_dp_event(comps))
    assert isinstance(to_dp_event(comps), dp_event.ComposedDpEvent)
    assert acc.get_epsilon(1e-7) == pytest.approx(pld_epsilon(comps, 1e-7, noise="ideal"), rel=1e-9)


def test_card_components_and_trip_components():
    comps = components_for_card_release(OPAL_EPS, OPAL_DELTA, 2, 7)
    assert [(c.scale, c.sensitivity, c.count) for c in comps] == [(Fraction(2), 2, 7)] * 4 + [(Fraction(1), 2, 7)] * 2
    assert basic_loss(comps) == pytest.approx((8 * 7, 6 * 7 / 8_000_000))
    trip = components_for_trip_release(OPAL_EPS, OPAL_DELTA)
    assert [(c.scale, c.sensitivity) for c in trip] == [(Fraction(2), 2)] * 4 + [(Fraction(1), 2)] * 2
    assert basic_loss(trip)[0] == 8  # the paper's per-partition replace-one ε


def test_bad_components_are_refused():
    with pytest.raises(ValueError, match="`count` must be positive. Found 0."):
        DLapComponent(Fraction(1), 1, 0)
    with pytest.raises(ValueError, match="scale must be positive"):
        DLapComponent(Fraction(0), 1)
    with pytest.raises(ValueError, match="noise must be one of"):
        pld_epsilon([DLapComponent(Fraction(3), 1)], 1e-6, noise="gaussian")


# --- dominance: the single-key shift by l1 dominates every spread of the same total ------------------

def _loss_pmf(c: int, t: float) -> dict[int, float]:
    """Exact pmf of t·(privacy loss) of the discrete Laplace pair (noise, noise shifted by c), under the
    unshifted side: +c for z ≤ 0, c − 2z for 0 < z < c, −c for z ≥ c."""
    a = math.exp(-1 / t)
    pm = {c: 1 / (1 + a)}
    pm[-c] = pm.get(-c, 0.0) + a ** c / (1 + a)
    for z in range(1, c):
        pm[c - 2 * z] = pm.get(c - 2 * z, 0.0) + (1 - a) / (1 + a) * a ** z
    return pm


def _convolve(p, q):
    out: dict[int, float] = {}
    for m1, a1 in p.items():
        for m2, a2 in q.items():
            out[m1 + m2] = out.get(m1 + m2, 0.0) + a1 * a2
    return out


def _hockey_stick(pm, t, eps):
    return sum(p * max(0.0, 1.0 - math.exp(eps - m / t)) for m, p in pm.items())


def _integer_partitions(n, largest=None):
    largest = largest or n
    if n == 0:
        yield []
        return
    for i in range(min(n, largest), 0, -1):
        for rest in _integer_partitions(n - i, i):
            yield [i, *rest]


def test_single_key_shift_dominates_every_spread():
    worst = -1.0
    for t in (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0):
        for k in range(2, 9):
            single = _loss_pmf(k, t)
            grid = sorted(set(np.linspace(0, k / t, 121).tolist()) | {m / t for m in range(-k, k + 1) if m >= 0})
            for spread in _integer_partitions(k):
                if len(spread) == 1:
                    continue
                pm = {0: 1.0}
                for c in spread:
                    pm = _convolve(pm, _loss_pmf(c, t))
                worst = max(worst, max(_hockey_stick(pm, t, e) - _hockey_stick(single, t, e) for e in grid))
    assert worst <= 1e-15


@pytest.mark.slow
def test_52_weekly_releases_at_the_defaults():
    from transit_release.accounting.pld import default_weekly_releases_loss

    year = default_weekly_releases_loss(52, 5e-7)
    assert year.basic_epsilon == pytest.approx(416)
    assert year.threshold_delta == pytest.approx(52 * 10 * 6 * 1e-10)
    assert year.pld_epsilon == pytest.approx(66.95, abs=0.05)
    assert year.advanced_epsilon == pytest.approx(110.48, abs=0.05)
