"""The accountant: interprets recorded events as privacy loss.

Composition rules (all for the events' own neighbouring relation):

* sequential (basic) composition inside a partition: ε and δ add up
  (Dwork & Roth, Theorem 3.16);
* parallel composition across disjoint partitions (McSherry 2009): the loss of
  a set of partitions is the largest partition's loss, because one trip lies in
  exactly one (mode, date) partition;
* releases touching the same partition compose sequentially (re-running a
  release spends again);
* over many releases, the advanced composition theorem can give a tighter ε at
  the price of an extra δ'; :meth:`AccountingReport.advanced_per_partition`
  reports it beside the basic bound (it never replaces it).
"""

from __future__ import annotations

import math

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from transit_release.noise import exact_fraction


@dataclass(frozen=True)
class PrivacyLoss:
    """An (ε, δ) pair kept as exact fractions of the decimals users wrote."""

    epsilon_exact: Fraction = Fraction(0)
    delta_exact: Fraction = Fraction(0)

    @classmethod
    def of(cls, epsilon: float, delta: float) -> "PrivacyLoss":
        return cls(exact_fraction(epsilon), exact_fraction(delta))

    @property
    def epsilon(self) -> float:
        return float(self.epsilon_exact)

    @property
    def delta(self) -> float:
        return float(self.delta_exact)

    def __add__(self, other: "PrivacyLoss") -> "PrivacyLoss":
        return PrivacyLoss(self.epsilon_exact + other.epsilon_exact, self.delta_exact + other.delta_exact)

    def max(self, other: "PrivacyLoss") -> "PrivacyLoss":
        return PrivacyLoss(max(self.epsilon_exact, other.epsilon_exact), max(self.delta_exact, other.delta_exact))


ADVANCED_COMPOSITION = ("advanced composition theorem (Dwork, Rothblum & Vadhan 2010; Dwork & Roth 2014, "
                        "Theorem 3.20), heterogeneous form: ε' = sqrt(2 ln(1/δ') Σ ε_i²) + Σ ε_i (e^ε_i − 1), "
                        "δ_total = Σ δ_i + δ'")


def advanced_composition(losses: list[PrivacyLoss], delta_prime: float) -> PrivacyLoss:
    """The advanced-composition bound of a sequence of (ε_i, δ_i) mechanisms, slack ``δ'``."""
    if not losses:
        return PrivacyLoss()
    if not 0 < delta_prime < 1:
        raise ValueError(f"delta_prime must be in (0, 1). Found {delta_prime}.")
    eps = [loss.epsilon for loss in losses]
    bound = math.sqrt(2 * math.log(1 / delta_prime) * sum(e * e for e in eps)) + sum(e * math.expm1(e) for e in eps)
    delta = sum((loss.delta_exact for loss in losses), Fraction(0)) + exact_fraction(delta_prime)
    return PrivacyLoss(Fraction(bound), delta)


@dataclass(frozen=True)
class AccountingReport:
    """Loss per unit of privacy, split by partition and by mode.

    ``spends`` keeps each partition's individual losses in ledger order, so that
    both basic and advanced composition can be computed from them.
    """

    unit_of_privacy: str
    neighbouring: str
    spends: dict[str, list[PrivacyLoss]] = field(default_factory=dict)

    @property
    def per_partition(self) -> dict[str, PrivacyLoss]:
        """Basic (sequential) composition inside each partition."""
        out = {}
        for part, losses in self.spends.items():
            total = PrivacyLoss()
            for loss in losses:
                total = total + loss
            out[part] = total
        return out

    @property
    def overall(self) -> PrivacyLoss:
        """Parallel composition over the disjoint partitions."""
        total = PrivacyLoss()
        for loss in self.per_partition.values():
            total = total.max(loss)
        return total

    def per_mode(self) -> dict[str, PrivacyLoss]:
        out: dict[str, PrivacyLoss] = {}
        for part, loss in self.per_partition.items():
            mode = part.split("/", 1)[0]
            out[mode] = out.get(mode, PrivacyLoss()).max(loss)
        return out

    def advanced_per_partition(self, delta_prime: float) -> dict[str, PrivacyLoss]:
        return {part: advanced_composition(losses, delta_prime) for part, losses in self.spends.items()}

    def advanced_overall(self, delta_prime: float) -> PrivacyLoss:
        total = PrivacyLoss()
        for loss in self.advanced_per_partition(delta_prime).values():
            total = total.max(loss)
        return total


def compose(events: Iterable) -> dict[tuple[str, str], AccountingReport]:
    """Group events by (unit of privacy, neighbouring relation) and compose each group."""
    spends: dict[tuple[str, str], dict[str, list[PrivacyLoss]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        spends[(e.unit_of_privacy, e.neighbouring)][e.partition].append(PrivacyLoss.of(e.epsilon, e.delta))
    return {key: AccountingReport(key[0], key[1], {p: list(v) for p, v in sorted(parts.items())})
            for key, parts in sorted(spends.items())}


def compose_one(events: Iterable) -> AccountingReport:
    """Compose events that share one unit of privacy and relation (e.g. one release)."""
    reports = compose(events)
    if not reports:
        return AccountingReport("trip", "replace-one")
    if len(reports) != 1:
        raise ValueError(f"events mix units of privacy or neighbouring relations: {sorted(reports)}")
    return next(iter(reports.values()))
