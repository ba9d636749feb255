"""The integer samplers: the exact table and its TV, conditional draws, exact gaps, limits."""

import math
import pickle
import time
from decimal import Decimal, localcontext
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from transit_release.errors import ConfigError, NoiseParameterError
from transit_release.noise import (GAP_CAP, MAX_SCALE, MAX_TRIALS, MIN_SCALE, NoiseSource, _gap_exact, _gap_ratios,
                                   bernoulli_successes, check_scale, discrete_laplace, discrete_laplace_table,
                                   exact_fraction, geometric_gaps, uniform_below)

TWO64 = 1 << 64


def test_exact_fraction_keeps_the_written_decimal():
    assert exact_fraction(0.3) == Fraction(3, 10)
    assert exact_fraction(1.25e-7) == Fraction(1, 8_000_000)
    assert exact_fraction(2) == 2


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(2), Fraction(20, 3), Fraction(200), Fraction(1000)])
def test_table_is_monotone_and_close_to_the_ideal(scale):
    table = discrete_laplace_table(scale)
    assert np.all(np.diff(table.cuts.astype(object)) >= 0)
    assert table.total_variation < 1e-14
    a = np.exp(-1 / float(scale))
    # P(Z >= k) = a^k / (1 + a) for k >= 1
    for k in (1, 5, 20):
        assert table.upper_tail(k) == pytest.approx(a ** k / (1 + a), rel=1e-9)


def test_draws_are_integers_and_centred():
    z = discrete_laplace(NoiseSource(seed=1).stream("x"), 2, 200_000)
    assert z.dtype == np.int64
    a = np.exp(-0.5)
    assert abs(z.mean()) < 0.05
    assert z.var() == pytest.approx(2 * a / (1 - a) ** 2, rel=0.03)


def test_seeded_streams_are_reproducible_and_independent_by_name():
    s1, s2 = NoiseSource(seed=5), NoiseSource(seed=5)
    a = discrete_laplace(s1.stream("bus", "20160808", "tap_on_time"), 2, 1000)
    b = discrete_laplace(s2.stream("bus", "20160808", "tap_on_time"), 2, 1000)
    c = discrete_laplace(s1.stream("bus", "20160808", "tap_off_time"), 2, 1000)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_os_entropy_streams_differ():
    s = NoiseSource()
    a = discrete_laplace(s.stream("x"), 2, 1000)
    b = discrete_laplace(s.stream("x"), 2, 1000)
    assert not np.array_equal(a, b)
    assert s.kind == "os-entropy"


def test_seed_is_never_shown_or_serialised():
    s = NoiseSource(seed=987654321)
    assert "987654321" not in repr(s)
    assert repr(s) == "NoiseSource(test-seed)"
    with pytest.raises(TypeError, match="not serialisable"):
        pickle.dumps(s)


def test_from_environment(monkeypatch):
    monkeypatch.delenv("TRANSIT_RELEASE_TEST_SEED", raising=False)
    assert NoiseSource.from_environment().kind == "os-entropy"
    monkeypatch.setenv("TRANSIT_RELEASE_TEST_SEED", "3")
    assert NoiseSource.from_environment().kind == "test-seed"


def test_non_positive_scale_is_refused():
    with pytest.raises(ValueError, match="scale must be positive. Found 0"):
        discrete_laplace_table(Fraction(0))


# ---- the table: exact cut points and exact TV ------------------------------------------------------



def ideal(scale: Fraction, digits: int = 100) -> Decimal:
    """``a = e^{-1/scale}`` in ``digits``-digit Decimal."""
    with localcontext() as ctx:
        ctx.prec = digits
        a = (-Decimal(scale.denominator) / Decimal(scale.numerator)).exp()
    return a


@pytest.mark.parametrize("scale", [Fraction(1, 16), Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(20)])
def test_cut_points_round_the_ideal_cdf_and_the_tv_is_exact(scale):
    table = discrete_laplace_table(scale)
    m = table.support_max
    a = ideal(scale)
    with localcontext() as ctx:
        ctx.prec = 100
        two64 = Decimal(TWO64)

        def cdf(z):
            return a ** (-z) / (1 + a) if z < 0 else 1 - a ** (z + 1) / (1 + a)

        expected = [int((cdf(z) * two64).to_integral_value()) for z in range(-m, m)]
        assert table.cuts.tolist() == expected
        assert a ** m / (1 + a) * two64 >= Decimal("0.5") > a ** (m + 1) / (1 + a) * two64  # last non-empty tail
        bounds = [0, *expected, TWO64]
        tv = sum(abs(Decimal(bounds[i + 1] - bounds[i]) / two64 - (1 - a) / (1 + a) * a ** abs(z))
                 for i, z in enumerate(range(-m, m + 1)))
        tv = (tv + 2 * a ** (m + 1) / (1 + a)) / 2  # plus the ideal mass beyond ±M
        # the float is rounded up, and the bound adds at most 4(M+2)^2 · 2^-128 to the exact value
        assert Decimal(table.total_variation) >= tv
        assert Decimal(table.total_variation) <= tv * (1 + Decimal(2) ** -50) + Decimal(4 * (m + 2) ** 2) / 2 ** 128


def test_table_is_symmetric_and_its_tail_words_are_exact():
    table = discrete_laplace_table(Fraction(5, 2))
    m = table.support_max
    cuts = [0, *map(int, table.cuts), TWO64]
    pmf = [cuts[i + 1] - cuts[i] for i in range(2 * m + 1)]
    assert pmf == pmf[::-1]
    for k in range(-m - 2, m + 3):
        words = table.upper_tail_words(k)
        assert words == TWO64 - cuts[k + m] if -m <= k <= m + 1 else words in (0, TWO64)
        assert words == sum(pmf[max(k + m, 0):])
        assert table.upper_tail(k) >= words / TWO64 and table.upper_tail(k) <= math.nextafter(words / TWO64, 2)
    assert table.tail_words.tolist() == [table.upper_tail_words(k) for k in range(1, m + 1)]


def test_conditional_draws_never_fall_below_the_threshold_and_use_the_same_cuts():
    table = discrete_laplace_table(Fraction(3))
    g = NoiseSource(seed=2).stream("cond")
    for threshold in (-200, -3, 0, 1, 9, table.support_max):
        z = table.sample_at_least(g, threshold, 5000)
        assert z.min() >= threshold and z.max() <= table.support_max
    assert np.all(table.sample_at_least(g, -10 ** 6, 10) >= -table.support_max)  # everything passes
    with pytest.raises(ValueError, match="never reaches"):
        table.sample_at_least(g, table.support_max + 1, 1)


@pytest.mark.slow
def test_conditional_draws_have_the_conditional_law():
    from scipy import stats

    table = discrete_laplace_table(Fraction(3))
    threshold = 4
    z = table.sample_at_least(NoiseSource(seed=3).stream("cond"), threshold, 200_000)
    values = np.arange(threshold, threshold + 25)
    p = np.array([table.upper_tail_words(v) - table.upper_tail_words(v + 1) for v in values], dtype=float)
    p = np.append(p, table.upper_tail_words(values[-1] + 1)) / table.upper_tail_words(threshold)
    obs = np.bincount(np.minimum(z - threshold, values.size), minlength=values.size + 1)
    assert stats.chisquare(obs, p * z.size).pvalue > 1e-3


def test_uniform_below_is_in_range_and_uniform():
    from scipy import stats

    g = NoiseSource(seed=4).stream("u")
    assert uniform_below(g, 1, 5).tolist() == [0] * 5
    assert uniform_below(g, TWO64, 3).dtype == np.uint64
    big = (1 << 63) + 1  # the worst acceptance rate, about 1/2
    assert np.all(uniform_below(g, big, 10_000) < np.uint64(big))
    x = uniform_below(g, 6, 60_000)
    assert stats.chisquare(np.bincount(x.astype(np.int64), minlength=6)).pvalue > 1e-3
    with pytest.raises(ValueError):
        uniform_below(g, 0, 1)


# ---- limits: refused fast, with the parameter, the limit and the way out ------------------------------

@pytest.mark.parametrize("scale,match", [
    (Fraction(200_000), r"noise scale 200000, above the largest supported scale 100,000 .*Use a scale ≤ 100,000"),
    (Fraction(10 ** 300), r"above the largest supported scale 100,000"),
    (Fraction(1, 17), r"noise scale 0.0588235, below the smallest supported scale 1/16 .*Use a scale ≥ 1/16"),
    (Fraction(1, 10 ** 300), r"below the smallest supported scale 1/16"),
])
def test_unsupported_scales_are_refused_at_once(scale, match):
    start = time.process_time()
    with pytest.raises(NoiseParameterError, match=match):
        discrete_laplace_table(scale)
    assert time.process_time() - start < 1.0


def test_non_finite_parameters_are_refused():
    with pytest.raises(NoiseParameterError, match="scale must be a finite number. Found inf."):
        discrete_laplace(NoiseSource(seed=1).stream("x"), float("inf"), 1)
    with pytest.raises(NoiseParameterError, match="epsilon must be a finite number. Found nan."):
        exact_fraction(float("nan"), "epsilon")
    assert issubclass(NoiseParameterError, ConfigError) and issubclass(NoiseParameterError, ValueError)


def test_the_suggested_epsilon_is_accepted():
    for eps, scale in ((Fraction(1, 10 ** 5), 2 / Fraction(1, 10 ** 5)), (Fraction(10 ** 6), 2 / Fraction(10 ** 6))):
        with pytest.raises(NoiseParameterError) as info:
            check_scale(scale, epsilon=eps, where="test")
        suggested = exact_fraction(float(str(info.value).rsplit(" ", 1)[1].rstrip(".")))
        assert check_scale(scale * eps / suggested) == 2 / suggested


def test_the_smallest_scale_has_a_negligible_delta_charge():
    table = discrete_laplace_table(MIN_SCALE)
    assert table.support_max == 2
    assert (1 + math.exp(1 / float(MIN_SCALE))) * table.total_variation < 1e-12


@pytest.mark.slow
def test_the_largest_scale_builds_in_bounded_time_and_memory():
    discrete_laplace_table.cache_clear()
    start = time.process_time()
    table = discrete_laplace_table(MAX_SCALE)
    elapsed = time.process_time() - start
    try:
        assert elapsed < 60  # about 2 s of CPU
        assert abs(table.support_max - 64 * math.log(2) * float(MAX_SCALE)) < 3  # a^M ≥ 2^-64 > a^(M+1)
        assert table.cuts.nbytes <= 72_000_000
        assert table.total_variation < 1e-13
        assert np.all(table.cuts[1:] >= table.cuts[:-1])
    finally:
        discrete_laplace_table.cache_clear()


# ---- exact geometric gaps and Bernoulli trials -----------------------------------------------------

class FakeBits:
    """A bit generator that hands out given words (and fails if asked for more)."""

    def __init__(self, words):
        self.words = list(words)

    def random_raw(self, size=None):
        n = 1 if size is None else size
        if n > len(self.words):
            raise AssertionError("asked for more words than given")
        out, self.words = self.words[:n], self.words[n:]
        return np.array(out, dtype=np.uint64)


def fake(words):
    return SimpleNamespace(bit_generator=FakeBits(words))


def split_words(w: int, n: int) -> list[int]:
    return [(w >> (64 * (n - 1 - i))) & (TWO64 - 1) for i in range(n)]


@pytest.mark.parametrize("p_words", [(1 << 62) + 987_654_321, (1 << 40) + 5, TWO64 - 12345])
def test_gaps_are_exact_at_the_boundaries(p_words):
    """U within 2^-256 of (1-p)^j, on either side: G = j if U ≤ (1-p)^j, else j - 1 (exact rationals)."""
    q = 1 - Fraction(p_words, TWO64)
    for j in (1, 2, 3, 7, 20, 41):
        qj = q ** j
        if qj < Fraction(1, 1 << 120):
            continue
        edge = math.floor(qj * (1 << 256))
        for w, expected in ((edge - 1, j), (edge + 1, j - 1)):
            # the first 128 bits cannot decide; the next 128 do (or, when (1-p)^j is a 256-bit dyadic
            # and the end of U's interval, one more word)
            got = geometric_gaps(fake(split_words(w, 4) + [12345, 678]), p_words, 1)
            assert got.tolist() == [expected], (j, w)


def test_float_path_error_is_far_below_its_tolerance():
    """Relative error of the float ratio against 60-digit Decimal, at U near 0, 1/2, 1 and at random."""
    rng = np.random.default_rng(0)  # positions to probe, not privacy noise
    his = [1 << 16, (1 << 16) + 7, 1 << 40, (1 << 63) - 1, 1 << 63, TWO64 - (1 << 16) - 1, TWO64 - (1 << 40)]
    his += rng.integers(0, TWO64, 300, dtype=np.uint64).tolist()
    hi = np.array(his, dtype=np.uint64)
    lo = rng.integers(0, TWO64, hi.size, dtype=np.uint64)
    for p_words in (1, 1 << 40, int(0.03 * TWO64), TWO64 - 1):
        ratio, top = _gap_ratios(hi, lo, p_words)
        with localcontext() as ctx:
            ctx.prec = 60
            ln_q = (Decimal(TWO64 - p_words) / Decimal(TWO64)).ln()
            for h, lw, got, t in zip(hi.tolist(), lo.tolist(), ratio.tolist(), top.tolist()):
                if t < 1 << 16:
                    continue  # the float path is not used there
                exact = ((Decimal(h) * TWO64 + lw) / Decimal(TWO64) ** 2).ln() / ln_q
                assert abs(Decimal(got) - exact) <= exact * Decimal(2) ** -48, (h, lw, p_words)


def test_float_and_exact_paths_agree():
    g = NoiseSource(seed=6).stream("w")
    for p_words in (int(0.5 * TWO64), int(0.03 * TWO64), 1 << 44):
        words = g.bit_generator.random_raw(2 * 1000).tolist()
        fast = geometric_gaps(fake(words + [0] * 4), p_words, 1000)
        slow = [_gap_exact(fake([0] * 4), (words[2 * i] << 64) | words[2 * i + 1], 128, p_words) for i in range(1000)]
        assert fast.tolist() == slow


def test_tiny_success_probabilities_take_the_decimal_path():
    g = NoiseSource(seed=7).stream("tiny")
    # p = 2^-44: gaps of about 2^44, beyond the float path; their mean is 1/p
    gaps = geometric_gaps(g, 1 << 20, 300)
    assert 0.7 < gaps.mean() / 2 ** 44 < 1.4
    # p = 2^-64: P(G ≥ 2^62) = (1 - 2^-64)^(2^62) ≈ e^-1/4, and those are capped
    capped = (geometric_gaps(g, 1, 300) == GAP_CAP).sum()
    assert abs(capped - 300 * math.exp(-0.25)) < 5 * math.sqrt(300 * 0.78 * 0.22)


def test_bernoulli_successes_edge_cases(monkeypatch):
    import transit_release.noise as noise

    g = NoiseSource(seed=8).stream("b")
    assert bernoulli_successes(g, 0, 1 << 60).size == 0
    assert bernoulli_successes(g, 100, 0).size == 0
    assert bernoulli_successes(g, 5, TWO64).tolist() == [0, 1, 2, 3, 4]
    # p = 1 - 2^-64: all succeed, over several batches of gaps
    monkeypatch.setattr(noise, "_GAP_BATCH", 1000)
    assert np.array_equal(bernoulli_successes(g, 10 ** 4 + 17, TWO64 - 1), np.arange(10 ** 4 + 17))
    batched = bernoulli_successes(NoiseSource(seed=8).stream("batches"), 10 ** 6, int(0.05 * TWO64))
    monkeypatch.undo()
    once = bernoulli_successes(NoiseSource(seed=8).stream("batches"), 10 ** 6, int(0.05 * TWO64))
    assert batched.size > 40_000 and np.all(np.diff(batched) > 0)
    assert abs(batched.size - once.size) < 6 * math.sqrt(2 * 0.05 * 10 ** 6)
    s = bernoulli_successes(g, 10 ** 6, int(0.01 * TWO64))
    assert np.all(np.diff(s) > 0) and s.min() >= 0 and s.max() < 10 ** 6
    assert abs(s.size - 10 ** 4) < 6 * 100
    with pytest.raises(ValueError, match="number of trials"):
        bernoulli_successes(g, MAX_TRIALS + 1, 1)


def test_bernoulli_successes_are_reproducible():
    a = bernoulli_successes(NoiseSource(seed=9).stream("r"), 10 ** 5, int(0.2 * TWO64))
    b = bernoulli_successes(NoiseSource(seed=9).stream("r"), 10 ** 5, int(0.2 * TWO64))
    c = bernoulli_successes(NoiseSource(seed=10).stream("r"), 10 ** 5, int(0.2 * TWO64))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.5, 0.03, 1e-4])
def test_gaps_have_the_exact_geometric_law(p):
    from scipy import stats

    p_words = int(p * TWO64)
    p_exact = p_words / TWO64
    n = 1_000_000
    gaps = geometric_gaps(NoiseSource(seed=12).stream("geo", str(p)), p_words, n)
    # bins of equal ideal mass: P(G ≥ j) = (1-p)^j
    edges = np.unique(np.floor(np.log1p(-np.linspace(0, 1, 41)[1:-1]) / math.log1p(-p_exact)).astype(np.int64) + 1)
    edges = np.concatenate([[0], edges])
    surv = (1 - p_exact) ** edges.astype(float)
    expected = np.append(-np.diff(surv), surv[-1]) * n
    observed = np.bincount(np.searchsorted(edges, gaps, side="right") - 1, minlength=edges.size)
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # a wrong p is rejected
    surv_wrong = (1 - 1.05 * p_exact) ** edges.astype(float)
    wrong = np.append(-np.diff(surv_wrong), surv_wrong[-1]) * n
    assert stats.chisquare(observed, wrong * n / wrong.sum()).pvalue < 1e-6
