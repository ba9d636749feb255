"""Budget policy: caps on composed privacy loss, enforced inside the ledger's write transaction.

The policy fails closed. The file is validated strictly (unknown keys, missing
or mistyped values, NaN or infinite budgets, unknown units or modes are
refused), every unit of privacy the project can spend must have a cap, and a
spend that no cap covers is refused rather than allowed.

A cap on ``unit_of_privacy: person`` caps one passenger's loss across every
kind of release of a population (:mod:`transit_release.accounting.person`).
A trip-level release bounds no person, so under such a cap it is refused
unless the policy says ``allow_unbounded_person_loss: true``; then the cap
holds for the releases that bound a person, and data cards and the audit state
a passenger's loss as unbounded.

**Populations** are declared here (``populations:``, each a name and, in words,
the people it covers): a release names one of them (``--population``, default
``default``), and one naming any other is refused before anything is read
(:meth:`BudgetPolicy.population`, exit 2). A policy without ``populations:``
declares one, ``default`` (every release of the home is about the same people),
as before declarations existed; in such a home a population the ledger already
names (a release made before) is still accepted, so that its releases can be
run again and found published.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from datetime import datetime, timezone
from pathlib import Path

from transit_release.accounting.accountant import PrivacyLoss, compose
from transit_release.accounting.events import (DEFAULT_POPULATION, InvalidEventError, check_population,
                                              population_named)
from transit_release.accounting.ledger_chain import LedgerEntry
from transit_release.accounting.units import PERSON, UNITS
from transit_release.config import KNOWN_MODES, default_file, read_yaml
from transit_release.errors import (BudgetError, BudgetExceededError, ConfigError, UnboundedPersonLossError,
                                     UncappedSpendError, UndeclaredPopulationError)
from transit_release.noise import exact_fraction

PERIODS = ("all-time", "calendar-year")
MEASURES = ("basic", "pld")
_CAP_KEYS = {"name", "unit_of_privacy", "per", "period", "epsilon", "delta", "modes", "measure"}
_POLICY_KEYS = {"caps", "allow_unbounded_person_loss", "populations"}
_POPULATION_KEYS = {"name", "covers"}
#: The most populations a policy may declare.
MAX_POPULATIONS = 64
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

    @property
    def on_person(self) -> bool:
        return self.unit_of_privacy == PERSON.name

    def applies_to(self, event) -> bool:
        if self.on_person:  # a person is behind every unit
            return True
        return event.unit_of_privacy == self.unit_of_privacy and (self.modes is None or event.mode in self.modes)

    def counts(self, entry: LedgerEntry, now: datetime) -> bool:
        if self.period == "all-time":
            return True
        return datetime.fromisoformat(entry.recorded_at).year == now.year

    def describe(self, now: datetime) -> str:
        period = "all time" if self.period == "all-time" else f"calendar year {now.year}"
        modes = f", modes {', '.join(self.modes)}" if self.modes else ""
        measure = ", by privacy-loss distributions" if self.measure == "pld" else ""
        per = "person (every kind of release of a population)" if self.on_person else self.per
        return f"cap '{self.name}': ε ≤ {self.epsilon:g}, δ ≤ {self.delta:g} per {per}{modes}, {period}{measure}"


@dataclass(frozen=True)
class CapStatus:
    """What a cap allows, has used and has left in one scope (for ``transit-release budget``)."""

    cap: Cap
    scope: str
    used: PrivacyLoss
    remaining: PrivacyLoss
    note: str = ""  # e.g. a person cap's population whose loss trip-level releases left unbounded
    #: the measure ``used`` is in, the cap's own: "basic" (ε and δ add up) or "pld" (ε by privacy-loss
    #: distributions at the cap's δ; ``used.delta`` is then 0 and ``basic`` holds the basic figure beside it)
    measure: str = "basic"
    basic: PrivacyLoss | None = None
    releases: tuple[str, ...] = ()  # the releases counted in this scope, in ledger order


@dataclass(frozen=True)
class NextRelease:
    """The policy's own verdict (:meth:`BudgetPolicy.check`) on the next release like ``like``, a recorded release:
    the same spends, in the same scope (its partitions or period; a card or a person is in every release), charged
    now. ``scopes`` are the (cap name, scope) pairs whose latest release ``like`` is."""

    like: str
    scopes: tuple[tuple[str, str], ...]
    allowed: bool
    reason: str = ""


@dataclass(frozen=True)
class Population:
    """A declared set of people: its name (what releases name) and, in words, whom it covers."""

    name: str
    covers: str

    def to_dict(self) -> dict:
        return {"name": self.name, "covers": self.covers}


#: What a policy without ``populations:`` declares: one population, every release of the home about it.
IMPLICIT_POPULATIONS = (Population(DEFAULT_POPULATION, "every passenger of the home's data (the budget policy "
                                                       "declares no population: every release is about the same "
                                                       "people)"),)


@dataclass(frozen=True)
class BudgetPolicy:
    caps: tuple[Cap, ...]
    allow_unbounded_person_loss: bool = False
    populations: tuple[Population, ...] = IMPLICIT_POPULATIONS
    #: whether the file declared its populations (else :data:`IMPLICIT_POPULATIONS`)
    declares_populations: bool = False
    source: str = "budget policy"

    def population(self, name: str | None, recorded: Iterable[str] = ()) -> Population:
        """The declared population a release names (``None``: ``default``), or
        :class:`~transit_release.errors.UndeclaredPopulationError` (exit 2) before anything is read.
        ``recorded``: the populations the ledger names already; a policy that declares none still accepts them
        (releases made before populations were declared run again and are found published)."""
        name = population_named(name)
        for p in self.populations:
            if p.name == name:
                return p
        if not self.declares_populations and name in set(recorded):
            return Population(name, "named by a release made before populations were declared (not declared in "
                                    "the budget policy)")
        declared = ", ".join(p.name for p in self.populations)
        raise UndeclaredPopulationError(
            f"population '{name}' is not declared in the {self.source} (declared: {declared}): a population is a "
            "declared set of people, not a word on the command line. Declare it under 'populations:' with the "
            "people it covers (only if they are other people than every other population's), or name a declared "
            "one; nothing was read or charged")

    def check(self, existing: list[LedgerEntry], events: Sequence, now: datetime | None = None) -> None:
        """Raise if ``events`` would break a cap, or if no cap covers one of them; the ledger calls this
        inside its write transaction, so concurrent releases cannot both pass."""
        from transit_release.accounting.person import check_populations

        now = now or datetime.now(timezone.utc)
        spends = [x for x in existing if x.entry_type == "spend"]
        recorded = [x.event() for x in spends]
        check_populations(recorded, list(events))
        uncovered = [e for e in events if not any(c.applies_to(e) for c in self.caps if not c.on_person)]
        if uncovered:
            e = uncovered[0]
            raise UncappedSpendError(
                f"no cap of the budget policy covers a spend of unit '{e.unit_of_privacy}'"
                + (f" for mode '{e.mode}'" if getattr(e, "mode", "") else "")
                + f" ({len(uncovered)} spend(s) in all): refused; add a cap for it to the policy")
        for cap in self.caps:
            mine = [e for e in events if cap.applies_to(e)]
            if not mine:
                continue
            before = [ev for x, ev in zip(spends, recorded) if cap.counts(x, now) and cap.applies_to(ev)]
            if cap.on_person:
                _check_person(cap, before, mine, now, self.allow_unbounded_person_loss, recorded)
                continue
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
        """Per cap and recorded scope: used and remaining, in the measure the cap is enforced in (scopes without
        spends are not listed). A card is in every card-level release, so a card cap has one scope: every
        card-level release it counts."""
        now = now or datetime.now(timezone.utc)
        spends = [x for x in existing if x.entry_type == "spend"]
        out = []
        for cap in self.caps:
            evs = [ev for ev in (x.event() for x in spends if cap.counts(x, now)) if cap.applies_to(ev)]
            if cap.on_person:
                out += _person_status(cap, evs)
                continue
            if cap.unit_of_privacy == "card":
                out += _card_status(cap, evs)
                continue
            for report in compose(evs).values():
                for label, used in report.per_partition.items():
                    cells = set(report.scopes[label].cells)
                    touching = tuple(dict.fromkeys(e.release_id for e in evs if _touches(e, cells)))
                    out.append(CapStatus(cap, label, used, PrivacyLoss(
                        max(exact_fraction(cap.epsilon) - used.epsilon_exact, 0),
                        max(exact_fraction(cap.delta) - used.delta_exact, 0)), releases=touching))
        return out

    def next_releases(self, existing: list[LedgerEntry], now: datetime | None = None,
                      status: list[CapStatus] | None = None) -> list[NextRelease]:
        """The policy's verdict on the next release of each scope of :meth:`status`: a release like the latest one
        recorded in that scope, with the same spends in the same scope, checked now by :meth:`check` (every cap,
        as its charge would be). One verdict per such release, naming the (cap, scope) pairs it stands for."""
        from dataclasses import replace

        now = now or datetime.now(timezone.utc)
        status = self.status(existing, now) if status is None else status
        by_release: dict[str, list[tuple[str, str]]] = {}
        for s in status:
            if s.releases:
                by_release.setdefault(s.releases[-1], []).append((s.cap.name, s.scope))
        spends = [x for x in existing if x.entry_type == "spend"]
        out = []
        for rid, scopes in by_release.items():
            events = [replace(x.event(), release_id=f"{rid} (next)") for x in spends if x.release_id == rid]
            try:
                self.check(existing, events, now)
            except (BudgetError, ConfigError) as exc:  # a population refusal is a ConfigError
                out.append(NextRelease(rid, tuple(scopes), False, str(exc)))
                continue
            out.append(NextRelease(rid, tuple(scopes), True))
        return out

    def public_summary(self, now: datetime | None = None) -> dict:
        """What a release's manifest says of the policy it was charged under: its caps on a passenger and whether
        trip-level releases may leave a passenger's loss unbounded."""
        now = now or datetime.now(timezone.utc)
        return {"person_caps": [c.describe(now) for c in self.caps if c.on_person],
                "allow_unbounded_person_loss": self.allow_unbounded_person_loss}

    def population_list(self, entries: Iterable) -> list[dict]:
        """Every population, declared or named on the ledger, with the people it covers and the first release
        that named it (``entries``: the ledger's, in order), for the audit."""
        from transit_release.accounting.claims import charged_populations

        first: dict[str, str] = {}
        count: dict[str, int] = {}
        for rid, population in charged_populations(entries).items():
            first.setdefault(population, rid)
            count[population] = count.get(population, 0) + 1
        out = [{**p.to_dict(), "declared": True, "first_release": first.get(p.name), "releases": count.get(p.name, 0)}
               for p in self.populations]
        declared = {p.name for p in self.populations}
        out += [{"name": name, "covers": None, "declared": False, "first_release": rid, "releases": count[name]}
                for name, rid in first.items() if name not in declared]
        return out

    @classmethod
    def from_dict(cls, data, source: str = "budget policy") -> "BudgetPolicy":
        if not isinstance(data, dict) or set(data) != {"policy"} or not isinstance(data["policy"], dict):
            raise ConfigError(f"{source}: expected exactly one top-level key 'policy:' holding a mapping")
        body = data["policy"]
        if "caps" not in body or set(body) - _POLICY_KEYS:
            unknown = sorted(set(body) - _POLICY_KEYS)
            raise ConfigError(f"{source}: 'policy:' must hold 'caps:' (and optionally 'populations:' and "
                              "'allow_unbounded_person_loss:')"
                              + (f"; unknown keys {unknown}" if unknown else ""))
        allow = body.get("allow_unbounded_person_loss", False)
        if not isinstance(allow, bool):
            raise ConfigError(f"{source}: 'allow_unbounded_person_loss' must be true or false. "
                              f"Found {type(allow).__name__}.")
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
        declared = "populations" in body
        populations = _populations(body["populations"], source) if declared else IMPLICIT_POPULATIONS
        return cls(tuple(caps), allow, populations, declared, source)


def _populations(raw, source: str) -> tuple[Population, ...]:
    """The ``populations:`` list: each ``name`` (a population's name) and ``covers`` (text), names unique."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{source}: 'populations:' must be a non-empty list of populations (name, covers)")
    if len(raw) > MAX_POPULATIONS:
        raise ConfigError(f"{source}: {len(raw):,} populations; at most {MAX_POPULATIONS} are supported")
    out = []
    for i, p in enumerate(raw):
        where = f"{source}: populations[{i}]"
        if not isinstance(p, dict) or set(p) != _POPULATION_KEYS:
            raise ConfigError(f"{where} must be a mapping of exactly 'name' and 'covers' (the people it covers, in "
                              "words)" + (f"; found keys {sorted(p)}" if isinstance(p, dict) else ""))
        try:
            name = check_population(p["name"])
        except InvalidEventError as exc:
            raise ConfigError(f"{where}: 'name': {exc}") from None
        if not isinstance(p["covers"], str) or not p["covers"].strip():
            raise ConfigError(f"{where}: 'covers' must say in words whom population '{name}' covers")
        out.append(Population(name, " ".join(p["covers"].split())))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: population names must be unique; repeated: "
                          f"{sorted({n for n in names if names.count(n) > 1})}")
    return tuple(out)


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


def _check_person(cap: Cap, before: list, requested: list, now: datetime, allow_unbounded: bool,
                  ever: list) -> None:
    """A cap on one person's loss over every release of the requested release's population recorded in the cap's
    period (``before``; :mod:`transit_release.accounting.person`); spends that leave a person's loss unbounded (trip
    level) only where the policy allows it — counted over every spend ever recorded (``ever``): a loss made
    unbounded last year is still unbounded."""
    from transit_release.accounting.person import bounds_a_person, epsilon_at, shares

    release_id, population = requested[0].release_id, requested[0].population
    mine = [e for e in before if e.population == population]
    if not allow_unbounded:
        if any(not bounds_a_person(e) for e in requested):
            raise UnboundedPersonLossError(
                f"release '{release_id}' is at trip level: it bounds a trip, not a passenger (a passenger's loss "
                f"grows with their number of trips), and {cap.describe(now)} caps a passenger's loss; refused. "
                "Release at card level (--unit card), or set 'allow_unbounded_person_loss: true' in the budget "
                "policy to let trip-level releases leave a passenger's loss unbounded (data cards and the audit "
                "then say so)")
        earlier = sorted({e.release_id for e in ever if e.population == population and not bounds_a_person(e)})
        if earlier:
            raise UnboundedPersonLossError(
                f"a passenger of population '{population}' has an unbounded loss already: trip-level release(s) "
                f"{', '.join(earlier[:3])}{' …' if len(earlier) > 3 else ''} count under {cap.describe(now)}; "
                f"release '{release_id}' refused. Set 'allow_unbounded_person_loss: true' in the budget policy to "
                "release anyway (data cards and the audit state the loss as unbounded)")
    asked = [e for e in requested if bounds_a_person(e)]
    if not asked:
        return
    kept = [e for e in mine if bounds_a_person(e)]
    after = shares(kept + asked)
    detail = f"{cap.describe(now)}, population '{population}'"
    if cap.measure == "pld":
        eps_after = epsilon_at(after, cap.delta)
        if eps_after > cap.epsilon:
            eps_before = epsilon_at(shares(kept), cap.delta) if kept else 0.0
            raise BudgetExceededError(release_id, eps_after - eps_before, max(cap.epsilon - eps_before, 0.0),
                                      detail=f"{detail}; with this release a passenger's loss by privacy-loss "
                                             f"distributions would be ε={eps_after:.3f} at δ={cap.delta:g}")
        return
    used, total_after = shares(kept).basic, after.basic
    asked_eps = total_after.epsilon_exact - used.epsilon_exact
    asked_delta = total_after.delta_exact - used.delta_exact
    rem_eps = max(exact_fraction(cap.epsilon) - used.epsilon_exact, 0)
    rem_delta = max(exact_fraction(cap.delta) - used.delta_exact, 0)
    if asked_eps > rem_eps or asked_delta > rem_delta:
        raise BudgetExceededError(release_id, float(asked_eps), float(rem_eps), float(asked_delta), float(rem_delta),
                                  detail=detail)


def _touches(event, cells: set[str]) -> bool:
    from transit_release.accounting.accountant import scope_of

    scope = scope_of(event).cells
    return scope is None or bool(cells & set(scope))


def card_pld_epsilon(cap: Cap, events: list) -> float:
    """A card's loss over ``events`` as a PLD cap measures it (:func:`_check_pld`): ε of the discrete Laplace parts
    composed by privacy-loss distributions at the cap's δ minus the thresholds' δ; ``inf`` when the thresholds' δ
    alone uses the cap's δ up."""
    from transit_release.accounting.pld import pld_epsilon, release_components, threshold_delta

    if not events:
        return 0.0
    components = release_components(events)
    spare = cap.delta - threshold_delta(components)
    return pld_epsilon(components, spare) if spare > 0 else float("inf")


def _card_status(cap: Cap, events: list) -> list[CapStatus]:
    """One scope: every card-level release ``cap`` counts (a card is in all of them), used in the cap's measure."""
    from transit_release.accounting.accountant import bounded_release_losses, total

    if not events:
        return []
    losses = bounded_release_losses(events)
    basic = total(loss for _, loss in losses)
    releases = tuple(rid for rid, _ in losses)
    scope = f"every card-level release ({len(releases)})"
    if cap.measure == "pld":
        eps = card_pld_epsilon(cap, events)
        used = PrivacyLoss(Fraction(eps) if math.isfinite(eps) else exact_fraction(cap.epsilon), Fraction(0))
        return [CapStatus(cap, scope, used, PrivacyLoss(max(exact_fraction(cap.epsilon) - used.epsilon_exact, 0),
                                                        exact_fraction(cap.delta)),
                          "" if math.isfinite(eps) else "the thresholds' δ alone exceeds the cap's δ", "pld",
                          basic, releases)]
    return [CapStatus(cap, scope, basic, PrivacyLoss(max(exact_fraction(cap.epsilon) - basic.epsilon_exact, 0),
                                                     max(exact_fraction(cap.delta) - basic.delta_exact, 0)),
                      releases=releases)]


def _person_status(cap: Cap, events: list) -> list[CapStatus]:
    """Per population: what a person has used under ``cap`` (basic composition, or ε by privacy-loss distributions
    at the cap's δ) and what remains; a population with trip-level spends is noted as unbounded."""
    from transit_release.accounting.person import bounds_a_person, epsilon_at, shares

    out = []
    for population in sorted({e.population for e in events}):
        mine = [e for e in events if e.population == population]
        s = shares(e for e in mine if bounds_a_person(e))
        releases = tuple(dict.fromkeys(e.release_id for e in mine))
        trips = sorted({e.release_id for e in mine if not bounds_a_person(e)})
        note = f"unbounded: trip-level release(s) {', '.join(trips)}" if trips else ""
        if cap.measure == "pld":
            eps = epsilon_at(s, cap.delta)
            used = PrivacyLoss(Fraction(eps) if math.isfinite(eps) else exact_fraction(cap.epsilon), Fraction(0))
            out.append(CapStatus(cap, f"population {population}", used, PrivacyLoss(
                max(exact_fraction(cap.epsilon) - used.epsilon_exact, 0), exact_fraction(cap.delta)), note, "pld",
                s.basic, releases))
            continue
        used = s.basic
        out.append(CapStatus(cap, f"population {population}", used, PrivacyLoss(
            max(exact_fraction(cap.epsilon) - used.epsilon_exact, 0),
            max(exact_fraction(cap.delta) - used.delta_exact, 0)), note, releases=releases))
    return out


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
    unit = UNITS.get(c["unit_of_privacy"]) or (PERSON if c["unit_of_privacy"] == PERSON.name else None)
    if unit is None:
        raise ConfigError(f"{where}: unknown unit_of_privacy {c['unit_of_privacy']!r}; known: "
                          f"{sorted([*UNITS, PERSON.name])}")
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
    if measure == "pld" and unit.name not in ("card", PERSON.name):
        raise ConfigError(f"{where}: measure 'pld' caps a card's or a person's loss over many releases; unit "
                          f"'{unit.name}' is capped by basic composition")
    if measure == "pld" and delta <= 0:
        raise ConfigError(f"{where}: a cap by privacy-loss distributions needs a positive δ")
    return Cap(name=c["name"], unit_of_privacy=unit.name, epsilon=eps, delta=delta, period=period, per=unit.per,
               modes=tuple(modes) if modes is not None else None, measure=measure)


def recorded_populations(ledger_path: Path):
    """The populations the ledger at ``ledger_path`` names (a generator, read when first asked: the ledger is read
    only where a policy without declarations meets a population other than ``default``). A ledger that cannot be
    read names none here; the release's own checks say why."""
    import sqlite3

    from transit_release.accounting.ledger import Ledger
    from transit_release.errors import TransitReleaseError

    if not Path(ledger_path).exists():
        return
    try:
        entries = Ledger(ledger_path, read_only=True).entries()
    except (sqlite3.Error, TransitReleaseError, OSError):
        return
    seen = set()
    for e in entries:
        if e.entry_type == "spend":
            try:
                population = e.event().population
            except ValueError:
                continue
            if population not in seen:
                seen.add(population)
                yield population


def default_policy_path() -> Path:
    return default_file("budget_policy.yaml")


def load_budget_policy(path: str | Path | None = None) -> BudgetPolicy:
    path = Path(path) if path is not None else default_policy_path()
    return BudgetPolicy.from_dict(read_yaml(path, "budget policy"), source=f"budget policy {path}")
