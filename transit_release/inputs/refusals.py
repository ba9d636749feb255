"""Every refusal that depends on the private data, in one registry.

Whether a release appears at all is a one-bit function of the input that the DP guarantee does not cover: a
refusal that depends on the data can move when one passenger is added or removed (one more bad row crossing a
share, a day with a single trip, a file with one record). Each such refusal is registered here with what it
refuses, where in the code, at what threshold and why it is kept; the code that refuses raises through
:func:`refusal`, which accepts only a registered key, and the threat model's table (``docs/threat-model.md``) is
:func:`markdown_table` (``python -m transit_release.inputs.refusals`` prints it). Tests keep the registry, the
raising sites, the raw-data quality suite and the table in step.

Not registered, because one passenger cannot move them: refusals of a file's form (a value that does not fit its
column's type, a time that is not a local time, a file that cannot be read), which refuse the file whatever the
valid records in it; refusals of public inputs and parameters (the stop table, the universe, the period, the
budget); and the pipeline's consistency checks, which no input can fail unless the code is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

from transit_release.config import QualityPolicy

#: The raw-data quality suite's least share of clean trips with a tap-off (``schemas.expectations`` reads it here).
MIN_TAP_OFF_PRESENT = 0.8
#: The raw-data quality suite's builder (its expectations' columns are the ``suite_column`` of the entries).
SUITE = "schemas.expectations.totals_suite"


@dataclass(frozen=True)
class Refusal:
    """One data-dependent refusal. ``sites`` are the functions (``module.function``) that refuse; ``suite_column``
    the column of the raw-data quality suite (:data:`SUITE`) that checks it too, if any."""

    key: str
    refusal: str
    sites: tuple[str, ...]
    threshold: str
    why: str
    suite_column: str | None = None


_QUALITY = QualityPolicy()
_LIMIT = (f"the quarantine limit (`quality.quarantine_limit`, or `--quarantine-limit` of a passenger kind read from "
          f"taps; default {_QUALITY.quarantine_limit:.0%})")

REFUSALS: dict[str, Refusal] = {r.key: r for r in (
    Refusal("row-count", "too few or too many rows in the trips file",
            ("transit_release.inputs.screening.check_gate", "transit_release.inputs.streaming._pass",
             "tasks.screen.validate_trips_file", SUITE),
            f"fewer than `min_rows` (default {_QUALITY.min_rows:,}: a file of only a header) or more than `max_rows` "
            f"(default {_QUALITY.max_rows:,}) data rows",
            "an empty file is no export of a period; the maximum bounds the run's memory and time", "rows"),
    Refusal("unknown-stops", "trips at stops the stop table does not have",
            ("transit_release.inputs.screening.check_gate", SUITE),
            f"more than {_LIMIT} of the rows",
            "the stop table (the public universe) does not describe this network: releasing would drop those trips "
            "from the location marginals without saying so", "unknown_stop_share"),
    Refusal("outside-period", "trips outside the declared period",
            ("transit_release.inputs.screening.check_gate", SUITE),
            f"more than {_LIMIT} of the rows",
            "the file is not the extract of the declared period", "outside_period_share"),
    Refusal("quarantine-share", "too many rows quarantined (any reason)",
            ("transit_release.inputs.screening.check_gate", SUITE),
            f"more than {_LIMIT} of the rows",
            "the sensitivity argument needs every released row to be one trip of one card; a file with many bad "
            "rows is probably not the export it should be", "quarantined_share"),
    Refusal("duplicates", "too many exact repeats of rows", (SUITE,),
            f"more than {_LIMIT} of the rows (implied by the quarantine share: a repeat is quarantined)",
            "a double export; a repeated row would count one trip twice", "duplicate_share"),
    Refusal("missing-tap-offs", "too many clean trips without a tap-off", (SUITE,),
            f"more than {1 - MIN_TAP_OFF_PRESENT:.0%} of the clean trips",
            "the tap-off feed is broken: the tap-off marginals would describe the feed, not the trips",
            "tap_off_missing_share"),
    Refusal("empty-day", "a day of the declared period without any clean trip",
            ("transit_release.inputs.screening.check_gate",),
            "no clean trip on some day of the period",
            "the extract misses a day: publishing it would present an outage as a day nobody rode"),
    Refusal("record-quarantine-share", "too many records of a sequence, trajectory or set file quarantined",
            ("tasks.inputs.check_quarantine",),
            "more than `--quarantine-limit` of the records (default 1%)",
            "as for trips: a file with many bad records is probably not the export it should be"),
    Refusal("empty-record-file", "a sequence, trajectory or set file without any record",
            ("transit_release.inputs.sequences.read_sequence_file",
             "transit_release.inputs.trajectories.read_trajectory_file", "transit_release.inputs.sets.read_set_file"),
            "no record (only comments or nothing)",
            "an empty file is no export of a period"),
    Refusal("population-overlap", "the records of people already released under another population",
            ("transit_release.accounting.claims.refuse_overlap",
             "transit_release.accounting.person.refuse_same_input_files"),
            "one input whose content (its clean rows, or one mode's; each card's sets of tap-on stations, bus "
            "tap-on postcodes or tap-on and tap-off places of one mode, or its tap-ons as date and place, or one "
            "day's tap-ons by place, or its or the period's sorted counts per place or per bus stop name, of a mode "
            "or a union of modes, tap-ons or all taps, whatever the date, the modes' names and the places' labels; its valid records, also as the mechanism "
            "reads them, cut; or every record line of an id-less file as sets of ids, whatever the kind or "
            "universe; in any order) equals an input of a charged release of another population, or one card id "
            "in common with one; for releases recorded before per-input claims: the same input files, byte for "
            "byte",
            "a person's loss composes the releases of their population only: the same person under two "
            "populations would have each loss stated without the other. It refuses (nothing is charged or "
            "published), never publishes; one passenger moves it only by being in both populations' records, "
            "which is what it refuses"),
    Refusal("records-of-another-period", "a sequence, trajectory or set file already released for another period",
            ("transit_release.accounting.claims.refuse_another_period",),
            "one date-less input whose content (its valid records, or every record line as sets of ids, whatever "
            "the kind or universe; in any order) equals an input a charged release read for another declared "
            "period",
            "releases of disjoint periods compose in parallel only if their records differ: the same records "
            "released for two periods would be released twice while each period's cap and the per-unit statement "
            "count them once. It refuses (nothing is charged or published), never publishes; one passenger moves it "
            "only by making the file another content, which is then another period's export"),
)}


def refusal(key: str, error: Exception) -> Exception:
    """``error``, marked as the registered refusal ``key`` (``error.refusal``); a key the registry does not hold
    is a programming error (``KeyError``), so an unregistered data-dependent refusal cannot be raised."""
    if key not in REFUSALS:
        raise KeyError(f"{key!r} is not a registered data-dependent refusal (transit_release.inputs.refusals)")
    error.refusal = key
    return error


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table() -> str:
    """The threat model's table of data-dependent refusals, one row per registered refusal."""
    rows = ["| Refusal | Where in the code | Threshold | Why it is kept |", "|---|---|---|---|"]
    for r in REFUSALS.values():
        where = "; ".join(f"`{s}`" for s in r.sites)
        if r.suite_column:
            where = where.replace(f"`{SUITE}`", f"`{SUITE}` (`{r.suite_column}`)")
        rows.append(f"| {_cell(r.refusal)} (`{r.key}`) | {where} | {_cell(r.threshold)} | {_cell(r.why)} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
