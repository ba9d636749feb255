"""Tight cumulative privacy loss with privacy loss distributions (Google's ``dp_accounting``).

The question a compliance officer asks is about people: how much privacy has
any one card lost across all the releases so far? Basic composition adds the
ε of every mechanism a card took part in; that is safe but loose when there
are hundreds of them (6 marginals × ``P`` partitions × 52 weeks). Privacy loss
distributions (PLDs; Meiser & Mohammadi 2018, Koskela et al. 2020, Doroshenko
et al. 2022) compose exactly (up to a pessimistic discretisation), and
``dp_accounting`` maintains that code; we map our mechanisms onto it rather
than writing composition by hand.

**What is composed.** A stability-based histogram (SBH) with discrete Laplace
noise at scale ``t`` and threshold ``T``, for one unit of privacy that changes
its histogram by ``(l0, l1, l∞)`` (see
:mod:`transit_release.mechanisms.stability_histogram`), splits in two:

* the keys present on both neighbouring data sets get independent discrete
  Laplace noise, shifted by ``c_i`` with ``Σ|c_i| ≤ l1``; thresholding them is
  post-processing. Its PLD is that of the pair (noise, noise shifted by the
  ``c_i``) — a *discrete Laplace part* with sensitivity ``l1``;
* the keys present on one side only can be released only through the "bad
  event" of the threshold, of probability at most ``β`` (the threshold's δ).

Writing each mechanism's output on both sides as the same mixture — with
probability ``1 − β`` the discrete Laplace part and nothing else, with
probability ``β`` anything — joint convexity of the hockey-stick divergence
gives, for any composition of such mechanisms,
``δ(ε) ≤ δ_PLD(ε) + Σ β_i``: the PLD of the discrete Laplace parts at ``ε``,
plus the thresholds' δ added beside (never folded into the PLD).

**Which pair is composed (dominance).** A marginal's shift may be spread over
several keys (``c = (1, 1, 1)`` for three trips at three different times) or
sit on one key (``c = (3)``). We compose the *single-key shift by the full
``l1``*, which must dominate every spread. Checked exactly (closed-form
privacy-loss pmfs, hockey-stick divergence on a fine ε grid) for every integer
partition of ``l1 ≤ 8`` and scales 0.5 to 20: the single-key shift's δ(ε) is
never below a spread's (largest difference spread − single: 0.0), so the
single-key pair dominates every shift with ``L1 ≤ k``
(``tests/test_pld.py::test_single_key_shift_dominates_every_spread``). The
intuition: the single shift puts mass ``1/(1+a)`` on the largest loss
``l1/t``, a spread only ``(1/(1+a))^m``. (A shift by one is exactly randomized
response with ε = 1/t; a product of those is dominated by the shift by m.)
The trip level's replace-one shift ``(+1, −1)`` is the spread ``(1, 1)``, so
sensitivity 2 covers it.

**Which noise.** ``noise="sampler"`` (the default, what the audit should
report) builds each PLD from the exact probability mass function of the
integer table the project actually samples from
(:func:`transit_release.noise.discrete_laplace_table`), so the table's
rounding and truncated tails are inside the PLD and no TV slack is needed for
the discrete Laplace parts (its tiny infinite-loss mass, about 2⁻⁸⁰, is
carried by ``dp_accounting`` into δ). ``noise="ideal"`` uses
``dp_accounting``'s own ``DiscreteLaplaceDpEvent`` PLD (ε at δ = 0 is then
exactly ``sensitivity/scale`` for one mechanism: the closed-form check). The two
agree to about 10⁻⁸ (relative) in ε at the δ we use. (Adding the table's TV ``η`` to an
ideal PLD's δ instead would cost ``(1 + e^{ε})·η`` per noisy count at the
*composed* ε, which explodes for a year of releases.)

**Truncated noise** (what card-level releases draw:
:func:`~transit_release.mechanisms.stability_histogram.truncated_card_level_stability_histogram`). The noise
is the sampled table conditioned on ``|Z| ≤ A`` and the threshold is ``A + k + 1``, so a key one side has
alone is never released: there is no bad event and no threshold δ beside. The pair composed is the drawn
truncated noise shifted by ``l1`` against the unshifted one, built from the exact conditioned pmf (no TV
slack); the shifted side's top ``l1`` outputs have no counterpart and are the PLD's infinite-loss mass,
which ``dp_accounting`` counts in δ. The single-key shift dominates every spread here too, infinite-loss
mass included (checked exactly for every integer partition of ``l1 ≤ 5`` at several scales and bounds:
``tests/test_pld.py::test_truncated_single_key_shift_dominates_every_spread``). For basic and advanced
composition one use is ``(l1/t, edge)`` with ``edge = P̂(Z ≥ A − l1 + 1 | |Z| ≤ A) ≤ δ_j``
(:func:`truncated_edge_mass`). dp_accounting has no ``DpEvent`` for it, so :func:`to_dp_event` refuses it.

**Public API** (what the lead calls):

* :class:`DLapComponent` — (noise scale, sensitivity, count, threshold δ per use);
* :func:`components_for_card_release` / :func:`components_for_trip_release` —
  the components one card (or one trip) takes part in per release;
* :func:`pld_epsilon` — ε of the composed discrete Laplace parts at a stated δ;
* :func:`cumulative_loss` — basic, PLD (at a stated δ, thresholds' δ beside)
  and advanced composition (only where better than basic) for one unit;
* :func:`weekly_releases_loss` — ``n`` weekly releases with given parameters, and
  :func:`default_weekly_releases_loss` — "52 weekly releases at the defaults";
* :func:`to_dp_event` — the ``dp_accounting`` event of a list of components.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

from transit_release.noise import discrete_laplace_table, exact_fraction

#: Discretisation of the privacy loss (dp_accounting's default is 1e-4; pessimistic rounding).
VALUE_DISCRETIZATION = 1e-4
NOISE_KINDS = ("sampler", "ideal")


@dataclass(frozen=True)
class DLapComponent:
    """``count`` uses of a discrete Laplace part at ``scale`` with single-key sensitivity ``sensitivity``.

    ``threshold_delta`` is the δ of the threshold's bad event of *one* use (the ``δ_j`` charged for
    the marginal); it is added beside the PLD, ``count`` times.
    """

    scale: Fraction
    sensitivity: int
    count: int = 1
    threshold_delta: float = 0.0
    noise_bound: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "scale", exact_fraction(self.scale) if not isinstance(self.scale, str)
                           else Fraction(self.scale))
        if self.scale <= 0:
            raise ValueError(f"scale must be positive. Found {self.scale}.")
        if int(self.sensitivity) != self.sensitivity or self.sensitivity < 1:
            raise ValueError(f"sensitivity must be a positive integer. Found {self.sensitivity}.")
        if int(self.count) != self.count or self.count < 1:
            raise ValueError(f"`count` must be positive. Found {self.count}.")
        if not 0 <= self.threshold_delta < 1:
            raise ValueError(f"threshold_delta must be in [0, 1). Found {self.threshold_delta}.")
        if self.noise_bound is not None:
            if int(self.noise_bound) != self.noise_bound or self.noise_bound < self.sensitivity:
                raise ValueError(f"noise_bound must be an integer of at least the sensitivity {self.sensitivity}. "
                                 f"Found {self.noise_bound}.")
            object.__setattr__(self, "noise_bound", int(self.noise_bound))

    @property
    def epsilon(self) -> float:
        """ε of one use of the discrete Laplace part: ``sensitivity/scale`` (for truncated noise, at the δ of
        :attr:`edge_delta`)."""
        return float(Fraction(self.sensitivity) / self.scale)

    @property
    def edge_delta(self) -> float:
        """δ of one use at :attr:`epsilon` that lies in the noise itself: 0 for untruncated noise (the sampler's
        tiny infinite-loss mass is inside the PLD); for noise truncated to ``|Z| ≤ A``, exactly
        :func:`truncated_edge_mass`: mostly the drawn mass of the top ``sensitivity`` values, where the shifted
        side has an output the other side cannot produce (infinite privacy loss; also in the PLD)."""
        if self.noise_bound is None:
            return 0.0
        return truncated_edge_mass(self.scale, self.noise_bound, self.sensitivity)

    @property
    def use_delta(self) -> float:
        """δ of one use at :attr:`epsilon` (basic and advanced composition): the threshold's plus the edge's."""
        return self.threshold_delta + self.edge_delta


def _merge(components: Iterable[DLapComponent]) -> dict[tuple[Fraction, int, int], tuple[int, float]]:
    """(scale, sensitivity, noise bound or -1) → (total count, total threshold δ): composition is commutative."""
    out: dict[tuple[Fraction, int, int], tuple[int, float]] = {}
    for c in components:
        key = (c.scale, int(c.sensitivity), -1 if c.noise_bound is None else c.noise_bound)
        n, d = out.get(key, (0, 0.0))
        out[key] = (n + int(c.count), d + c.count * c.threshold_delta)
    return out


def _table_log_pmf(scale: Fraction, bound: int | None) -> dict[int, float]:
    """``z → ln P̂(Z = z)`` of the integer table the project samples from, conditioned on ``|Z| ≤ bound`` when a
    bound is given (exactly what :meth:`~transit_release.noise.DiscreteLaplaceTable.sample_within` draws)."""
    table = discrete_laplace_table(scale)
    bounds = [0, *(int(c) for c in table.cuts), 1 << 64]
    masses = {z: bounds[i + 1] - bounds[i]
              for i, z in enumerate(range(-table.support_max, table.support_max + 1))}
    if bound is not None:
        masses = {z: m for z, m in masses.items() if -bound <= z <= bound}
    total = sum(masses.values())  # exact integers: the renormalisation is exact up to one log each
    log_total = math.log(total)
    return {z: math.log(m) - log_total for z, m in masses.items() if m > 0}


def _ideal_truncated_log_pmf(scale: Fraction, bound: int) -> dict[int, float]:
    """``z → ln Q_A(z)``: the ideal discrete Laplace at ``scale`` conditioned on ``|Z| ≤ A``."""
    inv = 1.0 / float(scale)
    log_w = {z: -abs(z) * inv for z in range(-bound, bound + 1)}
    top = max(log_w.values())
    log_total = top + math.log(math.fsum(math.exp(v - top) for v in log_w.values()))
    return {z: v - log_total for z, v in log_w.items()}


@lru_cache(maxsize=256)
def truncated_edge_mass(scale: Fraction, bound: int, sensitivity: int) -> float:
    """δ of one use at ε = ``s/t`` (``t`` = ``scale``, ``s`` = ``sensitivity``), exactly, for the sampled table
    conditioned on ``|Z| ≤ A`` (``A`` = ``bound``): ``max`` over both directions of
    ``Σ_x max(0, P̂(Z + s = x) − e^{s/t} P̂(Z = x))``, rounded up. Mostly the edge — the top ``s`` outputs
    only the shifted side can produce, ``P̂(Z ≥ A − s + 1 | |Z| ≤ A)`` — plus the table's rounding, where a
    ratio of neighbouring masses exceeds ``e^{1/t}`` (about 10⁻¹⁸ here)."""
    table = discrete_laplace_table(scale)
    cuts = [0, *(int(c) for c in table.cuts), 1 << 64]
    offset = table.support_max
    mass = {z: cuts[z + offset + 1] - cuts[z + offset] for z in range(-bound, bound + 1)}
    inside = sum(mass.values())
    s = int(sensitivity)
    with localcontext() as ctx:
        ctx.prec = 60
        ratio = (Decimal(s) * Decimal(scale.denominator) / Decimal(scale.numerator)).exp()
        worst = Decimal(0)
        for sign in (1, -1):  # the card added (output shifted up by s) or removed (the other side shifted)
            total = Decimal(0)
            for x in range(-bound, bound + s + 1) if sign == 1 else range(-bound - s, bound + 1):
                q = mass.get(x - sign * s, 0)
                p = mass.get(x, 0)
                gap = Decimal(q) - ratio * Decimal(p)
                if gap > 0:
                    total += gap
            worst = max(worst, total)
        value = worst / Decimal(inside)
    return math.nextafter(float(value), math.inf)


@lru_cache(maxsize=256)
def _single_pld(scale: Fraction, sensitivity: int, noise: str, interval: float, bound: int = -1):
    """One use's PLD: the pair (noise shifted by ``sensitivity``, noise), passed as dp_accounting's
    (``lower``, ``upper``); with ``symmetric=False`` it keeps both directions (the card added and removed), and
    the noise is symmetric, so the order does not change the result. ``bound`` ≥ 0: noise truncated to
    ``|Z| ≤ bound``; each side's outputs the other cannot produce (the top or bottom ``sensitivity`` values) go
    to the PLD's infinite-loss mass (dp_accounting counts it in δ)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    if noise not in NOISE_KINDS:
        raise ValueError(f"noise must be one of {NOISE_KINDS}. Found {noise!r}.")
    if noise == "ideal" and bound < 0:
        return pld.from_discrete_laplace_mechanism(1 / float(scale), sensitivity=sensitivity,
                                                   value_discretization_interval=interval)
    if noise == "ideal":
        log_pmf = _ideal_truncated_log_pmf(scale, bound)
    else:
        log_pmf = _table_log_pmf(scale, None if bound < 0 else bound)
    shifted = {z + sensitivity: lp for z, lp in log_pmf.items()}
    return pld.from_two_probability_mass_functions(shifted, log_pmf, pessimistic_estimate=True,
                                                   value_discretization_interval=interval, symmetric=False)


def _pure_pld(epsilon: float, delta: float, interval: float):
    """The PLD that dominates every (ε, δ)-DP mechanism (dp_accounting's ``from_privacy_parameters``: loss ±ε, and
    infinite loss with probability δ): how a pure-ε release whose inner structure is not decomposed composes."""
    from dp_accounting.pld import common, privacy_loss_distribution as pld

    return pld.from_privacy_parameters(common.DifferentialPrivacyParameters(float(epsilon), float(delta)),
                                       value_discretization_interval=interval)


def composed_pld(components: Sequence[DLapComponent], noise: str = "sampler",
                 value_discretization_interval: float = VALUE_DISCRETIZATION,
                 pure: Sequence[tuple[float, float]] = ()):
    """The ``dp_accounting`` PLD of all the components' discrete Laplace parts and of the ``pure`` (ε, δ)
    mechanisms, composed. Composition is commutative: the same multiset of parts gives the same PLD, remembered
    (a release's budget check, its charge and its data card compose the same ledger)."""
    merged = _merge(components)
    pure_counts: dict[tuple[float, float], int] = {}
    for eps, delta in pure:
        pure_counts[(float(eps), float(delta))] = pure_counts.get((float(eps), float(delta)), 0) + 1
    if not merged and not pure_counts:
        raise ValueError("no components to compose")
    return _composed(tuple(sorted((key, count) for key, (count, _) in merged.items())),
                     tuple(sorted(pure_counts.items())), noise, value_discretization_interval)


@lru_cache(maxsize=32)
def _composed(dlap: tuple, pure: tuple, noise: str, interval: float):
    out = None
    parts = [(_single_pld(scale, sens, noise, interval, bound), count) for (scale, sens, bound), count in dlap]
    parts += [(_pure_pld(eps, delta, interval), count) for (eps, delta), count in pure]
    for p, count in parts:
        if count > 1:
            p = p.self_compose(count)
        out = p if out is None else out.compose(p)
    return out


def pld_epsilon(components: Sequence[DLapComponent], delta: float, noise: str = "sampler",
                value_discretization_interval: float = VALUE_DISCRETIZATION,
                pure: Sequence[tuple[float, float]] = ()) -> float:
    """ε of the composed discrete Laplace parts (and ``pure`` mechanisms) at ``delta`` (the thresholds' δ is *not*
    included; the pure mechanisms' δ and the truncated noises' edges are inside the PLD)."""
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1). Found {delta}.")
    return float(composed_pld(components, noise, value_discretization_interval, pure).get_epsilon_for_delta(delta))


def threshold_delta(components: Iterable[DLapComponent]) -> float:
    """The thresholds' δ of all uses, added beside the PLD's δ."""
    return float(math.fsum(c.count * c.threshold_delta for c in components))


def basic_loss(components: Iterable[DLapComponent]) -> tuple[float, float]:
    """Basic composition: (Σ count·sensitivity/scale, Σ count·(threshold δ + edge δ))."""
    comps = list(components)
    eps = sum((c.count * Fraction(c.sensitivity) / c.scale for c in comps), Fraction(0))
    return float(eps), float(math.fsum(c.count * c.use_delta for c in comps))


def to_dp_event(components: Sequence[DLapComponent]):
    """The components as a ``dp_accounting`` event: a composition of self-composed ``DiscreteLaplaceDpEvent``s
    (noise parameter ``1/scale``; ideal noise; the thresholds' δ is not part of the event). dp_accounting has no
    event for truncated noise: such components are refused (``ValueError``)."""
    from dp_accounting import dp_event

    merged = _merge(components)
    if any(bound >= 0 for _, _, bound in merged):
        raise ValueError("dp_accounting has no event for truncated discrete Laplace noise; use composed_pld")
    events = [dp_event.SelfComposedDpEvent(
        dp_event.DiscreteLaplaceDpEvent(noise_parameter=1 / float(scale), sensitivity=sens), count)
        for (scale, sens, _), (count, _) in sorted(merged.items())]
    return dp_event.ComposedDpEvent(events)


@dataclass(frozen=True)
class CumulativeLoss:
    """One unit's cumulative loss, three ways (the audit's figures).

    ``pld_epsilon`` holds at ``pld_total_delta = pld_delta + threshold_delta + edge_delta``: the PLD's own
    ``δ'`` (``pld_delta``) plus the mechanisms' own δ — the thresholds' bad events, added beside, and the
    truncated noises' edges, which lie inside the PLD (its infinite-loss mass), so the PLD is read at
    ``pld_delta + edge_delta``. Either way the figure compares with basic composition's
    ``(Σ ε, threshold_delta + edge_delta)``. ``advanced_*`` is set only where advanced composition beats basic
    composition.
    """

    mechanisms: int
    basic_epsilon: float
    basic_delta: float
    pld_epsilon: float
    pld_delta: float
    threshold_delta: float
    advanced_epsilon: float | None
    advanced_delta: float | None
    noise: str
    edge_delta: float = 0.0
    pure_delta: float = 0.0

    @property
    def pld_total_delta(self) -> float:
        return self.pld_delta + self.threshold_delta + self.edge_delta + self.pure_delta

    def to_dict(self) -> dict:
        return {"mechanisms": self.mechanisms, "basic_epsilon": self.basic_epsilon,
                "basic_delta": self.basic_delta, "pld_epsilon": self.pld_epsilon, "pld_delta": self.pld_delta,
                "threshold_delta": self.threshold_delta, "edge_delta": self.edge_delta,
                "pure_delta": self.pure_delta, "pld_total_delta": self.pld_total_delta,
                "advanced_epsilon": self.advanced_epsilon, "advanced_delta": self.advanced_delta,
                "noise": self.noise}


def cumulative_loss(components: Sequence[DLapComponent], pld_delta: float, noise: str = "sampler",
                    value_discretization_interval: float = VALUE_DISCRETIZATION,
                    pure: Sequence[tuple[float, float]] = ()) -> CumulativeLoss:
    """Basic, PLD (ε at ``pld_delta``, the thresholds' δ beside) and advanced composition of ``components`` and of
    the ``pure`` (ε, δ) mechanisms (whose δ, like the truncated noises' edges, lies inside the PLD).

    The advanced figure uses the same extra δ' = ``pld_delta`` as the PLD so the two compare fairly.
    """
    from transit_release.accounting.accountant import PrivacyLoss, advanced_composition

    comps, pure = list(components), [(float(e), float(d)) for e, d in pure]
    b_eps, b_delta = basic_loss(comps)
    b_eps += float(math.fsum(e for e, _ in pure))
    p_delta = float(math.fsum(d for _, d in pure))
    b_delta += p_delta
    e_delta = float(math.fsum(c.count * c.edge_delta for c in comps))
    p_eps = (pld_epsilon(comps, pld_delta + e_delta + p_delta, noise, value_discretization_interval, pure)
             if comps or pure else 0.0)
    a_eps = a_delta = None
    if (comps or pure) and pld_delta > 0:
        losses = [PrivacyLoss(Fraction(c.sensitivity) / c.scale, exact_fraction(c.use_delta))
                  for c in comps for _ in range(c.count)] + [PrivacyLoss.of(e, d) for e, d in pure]
        adv = advanced_composition(losses, pld_delta)
        if adv.epsilon < b_eps:
            a_eps, a_delta = adv.epsilon, adv.delta
    # basic's ε holds at δ = b_delta ≤ the PLD figure's δ: never report more than it
    return CumulativeLoss(mechanisms=sum(c.count for c in comps) + len(pure), basic_epsilon=b_eps,
                          basic_delta=b_delta, pld_epsilon=min(p_eps, b_eps), pld_delta=pld_delta,
                          threshold_delta=threshold_delta(comps), advanced_epsilon=a_eps, advanced_delta=a_delta,
                          noise=noise, edge_delta=e_delta, pure_delta=p_delta)


def components_for_card_release(epsilons: Sequence[float], deltas: Sequence[float], max_rows_per_partition: int,
                                max_partitions: int, neighbouring: str = "add-remove-one",
                                truncated: bool = True) -> list[DLapComponent]:
    """What one card takes part in per card-level release: each marginal ``j`` (ε_j, δ_j) in each of its at
    most ``P`` partitions, sensitivity ``l1`` of :func:`card_sensitivity` at scale ``l1/ε_j``.

    ``truncated`` (what card-level releases draw): noise bounded by the marginal's
    :attr:`~transit_release.mechanisms.stability_histogram.TruncatedCardLevelBudget.noise_bound`, whose edge is
    inside the PLD and no threshold δ beside; otherwise the untruncated SBH with ``δ_j`` beside."""
    from transit_release.mechanisms.stability_histogram import (TruncatedCardLevelBudget, card_sensitivity,
                                                                user_level_scale)

    if len(epsilons) != len(deltas):
        raise ValueError(f"one δ per ε: {len(epsilons)} epsilons, {len(deltas)} deltas")
    l0, l1, linf = card_sensitivity(max_rows_per_partition, neighbouring)
    if truncated:
        return [DLapComponent(user_level_scale(e, l1), l1, int(max_partitions), 0.0,
                              TruncatedCardLevelBudget(e, d, max_rows_per_partition, neighbouring).noise_bound)
                for e, d in zip(epsilons, deltas)]
    return [DLapComponent(user_level_scale(e, l1), l1, int(max_partitions), float(d))
            for e, d in zip(epsilons, deltas)]


def components_for_trip_release(epsilons: Sequence[float], deltas: Sequence[float]) -> list[DLapComponent]:
    """What one trip takes part in per trip-level release (replace-one): one partition, six marginals at
    scale ``2/ε_j``, sensitivity 2 (the spread ``(+1, −1)`` is dominated by the shift by 2)."""
    from transit_release.mechanisms.stability_histogram import sbh_scale

    return [DLapComponent(sbh_scale(e), 2, 1, float(d)) for e, d in zip(epsilons, deltas)]


def weekly_releases_loss(releases: int, epsilons: Sequence[float], deltas: Sequence[float],
                         max_rows_per_partition: int, max_partitions: int, pld_delta: float,
                         noise: str = "sampler", truncated: bool = True) -> CumulativeLoss:
    """Cumulative per-card loss of ``releases`` card-level releases with the same parameters."""
    if int(releases) != releases or releases < 1:
        raise ValueError(f"`releases` must be positive. Found {releases}.")
    per_release = components_for_card_release(epsilons, deltas, max_rows_per_partition, max_partitions,
                                              truncated=truncated)
    return cumulative_loss([DLapComponent(c.scale, c.sensitivity, c.count * int(releases), c.threshold_delta,
                                          c.noise_bound) for c in per_release], pld_delta, noise)


def default_weekly_releases_loss(releases: int = 52, pld_delta: float = 5e-7,
                                 noise: str = "sampler", truncated: bool = True) -> CumulativeLoss:
    """Cumulative per-card loss of ``releases`` weekly card-level releases at
    :data:`~transit_release.mechanisms.stability_histogram.CARD_LEVEL_DEFAULTS`.

    At the defaults (k = 2, P = 10, ε_j = 0.1·(1, 1, 1, 1, 2, 2), δ_j = 10⁻¹⁰), with truncated noise (what
    card-level releases draw), 52 weeks: basic composition ε = 416 (δ = 3.0·10⁻⁷, the noise edges); PLD
    ε ≈ 66.95 at δ = 5·10⁻⁷ + 3.0·10⁻⁷ (the edges, inside the PLD); advanced composition ε ≈ 110.5. One
    week: basic 8, PLD ≈ 5.14 (δ = 5·10⁻⁷ + 5.8·10⁻⁹). ``truncated=False`` (the untruncated SBH, as releases drew before): PLD
    ε ≈ 66.95 at δ = 5·10⁻⁷ + 3.12·10⁻⁷ of thresholds beside.
    """
    from transit_release.mechanisms.stability_histogram import CARD_LEVEL_DEFAULTS, card_level_default_budgets

    eps, deltas = card_level_default_budgets()
    return weekly_releases_loss(releases, eps, deltas, CARD_LEVEL_DEFAULTS["k"], CARD_LEVEL_DEFAULTS["P"],
                                pld_delta, noise, truncated)


__all__ = ["DLapComponent", "default_weekly_releases_loss", "CumulativeLoss", "pld_epsilon", "composed_pld",
           "threshold_delta", "basic_loss", "truncated_edge_mass",
           "cumulative_loss", "components_for_card_release", "components_for_trip_release",
           "weekly_releases_loss", "to_dp_event", "VALUE_DISCRETIZATION", "NOISE_KINDS"]


def release_components(events: Sequence) -> list[DLapComponent]:
    """The discrete Laplace parts one unit takes part in, read off recorded stability-histogram spends.

    Trip-level spends (replace-one): every spend of the unit's worst partition counts (the caller passes the
    spends of one cell). Card-level spends: per release, the ``P`` partitions most expensive for one card
    (the contribution bound), each marginal at its scale with sensitivity ``l1``; spends with a ``noise_bound``
    (truncated noise) carry it, and no threshold δ (their threshold is never reached by a key one side has
    alone; the noise's edge is in the PLD). Other events have no
    discrete Laplace decomposition here: ``ValueError``.
    """
    from collections import defaultdict

    out: list[DLapComponent] = []
    card: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        if getattr(e, "max_partitions", None):
            card[e.release_id][e.partition].append(e)
        elif getattr(e, "kind", "") == "stability_histogram":
            out.append(DLapComponent(Fraction(e.noise_scale), 2, 1, float(e.delta)))
        else:
            raise ValueError(f"no discrete Laplace decomposition for {getattr(e, 'kind', type(e).__name__)} spends")
    for parts in card.values():
        bound = min(e.max_partitions for evs in parts.values() for e in evs)
        # most expensive first: by ε, then by δ (the edges and thresholds), then by name — never by ledger order
        worst = sorted(parts.items(), key=lambda kv: (sum(Fraction(repr(e.epsilon)) for e in kv[1]),
                                                      sum(Fraction(repr(e.delta)) for e in kv[1]), kv[0]),
                       reverse=True)
        worst = [evs for _, evs in worst]
        out += [DLapComponent(Fraction(e.noise_scale), int(e.sensitivity), 1, 0.0, e.noise_bound)
                if getattr(e, "noise_bound", None) is not None
                else DLapComponent(Fraction(e.noise_scale), int(e.sensitivity), 1, float(e.delta))
                for evs in worst[:bound] for e in evs]
    return out
