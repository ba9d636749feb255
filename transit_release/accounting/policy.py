"""Budget policy: caps on composed privacy loss, enforced inside the ledger's write transaction.

The policy fails closed. The file is validated strictly (unknown keys, missing
or mistyped values, NaN or infinite budgets, unknown units or modes are
refused), every unit of privacy the project can spend must have a cap, and a
spend that no cap covers is refused rather than allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from transit_release.accounting.accountant import PrivacyLoss, compose
from transit_release.accounting.ledger import LedgerEntry
from transit_release.accounting.units import UNITS
from transit_release.config import KNOWN_MODES, default_file, read_yaml
from transit_release.errors import BudgetExceededError, ConfigError, UncappedSpendError
from transit_release.noise import exact_fraction

PERIODS = ("all-time", "calendar-year")
MEASURES = ("basic", "pld")
_CAP_KEYS = {"name", "unit_of_privacy", "per", "period", "epsilon", "delta", "modes", "measure"}
#: The most caps a policy may hold (a cap per unit, mode and period is 5 × 4 × 2 = 40).
MAX_CAPS = 64


@dataclass(frozen=True)
class Cap:
    name: str
    unit_of_privacy: str
    epsilon: float
    delta: float
    period: str = "all-time"
    per: str = "partition"
    modes: tuple[str, ...] | None = None
    measure: str = "basic"  # "pld": the card unit's loss by privacy-loss distributions (thresholds' δ beside)

    def applies_to(self, event) -> bool:
        return event.unit_of_privacy == self.unit_of_privacy and (self.modes is None or event.mode in self.modes)

    def counts(self, entry: LedgerEntry, now: datetime) -> bool:
        if self.period == "all-time":
            return True
        return datetime.fromisoformat(entry.recorded_at).year == now.year

    def describe(self, now: datetime) -> str:
        period = "all time" if self.period == "all-time" else f"calendar year {now.year}"
        modes = f", modes {', '.join(self.modes)}" if self.modes else ""
        measure = ", by privacy-loss distributions" if self.measure == "pld" else ""
        return f"cap '{self.name}': ε ≤ {self.epsilon:g}, δ ≤ {self.delta:g} per {self.per}{modes}, {period}{measure}"


@dataclass(frozen=True)
class CapStatus:
    """What a cap allows, has used and has left in one scope (for ``transit-release budget``)."""

    cap: Cap
    scope: str
    used: PrivacyLoss
    remaining: PrivacyLoss


@dataclass(frozen=True)
class BudgetPolicy:
    caps: tuple[Cap, ...]

    def check(self, existing: list[LedgerEntry], events: Sequence, now: datetime | None = None) -> None:
        """Raise if ``events`` would break a cap, or if no cap covers one of them; the ledger calls this
        inside its write transaction, so concurrent releases cannot both pass."""
        now = now or datetime.now(timezone.utc)
        uncovered = [e for e in events if not any(c.applies_to(e) for c in self.caps)]
        if uncovered:
            e = uncovered[0]
            raise UncappedSpendError(
                f"no cap of the budget policy covers a spend of unit '{e.unit_of_privacy}'"
                + (f" for mode '{e.mode}'" if getattr(e, "mode", "") else "")
                + f" ({len(uncovered)} spend(s) in all): refused; add a cap for it to the policy")
        spends = [x for x in existing if x.entry_type == "spend"]
        for cap in self.caps:
            mine = [e for e in events if cap.applies_to(e)]
            if not mine:
                continue
            before = [ev for ev in (x.event() for x in spends if cap.counts(x, now)) if cap.applies_to(ev)]
            if cap.measure == "pld":
                _check_pld(cap, before, mine, now)
                continue
            over = []
            after = compose(before + mine)
            requested = compose(mine)
            for key, req in requested.items():
                rep = after[key]
                after_cells = rep.per_cell
                for label, scope in req.scopes.items():
                    worst = None
                    for cell in scope.cells:
                        asked = sum((x.epsilon_exact for x in req.spends[cell]), 0), \
                            sum((x.delta_exact for x in req.spends[cell]), 0)
                        used_eps = after_cells[cell].epsilon_exact - asked[0]
                        used_delta = after_cells[cell].delta_exact - asked[1]
                        rem_eps = max(exact_fraction(cap.epsilon) - used_eps, 0)
                        rem_delta = max(exact_fraction(cap.delta) - used_delta, 0)
                        if asked[0] > rem_eps or asked[1] > rem_delta:
                            worst = worst or (label, PrivacyLoss(*asked), float(rem_eps), float(rem_delta))
                    if worst:
                        over.append(worst)
            if over:
                label, loss, rem_eps, rem_delta = over[0]
                raise BudgetExceededError(label, loss.epsilon, rem_eps, loss.delta, rem_delta,
                                          detail=f"{cap.describe(now)}"
                                                 + (f"; {len(over) - 1} more partition(s) also exceed it"
                                                    if len(over) > 1 else ""))

    def status(self, existing: list[LedgerEntry], now: datetime | None = None) -> list[CapStatus]:
        """Per cap and recorded scope: used and remaining (scopes without spends are not listed)."""
        now = now or datetime.now(timezone.utc)
        spends = [x for x in existing if x.entry_type == "spend"]
        out = []
        for cap in self.caps:
            evs = [ev for ev in (x.event() for x in spends if cap.counts(x, now)) if cap.applies_to(ev)]
            for report in compose(evs).values():
                for label, used in report.per_partition.items():
                    out.append(CapStatus(cap, label, used, PrivacyLoss(
                        max(exact_fraction(cap.epsilon) - used.epsilon_exact, 0),
                        max(exact_fraction(cap.delta) - used.delta_exact, 0))))
        return out

    @classmethod
    def from_dict(cls, data, source: str = "budget policy") -> "BudgetPolicy":
        if not isinstance(data, dict) or set(data) != {"policy"} or not isinstance(data["policy"], dict):
            raise ConfigError(f"{source}: expected exactly one top-level key 'policy:' holding a mapping")
        body = data["policy"]
        if set(body) != {"caps"}:
            unknown = sorted(set(body) - {"caps"})
            raise ConfigError(f"{source}: 'policy:' must hold exactly 'caps:'" +
                              (f"; unknown keys {unknown}" if unknown else ""))
        raw = body["caps"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"{source}: 'caps:' must be a non-empty list of caps (one or more per unit of privacy)")
        if len(raw) > MAX_CAPS:
            raise ConfigError(f"{source}: {len(raw):,} caps; at most {MAX_CAPS} are supported (each cap composes the "
                              "whole ledger at every charge and in `budget`): merge caps, e.g. one without 'modes:'")
        caps = [_cap(c, f"{source}: caps[{i}]") for i, c in enumerate(raw)]
        names = [c.name for c in caps]
        if len(set(names)) != len(names):
            raise ConfigError(f"{source}: cap names must be unique; repeated: "
                              f"{sorted({n for n in names if names.count(n) > 1})}")
        missing = sorted(set(UNITS) - {c.unit_of_privacy for c in caps})
        if missing:
            raise ConfigError(f"{source}: every unit of privacy the project can spend needs a cap; missing: "
                              f"{missing}")
        for u in sorted({c.unit_of_privacy for c in caps}):
            if all(c.modes is not None for c in caps if c.unit_of_privacy == u):
                covered = sorted({m for c in caps if c.unit_of_privacy == u for m in c.modes})
                if set(covered) != set(KNOWN_MODES):
                    raise ConfigError(f"{source}: the caps of unit '{u}' cover only the modes {covered}; "
                                      "add a cap without 'modes:' or for the other modes")
        return cls(tuple(caps))


def _check_pld(cap: Cap, before: list, requested: list, now: datetime) -> None:
    """A cap on the privacy-loss-distribution figure: ε of the composed discrete Laplace parts at the cap's δ
    minus the thresholds' δ (which is added beside, never folded in)."""
    from transit_release.accounting.pld import pld_epsilon, release_components, threshold_delta

    after = release_components(before + requested)
    spare = cap.delta - threshold_delta(after)
    if spare <= 0:
        raise BudgetExceededError(cap.unit_of_privacy, 0.0, 0.0, threshold_delta(after), cap.delta,
                                  detail=f"{cap.describe(now)}: the thresholds' δ alone exceeds the cap")
    eps_after = pld_epsilon(after, spare)
    if eps_after > cap.epsilon:
        eps_before = pld_epsilon(release_components(before), spare) if before else 0.0
        raise BudgetExceededError(cap.unit_of_privacy, eps_after - eps_before, max(cap.epsilon - eps_before, 0.0),
                                  detail=f"{cap.describe(now)}; with this release the loss by privacy-loss "
                                         f"distributions would be ε={eps_after:.3f} at δ={cap.delta:g}")


def _number(c: dict, key: str, where: str) -> float:
    if key not in c:
        raise ConfigError(f"{where}: '{key}' is missing")
    v = c[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{where}: '{key}' must be a number. Found {type(v).__name__}.")
    v = float(v)
    if not math.isfinite(v):
        raise ConfigError(f"{where}: '{key}' must be finite. Found {v}.")
    return v


def _cap(c, where: str) -> Cap:
    if not isinstance(c, dict):
        raise ConfigError(f"{where} must be a mapping (name, unit_of_privacy, per, period, epsilon, delta[, modes])")
    unknown = sorted(set(c) - _CAP_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; allowed: {sorted(_CAP_KEYS)}")
    for key in ("name", "unit_of_privacy", "per"):
        if not isinstance(c.get(key), str) or not c[key].strip():
            raise ConfigError(f"{where}: '{key}' must be given as text")
    unit = UNITS.get(c["unit_of_privacy"])
    if unit is None:
        raise ConfigError(f"{where}: unknown unit_of_privacy {c['unit_of_privacy']!r}; known: {sorted(UNITS)}")
    if c["per"] != unit.per:
        raise ConfigError(f"{where}: a cap on unit '{unit.name}' is measured per '{unit.per}'. Found {c['per']!r}.")
    eps, delta = _number(c, "epsilon", where), _number(c, "delta", where)
    if eps < 0 or not 0 <= delta < 1:
        raise ConfigError(f"{where}: epsilon must be ≥ 0 and delta in [0, 1). Found ε={eps}, δ={delta}.")
    period = c.get("period", "all-time")
    if period not in PERIODS:
        raise ConfigError(f"{where}: period must be one of {list(PERIODS)}. Found {period!r}.")
    modes = c.get("modes")
    if modes is not None:
        if not unit.has_modes:
            raise ConfigError(f"{where}: spends of unit '{unit.name}' have no mode; remove 'modes:'")
        if not isinstance(modes, list) or not modes or not all(isinstance(m, str) for m in modes):
            raise ConfigError(f"{where}: 'modes:' must be a non-empty list of modes")
        bad = sorted(set(modes) - set(KNOWN_MODES))
        if bad or len(set(modes)) != len(modes):
            raise ConfigError(f"{where}: 'modes:' must list distinct modes of {list(KNOWN_MODES)}. Found {modes}.")
    measure = c.get("measure", "basic")
    if measure not in MEASURES:
        raise ConfigError(f"{where}: measure must be one of {list(MEASURES)}. Found {measure!r}.")
    if measure == "pld" and unit.name != "card":
        raise ConfigError(f"{where}: measure 'pld' caps the card unit (a card's loss over many releases); unit "
                          f"'{unit.name}' is capped by basic composition")
    if measure == "pld" and delta <= 0:
        raise ConfigError(f"{where}: a cap by privacy-loss distributions needs a positive δ")
    return Cap(name=c["name"], unit_of_privacy=unit.name, epsilon=eps, delta=delta, period=period, per=unit.per,
               modes=tuple(modes) if modes is not None else None, measure=measure)


def default_policy_path() -> Path:
    return default_file("budget_policy.yaml")


def load_budget_policy(path: str | Path | None = None) -> BudgetPolicy:
    path = Path(path) if path is not None else default_policy_path()
    return BudgetPolicy.from_dict(read_yaml(path, "budget policy"), source=f"budget policy {path}")
