"""Stability-based histogram (SBH): Algorithm 1 of Asghar, Tyler & Kaafar (2018).

For every point ``x`` *present* in the data (never for absent points):
``a_x = q_x(D) + Z`` with ``Z`` discrete Laplace at scale ``t = 2/ε``; the
point is released with count ``a_x`` when ``a_x ≥ T`` and dropped otherwise.

Privacy (Theorem 5 of the paper, adapted to integer noise). Neighbours differ
by *replacing* one row, which changes two points by one each. For one changed
point: if it is present on both sides, the shift by one costs ``ε/2`` (the
ratio of neighbouring discrete-Laplace masses is ``e^{1/t} = e^{ε/2}``); if it
is absent on one side, the only difference is the "bad event" that a true
count of 1 passes the threshold, ``P(1 + Z ≥ T)``. We choose the smallest
integer ``T`` with

    P̂(Z ≥ T - 1) + (1 + e^{ε/2}) · η  ≤  δ/2

where ``P̂`` is the distribution actually drawn and ``η`` its exact
total-variation distance to the ideal one (see :mod:`transit_release.noise`).
For the ideal distribution this is the spec's
``T = 1 + ceil(t · ln(2 / (δ (1 + a))))`` with ``a = e^{-1/t}``: 34 at ε = 1
and 18 at ε = 2 for δ = 1/8,000,000. Each point is (ε/2, δ/2)-indistinguishable,
so the histogram is (ε, δ)-DP under replace-one and (ε/2, δ/2)-DP under
add/remove-one neighbours.

Where we differ from the paper, and why: the paper adds continuous Laplace
noise, thresholds at ``2 ln(2/δ)/ε + 1`` and rounds. We follow the spec
(``../shared/specs/stability_histogram.md``): integer noise, so no rounding is
needed and nothing of the true count leaks through floating-point artefacts;
the threshold is the exact integer bound above, which gives the same smallest
released counts as the paper's rounding (34 and 18).

Parameters the integer sampler cannot honour (ε outside ``[2e-5, 32]``, i.e. a
noise scale outside ``[1/16, 100,000]``, or ε not a positive finite number) are
refused by :func:`sbh_scale` with a
:class:`~transit_release.errors.NoiseParameterError` when the thresholds are
planned, before any spend or draw.

Order: the caller passes the counts of the present points in key order; the
output is in that same order, never in the data's order.

Card level (user-level SBH)
---------------------------
With the card as the unit, each card's contribution is bounded first
(:mod:`transit_release.mechanisms.contribution_bounding`: at most ``k`` trips
per card per (mode, date) partition, at most ``P`` partitions per card). Under
*add/remove one card*, one marginal of one partition then changes by the
card's at most ``k`` trips: at most ``l0 = k`` keys change, by at most
``l∞ = k`` each and at most ``l1 = k`` in total — the sensitivity
``(l0, l1, l∞) = (k, k, k)`` of OpenDP's ``L01InfDistance``. (Under
*replace one card* it is ``(2k, 2k, k)``: ``k`` trips out, ``k`` in; the trip
level is the replace case with ``k = 1``, i.e. ``(2, 2, 1)``.) For a general
``(l0, l1, l∞)``:

* **Keys present on both sides** (counts ``q`` and ``q + c_i``, ``Σ|c_i| ≤ l1``):
  independent discrete Laplace noise at scale ``t`` gives privacy loss at most
  ``Σ|c_i|/t ≤ l1/t``. So the scale is ``t = l1/ε_j`` and the marginal's ε is
  ``ε_j`` (for the card level ``t = k/ε_j``).
* **Keys present on one side only** (the card's trips are the only ones there,
  so their true count is ``c_i ≤ l∞``; at most ``l0`` of them): the other side
  never releases them, so the only difference is the "bad event" that one of
  them passes the threshold. Key ``i`` passes with probability
  ``P̂(c_i + Z ≥ T) ≤ P̂(Z ≥ T − l∞)``; the noise is independent across keys, so
  ``P(any passes) = 1 − Π(1 − P̂(Z ≥ T − c_i)) ≤ l0 · P̂(Z ≥ T − l∞)`` (union
  bound; OpenDP's map uses ``1 − (1 − p)^{l0}``, smaller by a relative
  ``≈ (l0 − 1)p/2 ≈ 10⁻⁸``, so the two agree to 7 digits).
* **The sampler's TV** (:mod:`transit_release.noise`): each of the at most
  ``l0`` changed noisy counts is drawn within TV ``η`` of the ideal; per count
  the coupling argument charges ``(1 + e^{ε_i}) η`` with ``ε_i = c_i/t ≤ l∞/t``.

So the marginal is ``(ε_j, δ_j)``-DP per card (per partition) when ``T`` is the
smallest integer with

    l0 · ( P̂(Z ≥ T − l∞) + (1 + e^{l∞/t}) · η )  ≤  δ_j,     t = l1/ε_j.

At ``(2, 2, 1)`` this is exactly the trip-level condition above
(``2·(P̂(Z ≥ T−1) + (1+e^{ε/2})η) ≤ δ``), so ``k = 1`` under replace-one gives
34 and 18 again; for ideal noise, ``T = l∞ + ceil(t · ln(l0 / (δ_j (1 + a))))``,
``a = e^{−1/t}``. Which keys can change is bounded by ``l0 = k`` although the
total change is also at most ``k``: the union bound over ``l0`` keys each at
``l∞`` is what OpenDP's privacy map computes (so it can check us exactly); the
true worst case under ``Σ c_i ≤ k`` is ``max(P(Z ≥ T−k), k·P(Z ≥ T−1))``
(the sum of ``P(Z ≥ T − c_i)`` is convex in the ``c_i``). Whenever
``e^{(k−1)/t} < k`` (every card default) the second term binds, so the exact
bound lowers ``T`` by only ``k − 1`` (464 → 463 and 233 → 232 at the card
defaults, computed); we keep the checkable bound. A real gain needs δ spent
elsewhere: :func:`truncated_card_level_stability_histogram` (405 and 211 at the
card defaults), which is what card-level releases use; this function serves the
trip level (``k = 1`` under replace-one) and is the untruncated reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from transit_release.errors import NoiseParameterError
from transit_release.noise import check_scale, discrete_laplace_table, exact_fraction

MECHANISM_NAME = "stability_histogram"


def sbh_scale(epsilon: float) -> Fraction:
    """Noise scale ``t = 2/ε`` (sensitivity 1 per point, two points per replacement).

    Refuses (:class:`NoiseParameterError`) an ε that is not a positive finite number or whose
    scale the samplers do not support (``2e-5 ≤ ε ≤ 32``, see :func:`~transit_release.noise.check_scale`).
    """
    eps = exact_fraction(epsilon, "epsilon")
    if eps <= 0:
        raise NoiseParameterError(f"epsilon must be positive. Found {float(eps)}.")
    return check_scale(Fraction(2) / eps, epsilon=eps, where="stability histogram (noise scale 2/ε)")


def bad_event_bound(epsilon: float, threshold: int) -> float:
    """Per-point δ actually achieved: ``P̂(Z ≥ T-1) + (1 + e^{ε/2}) η``."""
    table = discrete_laplace_table(sbh_scale(epsilon))
    return table.upper_tail(threshold - 1) + (1.0 + math.exp(float(epsilon) / 2.0)) * table.total_variation


def sbh_threshold(epsilon: float, delta: float) -> int:
    """The smallest integer threshold ``T`` whose bad event is at most ``δ/2``."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1). Found {delta}.")
    table = discrete_laplace_table(sbh_scale(epsilon))
    slack = (1.0 + math.exp(float(epsilon) / 2.0)) * table.total_variation

    def bounded(k: int) -> bool:  # monotone in k: the tail only shrinks
        return table.upper_tail(k) + slack <= delta / 2.0

    lo, hi = 1, table.support_max + 1  # upper_tail(M + 1) = 0
    if not bounded(hi):
        raise ValueError(
            f"delta={delta:.3g} is too small for epsilon={float(epsilon)}: "
            f"the noise table's error bound {slack:.3g} already exceeds delta/2."
        )
    while lo < hi:  # the smallest k with bounded(k)
        mid = (lo + hi) // 2
        if bounded(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo + 1


def user_level_scale(epsilon: float, l1: int) -> Fraction:
    """Noise scale ``t = l1/ε`` for a unit that changes a histogram by at most ``l1`` in total; refuses
    (:class:`NoiseParameterError`, naming the ε to use) a scale the samplers do not support."""
    eps = exact_fraction(epsilon, "epsilon")
    if eps <= 0:
        raise NoiseParameterError(f"epsilon must be positive. Found {float(eps)}.")
    if int(l1) != l1 or l1 < 1:
        raise ValueError(f"l1 sensitivity must be a positive integer. Found {l1}.")
    return check_scale(Fraction(int(l1)) / eps, epsilon=eps,
                       where=f"stability histogram (noise scale {int(l1)}/ε)")


def _check_sensitivity(l0: int, l1: int, linf: int) -> None:
    for name, v in (("l0", l0), ("l1", l1), ("linf", linf)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} sensitivity must be a positive integer. Found {v}.")
    if linf > l1 or l1 > l0 * linf:
        raise ValueError(f"sensitivity (l0, l1, linf) = ({l0}, {l1}, {linf}) is inconsistent: "
                         "need linf <= l1 <= l0 * linf")


def user_level_tv_slack(epsilon: float, l0: int, l1: int, linf: int) -> float:
    """δ charged for the sampler's exact TV ``η``: ``l0 · (1 + e^{l∞/t}) · η`` with ``t = l1/ε``."""
    _check_sensitivity(l0, l1, linf)
    scale = user_level_scale(epsilon, l1)
    table = discrete_laplace_table(scale)
    return l0 * (1.0 + math.exp(linf / float(scale))) * table.total_variation


def user_level_bad_event(epsilon: float, threshold: int, l0: int, l1: int, linf: int) -> float:
    """δ actually achieved per marginal: ``l0 · (P̂(Z ≥ T − l∞) + (1 + e^{l∞/t}) η)``, ``t = l1/ε``."""
    _check_sensitivity(l0, l1, linf)
    table = discrete_laplace_table(user_level_scale(epsilon, l1))
    return l0 * table.upper_tail(int(threshold) - int(linf)) + user_level_tv_slack(epsilon, l0, l1, linf)


def user_level_threshold(epsilon: float, delta: float, l0: int, l1: int, linf: int) -> int:
    """The smallest integer threshold ``T`` whose bad event (with the TV slack) is at most ``δ``.

    ``(l0, l1, linf) = (2, 2, 1)`` is the trip level (:func:`sbh_threshold`); the card level under
    add/remove-one card is ``(k, k, k)``.
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1). Found {delta}.")
    _check_sensitivity(l0, l1, linf)
    table = discrete_laplace_table(user_level_scale(epsilon, l1))
    slack = user_level_tv_slack(epsilon, l0, l1, linf)
    for j in range(-table.support_max + 1, table.support_max + 2):
        if l0 * table.upper_tail(j) + slack <= delta:
            return int(j + linf)
    raise ValueError(
        f"delta={delta:.3g} is too small for epsilon={float(epsilon)} at sensitivity ({l0}, {l1}, {linf}): "
        f"the noise table's error bound {slack:.3g} already exceeds delta.")


NEIGHBOURING_CARD = ("add-remove-one", "replace-one")


def card_sensitivity(max_rows_per_partition: int, neighbouring: str = "add-remove-one") -> tuple[int, int, int]:
    """``(l0, l1, l∞)`` of one marginal of one partition for one card that has at most ``k`` trips in it."""
    k = int(max_rows_per_partition)
    if k != max_rows_per_partition or k < 1:
        raise ValueError(f"max_rows_per_partition must be a positive integer. Found {max_rows_per_partition}.")
    if neighbouring == "add-remove-one":
        return (k, k, k)
    if neighbouring == "replace-one":
        return (2 * k, 2 * k, k)
    raise ValueError(f"neighbouring must be one of {NEIGHBOURING_CARD}. Found {neighbouring!r}.")


@dataclass(frozen=True)
class CardLevelBudget:
    """One marginal's card-level SBH parameters, from public inputs only.

    ``epsilon``/``delta`` are per card for this marginal of one partition under ``neighbouring``;
    ``max_rows_per_partition`` is the contribution bound ``k``.
    """

    epsilon: float
    delta: float
    max_rows_per_partition: int
    neighbouring: str = "add-remove-one"

    @property
    def sensitivity(self) -> tuple[int, int, int]:
        return card_sensitivity(self.max_rows_per_partition, self.neighbouring)

    @property
    def scale(self) -> Fraction:
        return user_level_scale(self.epsilon, self.sensitivity[1])

    @property
    def threshold(self) -> int:
        return user_level_threshold(self.epsilon, self.delta, *self.sensitivity)

    @property
    def tv_slack(self) -> float:
        return user_level_tv_slack(self.epsilon, *self.sensitivity)

    @property
    def bad_event(self) -> float:
        """The δ this threshold achieves (at most ``delta``)."""
        return user_level_bad_event(self.epsilon, self.threshold, *self.sensitivity)


# ---- the truncated-noise variant ---------------------------------------------------------------------

_TRUNCATED_DIGITS = 60


def truncated_ideal_delta(epsilon: float, bound: int, l1: int) -> float:
    """``Q_A(Z ≥ A − l1 + 1)`` for the ideal discrete Laplace at scale ``t = l1/ε`` conditioned on ``|Z| ≤ A``
    (``A = bound``), rounded up: ``(a^{A−l1+1} − a^{A+1}) / (1 + a − 2a^{A+1})``, ``a = e^{−1/t}``
    (60 significant digits, then one float step up)."""
    eps = exact_fraction(epsilon, "epsilon")
    bound, l1 = int(bound), int(l1)
    if bound < l1 - 1:
        raise ValueError(f"noise bound {bound} must be at least l1 - 1 = {l1 - 1}")
    with localcontext() as ctx:
        ctx.prec = _TRUNCATED_DIGITS
        a = (-Decimal(eps.numerator) / (Decimal(eps.denominator) * l1)).exp()
        top = a ** (bound + 1)
        value = (a ** (bound - l1 + 1) - top) / (1 + a - 2 * top)
    return math.nextafter(float(value), math.inf)


def truncated_user_level_delta(epsilon: float, bound: int, l0: int, l1: int, linf: int) -> float:
    """δ of the truncated-noise SBH with noise bound ``A``: ``Q_A(Z ≥ A − l1 + 1) + l0 (1 + e^{l∞/t}) η_A``,
    ``t = l1/ε``, ``η_A`` the drawn truncated noise's TV to the ideal one
    (:meth:`~transit_release.noise.DiscreteLaplaceTable.truncated_total_variation`). Its threshold
    ``A + l∞ + 1`` is never reached by a key only one side has, so there is no bad-event term."""
    _check_sensitivity(l0, l1, linf)
    scale = user_level_scale(epsilon, l1)
    table = discrete_laplace_table(scale)
    slack = l0 * (1.0 + math.exp(linf / float(scale))) * table.truncated_total_variation(bound)
    return truncated_ideal_delta(epsilon, bound, l1) + slack


def truncated_user_level_bound(epsilon: float, delta: float, l0: int, l1: int, linf: int) -> int:
    """The smallest noise bound ``A ≥ l1`` whose :func:`truncated_user_level_delta` is at most ``δ``."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1). Found {delta}.")
    _check_sensitivity(l0, l1, linf)
    table = discrete_laplace_table(user_level_scale(epsilon, l1))

    def ok(a: int) -> bool:  # monotone: both terms only shrink as A grows
        return truncated_user_level_delta(epsilon, a, l0, l1, linf) <= delta

    lo, hi = int(l1), table.support_max + int(l1)
    if not ok(hi):
        raise ValueError(
            f"delta={delta:.3g} is too small for epsilon={float(epsilon)} at sensitivity ({l0}, {l1}, {linf}) "
            "with truncated noise: the noise table's error bound already exceeds it.")
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class TruncatedCardLevelBudget:
    """One marginal's card-level SBH with *truncated* discrete Laplace noise
    (:func:`truncated_card_level_stability_histogram`).

    Same public inputs and the same per-card ``(ε, δ)`` for this marginal of one partition as
    :class:`CardLevelBudget`; deliberately not a subclass, so it can never be handed to the untruncated
    sanitizer (whose thresholds it does not satisfy).
    """

    epsilon: float
    delta: float
    max_rows_per_partition: int
    neighbouring: str = "add-remove-one"

    @property
    def sensitivity(self) -> tuple[int, int, int]:
        return card_sensitivity(self.max_rows_per_partition, self.neighbouring)

    @property
    def scale(self) -> Fraction:
        return user_level_scale(self.epsilon, self.sensitivity[1])

    @property
    def noise_bound(self) -> int:
        """``A``: every noise draw lies in ``[−A, A]``."""
        return truncated_user_level_bound(self.epsilon, self.delta, *self.sensitivity)

    @property
    def threshold(self) -> int:
        """``T = A + l∞ + 1``: a key whose true count is at most ``l∞`` is never released."""
        return self.noise_bound + self.sensitivity[2] + 1

    @property
    def achieved_delta(self) -> float:
        """The δ this bound achieves (at most ``delta``)."""
        return truncated_user_level_delta(self.epsilon, self.noise_bound, *self.sensitivity)


@dataclass(frozen=True)
class SBHResult:
    """Positions (into the input) of released points and their released counts."""

    kept: np.ndarray  # int64 positions, increasing
    counts: np.ndarray  # int64, >= threshold
    threshold: int


def stability_histogram(
    counts: np.ndarray,
    epsilon: float,
    delta: float,
    generator: np.random.Generator,
) -> SBHResult:
    """Run the SBH on the true counts of the points present in one histogram.

    ``counts`` must be positive integers (absent points are never passed in).
    """
    counts = np.asarray(counts)
    if counts.ndim != 1:
        raise ValueError(f"counts must be one-dimensional. Found shape {counts.shape}.")
    return _sanitize(counts, sbh_scale(epsilon), sbh_threshold(epsilon, delta), generator)


def card_level_stability_histogram(counts: np.ndarray, budget: CardLevelBudget,
                                   generator: np.random.Generator) -> SBHResult:
    """The SBH at card level: scale ``l1/ε``, threshold :func:`user_level_threshold`, same sampler.

    ``counts`` are the true counts of the present points after contribution bounding.
    """
    if not isinstance(budget, CardLevelBudget):
        raise TypeError(f"card_level_stability_histogram needs a CardLevelBudget. Found {type(budget).__name__}.")
    return _sanitize(counts, budget.scale, budget.threshold, generator)


def truncated_card_level_stability_histogram(counts: np.ndarray, budget: TruncatedCardLevelBudget,
                                             generator: np.random.Generator) -> SBHResult:
    """The card-level SBH with noise drawn from the same table conditioned on ``|Z| ≤ A``
    (:meth:`~transit_release.noise.DiscreteLaplaceTable.sample_within`) and threshold ``T = A + l∞ + 1``.

    Same scale ``l1/ε`` and same per-card ``(ε, δ)`` as :func:`card_level_stability_histogram`, a lower
    threshold (405 against 464 at ε_j = 0.1, 211 against 233 at ε_j = 0.2, k = 2, δ_j = 10⁻¹⁰). Why it is
    ``(ε, δ)``-DP for one card (one unit changing the histogram by ``(l0, l1, l∞)``), with ``Q_A`` the ideal
    discrete Laplace at scale ``t = l1/ε`` conditioned on ``|Z| ≤ A``:

    * **keys only one side has** hold the card's rows alone, true count ``c ≤ l∞``; ``c + Z ≤ l∞ + A < T``,
      so they are never released: both outputs are "absent" with probability 1 (no bad event at all);
    * **keys both sides have** (counts ``n_i`` and ``n_i + c_i``, ``Σ|c_i| ≤ l1``, at most ``l0`` of them):
      the release is post-processing (thresholding, the same on both sides) of the noisy vector, so it is
      enough that ``n + c + Z`` and ``n + Z`` are ``(ε, δ)``-close. On the points both supports contain the
      ratio of their probabilities is ``Π_i e^{(|v_i − n_i| − |v_i − n_i − c_i|)/t}``, at most
      ``e^{Σ|c_i|/t} ≤ e^{ε}``
      (the normalisers are equal); a point in one support only needs some coordinate ``Z_i`` in the top
      ``|c_i|`` values ``A − |c_i| + 1 .. A`` (or, for the other side / a negative ``c_i``, the bottom ones,
      symmetric). So for every set ``S``, ``P(n + c + Z ∈ S) ≤ e^ε P(n + Z ∈ S) + β`` with
      ``β ≤ Σ_i Σ_{r<|c_i|} q_A(A − r)``. The multiset ``{r < |c_i|}`` has at most ``l1`` elements and its
      ``j``-th smallest is at most ``j`` (each key contributes an ``r = 0``, …), and ``q_A(A − r)`` grows
      with ``r`` for ``r ≤ A``, so ``β ≤ Σ_{r<l1} q_A(A − r) = Q_A(Z ≥ A − l1 + 1)`` — the worst case is
      the whole shift on one key, as for the untruncated PLD (``accounting.pld``);
    * **the sampler**: the drawn truncated noise is within TV ``η_A ≤ 2η / P̂(|Z| ≤ A)`` of ``Q_A``; the
      same coupling as for the untruncated SBH charges ``(1 + e^{l∞/t}) η_A`` per changed noisy count, at
      most ``l0`` of them.

    ``A`` is the smallest with ``Q_A(Z ≥ A − l1 + 1) + l0 (1 + e^{l∞/t}) η_A ≤ δ``
    (:func:`truncated_user_level_bound`). This is the truncated Laplace mechanism (Geng, Ding, Guo &
    Kumar, AISTATS 2020) used as the SBH's noise: where the Laplace SBH spends δ only on the bad event
    ``P(c + Z ≥ T) ≈ e^{−(T−c)/t}/2``, the truncated one spends it on the ``l1`` edge values,
    ``≈ (l1/2t) e^{−A/t}``, which buys about ``t·ln(t·l0/l1) − l1`` off the threshold (58 at t = 20, k = 2;
59 measured) — the same gain PipelineDP's
    truncated-geometric partition selection has over Laplace thresholding, without a second noisy count.

    **Accounting.** Per use it is ``(ε, δ)`` with the same ε and δ as :class:`CardLevelBudget`, so basic
    composition is unchanged. Card-level releases use it
    (:meth:`~transit_release.config.ReleaseConfig.sbh_budget`) and record
    :class:`~transit_release.accounting.events.TruncatedCardStabilityHistogramEvent`; the PLD accounting
    (:mod:`transit_release.accounting.pld`) builds each use's privacy loss distribution from the drawn truncated
    noise itself, the edge as infinite loss, with no threshold δ beside.
    """
    if not isinstance(budget, TruncatedCardLevelBudget):
        raise TypeError(f"truncated_card_level_stability_histogram needs a TruncatedCardLevelBudget. "
                        f"Found {type(budget).__name__}.")
    counts = np.asarray(counts)
    if counts.ndim != 1:
        raise ValueError(f"counts must be one-dimensional. Found shape {counts.shape}.")
    if counts.size and (not np.issubdtype(counts.dtype, np.integer) or counts.min() < 1):
        raise ValueError("counts must be positive integers: only points present in the data are sanitized.")
    threshold = budget.threshold
    noisy = counts.astype(np.int64) + discrete_laplace_table(budget.scale).sample_within(
        generator, budget.noise_bound, counts.size)
    kept = np.flatnonzero(noisy >= threshold)
    return SBHResult(kept=kept, counts=noisy[kept], threshold=threshold)


def _sanitize(counts: np.ndarray, scale: Fraction, threshold: int, generator: np.random.Generator) -> SBHResult:
    counts = np.asarray(counts)
    if counts.ndim != 1:
        raise ValueError(f"counts must be one-dimensional. Found shape {counts.shape}.")
    if counts.size and (not np.issubdtype(counts.dtype, np.integer) or counts.min() < 1):
        raise ValueError("counts must be positive integers: only points present in the data are sanitized.")
    noisy = counts.astype(np.int64) + discrete_laplace_table(scale).sample(generator, counts.size)
    kept = np.flatnonzero(noisy >= threshold)
    return SBHResult(kept=kept, counts=noisy[kept], threshold=threshold)


def _published_pmf(scale: Fraction | str, noise_bound: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The noise values and their drawn probabilities (the table, conditioned on ``|Z| ≤ noise_bound`` if given)."""
    table = discrete_laplace_table(Fraction(scale))
    z = np.arange(-table.support_max, table.support_max + 1, dtype=np.int64)
    bounds = np.concatenate([[0.0], table.cuts.astype(np.float64), [2.0 ** 64]])
    pmf = np.diff(bounds) / 2.0 ** 64
    if noise_bound is not None:
        inside = np.abs(z) <= int(noise_bound)
        z, pmf = z[inside], pmf[inside] / pmf[inside].sum()
    return z, pmf


def drop_probability(true_count: int, scale: Fraction | str, threshold: int, noise_bound: int | None = None) -> float:
    """``P̂(c + Z < T)``: how likely a point with true count ``c`` is left out of a release with noise at ``scale``
    (truncated to ``|Z| ≤ noise_bound`` if given) and threshold ``T`` (the published parameters of a marginal)."""
    if noise_bound is None:
        return 1.0 - discrete_laplace_table(Fraction(scale)).upper_tail(int(threshold) - int(true_count))
    z, pmf = _published_pmf(scale, noise_bound)
    return float(min(1.0, pmf[(int(true_count) + z) < int(threshold)].sum()))


def mean_released(true_count: int, scale: Fraction | str, threshold: int, noise_bound: int | None = None) -> float:
    """``E[c + Z | c + Z ≥ T]``: the average published count of a point with true count ``c`` when it is published
    (above ``c`` near the threshold: only noisy counts that cleared it are shown)."""
    z, pmf = _published_pmf(scale, noise_bound)
    kept = (int(true_count) + z) >= int(threshold)
    if pmf[kept].sum() == 0:
        return float("nan")
    return float(((int(true_count) + z[kept]) * pmf[kept]).sum() / pmf[kept].sum())


#: Card-level defaults, chosen from ``benchmarks/experiment_card_level.py`` on the full-size synthetic week
#: (its report has the curves): at most ``k = 2`` trips per card per (mode, date) partition, at most
#: ``P = 10`` partitions per card per weekly release, ε_j = 0.1 · (1, 1, 1, 1, 2, 2) and δ_j = 10⁻¹⁰ per
#: card, add/remove-one card. Why: 98.8% of (card, partition) pairs have at most 2 trips, so k = 2 drops
#: 0.8% of trips while k = 1 drops 38% (every released count ~38% low); k = 3 raises noise and thresholds
#: by half for 1% more pairs: at every ε of the sweep it covers 4 points fewer trips and releases a third
#: fewer cells, for 0.4 points less error. P = 10 keeps every partition of 99.7% of cards, so bounding
#: biases counts by under 1% (mean relative error of released cells 2.8%), where P = 7 drops 3% of trips
#: — the commuters' — and nearly doubles that error (4.4%) for ~3 points of coverage at equal card-week
#: ε. ε_j at 0.1 gives a card-week ε of 8 by basic composition (the number the
#: trip level promised per trip-partition; 5.4 by PLD at δ = 10⁻⁷), covering 81% of trips (trip level:
#: 97%), where halving it to card-week 4 covers 75% (the figures of the truncated-noise SBH releases use). δ_j = 10⁻¹⁰ keeps the thresholds' δ of a year of weekly
#: releases (52 · 10 · 6 · δ_j = 3.1·10⁻⁷) below one over the number of cards (2.1 million).
CARD_LEVEL_DEFAULTS = {"k": 2, "P": 10, "eps_scale": 0.1, "delta": 1e-10}


def card_level_default_budgets() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(ε_j, δ_j) of the six marginals j = 1..6 at :data:`CARD_LEVEL_DEFAULTS`."""
    s = Fraction(repr(CARD_LEVEL_DEFAULTS["eps_scale"]))
    eps = tuple(float(s * w) for w in (1, 1, 1, 1, 2, 2))
    return eps, (CARD_LEVEL_DEFAULTS["delta"],) * 6
