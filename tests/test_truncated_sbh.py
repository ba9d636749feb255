"""The card-level SBH with truncated discrete Laplace noise (what card-level releases draw).

Checked here: the sampler's support and exact conditional distribution, the thresholds at the card defaults,
minimality of the noise bound, that a key the card holds alone can never be released, and — exactly, from the
drawn distribution's integer words — that the privacy profile at ``ε`` stays within the stated ``δ`` for every
shift a card can make at small scales (one key shifted by up to ``l1``; shifts spread over two keys).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from transit_release.mechanisms import stability_histogram as sbh
from transit_release.noise import NoiseSource, discrete_laplace_table


def drawn_truncated_pmf(scale: Fraction, bound: int, exact: bool = False) -> dict:
    """``P̂(Z = z | |Z| ≤ A)`` of the table actually sampled, from its exact words (``exact``: as 50-digit
    decimals, else floats)."""
    table = discrete_laplace_table(scale)
    m = table.support_max
    edges = [0, *(int(c) for c in table.cuts), 1 << 64]
    total = table.within_words(bound)
    if exact:
        return {z: Decimal(edges[z + m + 1] - edges[z + m]) / Decimal(total) for z in range(-bound, bound + 1)}
    return {z: (edges[z + m + 1] - edges[z + m]) / total for z in range(-bound, bound + 1)}


def hockey_stick(p: dict, q: dict, eps: float) -> Decimal:
    """``Σ_v (p(v) − e^ε q(v))_+`` in 50-digit decimals (floats would carry errors of ~1e-16 per term)."""
    e = Decimal(repr(eps)).exp()
    zero = Decimal(0)
    return sum((max(zero, p.get(v, zero) - e * q.get(v, zero)) for v in set(p) | set(q)), zero)


def test_sample_within_stays_within_and_matches_the_conditional_table():
    scale = Fraction(3)
    table = discrete_laplace_table(scale)
    bound = 7
    z = table.sample_within(NoiseSource(seed=1).stream("t"), bound, 400_000)
    assert z.min() >= -bound and z.max() <= bound and z.min() == -bound and z.max() == bound
    pmf = drawn_truncated_pmf(scale, bound)
    freq = np.bincount(z + bound, minlength=2 * bound + 1) / z.size
    for v, p in pmf.items():
        assert abs(freq[v + bound] - p) < 5 * math.sqrt(p * (1 - p) / z.size) + 1e-6
    assert math.fsum(pmf.values()) == pytest.approx(1.0, abs=1e-15)


def test_within_words_and_the_truncated_tv():
    table = discrete_laplace_table(Fraction(20))
    assert table.within_words(0) == (1 << 64) - 2 * table.upper_tail_words(1)
    assert table.within_words(10 * table.support_max) == 1 << 64
    assert table.truncated_total_variation(402) >= 2 * table.total_variation


@pytest.mark.parametrize("eps,bound,threshold,laplace_threshold", [(0.1, 402, 405, 464), (0.2, 208, 211, 233)])
def test_card_defaults_thresholds(eps, bound, threshold, laplace_threshold):
    b = sbh.TruncatedCardLevelBudget(eps, 1e-10, 2)
    assert b.sensitivity == (2, 2, 2)
    assert b.noise_bound == bound and b.threshold == threshold
    assert b.achieved_delta <= 1e-10
    assert sbh.truncated_user_level_delta(eps, bound - 1, 2, 2, 2) > 1e-10  # the smallest bound
    assert sbh.CardLevelBudget(eps, 1e-10, 2).threshold == laplace_threshold  # the untruncated SBH unchanged
    assert b.scale == sbh.CardLevelBudget(eps, 1e-10, 2).scale


def test_ideal_delta_closed_form():
    eps, bound, l1 = 0.5, 30, 3
    a = math.exp(-eps / l1)
    num = sum(a ** z for z in range(bound - l1 + 1, bound + 1))
    den = sum(a ** abs(z) for z in range(-bound, bound + 1))
    assert sbh.truncated_ideal_delta(eps, bound, l1) == pytest.approx(num / den, rel=1e-12)
    assert sbh.truncated_ideal_delta(eps, bound, l1) >= num / den * (1 - 1e-15)


def test_a_key_the_card_holds_alone_is_never_released():
    b = sbh.TruncatedCardLevelBudget(2.0, 1e-3, 2)
    k = b.max_rows_per_partition
    res = sbh.truncated_card_level_stability_histogram(np.full(200_000, k, dtype=np.int64), b,
                                                       NoiseSource(seed=3).stream("alone"))
    assert res.kept.size == 0
    assert b.noise_bound + k < b.threshold


@pytest.mark.parametrize("eps,delta,k", [(2.0, 1e-3, 2), (1.0, 1e-4, 2), (0.5, 1e-3, 3), (2.0, 1e-6, 1)])
def test_exact_profile_of_the_drawn_noise_is_within_delta(eps, delta, k):
    """δ(ε) = sup_S P(n + c + Z ∈ S) − e^ε P(n + Z ∈ S), both directions, computed on the drawn pmf."""
    with localcontext() as ctx:
        ctx.prec = 50
        _check_profile(eps, delta, k)


def _check_profile(eps, delta, k):
    b = sbh.TruncatedCardLevelBudget(eps, delta, k)
    bound, scale = b.noise_bound, b.scale
    pmf = drawn_truncated_pmf(scale, bound, exact=True)
    worst = Decimal(0)
    for c in range(1, k + 1):  # the whole shift on one key
        shifted = {z + c: p for z, p in pmf.items()}
        worst = max(worst, hockey_stick(shifted, pmf, eps), hockey_stick(pmf, shifted, eps))
    if k >= 2:  # spread (1, 1) over two keys: product distributions
        two = {(x, y): px * py for x, px in pmf.items() for y, py in pmf.items()}
        moved = {(x + 1, y + 1): p for (x, y), p in two.items()}
        worst = max(worst, hockey_stick(moved, two, eps), hockey_stick(two, moved, eps))
    assert 0 < worst <= Decimal(b.achieved_delta) and b.achieved_delta <= delta
    # the bound is not loose: the single-key shift by l1 costs the ideal edge mass
    assert float(worst) == pytest.approx(sbh.truncated_ideal_delta(eps, bound, k), rel=1e-9)


def test_the_truncated_budget_is_refused_by_the_untruncated_sanitizer_and_vice_versa():
    counts = np.array([500, 600], dtype=np.int64)
    g = NoiseSource(seed=4).stream("x")
    with pytest.raises(TypeError):
        sbh.card_level_stability_histogram(counts, sbh.TruncatedCardLevelBudget(0.1, 1e-10, 2), g)
    with pytest.raises(TypeError):
        sbh.truncated_card_level_stability_histogram(counts, sbh.CardLevelBudget(0.1, 1e-10, 2), g)


def test_sanitizer_releases_above_the_lower_threshold():
    b = sbh.TruncatedCardLevelBudget(0.1, 1e-10, 2)
    counts = np.array([1, 2, 380, 405, 430, 464, 2000], dtype=np.int64)
    res = sbh.truncated_card_level_stability_histogram(counts, b, NoiseSource(seed=8).stream("y"))
    assert res.threshold == 405 and (res.counts >= 405).all()
    assert 0 not in res.kept and 1 not in res.kept and 6 in res.kept
    assert (np.abs(res.counts - counts[res.kept]) <= b.noise_bound).all()
