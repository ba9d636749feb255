"""Budget policy: caps on composed privacy loss, enforced inside the ledger's write transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from transit_release.accounting.accountant import PrivacyLoss, compose
from transit_release.accounting.ledger import LedgerEntry
from transit_release.config import default_file, read_yaml
from transit_release.errors import BudgetExceededError, ConfigError
from transit_release.noise import exact_fraction

PERIODS = ("all-time", "calendar-year")


@dataclass(frozen=True)
class Cap:
    name: str
    unit_of_privacy: str
    epsilon: float
    delta: float
    period: str = "all-time"
    per: str = "partition"
    modes: tuple[str, ...] | None = None

    def applies_to(self, event) -> bool:
        return event.unit_of_privacy == self.unit_of_privacy and (self.modes is None or event.mode in self.modes)

    def counts(self, entry: LedgerEntry, now: datetime) -> bool:
        if self.period == "all-time":
            return True
        return datetime.fromisoformat(entry.recorded_at).year == now.year

    def describe(self, now: datetime) -> str:
        period = "all time" if self.period == "all-time" else f"calendar year {now.year}"
        return f"cap '{self.name}': ε ≤ {self.epsilon:g}, δ ≤ {self.delta:g} per {self.per}, {period}"


@dataclass(frozen=True)
class BudgetPolicy:
    caps: tuple[Cap, ...]

    def check(self, existing: list[LedgerEntry], events: Sequence, now: datetime | None = None) -> None:
        """Raise :class:`BudgetExceededError` if ``events`` would break a cap; the ledger calls this
        inside its write transaction, so concurrent releases cannot both pass."""
        now = now or datetime.now(timezone.utc)
        spends = [e for e in existing if e.entry_type == "spend"]
        for cap in self.caps:
            requested = compose(e for e in events if cap.applies_to(e))
            if not requested:
                continue
            spent = compose(ev for ev in (x.event() for x in spends if cap.counts(x, now)) if cap.applies_to(ev))
            over = []
            for key, report in requested.items():
                before = spent.get(key)
                for part, loss in report.per_partition.items():
                    used = before.per_partition.get(part, PrivacyLoss()) if before else PrivacyLoss()
                    remaining_eps = max(exact_fraction(cap.epsilon) - used.epsilon_exact, 0)
                    remaining_delta = max(exact_fraction(cap.delta) - used.delta_exact, 0)
                    if loss.epsilon_exact > remaining_eps or loss.delta_exact > remaining_delta:
                        over.append((part, loss, float(remaining_eps), float(remaining_delta)))
            if over:
                part, loss, rem_eps, rem_delta = over[0]
                raise BudgetExceededError(part, loss.epsilon, rem_eps, loss.delta, rem_delta,
                                          detail=f"{cap.describe(now)}"
                                                 + (f"; {len(over) - 1} more partition(s) also exceed it"
                                                    if len(over) > 1 else ""))

    @classmethod
    def from_dict(cls, data, source: str = "budget policy") -> "BudgetPolicy":
        if not isinstance(data, dict) or not isinstance(data.get("policy"), dict):
            raise ConfigError(f"{source}: expected a top-level 'policy:' mapping")
        caps = []
        for i, c in enumerate(data["policy"].get("caps") or []):
            where = f"{source}: caps[{i}]"
            if not isinstance(c, dict):
                raise ConfigError(f"{where} must be a mapping")
            unknown = set(c) - {"name", "unit_of_privacy", "per", "period", "epsilon", "delta", "modes"}
            if unknown:
                raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
            try:
                eps, delta = float(c["epsilon"]), float(c["delta"])
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{where} needs numeric 'epsilon' and 'delta'") from None
            if eps < 0 or not 0 <= delta < 1:
                raise ConfigError(f"{where}: epsilon must be ≥ 0 and delta in [0, 1). Found ε={eps}, δ={delta}.")
            period = c.get("period", "all-time")
            if period not in PERIODS:
                raise ConfigError(f"{where}: period must be one of {list(PERIODS)}. Found {period!r}.")
            if c.get("per", "partition") != "partition":
                raise ConfigError(f"{where}: per must be 'partition'. Found {c.get('per')!r}.")
            modes = c.get("modes")
            caps.append(Cap(name=str(c.get("name", f"cap-{i}")), unit_of_privacy=str(c.get("unit_of_privacy", "trip")),
                            epsilon=eps, delta=delta, period=period,
                            modes=tuple(modes) if modes is not None else None))
        return cls(tuple(caps))


def default_policy_path() -> Path:
    return default_file("budget_policy.yaml")


def load_budget_policy(path: str | Path | None = None) -> BudgetPolicy:
    path = Path(path) if path is not None else default_policy_path()
    return BudgetPolicy.from_dict(read_yaml(path, "budget policy"), source=f"budget policy {path}")
