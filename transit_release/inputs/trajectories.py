"""Trajectory inputs: the one-trajectory-a-line format, and trajectories built from tap data.

File format: one passenger's trajectory per line, ``station@hour`` tokens
separated by white space, e.g. ``12@7 40@17 12@20``; the hour is the hour of
the week, 0–167 counted from Monday 00:00; lines starting with ``%`` or ``#``
are comments. A station id is any token without white space; the part after
the last ``@`` is the hour.

The domain is public and given, never derived from the data: the location
universe is a :class:`~transit_release.inputs.universe.LocationUniverse` (a
locations file, a taxonomy file's locations, or the stop table's stations for
tap data: :mod:`transit_release.inputs.universe` is the one reader), the time
universe is the 168 hours of the week.

Validation, line by line (the first reason that applies): ``empty`` (nothing
after stripping), ``too_long`` (more than ``max_length`` tokens),
``malformed`` (a token without ``@`` or whose hour is not a whole number),
``hour_out_of_range`` (not in 0–167), ``unknown_location`` (not in the
universe), ``time_decreasing`` (an hour earlier than the one before it: within
one week a passenger's hours never go back). Such lines are quarantined; the
caller decides with the quarantine limit, as for trips. Messages and reports
give line numbers and counts, never tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from transit_release.errors import InputDataError
from transit_release.inputs.content import ContentDigest, RecordLines
from transit_release.inputs.refusals import refusal
from transit_release.inputs.universe import (LocationUniverse, from_stop_table, record_lines, require_public,
                                             stop_location_id)
from transit_release.mechanisms.safepath import HOURS_PER_WEEK, Trajectories

DEFAULT_MAX_LENGTH = 1000
REASONS = ("empty", "too_long", "malformed", "hour_out_of_range", "unknown_location", "time_decreasing")
TRIP_REASONS = ("unknown_location", "outside_period", "too_long")


@dataclass(frozen=True)
class TrajectoryInput:
    trajectories: Trajectories
    universe: LocationUniverse  # public: location index -> id
    quarantined: dict[str, list[int]]  # reason -> 1-based line (or row) numbers (private: not values)
    lines: int  # lines (or tap rows) read
    #: the file's kind-independent digest of every record line, before screening (a record file only; private)
    lines_digest: ContentDigest | None = None

    @property
    def locations(self) -> tuple[str, ...]:
        return self.universe.ids

    @property
    def quarantine_counts(self) -> dict[str, int]:
        return {r: len(v) for r, v in self.quarantined.items() if v}

    @property
    def quarantined_share(self) -> float:
        return sum(self.quarantine_counts.values()) / max(self.lines, 1)


def read_trajectory_file(path: str | Path, universe: LocationUniverse,
                         max_length: int = DEFAULT_MAX_LENGTH) -> TrajectoryInput:
    """Read ``station@hour`` lines against the public ``universe`` and the 168 hours of the week."""
    universe = require_public(universe, "read_trajectory_file")
    path = Path(path)
    index = universe.index()
    quarantined: dict[str, list[int]] = {r: [] for r in REASONS}
    kept: list[list[tuple[int, int]]] = []
    n_lines = 0
    every = RecordLines()
    for number, tokens in record_lines(path, "trajectory file"):
        n_lines += 1
        every.add(tokens)
        reason = None
        if not tokens:
            reason = "empty"
        elif len(tokens) > max_length:
            reason = "too_long"
        else:
            pairs = []
            for tok in tokens:
                loc, at, hour = tok.rpartition("@")
                if not at or not loc or not hour.isascii() or not hour.isdigit():
                    reason = "malformed"
                    break
                pairs.append((loc, int(hour)))
            if reason is None and any(h >= HOURS_PER_WEEK for _, h in pairs):
                reason = "hour_out_of_range"
            if reason is None:
                ids = [index.get(loc, -1) for loc, _ in pairs]
                if -1 in ids:
                    reason = "unknown_location"
                elif any(b[1] < a[1] for a, b in zip(pairs, pairs[1:])):
                    reason = "time_decreasing"
                else:
                    kept.append([(i, h) for i, (_, h) in zip(ids, pairs)])
        if reason is not None:
            quarantined[reason].append(number)
    if n_lines == 0:
        raise refusal("empty-record-file",
                      InputDataError(f"trajectory file {path.name}: no trajectories (only comments or nothing)"))
    return TrajectoryInput(Trajectories.from_lists(kept, len(universe)), universe,
                           {r: v for r, v in quarantined.items() if v}, n_lines, every.digest())


def format_trajectories(release: list[tuple[tuple[tuple[int, int], ...], int]], locations: tuple[str, ...],
                        header: str = "") -> str:
    """One line per released trajectory (``copies`` lines for each), in the release's sorted order."""
    parts = [f"# {line}\n" for line in header.splitlines()]
    for traj, copies in release:
        parts.append((" ".join(f"{locations[loc]}@{hour}" for loc, hour in traj) + "\n") * copies)
    return "".join(parts)


def write_trajectory_file(path: str | Path, release: list[tuple[tuple[tuple[int, int], ...], int]],
                          locations: tuple[str, ...], header: str = "") -> None:
    Path(path).write_text(format_trajectories(release, locations, header), encoding="utf-8", newline="\n")


def week_hours(times: pd.Series, period_start: date) -> np.ndarray:
    """Hours since Monday 00:00 of the period's week (``period_start`` must be a Monday)."""
    origin = np.datetime64(datetime.combine(period_start, datetime.min.time()), "ns")
    delta = times.to_numpy(dtype="datetime64[ns]") - origin
    return (delta // np.timedelta64(1, "h")).astype(np.int64)


def trajectories_from_trips(trips: pd.DataFrame, stops: pd.DataFrame, period_start: date,
                            period_end: date | None = None, mode: str = "train",
                            max_length: int = DEFAULT_MAX_LENGTH) -> TrajectoryInput:
    """One trajectory per card over the declared period: its tap-ons in time order as (location, hour of week).

    ``trips`` are clean trips (validated). The period is declared, not inferred: it starts on a
    Monday (hours count from Monday 00:00, wall-clock time) and lasts at most a week
    (``period_end`` inclusive, default the Sunday). The universe is the stop table's station
    names of ``mode`` (public, as for sequences: :func:`~transit_release.inputs.universe.from_stop_table`);
    taps at the same minute are ordered by location, so the result never depends on the rows'
    order. Taps at an unknown stop or outside the period, and cards with more than ``max_length``
    taps, are quarantined (row numbers, 1-based among this mode's rows). The card id groups taps
    and is dropped here.
    """
    if period_start.weekday() != 0:
        raise InputDataError("the trajectory period must start on a Monday (hours of the week count from "
                             "Monday 00:00)")
    period_end = period_end or period_start + timedelta(days=6)
    if not period_start <= period_end <= period_start + timedelta(days=6):
        raise InputDataError("the trajectory period must end on or after its start and last at most 7 days")
    universe = from_stop_table(stops, mode)
    names = stops[stops["mode"] == mode].set_index("stop_id")["name"].dropna().map(stop_location_id)
    t = trips[trips["mode"] == mode]
    loc = t["tap_on_stop"].map(names).map(universe.index())
    unknown = loc.isna().to_numpy()
    loc = loc.fillna(-1).to_numpy(dtype=np.int64)
    hours = week_hours(t["tap_on_time"], period_start)
    last_hour = ((period_end - period_start).days + 1) * 24
    rows = np.arange(1, len(t) + 1)
    quarantined: dict[str, list[int]] = {}
    outside = ~unknown & ((hours < 0) | (hours >= last_hour))
    if unknown.any():
        quarantined["unknown_location"] = rows[unknown].tolist()
    if outside.any():
        quarantined["outside_period"] = rows[outside].tolist()
    good = ~unknown & ~outside
    df = pd.DataFrame({"card": t["card_id"].to_numpy()[good], "time": t["tap_on_time"].to_numpy()[good],
                       "loc": loc[good], "hour": hours[good], "row": rows[good]})
    df = df.sort_values(["card", "time", "loc"], kind="stable")
    card = df["card"].to_numpy()
    bounds = np.flatnonzero(card[1:] != card[:-1]) + 1 if len(df) else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], bounds, [len(df)]]).astype(np.int64) if len(df) else np.zeros(1, dtype=np.int64)
    lengths = np.diff(offsets)
    long_cards = np.flatnonzero(lengths > max_length)
    if long_cards.size:
        quarantined["too_long"] = sorted(df["row"].to_numpy()[offsets[long_cards]].tolist())
    locs, hrs = df["loc"].to_numpy(), df["hour"].to_numpy()
    trajs = sorted(tuple(zip(locs[a:b].tolist(), hrs[a:b].tolist()))
                   for a, b, n in zip(offsets[:-1], offsets[1:], lengths) if n <= max_length)
    return TrajectoryInput(Trajectories.from_lists(trajs, len(universe)), universe, quarantined, len(t))
