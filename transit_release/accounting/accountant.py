"""The accountant: interprets recorded events as privacy loss.

Composition rules (all for the events' own neighbouring relation):

* sequential (basic) composition inside a partition: ε and δ add up
  (Dwork & Roth, Theorem 3.16);
* parallel composition across disjoint partitions (McSherry 2009): the loss of
  a set of partitions is the largest partition's loss, because one trip lies in
  exactly one (mode, date) partition;
* releases touching the same partition compose sequentially (re-running a
  release spends again).
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class AccountingReport:
    """Loss per unit of privacy, split by partition and by mode."""

    unit_of_privacy: str
    neighbouring: str
    per_partition: dict[str, PrivacyLoss] = field(default_factory=dict)

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


def compose(events: Iterable) -> dict[tuple[str, str], AccountingReport]:
    """Group events by (unit of privacy, neighbouring relation) and compose each group."""
    sums: dict[tuple[str, str], dict[str, PrivacyLoss]] = defaultdict(lambda: defaultdict(PrivacyLoss))
    for e in events:
        key = (e.unit_of_privacy, e.neighbouring)
        sums[key][e.partition] = sums[key][e.partition] + PrivacyLoss.of(e.epsilon, e.delta)
    return {key: AccountingReport(key[0], key[1], dict(sorted(parts.items()))) for key, parts in sorted(sums.items())}


def compose_one(events: Iterable) -> AccountingReport:
    """Compose events that share one unit of privacy and relation (e.g. one release)."""
    reports = compose(events)
    if not reports:
        return AccountingReport("trip", "replace-one")
    if len(reports) != 1:
        raise ValueError(f"events mix units of privacy or neighbouring relations: {sorted(reports)}")
    return next(iter(reports.values()))
