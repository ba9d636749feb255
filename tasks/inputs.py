"""What every kind of release establishes about its input before it reads a record, and the check after.

The declared period (public: it names what is covered), the public universe of a passenger-level kind (a
locations or taxonomy file, or the stations of a stop table: never read off the data), the home-keyed
fingerprint of the input files, and the quarantine check of a record file (too many bad records abort).
"""

from __future__ import annotations

import logging
from pathlib import Path

from prefect import get_run_logger

from tasks import data_task
from transit_release.errors import InputDataError
from transit_release.files.home import Home
from transit_release.inputs import content
from transit_release.inputs import tables as io
from transit_release.inputs import universe as universes
from transit_release.inputs.refusals import refusal
from transit_release.inputs.screening import Period, parse_period
from transit_release.runtime.disclosure import log_internal


@data_task(name="declared-period")
def declared_period(start: str | None, end: str | None) -> Period:
    """The release period, which a publishing run must declare (it is public: it names what is covered)."""
    if start is None and end is None:
        raise InputDataError("declare the period the records cover with --period-start and --period-end "
                             "(YYYY-MM-DD): it is public, and releases of disjoint periods compose in parallel")
    return parse_period(start, end)


@data_task(name="fingerprint-inputs")
def fingerprint_inputs(home: Home, paths: list[str]) -> str:
    """The home-keyed fingerprint of the input files (recorded in the ledger, never published)."""
    return io.fingerprint(*paths, key=home.fingerprint_key())


@data_task(name="record-content")
def record_content(role: str, data, cut: int | None = None) -> content.InputContent:
    """What a record file holds, order-independent (:mod:`transit_release.inputs.content`), and with ``cut`` its
    records as the mechanism reads them: the overlap check between populations keys and compares it; never logged
    or published."""
    return content.of_record_input(role, data, cut)


@data_task(name="tap-content")
def tap_content(clean, stops, role: str | None = None, data=None, cut: int | None = None) -> content.InputContent:
    """What a tap file holds (its clean trips, order-independent, their stops as the public locations of the stop
    table ``stops``, and its distinct card ids), as :func:`record_content`; with ``role`` and ``data``, also the
    records of that kind built from it (:func:`~transit_release.inputs.content.with_derived`, issue #40), and with
    ``cut`` those records as the mechanism reads them."""
    taps = content.of_clean_trips(clean, stops)
    return taps if role is None else content.with_derived(taps, role, data, cut)


@data_task(name="load-universe")
def load_universe(locations: str | None, taxonomy: str | None,
                  taxonomy_flag: str = "--taxonomy") -> universes.LocationUniverse:
    """The public location universe: a locations file, a taxonomy file's leaves, or both (they must agree)."""
    return universes.load_universe(locations, taxonomy, taxonomy_flag)


@data_task(name="stop-table-universe")
def stop_universe(stops, mode: str, path: str) -> universes.LocationUniverse:
    """The public universe of a release built from taps: the stop table's stations of ``mode``."""
    return universes.from_stop_table(stops, mode, f"stops file {Path(path).name}")


def check_quarantine(what: str, name: str, counts: dict[str, int], lines: int, limit: float) -> None:
    """Refuse a record file of which more than ``limit`` of the lines were quarantined (counts only in the
    message); log the counts of a smaller share."""
    bad = sum(counts.values())
    if lines and bad / lines > limit:
        parts = ", ".join(f"{r} {c:,}" for r, c in counts.items())
        raise refusal("record-quarantine-share", InputDataError(
            f"{what} {name}: {bad:,} of {lines:,} records ({bad / lines:.2%}) would be quarantined, more than the "
            f"limit of {limit:.2%}: {parts}"))
    if bad:
        log_internal(get_run_logger(), logging.WARNING, "records quarantined",
                     "quarantined %d of %d records, by reason %s", bad, lines, counts)
