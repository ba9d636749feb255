"""Slow statistical tests of the noise: the true scale passes, 0.7x and 1.3x fail."""

import numpy as np
import pytest

from transit_release.noise import NoiseSource, discrete_laplace

pytestmark = pytest.mark.slow
N = 400_000


def chi2_pvalue(samples: np.ndarray, scale: float) -> float:
    """Chi-square goodness of fit of integer samples to the discrete Laplace at ``scale``."""
    from scipy import stats

    a = np.exp(-1 / scale)
    lo, hi = -12 * int(np.ceil(scale)), 12 * int(np.ceil(scale))
    z = np.arange(lo, hi + 1)
    p = (1 - a) / (1 + a) * a ** np.abs(z)
    p[0] += a ** (-lo + 1) / (1 + a)  # lump the tails into the end bins
    p[-1] += a ** (hi + 1) / (1 + a)
    obs = np.bincount(np.clip(samples, lo, hi) - lo, minlength=z.size)
    exp = p * samples.size
    keep = exp >= 5
    obs = np.append(obs[keep], obs[~keep].sum())
    exp = np.append(exp[keep], exp[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("scale", [1.0, 2.0, 5.0])
def test_true_scale_passes_and_wrong_scales_fail(scale):
    z = discrete_laplace(NoiseSource(seed=11).stream("dist", str(scale)), scale, N)
    assert chi2_pvalue(z, scale) > 1e-3
    assert chi2_pvalue(z, 0.7 * scale) < 1e-6
    assert chi2_pvalue(z, 1.3 * scale) < 1e-6


def test_negative_control_rejects_continuous_rounded_laplace_of_other_shape():
    """A distribution that is not discrete Laplace (rounded Gaussian, same variance) is rejected."""
    a = np.exp(-1 / 2.0)
    sd = np.sqrt(2 * a / (1 - a) ** 2)
    z = np.rint(np.random.default_rng(1).normal(0, sd, N)).astype(np.int64)
    assert chi2_pvalue(z, 2.0) < 1e-6


def test_os_entropy_noise_has_the_right_distribution():
    z = discrete_laplace(NoiseSource().stream("dist"), 2.0, N)
    assert chi2_pvalue(z, 2.0) > 1e-4
