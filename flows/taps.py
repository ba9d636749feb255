"""Tap data as the input of a passenger-level release (sequences, trajectories, station sets).

The same validation gate as the Opal release, for one declared period: the file
contract, the row screen against the stop table and the period (quarantined
rows to ``private/``), the clean-trips contract. What comes out are clean trips
with their card ids, from which a kind builds one record per card over the
period; the stop table is also the public universe of such releases.
"""

from __future__ import annotations

from tasks.ingest import ingest_stops, ingest_trips
from tasks.screen import screen_trips, validate_trips_file
from tasks.validate import validate_clean_trips, validate_stops
from transit_release.config import KNOWN_MODES, QualityPolicy, ReleaseConfig, load_release_config
from transit_release.files.home import Home


def clean_taps(where: Home, release_id: str, trips: str, stops: str, period, quarantine_limit: float,
               dry_run: bool = False):
    """(clean trips, stop table, quarantine summary) of one declared period; file-level problems abort."""
    config = _screen_config(quarantine_limit)
    raw = validate_trips_file(ingest_trips(trips), trips)
    stop_table = validate_stops(ingest_stops(stops), stops)
    screened = screen_trips(where, release_id, raw, stop_table, period, config, trips, dry_run)
    return validate_clean_trips(screened.clean, trips), stop_table, screened.summary()


def _screen_config(quarantine_limit: float) -> ReleaseConfig:
    """The Opal defaults' quality policy with the kind's quarantine limit (budgets are not used here)."""
    base = load_release_config()
    return ReleaseConfig(budgets=base.budgets, bin_minutes=base.bin_minutes, modes=KNOWN_MODES,
                         quality=QualityPolicy(**{**base.quality.__dict__, "quarantine_limit": quarantine_limit}))
