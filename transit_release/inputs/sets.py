"""Set-valued inputs: the one-set-a-line format, and sets built from tap data.

File format (as in the FIMI / MSNBC-style transaction files): one set per line,
item ids separated by white space; the order of the items and repeats on a
line are ignored; lines starting with ``%`` or ``#`` are comments. Item ids are
mapped to ``0..|I|-1`` through the release's public
:class:`~transit_release.inputs.universe.LocationUniverse` (a locations file,
or the stop table's locations), never through the tokens found in the data:
the universe's sorted ids fix the item order and so the DiffPart taxonomy.

Validation: a line holding no item is quarantined as ``empty``; a line with
a token outside the universe as ``unknown_item`` (the whole line: dropping the
item would publish a different set than the person's); a line with more than
``max_size`` distinct items as ``too_large``. The caller decides with the
quarantine limit, as for trips. Messages give line numbers and counts, never
tokens.

From tap data (:func:`sets_from_trips`): each card's distinct locations over
the declared period, tap-on and tap-off alike, as ``mode:location`` ids of the
universe :func:`~transit_release.inputs.universe.from_stop_locations` builds
from the same stop table (bus stops as their postcode, other modes' stops as
their name, as in the Opal release). The card id groups the taps and is
dropped here; the sets are ordered by content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from transit_release.errors import InputDataError
from transit_release.inputs.content import ContentDigest, RecordLines
from transit_release.inputs.refusals import refusal
from transit_release.inputs.screening import Period
from transit_release.inputs.universe import LocationUniverse, location_id, record_lines, require_public
from transit_release.mechanisms.diffpart import ItemSets
from transit_release.preprocessing import _lookup, build_location_index

REASONS = ("empty", "unknown_item", "too_large")
TAP_REASONS = ("unknown_stop", "outside_period", "unknown_location")


@dataclass(frozen=True)
class SetInput:
    sets: ItemSets
    universe: LocationUniverse  # public: item id -> location id
    quarantined: dict[str, list[int]]  # reason -> 1-based line (or trip row) numbers (private: not values)
    lines: int  # data lines read (comments excluded), or trip rows considered
    #: the file's kind-independent digest of every record line, before screening (a record file only; private)
    lines_digest: ContentDigest | None = None

    @property
    def quarantine_counts(self) -> dict[str, int]:
        return {r: len(v) for r, v in self.quarantined.items() if v}

    @property
    def quarantined_share(self) -> float:
        return sum(self.quarantine_counts.values()) / self.lines if self.lines else 0.0


def read_set_file(path: str | Path, universe: LocationUniverse, max_size: int | None = None) -> SetInput:
    """Read a one-set-a-line file against the public ``universe``; bad lines are quarantined with a reason."""
    universe = require_public(universe, "read_set_file")
    path = Path(path)
    index = universe.index()
    quarantined: dict[str, list[int]] = {r: [] for r in REASONS}
    items: list[int] = []
    sizes: list[int] = []
    n_lines = 0
    every = RecordLines()
    for number, tokens in record_lines(path, "set file"):
        n_lines += 1
        every.add(tokens)
        if not tokens:
            quarantined["empty"].append(number)
            continue
        ids = {index.get(t, -1) for t in tokens}
        if -1 in ids:
            quarantined["unknown_item"].append(number)
        elif max_size is not None and len(ids) > max_size:
            quarantined["too_large"].append(number)
        else:
            items.extend(sorted(ids))
            sizes.append(len(ids))
    if n_lines == 0:
        raise refusal("empty-record-file", InputDataError(f"set file {path.name}: no sets (only comments or nothing)"))
    offsets = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))]).astype(np.int64)
    sets = ItemSets.from_arrays(np.asarray(items, dtype=np.int64), offsets, len(universe), canonical=True)
    return SetInput(sets, universe, {r: v for r, v in quarantined.items() if v}, n_lines, every.digest())


def format_sets(release: list[tuple[tuple[int, ...], int]], universe: LocationUniverse, header: str = "") -> str:
    """One line per released set (``copies`` lines for each), items in universe order, in the release's order."""
    ids = require_public(universe, "format_sets").ids
    parts = [f"# {line}\n" for line in header.splitlines()]
    for items, copies in release:
        parts.append((" ".join(ids[i] for i in items) + "\n") * copies)
    return "".join(parts)


def write_set_file(path: str | Path, release: list[tuple[tuple[int, ...], int]], universe: LocationUniverse,
                   header: str = "") -> None:
    Path(path).write_text(format_sets(release, universe, header), encoding="utf-8", newline="\n")


def sets_from_trips(trips: pd.DataFrame, stops: pd.DataFrame, period: Period, universe: LocationUniverse,
                    modes: Sequence[str] | None = None) -> SetInput:
    """Each card's distinct locations (tap-on and tap-off) over ``period``: one set per card.

    ``universe`` is the public one :func:`~transit_release.inputs.universe.from_stop_locations` gives for
    the same stop table and ``modes`` (default: every mode of the stop table); a tap maps to the id
    ``mode:location`` of its stop. ``trips`` are clean trips (validated). Rows of other modes are not part of
    these sets and are skipped; a row whose stop is missing from the stop table is quarantined as
    ``unknown_stop``, one whose tap-on falls outside the period as ``outside_period``, one whose location is
    not in ``universe`` (another universe than the stop table's) as ``unknown_location``. A tap at a stop the
    table gives no location (a bus stop without a postcode) adds no item. A card with no located tap gives
    no set.
    """
    universe = require_public(universe, "sets_from_trips")
    if modes is None:
        modes = stops["mode"].dropna().astype(str).unique()
    modes = tuple(sorted(set(modes)))
    index = build_location_index(stops, modes)
    # each mode's location code -> item id of the universe (-1: not in it)
    ids = universe.index()
    item_of = [np.array([ids.get(location_id(m, loc), -1) for loc in index.vocab[m]] + [-1], dtype=np.int64)
               for m in modes]
    mode_code = pd.Categorical(trips["mode"].astype("string"), categories=list(modes)).codes.astype(np.int8)
    rows = np.flatnonzero(mode_code >= 0)
    mc = mode_code[rows]
    on_stop = trips["tap_on_stop"].to_numpy(dtype=np.int64)[rows]
    off_stop = trips["tap_off_stop"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)[rows]
    off_present = off_stop >= 0

    def in_table(stop: np.ndarray, present: np.ndarray) -> np.ndarray:
        if index.stop_ids.size == 0:
            return np.zeros(stop.size, dtype=bool)
        pos = np.searchsorted(index.stop_ids, stop).clip(0, index.stop_ids.size - 1)
        return present & (index.stop_ids[pos] == stop) & (index.stop_mode[pos] == mc)

    unknown = ~in_table(on_stop, np.ones(rows.size, dtype=bool)) | (off_present & ~in_table(off_stop, off_present))
    day = trips["tap_on_time"].to_numpy(dtype="datetime64[D]")[rows]
    start, end = np.datetime64(period.start, "D"), np.datetime64(period.end, "D")
    outside = ~unknown & ~((day >= start) & (day <= end))
    ok = ~unknown & ~outside

    def items(stop: np.ndarray, present: np.ndarray) -> np.ndarray:
        code = _lookup(index, stop, present, mc).astype(np.int64)  # -1: no location
        out = np.full(stop.size, -1, dtype=np.int64)
        for k in range(len(modes)):
            sel = mc == k
            out[sel] = item_of[k][code[sel]]  # code -1 picks the trailing -1
        return np.where(code >= 0, out, -2)  # -2: a stop without a location (no item, not an error)

    on_item = items(on_stop, ok)
    off_item = items(off_stop, ok & off_present)
    foreign = ok & ((on_item == -1) | (off_present & (off_item == -1)))
    good = ok & ~foreign
    card = trips["card_id"].to_numpy(dtype=np.int64)[rows]
    keep_on, keep_off = good & (on_item >= 0), good & (off_item >= 0)
    cards = np.concatenate([card[keep_on], card[keep_off]])
    flat = np.concatenate([on_item[keep_on], off_item[keep_off]])
    order = np.lexsort((flat, cards))
    cards, flat = cards[order], flat[order]
    fresh = np.r_[True, (cards[1:] != cards[:-1]) | (flat[1:] != flat[:-1])]
    cards, flat = cards[fresh], flat[fresh]
    starts = np.flatnonzero(np.r_[True, cards[1:] != cards[:-1]]) if cards.size else np.zeros(0, dtype=np.int64)
    bounds = np.r_[starts, cards.size]
    # order the sets by content, not by card id
    records = sorted(tuple(flat[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:]))
    quarantined = {"unknown_stop": (rows[unknown] + 1).tolist(), "outside_period": (rows[outside] + 1).tolist(),
                   "unknown_location": (rows[foreign] + 1).tolist()}
    return SetInput(ItemSets.from_lists(records, len(universe)), universe,
                    {r: v for r, v in quarantined.items() if v}, int(rows.size))
