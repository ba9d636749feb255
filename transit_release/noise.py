"""The one place that draws randomness.

Bits come from ChaCha20 (``randomgen.ChaCha``, 20 rounds), a cryptographically
secure stream cipher, keyed with 256 bits from the operating system
(:func:`secrets.token_bytes`). Each (partition, marginal) gets its own freshly
keyed stream, so results never depend on the order in which partitions are
processed. Tests may build a :class:`NoiseSource` from an explicit seed; the
seed is hashed at once, never stored in clear, never printed by ``repr`` and
never written anywhere by the tool. Every sampler below is a deterministic
function of 64-bit ChaCha words, which are taken to be independent and uniform.

Integer noise. Continuous floating-point Laplace noise leaks (Mironov, CCS
2012), so every mechanism adds integer noise from the discrete Laplace
(two-sided geometric) distribution ``P(Z = z) = (1 - a)/(1 + a) · a^|z|``,
``a = e^{-1/t}`` at scale ``t``.

How it is drawn: inversion of one uniform 64-bit word ``u`` through a table of
integer cut points, ``Z = min{z : u < C[z]}``. With ``R_k = round(2^64 a^k/(1+a))``
(``2^64`` times the ideal tail ``P(Z ≥ k)``, ``k ≥ 1``), ``C[-k] = R_k`` and
``C[k-1] = 2^64 - R_k``: the table is symmetric and stops at the last ``M`` with
``R_M ≥ 1`` (the ideal tail beyond it is below ``2^-65``). The drawn distribution
``P̂(Z = ±k) = (R_k - R_{k+1})/2^64``, ``P̂(Z = ±M) = R_M/2^64``,
``P̂(0) = 1 - 2R_1/2^64`` is known exactly, and so is its total-variation distance
``η`` to the ideal one (rounding of every cut plus the truncated tails, about
``M · 2^-66``: 7e-17 at scale 100, 7e-16 at scale 1,000, 7e-15 at scale 10,000).
The table is built in 128-bit fixed-point integer arithmetic (powers of ``a``
by repeated multiplication; each value's error is below ``2k · 2^-128``, and that
error is added to ``η`` before it is rounded up to a float), in about 0.05 s at
scale 1,000 and 0.4 s at 10,000. The mechanisms charge ``η`` to δ by a coupling argument: an
(ε, δ) mechanism run on noise within TV ``η`` of its ideal is
(ε, δ + (1 + e^ε)·η), per noisy count that one record can change.
Exact rejection samplers (Canonne, Kamath & Steinke 2020, as in OpenDP) avoid
``η`` altogether but need about ten random draws and several branches per
sample; the table gives the same integer-valued, leak-free output in one draw,
with the difference accounted for rather than ignored.

Limits. The table has ``2M ≈ 128 ln2 · t ≈ 89·t`` entries, so the scale is bounded:
:data:`MAX_SCALE` = 100,000 (8.9 million entries, 71 MB, about 2 s to build; at most
16 tables are cached).
Very small scales (ε per unit of sensitivity above 16) are refused too: there
``a`` is so small that the 2^-64 granularity of the table dominates the noise,
and the δ charge ``(1 + e^{1/t})·η`` stops being negligible (see
:data:`MIN_SCALE`). Both refusals raise :class:`~transit_release.errors.NoiseParameterError`
with a message naming the scale (or the ε behind it), the limit and the way out;
the mechanisms check at plan time, before any spend or draw.

Exact helpers for samplers built on the table: :meth:`DiscreteLaplaceTable.sample_at_least`
(the table's noise conditioned on ``Z ≥ T``, by inversion of a word drawn uniformly
from ``[C[T-1], 2^64)``), :func:`geometric_gaps` and :func:`bernoulli_successes`
(the successes among ``n`` independent Bernoulli(``K/2^64``) trials, by geometric
gaps; exact, see :func:`geometric_gaps`).
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

import numpy as np
from randomgen import ChaCha

from transit_release.errors import NoiseParameterError

#: Environment variable that makes the noise deterministic. For tests only:
#: a release made with it is marked ``noise_source: test-seed`` in its manifest.
TEST_SEED_ENV = "TRANSIT_RELEASE_TEST_SEED"

_TWO_64 = 1 << 64
_DECIMAL_DIGITS = 60
#: fixed-point precision (bits) of the table build
_FIXED_BITS = 128

#: Largest supported noise scale: its table has about 9 million entries (71 MB).
MAX_SCALE = Fraction(100_000)
#: Smallest supported noise scale (ε ≤ 16 per unit of sensitivity). Below it ``a = e^{-1/t}``
#: is below e^-16 ≈ 1.1e-7, the table's support shrinks to ±2 or ±1 with probabilities that
#: are multiples of 2^-64, and the δ charge ``(1 + e^{1/t})·η`` (4e-13 at 1/16) passes 1e-12 at
#: 1/18, 1e-9 at 1/25 and 1e-2 at 1/40 (``a`` underflows altogether near 1/745 in floating
#: point). Noise that is almost always 0 gives no privacy worth the name anyway.
MIN_SCALE = Fraction(1, 16)

#: Geometric gaps are capped here (any gap this long ends every sequence of trials).
GAP_CAP = 1 << 62
#: Most Bernoulli trials :func:`bernoulli_successes` accepts in one call.
MAX_TRIALS = 1 << 58
# The float path of the gap sampler is trusted only this far (relative) from an integer.
_GAP_FLOAT_TOLERANCE = 2.0 ** -40
# Most gaps drawn at once by :func:`bernoulli_successes`.
_GAP_BATCH = 1 << 22


def exact_fraction(x: float | int | Fraction, name: str = "value") -> Fraction:
    """The decimal a user wrote, as an exact fraction (``0.3`` → ``3/10``); refuses inf and nan."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    f = float(x)
    if not math.isfinite(f):
        raise NoiseParameterError(f"{name} must be a finite number. Found {f}.")
    return _decimal_fraction(f)


@lru_cache(maxsize=4096)
def _decimal_fraction(f: float) -> Fraction:
    """``Fraction(repr(f))``, remembered: the accountant reads the same few ε and δ off thousands of spends."""
    return Fraction(repr(f))


def _round_sig(x: Fraction, rounding: str, digits: int = 3) -> float:
    """``x`` to ``digits`` significant digits, rounded in the given direction (for messages)."""
    with localcontext() as ctx:
        ctx.prec = digits
        ctx.rounding = rounding
        return float(Decimal(x.numerator) / Decimal(x.denominator))


def _float(x) -> float:
    """``x`` as a float for a message: ``inf`` past the largest float (ε = 1e-320 gives a scale of about 1e320)."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def check_scale(scale: Fraction, *, epsilon: Fraction | None = None, where: str = "") -> Fraction:
    """``scale`` if the samplers support it (``MIN_SCALE ≤ scale ≤ MAX_SCALE``), else :class:`NoiseParameterError`.

    ``epsilon`` (the ε that gave this scale, ``scale ∝ 1/ε``) and ``where`` (e.g. "the
    stability histogram (scale 2/ε)") make the message say which ε to use instead.
    """
    scale = exact_fraction(scale, "scale")
    if scale <= 0:
        raise NoiseParameterError(f"scale must be positive. Found {scale}.")
    prefix = f"{where}: " if where else ""
    given = f"ε = {_float(epsilon):g} gives noise scale {_float(scale):g}" if epsilon is not None \
        else f"noise scale {_float(scale):g}"
    if scale > MAX_SCALE:
        entries = 2 * 64 * math.log(2) * _float(scale)
        msg = (f"{prefix}{given}, above the largest supported scale {int(MAX_SCALE):,} (its sampling table "
               f"would need about {entries:.2g} entries; noise that large drowns any count anyway). ")
        if epsilon is not None:
            msg += f"Use ε ≥ {_round_sig(epsilon * scale / MAX_SCALE, ROUND_CEILING):g}."
        else:
            msg += f"Use a scale ≤ {int(MAX_SCALE):,}."
        raise NoiseParameterError(msg)
    if scale < MIN_SCALE:
        msg = (f"{prefix}{given}, below the smallest supported scale 1/{int(1 / MIN_SCALE)} (at most "
               f"ε = {int(1 / MIN_SCALE)} per unit of sensitivity: beyond it the integer sampler's 2^-64 "
               f"granularity, charged to δ as (1 + e^ε)·η, outgrows any useful δ). ")
        if epsilon is not None:
            msg += f"Use ε ≤ {_round_sig(epsilon * scale / MIN_SCALE, ROUND_FLOOR):g}."
        else:
            msg += f"Use a scale ≥ 1/{int(1 / MIN_SCALE)}."
        raise NoiseParameterError(msg)
    return scale


def _invert(cuts: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Table indices of uniform 64-bit words: the smallest ``i`` with ``word < cuts[i]``."""
    return np.searchsorted(cuts, words, side="right").astype(np.int64)


def _raw_words(generator: np.random.Generator, size: int) -> np.ndarray:
    return np.asarray(generator.bit_generator.random_raw(size), dtype=np.uint64).reshape(size)


def uniform_below(generator: np.random.Generator, bound: int, size: int) -> np.ndarray:
    """``size`` integers uniform on ``[0, bound)``, ``1 ≤ bound ≤ 2^64``, exactly.

    Masked rejection: the top ``⌈log2 bound⌉`` bits of a word, kept if below ``bound``
    (accepted with probability above 1/2, so about two words per draw at worst).
    """
    if not 1 <= bound <= _TWO_64:
        raise ValueError(f"bound must be in [1, 2^64]. Found {bound}.")
    if bound == 1:
        return np.zeros(size, dtype=np.uint64)
    if bound == _TWO_64:
        return _raw_words(generator, size)
    shift = np.uint64(64 - (bound - 1).bit_length())
    out = np.empty(size, dtype=np.uint64)
    todo = np.arange(size)
    limit = np.uint64(bound)
    while todo.size:
        w = _raw_words(generator, todo.size) >> shift
        ok = w < limit
        out[todo[ok]] = w[ok]
        todo = todo[~ok]
    return out


@dataclass(frozen=True)
class DiscreteLaplaceTable:
    """Integer inverse-CDF table of the discrete Laplace distribution at scale ``t``.

    ``cuts[i]`` is ``C[z]`` for ``z = i - support_max`` (``i < 2M``); a uniform
    64-bit word ``u`` maps to the smallest ``z`` with ``u < C[z]`` (``M`` if none).
    ``R_k = 2^64 · P̂(Z ≥ k) = C[-k]`` for ``k = 1..M`` (:attr:`tail_words`).
    """

    scale: Fraction
    support_max: int
    cuts: np.ndarray
    total_variation: float

    @property
    def tail_words(self) -> np.ndarray:
        """``R_1..R_M`` (a view of ``cuts``: ``C[-k] = R_k``)."""
        return self.cuts[self.support_max - 1::-1] if self.support_max else self.cuts[:0]

    def upper_tail_words(self, k: int) -> int:
        """``2^64 · P̂(Z ≥ k)``, an exact integer in ``[0, 2^64]``."""
        k = int(k)
        m = self.support_max
        if k >= 1:
            return int(self.cuts[m - k]) if k <= m else 0
        return _TWO_64 - int(self.cuts[m - 1 + k]) if 1 - k <= m else _TWO_64

    def upper_tail(self, k: int) -> float:
        """``P̂(Z ≥ k)`` of the drawn distribution, a float rounded up (never understated)."""
        words = self.upper_tail_words(k)
        f = float(words)
        if int(f) < words:
            f = math.nextafter(f, math.inf)
        return math.ldexp(f, -64)

    def sample(self, generator: np.random.Generator, size: int) -> np.ndarray:
        """``size`` independent draws as ``int64``."""
        return _invert(self.cuts, _raw_words(generator, size)) - self.support_max

    def sample_at_least(self, generator: np.random.Generator, threshold: int, size: int) -> np.ndarray:
        """``size`` independent draws of the table's ``Z`` conditioned on ``Z ≥ threshold``, exactly.

        ``Z ≥ T`` exactly when the word is at least ``C[T-1] = 2^64 - K`` (``K = 2^64·P̂(Z ≥ T)``),
        so a word uniform on ``[2^64 - K, 2^64)`` inverted through the same cuts gives
        ``P̂(Z = z) / P̂(Z ≥ T)`` for every ``z ≥ T``.
        """
        k = self.upper_tail_words(threshold)
        if k == 0:
            raise ValueError(f"the table at scale {self.scale} never reaches {threshold}")
        words = uniform_below(generator, k, size) + np.uint64(_TWO_64 - k if k < _TWO_64 else 0)
        return _invert(self.cuts, words) - self.support_max

    def within_words(self, bound: int) -> int:
        """``2^64 · P̂(|Z| ≤ bound)``, an exact integer: ``2^64 − 2 R_{bound+1}`` (the table is symmetric)."""
        bound = int(bound)
        if bound < 0:
            raise ValueError(f"bound must be non-negative. Found {bound}.")
        return _TWO_64 - 2 * self.upper_tail_words(bound + 1)

    def truncated_total_variation(self, bound: int) -> float:
        """TV between the drawn ``Z`` conditioned on ``|Z| ≤ bound`` and the ideal discrete Laplace conditioned on
        the same event, rounded up: at most ``2η / P̂(|Z| ≤ bound)``.

        Why: with restricted masses ``p, q`` on the event ``E`` (totals ``m_p = P̂(E)``, ``m_q``) and
        ``d = Σ_E |p − q| ≤ 2η``, ``Σ_E |p/m_p − q/m_q| ≤ d/m_p + |m_q − m_p|/m_p ≤ 2d/m_p``;
        TV is half of it.
        """
        m = self.within_words(bound)
        return math.nextafter(2.0 * self.total_variation * (_TWO_64 / m), math.inf)

    def sample_within(self, generator: np.random.Generator, bound: int, size: int) -> np.ndarray:
        """``size`` independent draws of the table's ``Z`` conditioned on ``|Z| ≤ bound``, exactly.

        ``−bound ≤ Z ≤ bound`` exactly when the word lies in ``[C[−bound−1], C[bound]) =
        [R_{bound+1}, 2^64 − R_{bound+1})``, so a word uniform on that range inverted through the same cuts
        gives ``P̂(Z = z) / P̂(|Z| ≤ bound)`` for every ``|z| ≤ bound``.
        """
        width = self.within_words(bound)
        if width <= 0:
            raise ValueError(f"the table at scale {self.scale} has no mass within {bound}")
        words = uniform_below(generator, width, size) + np.uint64(self.upper_tail_words(int(bound) + 1))
        return _invert(self.cuts, words) - self.support_max


@lru_cache(maxsize=16)
def discrete_laplace_table(scale: Fraction) -> DiscreteLaplaceTable:
    """Build (once per scale) the sampling table and its exact error bound.

    Refuses (:class:`NoiseParameterError`) a scale outside ``[MIN_SCALE, MAX_SCALE]``.
    """
    scale = check_scale(scale)
    s = _FIXED_BITS
    shift = s - 64
    half = 1 << (shift - 1)
    with localcontext() as ctx:
        ctx.prec = _DECIMAL_DIGITS
        a = (-Decimal(scale.denominator) / Decimal(scale.numerator)).exp()
        # |A - a·2^s| ≤ 1 and |X_1 - x_1| ≤ 1 (60 correct digits, then rounding to an integer)
        big_a = int((a * Decimal(1 << s)).to_integral_value(rounding=ROUND_HALF_EVEN))
        x = int((a / (1 + a) * Decimal(1 << s)).to_integral_value(rounding=ROUND_HALF_EVEN))
    # X_k ≈ x_k = 2^s a^k/(1+a); X_{k+1} = floor(X_k A / 2^s) keeps |X_k - x_k| ≤ 2k.
    # D_k = R_k 2^(s-64) - x_k is the rounding error of R_k in units of 2^-s, and
    # 2^s TV = |D_1| + Σ_{k<M} |D_k - D_{k+1}| + |D_M + x_{M+1}| + x_{M+1}
    # (z = 0, the pairs ±k, the pair ±M that takes the whole tail, the ideal mass beyond M).
    chunks, chunk = [], []
    tv = 0
    prev = None
    while True:
        r = (x + half) >> shift
        if r == 0:
            break
        d = (r << shift) - x
        tv += abs(d) if prev is None else abs(prev - d)
        prev = d
        chunk.append(r)
        if len(chunk) == 65536:
            chunks.append(np.array(chunk, dtype=np.uint64))
            chunk = []
        x = (x * big_a) >> s
    chunks.append(np.array(chunk, dtype=np.uint64))
    m = sum(c.size for c in chunks)
    tv += abs(prev + x) + x
    tv += 4 * (m + 2) ** 2  # every |X_k - x_k| ≤ 2k above, summed over the terms
    cuts = np.empty(2 * m, dtype=np.uint64)  # C[-M..-1] = R_M..R_1, C[0..M-1] = 2^64 - R_1..R_M
    np.concatenate(chunks, out=cuts[m:])
    del chunks
    cuts[:m] = cuts[m:][::-1]
    np.subtract(np.uint64(0), cuts[m:], out=cuts[m:])
    return DiscreteLaplaceTable(
        scale=scale,
        support_max=m,
        cuts=cuts,
        total_variation=math.nextafter(float(Fraction(tv, 1 << s)), math.inf),
    )


def discrete_laplace(generator: np.random.Generator, scale: Fraction | float, size: int) -> np.ndarray:
    """``size`` draws of integer noise with ``P(Z = z) ∝ exp(-|z|/scale)``."""
    return discrete_laplace_table(exact_fraction(scale, "scale")).sample(generator, size)


# ---- exact geometric gaps and Bernoulli trials ------------------------------------------------------

def _dyadic(n: int, bits: int) -> Decimal:
    """``n / 2^bits`` as an exact Decimal (``n·5^bits · 10^-bits``)."""
    return Decimal(f"{n * 5 ** bits}E-{bits}")


def _ln_failure(p_words: int) -> Decimal:
    """``ln(1 - p)``, ``p = p_words/2^64``, correctly rounded in the current context (``1 - p`` is exact)."""
    return _dyadic(_TWO_64 - p_words, 64).ln()


def _gap_exact(generator: np.random.Generator, w: int, bits: int, p_words: int) -> int:
    """The gap of ``U ∈ [w/2^bits, (w+1)/2^bits)``, revealing more bits of ``U`` until it is decided.

    ``G = ⌊ln U / ln(1-p)⌋`` is decided when the values of ``ln U/ln(1-p)`` at both ends of
    ``U``'s interval, bracketed with their rounding error, have the same floor. The ends of
    the interval and ``1-p`` are exact Decimals (dyadic rationals; the constructor is exact),
    and ``ln`` and ``/`` are correctly rounded for exact operands of any length, so at
    precision ``P`` each quotient is within a relative 2·10^(1-P) of the truth; the bracket
    is 10^(5-P) each way. If undecided, 64 more bits of ``U`` come from the stream and ``P``
    grows by 20 digits; this ends with probability 1.
    """
    while True:
        if w > 0:
            with localcontext() as ctx:
                ctx.prec = 40 + 20 * ((bits - 128) // 64)
                ctx.rounding = ROUND_HALF_EVEN
                ln_q = _ln_failure(p_words)
                err = Decimal(10) ** (5 - ctx.prec)
                top = w + 1
                low = Decimal(0) if top == 1 << bits else (_dyadic(top, bits).ln() / ln_q) * (1 - err)
                if low >= GAP_CAP:
                    return GAP_CAP
                j = int(low)
                high = (_dyadic(w, bits).ln() / ln_q) * (1 + err)
                if high < j + 1:
                    return j
        w = (w << 64) | int(_raw_words(generator, 1)[0])
        bits += 64


def _gap_ratios(hi: np.ndarray, lo: np.ndarray, p_words: int) -> tuple[np.ndarray, np.ndarray]:
    """Float ``ln U / ln(1-p)`` at ``U = (hi·2^64 + lo)/2^128``, and the first word of ``min(U, 1-U)``."""
    with localcontext() as ctx:
        ctx.prec = 40
        inv_ln_q = 1.0 / float(_ln_failure(p_words))
    # t = U (when U < 1/2) or 1 - U (otherwise, from the complemented words), to a few ulps
    upper = hi >= np.uint64(1 << 63)
    top = np.where(upper, ~hi, hi).view(np.int64)  # < 2^63
    rest = (np.where(upper, ~lo, lo) >> np.uint64(11)).view(np.int64)
    t = (top.astype(float) + rest.astype(float) * 2.0 ** -53) * 2.0 ** -64
    with np.errstate(divide="ignore"):
        ln_u = np.log(t)
    ln_u[upper] = np.log1p(-t[upper])
    return ln_u * inv_ln_q, top


def geometric_gaps(generator: np.random.Generator, p_words: int, size: int) -> np.ndarray:
    """``size`` independent draws of ``G`` with ``P(G ≥ j) = (1 - p)^j`` (failures before a success), exactly.

    ``p = p_words / 2^64``, ``0 < p_words ≤ 2^64``; draws are capped at :data:`GAP_CAP`.

    ``G = ⌊ln U / ln(1-p)⌋`` for ``U`` uniform on (0, 1): ``G ≥ j ⟺ U ≤ (1-p)^j``. ``U`` is
    revealed 128 bits at a time (two ChaCha words) and ``G`` is computed from its interval:

    * float path: ``L = ln U / ln(1-p)`` in float64 (``ln U`` by ``log``, or ``log1p(-(1-U))``
      with ``1-U`` formed from the complemented words when ``U ≥ 1/2``; ``1/ln(1-p)`` from a
      correctly rounded Decimal). Its relative error is a few ulps (below 2^-48: about
      2^-52 from forming ``U`` or ``1-U`` in float, which the path takes only when the
      first word of it is at least 2^16, so that the 2^-128-wide interval of ``U`` is
      2^-80 relative; 1-2 ulps for ``log``/``log1p`` and the product). ``⌊L⌋`` is taken only
      when ``L·(1 ± 2^-40) ± 2^-40`` have the same floor (and ``L < 2^52``), a margin 256
      times that error: then it is the exact ``G``.
    * otherwise (probability about 2^-39·L per draw, or always when ``L`` is huge, i.e.
      tiny ``p``): :func:`_gap_exact`, in 40-digit (or more) Decimal with rigorous brackets,
      drawing more bits of ``U`` if its interval straddles a boundary ``(1-p)^j``.

    So ``G`` is exactly geometric (its total-variation distance to the ideal is 0): the
    mechanisms have nothing to charge for it.
    """
    if not 0 < p_words <= _TWO_64:
        raise ValueError(f"p_words must be in (0, 2^64]. Found {p_words}.")
    if p_words == _TWO_64 or size == 0:
        return np.zeros(size, dtype=np.int64)
    words = _raw_words(generator, 2 * size).reshape(size, 2)
    hi, lo = words[:, 0], words[:, 1]
    ratio, top = _gap_ratios(hi, lo, p_words)
    r = _GAP_FLOAT_TOLERANCE
    low = np.floor(np.maximum(ratio * (1 - r) - r, 0.0))
    high = np.floor(ratio * (1 + r) + r)
    decided = (low == high) & (high < 2.0 ** 52) & (top >= 1 << 16)
    out = np.empty(size, dtype=np.int64)
    out[decided] = low[decided].astype(np.int64)
    for i in np.flatnonzero(~decided).tolist():
        out[i] = _gap_exact(generator, (int(hi[i]) << 64) | int(lo[i]), 128, p_words)
    return out


def bernoulli_successes(generator: np.random.Generator, n_trials: int, p_words: int) -> np.ndarray:
    """Sorted positions (int64) of the successes among ``n_trials`` independent Bernoulli(``p_words/2^64``) trials.

    Exactly: successive successes are separated by independent geometric gaps
    (:func:`geometric_gaps`), drawn in batches; gaps drawn past the last trial are discarded,
    which does not bias the ones kept (whether a gap is used depends only on earlier gaps).
    """
    n = int(n_trials)
    if not 0 <= n <= MAX_TRIALS:
        raise ValueError(f"the number of trials must be in [0, 2^58]. Found {n}.")
    if not 0 <= p_words <= _TWO_64:
        raise ValueError(f"p_words must be in [0, 2^64]. Found {p_words}.")
    if n == 0 or p_words == 0:
        return np.zeros(0, dtype=np.int64)
    if p_words == _TWO_64:
        return np.arange(n, dtype=np.int64)
    p = p_words / _TWO_64
    out = []
    last = -1  # position of the last success so far
    while True:
        remaining = n - 1 - last  # trials after it
        if remaining <= 0:
            break
        mean = remaining * p
        batch = int(min(mean + 6 * math.sqrt(mean) + 16, _GAP_BATCH, (1 << 63) // (remaining + 1) - 1))
        gaps = np.minimum(geometric_gaps(generator, p_words, batch), remaining)  # a gap ≥ remaining ends it
        steps = np.cumsum(gaps + 1)  # < batch·(remaining+1) < 2^63
        k = int(np.searchsorted(steps, remaining, side="right"))
        out.append(last + steps[:k])
        if k < batch:
            break
        last += int(steps[-1])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


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
