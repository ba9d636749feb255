import pickle
from fractions import Fraction

import numpy as np
import pytest

from transit_release.noise import NoiseSource, discrete_laplace, discrete_laplace_table, exact_fraction


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
