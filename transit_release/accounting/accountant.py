"""The accountant: interprets recorded events as privacy loss.

Composition rules (all for the events' own unit of privacy and neighbouring
relation; the ledger only records, this module decides what the records mean):

* every spend touches a set of **cells**: the disjoint pieces of data one unit
  of privacy can be in. A trip lies in one (mode, date) partition, so a
  stability-histogram spend touches the cell ``mode/date``. A passenger's
  sequence, trajectory or station set covers a declared calendar period, so a
  spend over a period touches one cell per day of it;
* inside a cell, spends compose sequentially (basic composition: ε and δ add
  up; Dwork & Roth, Theorem 3.16);
* across cells, parallel composition (McSherry 2009): the loss of the unit is
  that of its worst cell. Two releases of disjoint periods therefore compose
  in parallel and two of overlapping periods sequentially on their common days
  — the loss of any day is the sum of the spends covering it;
* a spend whose scope is not a declared partition or period (sequence records
  written before periods were declared, whose scope is free text) touches every
  cell of its unit: it composes sequentially with everything;
* a card is the same person in every release, so card-level spends compose
  sequentially across releases; within one release a card touches at most
  ``P`` of its partitions (the contribution bound), so the release costs a card
  the sum of its ``P`` most expensive partitions (each partition's marginals
  composed sequentially) — bounded parallel composition;
* over many spends, the advanced composition theorem can give a tighter ε at
  the price of an extra δ'; :meth:`AccountingReport.advanced_overall` reports
  it beside the basic bound (never instead of it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from fractions import Fraction

from transit_release.noise import exact_fraction

#: The cell of spends that touch every cell (unknown scope), when the unit has no other cell.
EVERYWHERE = "*"


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


def total(losses: Iterable[PrivacyLoss]) -> PrivacyLoss:
    out = PrivacyLoss()
    for loss in losses:
        out = out + loss
    return out


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
class Scope:
    """What one spend touches: its cells (None: every cell of its unit), how it is named, its mode."""

    cells: tuple[str, ...] | None
    label: str
    mode: str = ""


def scope_of(event) -> Scope:
    """The cells a recorded event touches (the accountant's reading of its partition or period)."""
    period = getattr(event, "period", None)
    if period is not None:
        start, end = period
        days = tuple((start + timedelta(days=i)).isoformat() for i in range((end - start).days + 1))
        return Scope(days, event.partition, "")
    if hasattr(event, "date") and hasattr(event, "marginal"):  # one (mode, date) partition of trips
        return Scope((event.partition,), event.partition, event.mode)
    return Scope(None, event.partition, getattr(event, "mode", ""))


@dataclass(frozen=True)
class AccountingReport:
    """Loss of one unit of privacy: per cell, per recorded scope (partition or period) and per mode.

    ``spends`` keeps each cell's individual losses in ledger order, so that both
    basic and advanced composition can be computed from them; ``scopes`` maps
    each recorded scope label to the cells it touches (and its mode).
    """

    unit_of_privacy: str
    neighbouring: str
    spends: dict[str, list[PrivacyLoss]] = field(default_factory=dict)
    scopes: dict[str, Scope] = field(default_factory=dict)

    @property
    def per_cell(self) -> dict[str, PrivacyLoss]:
        """Basic (sequential) composition inside each cell."""
        return {cell: total(losses) for cell, losses in self.spends.items()}

    @property
    def per_partition(self) -> dict[str, PrivacyLoss]:
        """Per recorded scope (a ``mode/date`` partition, or a period): the loss of its worst cell."""
        cells = self.per_cell
        return {label: _worst(cells[c] for c in s.cells) for label, s in self.scopes.items()}

    @property
    def overall(self) -> PrivacyLoss:
        """Parallel composition over the cells: the worst cell."""
        return _worst(self.per_cell.values())

    def per_mode(self) -> dict[str, PrivacyLoss]:
        out: dict[str, PrivacyLoss] = {}
        cells = self.per_cell
        for s in self.scopes.values():
            if s.mode:
                out[s.mode] = out.get(s.mode, PrivacyLoss()).max(_worst(cells[c] for c in s.cells))
        return dict(sorted(out.items()))

    def spends_in(self, label: str) -> list[PrivacyLoss]:
        """The losses of the worst cell of a scope, in ledger order (what composes there)."""
        cells = self.scopes[label].cells
        worst = max(cells, key=lambda c: (total(self.spends[c]).epsilon_exact, c))
        return self.spends[worst]

    def advanced_per_partition(self, delta_prime: float) -> dict[str, PrivacyLoss]:
        return {label: advanced_composition(self.spends_in(label), delta_prime) for label in self.scopes}

    def advanced_overall(self, delta_prime: float) -> PrivacyLoss:
        return _worst(advanced_composition(losses, delta_prime) for losses in self.spends.values())


def _worst(losses: Iterable[PrivacyLoss]) -> PrivacyLoss:
    out = PrivacyLoss()
    for loss in losses:
        out = out.max(loss)
    return out


def compose(events: Iterable) -> dict[tuple[str, str], AccountingReport]:
    """Group events by (unit of privacy, neighbouring relation) and compose each group."""
    grouped: dict[tuple[str, str], list] = defaultdict(list)
    for e in events:
        grouped[(e.unit_of_privacy, e.neighbouring)].append(e)
    return {key: _compose_unit(key, evs) for key, evs in sorted(grouped.items())}


def bounded_release_losses(events: list) -> list[tuple[str, PrivacyLoss]]:
    """Card-level spends, one loss per release (in ledger order): its ``P`` most expensive partitions, each
    partition's spends summed (what the release can cost one card)."""
    by_release: dict[str, dict[str, PrivacyLoss]] = defaultdict(lambda: defaultdict(PrivacyLoss))
    bound: dict[str, int] = {}
    for e in events:
        by_release[e.release_id][e.partition] = by_release[e.release_id][e.partition] + PrivacyLoss.of(e.epsilon,
                                                                                                      e.delta)
        bound[e.release_id] = min(bound.get(e.release_id, e.max_partitions), e.max_partitions)
    out = []
    for rid, parts in by_release.items():
        top = sorted(parts.values(), key=lambda x: (x.epsilon_exact, x.delta_exact), reverse=True)[:bound[rid]]
        out.append((rid, total(top)))
    return out


def _bounded_releases(events: list) -> list[tuple[Scope, PrivacyLoss]]:
    """Card-level spends, one loss per release; every release touches every cell of the unit (a card is in all of
    them)."""
    label = {e.release_id: f"{e.release_period} ({e.release_id})" for e in events}
    return [(Scope(None, label[rid], ""), loss) for rid, loss in bounded_release_losses(events)]


def _compose_unit(key: tuple[str, str], events: list) -> AccountingReport:
    bounded = [e for e in events if hasattr(e, "max_partitions")]
    scoped = [(scope_of(e), PrivacyLoss.of(e.epsilon, e.delta)) for e in events if not hasattr(e, "max_partitions")]
    scoped += _bounded_releases(bounded)
    cells = sorted({c for s, _ in scoped if s.cells is not None for c in s.cells}) or [EVERYWHERE]
    spends: dict[str, list[PrivacyLoss]] = {c: [] for c in cells}
    scopes: dict[str, Scope] = {}
    for s, loss in scoped:  # ledger order within each cell
        touched = cells if s.cells is None else s.cells
        for c in touched:
            spends[c].append(loss)
        scopes.setdefault(s.label, Scope(tuple(touched), s.label, s.mode))
    return AccountingReport(key[0], key[1], spends, dict(sorted(scopes.items())))


def compose_one(events: Iterable) -> AccountingReport:
    """Compose events that share one unit of privacy and relation (e.g. one release)."""
    reports = compose(events)
    if not reports:
        return AccountingReport("trip", "replace-one")
    if len(reports) != 1:
        raise ValueError(f"events mix units of privacy or neighbouring relations: {sorted(reports)}")
    return next(iter(reports.values()))


def _cells_of(event, report: AccountingReport) -> tuple[str, ...]:
    """The cells of ``report`` an event counts in: a card-level spend (bounded over partitions) and an event
    without a calendar scope count in every cell, as :func:`_compose_unit` composes them."""
    if hasattr(event, "max_partitions") or scope_of(event).cells is None:
        return tuple(report.spends)
    return scope_of(event).cells


def cumulative_for(recorded: Iterable, these: Iterable) -> dict:
    """The loss of the unit of ``these`` events (one release) counting every ``recorded`` spend of that unit:
    the worst of the cells ``these`` touch. Figures for the data card ("where the unit stands at publication")."""
    these = list(these)
    if not these:
        return {"epsilon": 0.0, "delta": 0.0, "releases": 0}
    key = (these[0].unit_of_privacy, these[0].neighbouring)
    recorded = [e for e in recorded if (e.unit_of_privacy, e.neighbouring) == key]
    report = compose(recorded)[key]
    touched = {c for e in these for c in _cells_of(e, report)}
    cells = report.per_cell
    worst = _worst(cells[c] for c in touched if c in cells)
    releases = {e.release_id for e in recorded if set(_cells_of(e, report)) & touched}
    return {"epsilon": worst.epsilon, "delta": worst.delta, "releases": len(releases)}
