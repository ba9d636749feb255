"""The one place that draws randomness.

Bits come from ChaCha20 (``randomgen.ChaCha``, 20 rounds), a cryptographically
secure stream cipher, keyed with 256 bits from the operating system
(:func:`secrets.token_bytes`). Each (partition, marginal) gets its own freshly
keyed stream, so results never depend on the order in which partitions are
processed. Tests may build a :class:`NoiseSource` from an explicit seed; the
seed is hashed at once, never stored in clear, never printed by ``repr`` and
never written anywhere by the tool.

Integer noise. Continuous floating-point Laplace noise leaks (Mironov, CCS
2012), so every mechanism adds integer noise from the discrete Laplace
(two-sided geometric) distribution ``P(Z = z) ∝ exp(-|z|/t)``.

How it is drawn: inversion of one uniform 64-bit word through a table of
integer cut points ``C[z] = round(2^64 · F(z))`` computed once per scale in
60-digit decimal arithmetic (``F`` the exact CDF). A draw is one ChaCha word
and one binary search, exact integer arithmetic only. The distribution drawn
from, ``P̂(z) = (C[z] - C[z-1]) / 2^64`` on ``[-M, M]``, is therefore known
exactly; its total-variation distance ``η`` to the ideal distribution
(rounding plus the truncated tails: about 2^-65 per table entry, below
10^-14 for every scale up to 1,000, i.e. ε ≥ 0.002 in the SBH) is computed
exactly and charged to δ by the mechanisms (a coupling argument: an (ε, δ)
mechanism run on noise within TV ``η`` of its ideal is (ε, δ + (1 + e^ε)·η)).
Exact rejection samplers (Canonne, Kamath & Steinke 2020, as in OpenDP) avoid
``η`` altogether but need about ten random draws and several branches per
sample; the table gives the same integer-valued, leak-free output in one draw,
with the difference accounted for rather than ignored.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

import numpy as np
from randomgen import ChaCha

#: Environment variable that makes the noise deterministic. For tests only:
#: a release made with it is marked ``noise_source: test-seed`` in its manifest.
TEST_SEED_ENV = "TRANSIT_RELEASE_TEST_SEED"

_TWO_64 = 1 << 64
#: The ideal tail beyond the table's support is below 2^-TAIL_BITS.
_TAIL_BITS = 80
_DECIMAL_DIGITS = 60


def exact_fraction(x: float | int | Fraction) -> Fraction:
    """The decimal a user wrote, as an exact fraction (``0.3`` → ``3/10``)."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    return Fraction(repr(float(x)))


def _invert(cuts: np.ndarray, generator: np.random.Generator, size: int) -> np.ndarray:
    """Table indices of ``size`` uniform 64-bit words: the smallest ``i`` with ``word < cuts[i]``."""
    words = np.asarray(generator.bit_generator.random_raw(size), dtype=np.uint64)
    return np.searchsorted(cuts, words, side="right").astype(np.int64)


@dataclass(frozen=True)
class DiscreteLaplaceTable:
    """Integer inverse-CDF table of the discrete Laplace distribution at scale ``t``.

    ``cuts[i]`` is ``C[z]`` for ``z = i - support_max`` (``i < 2M``); a uniform
    64-bit word ``u`` maps to the smallest ``z`` with ``u < C[z]``.
    """

    scale: Fraction
    support_max: int
    cuts: np.ndarray
    total_variation: float
    _upper_tail: tuple[float, ...]

    def upper_tail(self, k: int) -> float:
        """``P̂(Z ≥ k)`` of the drawn distribution (exact up to float rounding, rounded up)."""
        if k <= -self.support_max:
            return 1.0
        if k > self.support_max:
            return 0.0
        return self._upper_tail[k + self.support_max]

    def sample(self, generator: np.random.Generator, size: int) -> np.ndarray:
        """``size`` independent draws as ``int64``."""
        return _invert(self.cuts, generator, size) - self.support_max


@lru_cache(maxsize=64)
def discrete_laplace_table(scale: Fraction) -> DiscreteLaplaceTable:
    """Build (once per scale) the sampling table and its exact error bound."""
    if scale <= 0:
        raise ValueError(f"scale must be positive. Found {scale}.")
    with localcontext() as ctx:
        ctx.prec = _DECIMAL_DIGITS
        t = Decimal(scale.numerator) / Decimal(scale.denominator)
        a = (-1 / t).exp()
        one_plus_a = 1 + a
        # smallest M with P(Z > M) = a^(M+1)/(1+a) <= 2^-80, plus one for safety
        m = int(math.ceil(float(t) * _TAIL_BITS * math.log(2))) + 1

        def cdf(z: int) -> Decimal:
            if z < 0:
                return a ** (-z) / one_plus_a
            return 1 - a ** (z + 1) / one_plus_a

        two64 = Decimal(_TWO_64)
        cuts = []
        for z in range(-m, m):
            c = int((cdf(z) * two64).to_integral_value(rounding=ROUND_HALF_EVEN))
            cuts.append(min(max(c, 0), _TWO_64 - 1))
        # exact TV distance between the drawn and the ideal distribution
        bounds = [0, *cuts, _TWO_64]
        pmf_coef = (1 - a) / one_plus_a
        tv = Decimal(0)
        for i, z in enumerate(range(-m, m + 1)):
            drawn = Decimal(bounds[i + 1] - bounds[i]) / two64
            ideal = pmf_coef * a ** abs(z)
            tv += abs(drawn - ideal)
        tv += 2 * a ** (m + 1) / one_plus_a  # ideal mass outside [-M, M]
        tv /= 2
        tail = [float((two64 - Decimal(bounds[i])) / two64) for i in range(0, 2 * m + 1)]
    # round the bound up so that the float never understates the error
    tv_float = math.nextafter(float(tv), math.inf)
    return DiscreteLaplaceTable(
        scale=scale,
        support_max=m,
        cuts=np.array(cuts, dtype=np.uint64),
        total_variation=tv_float,
        _upper_tail=tuple(math.nextafter(x, math.inf) if x > 0 else 0.0 for x in tail),
    )


@dataclass(frozen=True)
class GeometricTable:
    """Integer inverse-CDF table of ``P(G = k) = (1 - a) a^k``, ``k ≥ 0``, ``a = e^{-1/t}``.

    This is the upper tail of the discrete Laplace at scale ``t`` past any
    threshold (memorylessness: ``Z - T | Z ≥ T`` is this ``G``), which the
    empty-node sampling of the prefix tree needs.
    """

    scale: Fraction
    cuts: np.ndarray
    total_variation: float

    def sample(self, generator: np.random.Generator, size: int) -> np.ndarray:
        return _invert(self.cuts, generator, size)


@lru_cache(maxsize=64)
def geometric_table(scale: Fraction) -> GeometricTable:
    if scale <= 0:
        raise ValueError(f"scale must be positive. Found {scale}.")
    with localcontext() as ctx:
        ctx.prec = _DECIMAL_DIGITS
        a = (-Decimal(scale.denominator) / Decimal(scale.numerator)).exp()
        m = int(math.ceil(float(scale) * _TAIL_BITS * math.log(2))) + 1
        two64 = Decimal(_TWO_64)
        cuts = [min(int(((1 - a ** (k + 1)) * two64).to_integral_value(rounding=ROUND_HALF_EVEN)), _TWO_64 - 1)
                for k in range(m)]
        bounds = [0, *cuts, _TWO_64]
        tv = sum(abs(Decimal(bounds[k + 1] - bounds[k]) / two64 - (1 - a) * a ** k) for k in range(m + 1))
        tv = (tv + a ** (m + 1)) / 2
    return GeometricTable(scale, np.array(cuts, dtype=np.uint64), math.nextafter(float(tv), math.inf))


def discrete_laplace(generator: np.random.Generator, scale: Fraction | float, size: int) -> np.ndarray:
    """``size`` draws of integer noise with ``P(Z = z) ∝ exp(-|z|/scale)``."""
    return discrete_laplace_table(exact_fraction(scale)).sample(generator, size)


class NoiseSource:
    """Hands out independent ChaCha20 streams, one per named purpose.

    ``NoiseSource()`` keys every stream from the operating system's entropy.
    ``NoiseSource(seed=n)`` derives each stream's key from ``n`` and the
    stream's name: deterministic, for tests only.
    """

    __slots__ = ("_root",)

    def __init__(self, seed: int | None = None):
        if seed is None:
            self._root: bytes | None = None
        else:
            self._root = hashlib.sha256(b"transit-release/test-seed/" + str(int(seed)).encode()).digest()

    @classmethod
    def from_environment(cls) -> "NoiseSource":
        """OS entropy, unless the test-only seed variable is set."""
        raw = os.environ.get(TEST_SEED_ENV)
        if raw is None or raw == "":
            return cls()
        return cls(seed=int(raw))

    @property
    def deterministic(self) -> bool:
        return self._root is not None

    @property
    def kind(self) -> str:
        """``os-entropy`` or ``test-seed``: what a manifest may say, never the seed."""
        return "test-seed" if self.deterministic else "os-entropy"

    def stream(self, *name: str) -> np.random.Generator:
        """A fresh generator for one purpose, e.g. ``stream("bus", "20160808", "tap_on_time")``."""
        if self._root is None:
            key = int.from_bytes(secrets.token_bytes(32), "big")
        else:
            label = "\x1f".join(name).encode()
            key = int.from_bytes(hashlib.sha256(self._root + b"\x1e" + label).digest(), "big")
        return np.random.Generator(ChaCha(key=key, rounds=20))

    def __repr__(self) -> str:
        return f"NoiseSource({self.kind})"

    def __reduce__(self):
        # A seeded source must never be serialised (e.g. into a Prefect result).
        raise TypeError("NoiseSource is not serialisable; create one where the noise is drawn")
