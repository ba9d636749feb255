"""The units of privacy the project can spend, and what a cap on each is measured per.

A unit is what one release protects as a whole (the neighbouring relation adds
or removes, or replaces, one of it). Every unit listed here needs a cap in the
budget policy; a spend of a unit not listed is refused.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    name: str
    protects: str  # plain words, for data cards and the audit
    per: str  # what a cap on this unit is measured per (the accountant's cells)
    has_modes: bool  # spends carry a transport mode (caps may be restricted to modes)


UNITS: dict[str, Unit] = {u.name: u for u in (
    Unit("trip", "one trip (one tap-on/tap-off row)", "partition", True),
    Unit("card", "one smart card: all of its trips in the release period", "card", True),
    Unit("passenger-sequence", "one passenger's whole sequence of stations over the declared period", "period",
         False),
    Unit("passenger-trajectory", "one passenger's whole trajectory of (station, hour) pairs over the declared "
         "period", "period", False),
    Unit("passenger-set", "one passenger's whole set of stations used over the declared period", "period", False),
)}


#: Not a unit a release spends but the person behind every unit: a cap on it composes every kind of release of a
#: population (:mod:`transit_release.accounting.person`).
PERSON = Unit("person", "one passenger: everything of theirs in every release of a population", "person", False)


def unit(name: str) -> Unit:
    try:
        return UNITS[name]
    except KeyError:
        raise ValueError(f"unknown unit of privacy {name!r}; known: {sorted(UNITS)}") from None
