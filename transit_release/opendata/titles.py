"""A release's title in words, for people: what it is, where (the place ``open-data.yaml`` names, if any) and when.

``Public-transport taps by time and location, Sydney, 8–14 August 2016``; the release id stays the identifier
(file names, links, the catalogue's ``dct:identifier``). The landing page, the data card, the Data Package and the
catalogue all use :func:`release_title`, so a portal, a download and the page show one title. Built from the
manifest alone: its kind, mechanism, unit of privacy, period and publication settings.
"""

from __future__ import annotations

import calendar
from datetime import date

#: what each kind (and mechanism) publishes, as a title's first words
_WHAT = {
    "opal": "Public-transport taps by time and location",
    ("sequences", "prefix-tree"): "Passenger journeys as sequences of stations",
    ("sequences", "ngram"): "Passenger journeys as runs of consecutive stations",
    ("trajectories", "safepath"): "Passenger trajectories: stations and hours of the week",
    ("trajectories", "trajectory-markov"): "Synthetic passenger trajectories: stations and hours of the week",
    "sets": "The stations each passenger used",
}


def _day(d: date, year: bool = True, month: bool = True) -> str:
    return f"{d.day}" + (f" {calendar.month_name[d.month]}" if month else "") + (f" {d.year}" if year else "")


def period_words(start: str, end: str) -> str:
    """``8–14 August 2016``, ``January 2026`` (a whole month), ``28 July – 3 August 2016``, ``8 August 2016``."""
    a, b = date.fromisoformat(start), date.fromisoformat(end)
    if a == b:
        return _day(a)
    if (a.year, a.month) == (b.year, b.month):
        if a.day == 1 and b.day == calendar.monthrange(b.year, b.month)[1]:
            return f"{calendar.month_name[a.month]} {a.year}"
        return f"{a.day}–{_day(b)}"
    if a.year == b.year:
        return f"{_day(a, year=False)} – {_day(b)}"
    return f"{_day(a)} – {_day(b)}"


def release_title(manifest: dict) -> str:
    """The release's title in words (see the module's docstring); its product, if the kind is not known here."""
    kind = manifest.get("kind", "")
    p = manifest.get("privacy") or {}
    what = _WHAT.get((kind, p.get("mechanism_id")), _WHAT.get(kind)) or manifest.get("product") \
        or "Differentially private release"
    place = ((manifest.get("publication") or {}).get("spatial") or {}).get("name")
    period = manifest.get("period") or {}
    parts = [what] + ([place] if place else [])
    if period.get("start") and period.get("end"):
        parts.append(period_words(period["start"], period["end"]))
    title = ", ".join(parts)
    if kind == "opal" and p.get("unit_of_privacy") == "trip":
        title += " (per-trip privacy)"
    return title


def card_heading(manifest: dict) -> str:
    """The first lines of a data card: its title, then the release id it documents."""
    return f"# {release_title(manifest)}\n\nRelease `{manifest['release_id']}`."
