"""Margins of error of published counts, from the public noise distribution alone.

A count a release publishes is ``n = c + Z``: the true count ``c`` plus integer
noise ``Z`` drawn by :mod:`transit_release.noise` from a distribution every
manifest states (its scale, and at the card level its bound ``A``). This module
computes, from those public parameters only (post-processing: no data is read,
nothing is spent), how far a published count, a sum of counts or a difference
of two counts may lie from the truth:

* :class:`NoiseLaw` is the exact distribution the project samples: the
  discrete Laplace table's integer cut points (:func:`~transit_release.noise.discrete_laplace_table`),
  conditioned on ``|Z| ≤ A`` when a bound is given (what
  :meth:`~transit_release.noise.DiscreteLaplaceTable.sample_within` draws).
* :func:`half_width` is the smallest integer ``h`` with ``P(|Z_1 + … + Z_k| ≤ h) ≥ level``
  for independent noises (every published cell got its own draw). By convolution
  of the exact distributions (floating point) when the sum's support has at most
  :data:`MAX_EXACT_SUPPORT` values; beyond it by a Chernoff bound, ``P(S ≥ h + 1) ≤
  min_λ e^{−λ(h+1)} Π E[e^{λZ_i}]`` with each moment generating function computed on
  the exact distribution, doubled for both tails (the noise is symmetric), which
  can only make ``h`` larger than necessary. Every result says which was used.
* :func:`count_interval`, :func:`sum_interval` and :func:`difference_interval` put
  ``n ± h`` around published figures. The noise is symmetric, so a difference has
  the law of a sum.
* :func:`near_threshold` says what publication does to a count near the
  threshold ``T``: only ``c + Z ≥ T`` is published, so among published counts
  those near ``T`` are biased upward and ``n ± h`` covers ``c`` less often than
  ``level``; far above ``T`` (at the card level from ``c ≥ T + A`` on: always
  published) the interval's coverage is exactly the unconditional one.

What an interval is: over the noise, ``[n − h, n + h]`` contains the true ``c``
with probability at least ``level`` (its :attr:`Interval.coverage`, exact for the
convolution: the noise is integer-valued, so the probability jumps by steps
and is usually a little above ``level``). A sum over published cells omits the
cells the threshold dropped: it estimates the sum of the published cells' true
counts, not a total over every cell.

For Opal releases :func:`marginal_laws` and :func:`row_laws` read each
marginal's law off the manifest, so an analyst can write::

    laws = analysis.row_laws(manifest, "location", table)        # one law per row
    week = table[(table["loc"] == "Central") & (table["tap"] == "on")]
    analysis.sum_interval(week["count"], [laws[i] for i in week.index])
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from transit_release.noise import discrete_laplace_table, exact_fraction

#: The confidence level every public margin of error is stated at.
LEVEL = 0.95
#: Largest support (number of values) of a sum whose distribution is computed by convolution.
MAX_EXACT_SUPPORT = 1 << 22
#: Above this many products of supports, two distributions are convolved by FFT rather than directly.
_DIRECT_PRODUCTS = 1 << 22

EXACT = "exact distribution (convolution)"
CHERNOFF = "Chernoff bound (conservative)"


@dataclass(frozen=True)
class NoiseLaw:
    """The noise of one published count: the project's discrete Laplace table at ``scale``, conditioned on
    ``|Z| ≤ bound`` when a bound is given."""

    scale: Fraction
    bound: int | None = None

    @classmethod
    def of(cls, scale: Fraction | str | float | int, bound: int | None = None) -> "NoiseLaw":
        """From a manifest's ``noise_scale`` (``"20"``, ``"1/2"``) and ``noise_bound`` (or None)."""
        s = Fraction(scale) if isinstance(scale, str) else exact_fraction(scale, "noise scale")
        return cls(s, None if bound is None else int(bound))

    def pmf(self) -> tuple[int, np.ndarray]:
        """``(lowest value, probabilities)``: ``P(Z = lowest + i) = probabilities[i]`` (read-only)."""
        return _pmf(self.scale, self.bound)

    @property
    def sd(self) -> float:
        """The noise's standard deviation."""
        low, p = self.pmf()
        z = np.arange(low, low + p.size, dtype=np.float64)
        return float(math.sqrt((p * z * z).sum()))


@lru_cache(maxsize=64)
def _pmf(scale: Fraction, bound: int | None) -> tuple[int, np.ndarray]:
    table = discrete_laplace_table(scale)
    m = table.support_max
    cuts = table.cuts  # C[-M..M-1]: value z = i - M is drawn for words in [cuts[i-1], cuts[i])
    masses = np.empty(2 * m + 1, dtype=np.uint64)
    masses[0] = cuts[0]
    masses[1:-1] = np.diff(cuts)  # exact: the cuts increase
    masses[-1] = ~cuts[-1] + np.uint64(1)  # 2^64 − C[M−1] (C[M−1] > 0)
    p = masses.astype(np.float64) / 2.0 ** 64
    low = -m
    if bound is not None:
        a = min(int(bound), m)
        p = p[m - a:m + a + 1]
        p = p / p.sum()
        low = -a
    p.setflags(write=False)
    return low, p


@dataclass(frozen=True)
class Interval:
    """``estimate ± half_width``: contains the truth with probability at least ``coverage`` (≥ the level asked)."""

    estimate: float
    half_width: int
    coverage: float
    method: str

    @property
    def low(self) -> float:
        return self.estimate - self.half_width

    @property
    def high(self) -> float:
        return self.estimate + self.half_width


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.size * b.size <= _DIRECT_PRODUCTS:
        return np.convolve(a, b)
    n = a.size + b.size - 1
    out = np.fft.irfft(np.fft.rfft(a, n) * np.fft.rfft(b, n), n)
    return np.clip(out, 0.0, None)


def _power(p: np.ndarray, k: int) -> np.ndarray:
    """The distribution of a sum of ``k`` independent copies (by squaring)."""
    result, base = np.ones(1), p
    while k:
        if k & 1:
            result = _convolve(result, base)
        k >>= 1
        if k:
            base = _convolve(base, base)
    return result


def sum_distribution(laws: Iterable[NoiseLaw]) -> tuple[int, np.ndarray]:
    """``(lowest value, probabilities)`` of the sum of independent noises with these laws (convolution)."""
    groups = Counter(laws)
    low, out = 0, np.ones(1)
    for law, k in sorted(groups.items(), key=lambda g: (g[0].scale, g[0].bound or -1)):
        lo, p = law.pmf()
        low += k * lo
        out = _convolve(out, _power(p, k))
    return low, out / out.sum()


def _support(laws: Counter) -> int:
    return sum(k * (law.pmf()[1].size - 1) for law, k in laws.items()) + 1


def _within(low: int, p: np.ndarray) -> np.ndarray:
    """``P(|S| ≤ h)`` for ``h = 0, 1, …`` of a distribution symmetric about 0."""
    centre = -low
    half = min(centre, p.size - 1 - centre)
    right = p[centre + 1:centre + 1 + half]
    left = p[centre - 1::-1][:half] if centre else p[:0]
    return np.concatenate([[p[centre]], p[centre] + np.cumsum(right + left)])


def _log_mgf(law: NoiseLaw, lam: float) -> float:
    low, p = law.pmf()
    z = np.arange(low, low + p.size, dtype=np.float64)
    with np.errstate(divide="ignore"):
        x = lam * z + np.log(p)
    top = x.max()
    return float(top + math.log(np.exp(x - top).sum()))


def _chernoff_tail(laws: Counter, h: int) -> float:
    """``2 · min_λ e^{−λ(h+1)} Π E[e^{λZ}]`` ≥ ``P(|S| ≥ h + 1)``, minimised over λ by golden section (the
    exponent is convex in λ)."""
    smallest = min(float(law.scale) for law in laws)
    def f(lam: float) -> float:
        return -lam * (h + 1) + sum(k * _log_mgf(law, lam) for law, k in laws.items())
    lo, hi = 0.0, 1.0 / smallest  # the untruncated MGF is finite below 1/scale; the optimum lies below it
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(80):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = f(b)
    return min(1.0, 2.0 * math.exp(min(fa, fb, f(lo), f(hi))))


def half_width(laws: Sequence[NoiseLaw] | Iterable[NoiseLaw], level: float = LEVEL) -> tuple[int, float, str]:
    """``(h, coverage, method)``: the smallest integer ``h`` with ``P(|Σ Z_i| ≤ h) ≥ level`` for independent
    noises with these laws, the probability itself (a lower bound of it for the Chernoff bound) and how it was
    computed (:data:`EXACT` or :data:`CHERNOFF`)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1). Found {level}.")
    groups = Counter(laws)
    if not groups:
        return 0, 1.0, EXACT
    if _support(groups) <= MAX_EXACT_SUPPORT:
        low, p = sum_distribution(groups.elements())
        within = _within(low, p)
        h = int(np.searchsorted(within, level, side="left"))
        if h >= within.size:  # rounding at the very end of the support
            h = within.size - 1
        return h, float(min(1.0, within[h])), EXACT
    sd = math.sqrt(sum(k * law.sd ** 2 for law, k in groups.items()))
    lo, hi = 0, max(1, int(3 * sd))
    while _chernoff_tail(groups, hi) > 1 - level:
        lo, hi = hi, 2 * hi
    while lo < hi:  # the smallest h whose bound holds
        mid = (lo + hi) // 2
        if _chernoff_tail(groups, mid) <= 1 - level:
            hi = mid
        else:
            lo = mid + 1
    return hi, 1.0 - _chernoff_tail(groups, hi), CHERNOFF


def count_interval(count: float, law: NoiseLaw, level: float = LEVEL) -> Interval:
    """The interval around one published count."""
    h, coverage, method = half_width([law], level)
    return Interval(float(count), h, coverage, method)


def sum_interval(counts: Iterable[float], laws: Sequence[NoiseLaw], level: float = LEVEL) -> Interval:
    """The interval around the sum of published counts, one law per count (e.g. a week from its seven days)."""
    counts = [float(c) for c in counts]
    laws = list(laws)
    if len(counts) != len(laws):
        raise ValueError(f"one noise law per count: {len(counts)} counts, {len(laws)} laws")
    h, coverage, method = half_width(laws, level)
    return Interval(float(sum(counts)), h, coverage, method)


def difference_interval(a: float, law_a: NoiseLaw, b: float, law_b: NoiseLaw, level: float = LEVEL) -> Interval:
    """The interval around ``a − b`` of two published counts (symmetric noise: the law of a sum)."""
    h, coverage, method = half_width([law_a, law_b], level)
    return Interval(float(a) - float(b), h, coverage, method)


@dataclass(frozen=True)
class ThresholdEffect:
    """What the threshold does to a cell of true count ``true_count``."""

    true_count: int
    published: float  # P(c + Z ≥ T)
    mean_error: float  # E[c + Z − c | published]: the upward bias of what is published
    coverage: float  # P(|Z| ≤ h | published): how often ``n ± h`` holds the truth among published cells


def near_threshold(law: NoiseLaw, threshold: int, true_count: int, h: int) -> ThresholdEffect:
    """Exactly, from the noise's distribution: publication probability, bias and conditional coverage."""
    low, p = law.pmf()
    z = np.arange(low, low + p.size, dtype=np.int64)
    kept = (int(true_count) + z) >= int(threshold)
    mass = float(p[kept].sum())
    if mass == 0.0:
        return ThresholdEffect(int(true_count), 0.0, float("nan"), float("nan"))
    return ThresholdEffect(int(true_count), mass, float((z[kept] * p[kept]).sum() / mass),
                           float(p[kept & (np.abs(z) <= h)].sum() / mass))


# ---- Opal releases: a law per marginal, read off the manifest -------------------------------------------

def marginal_laws(manifest: dict) -> dict[str, NoiseLaw]:
    """An Opal release's marginal name → the law of each of its counts (``privacy.marginals``)."""
    marginals = manifest.get("privacy", {}).get("marginals")
    if not marginals:
        raise ValueError(f"{manifest.get('release_id', 'this release')}: its manifest states no marginals "
                         "(only Opal releases publish counts with one noise law per marginal)")
    return {name: NoiseLaw.of(m["noise_scale"], m.get("noise_bound")) for name, m in marginals.items()}


def marginal_of(manifest: dict, file: str, tap: str) -> str:
    """The marginal whose counts fill the rows of ``file`` (``time``, ``location``, ``time-loc``) with ``tap``."""
    for name, m in manifest["privacy"]["marginals"].items():
        if m["file"] == file and name.startswith(f"tap_{tap}_"):
            return name
    raise ValueError(f"no marginal of {manifest.get('release_id', 'this release')} publishes {file}.csv rows "
                     f"with tap = {tap!r}")


def row_laws(manifest: dict, file: str, table) -> list[NoiseLaw]:
    """The law of each row's count of a published Opal table (``file`` without extension; ``table`` with its
    ``tap`` column), in row order."""
    laws = marginal_laws(manifest)
    by_tap = {tap: laws[marginal_of(manifest, file, tap)] for tap in ("on", "off")}
    return [by_tap[t] for t in table["tap"]]


def ideal_half_width(scale: Fraction | float, level: float = LEVEL) -> tuple[int, float, float]:
    """``(h, coverage, sd)`` of one count's noise under the ideal discrete Laplace at ``scale`` (no bound), in
    closed form: ``P(|Z| ≤ h) = 1 − 2a^{h+1}/(1 + a)``, ``a = e^{−1/scale}``, variance ``2a/(1 − a)²``. The
    drawn table is within its total-variation error ``η`` (below 10⁻¹³ at every supported scale) of it; used where
    building the exact table would cost more than it tells (the tree releases' very large node scales)."""
    a = math.exp(-1.0 / float(scale))
    h = max(0, math.ceil(math.log((1 - level) * (1 + a) / 2) / math.log(a)) - 1)
    while 1 - 2 * a ** (h + 1) / (1 + a) < level:  # the logarithm's rounding
        h += 1
    while h > 0 and 1 - 2 * a ** h / (1 + a) >= level:
        h -= 1
    return h, 1 - 2 * a ** (h + 1) / (1 + a), math.sqrt(2 * a) / (1 - a)
