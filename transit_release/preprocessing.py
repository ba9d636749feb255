"""Preprocessing of the Opal release (paper §4.1, steps 1–6). No noise here.

1. the card id is dropped (it never leaves :func:`encode_trips`);
2. tap-on and tap-off times are binned to ``bin_minutes`` windows, ``-1`` when
   unknown (missing tap-off);
3. bus stops collapse to postcodes through the stop table, other modes' stops
   to their names; a stop without a location, or not in the table, is ``-1``;
4. trips are partitioned by mode × date (date of the tap-on);
5./6. each partition yields six histograms, one per column combination.

These steps only fix the domain, so they cost no privacy (paper, Theorem 7).
The location vocabulary comes from the stop table, not from the trips, so the
set of possible keys does not depend on the data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from transit_release.config import MARGINALS, Marginal

UNKNOWN = "-1"


@dataclass(frozen=True)
class LocationIndex:
    """Stop id → (mode, location code) lookup, built from the stop table."""

    vocab: dict[str, tuple[str, ...]]
    stop_ids: np.ndarray  # sorted int64
    stop_mode: np.ndarray  # int8 index into ``modes``
    stop_code: np.ndarray  # int32 code into vocab[mode], -1 for no location
    modes: tuple[str, ...]
    #: per mode, the location ids of its stops' names (:func:`~transit_release.inputs.universe.stop_location_id`, a
    #: bus stop's too: what the passenger kinds count a tap-on as; issue #40's tap-on claims), sorted
    name_vocab: Mapping[str, tuple[str, ...]] | None = None
    stop_name_code: np.ndarray | None = None  # int32 code into name_vocab[mode], -1 for a stop without a name

    @property
    def max_locations(self) -> int:
        return max((len(v) for v in self.vocab.values()), default=0)

    @cached_property
    def dense(self) -> tuple[int, np.ndarray, np.ndarray] | None:
        """``(first id, mode by id - first, code by id - first)`` (mode ``-1`` where no stop has that id) when the
        ids span at most :data:`DENSE_SPAN` values, else None: a lookup is then an array index, not a binary
        search (the week's largest partition: 0.03 s instead of 0.3 s)."""
        if self.stop_ids.size == 0:
            return None
        first = int(self.stop_ids[0])
        span = int(self.stop_ids[-1]) - first + 1
        if span > DENSE_SPAN:
            return None
        ids, at = np.unique(self.stop_ids, return_index=True)  # the first of equal ids, as the binary search
        mode = np.full(span, -1, dtype=np.int8)
        code = np.full(span, -1, dtype=np.int32)
        mode[ids - first] = self.stop_mode[at]
        code[ids - first] = self.stop_code[at]
        return first, mode, code

    @cached_property
    def dense_names(self) -> np.ndarray | None:
        """The name codes laid out as :attr:`dense`'s codes (when it is not None)."""
        if self.dense is None or self.stop_name_code is None:
            return None
        first, mode, _ = self.dense
        ids, at = np.unique(self.stop_ids, return_index=True)
        code = np.full(mode.size, -1, dtype=np.int32)
        code[ids - first] = self.stop_name_code[at]
        return code


#: The widest range of stop ids looked up through dense arrays (5 bytes per id: 20 MiB); wider ranges are
#: looked up by binary search.
DENSE_SPAN = 1 << 22


def save_location_index(index: LocationIndex, path: Path) -> Path:
    """Write the index (``.npz``: lookup arrays; vocabularies and modes as JSON inside) for tasks in other
    processes: a stop table of 200,000 stops is no task or subflow parameter."""
    import json

    names = {} if index.stop_name_code is None else {"stop_name_code": index.stop_name_code}
    np.savez(path, stop_ids=index.stop_ids, stop_mode=index.stop_mode, stop_code=index.stop_code, **names,
             meta=np.frombuffer(json.dumps({"vocab": {m: list(v) for m, v in index.vocab.items()},
                                            "modes": list(index.modes),
                                            "name_vocab": None if index.name_vocab is None else
                                            {m: list(v) for m, v in index.name_vocab.items()}}).encode(),
                                dtype=np.uint8))
    return Path(path)


_LOADED_INDEXES: dict[str, LocationIndex] = {}


def load_location_index(path: str | Path) -> LocationIndex:
    """The index saved at ``path`` (read once per process: a worker prepares many partitions)."""
    import json

    key = str(path)
    if key not in _LOADED_INDEXES:
        with np.load(path) as z:
            meta = json.loads(z["meta"].tobytes().decode())
            _LOADED_INDEXES.clear()  # one release's index at a time
            names = meta.get("name_vocab")
            _LOADED_INDEXES[key] = LocationIndex(vocab={m: tuple(v) for m, v in meta["vocab"].items()},
                                                 stop_ids=z["stop_ids"], stop_mode=z["stop_mode"],
                                                 stop_code=z["stop_code"], modes=tuple(meta["modes"]),
                                                 name_vocab=None if names is None else
                                                 {m: tuple(v) for m, v in names.items()},
                                                 stop_name_code=z["stop_name_code"] if names is not None else None)
    return _LOADED_INDEXES[key]


def build_location_index(stops: pd.DataFrame, modes: tuple[str, ...]) -> LocationIndex:
    stops = stops[stops["mode"].isin(modes)].sort_values("stop_id", kind="stable")
    is_bus = stops["mode"].to_numpy() == "bus"
    postcode = stops["postcode"]
    label = np.where(is_bus,
                     postcode.astype("string").fillna(UNKNOWN).to_numpy(dtype=object),
                     stops["name"].astype("string").fillna(UNKNOWN).to_numpy(dtype=object))
    label = np.where(pd.Series(label).str.strip().eq("").to_numpy(), UNKNOWN, label)
    mode_arr = stops["mode"].to_numpy(dtype=object)
    vocab = {m: tuple(sorted(set(label[(mode_arr == m) & (label != UNKNOWN)]))) for m in modes}
    code = np.full(len(stops), -1, dtype=np.int32)
    for m in modes:
        sel = (mode_arr == m) & (label != UNKNOWN)
        lookup = {loc: i for i, loc in enumerate(vocab[m])}
        code[sel] = [lookup[x] for x in label[sel]]
    mode_index = {m: i for i, m in enumerate(modes)}
    # the location id of each stop's name, a bus stop's too (what the passenger kinds count; issue #40)
    has_name = stops["name"].notna().to_numpy()
    name_id = np.where(has_name, stops["name"].astype(str).str.strip().str.replace(r"\s+", "_", regex=True)
                       .to_numpy(dtype=object), None)
    name_vocab = {m: tuple(sorted(set(name_id[(mode_arr == m) & has_name]))) for m in modes}
    name_code = np.full(len(stops), -1, dtype=np.int32)
    for m in modes:
        sel = (mode_arr == m) & has_name
        lookup = {loc: i for i, loc in enumerate(name_vocab[m])}
        name_code[sel] = [lookup[x] for x in name_id[sel]]
    return LocationIndex(
        vocab=vocab,
        stop_ids=stops["stop_id"].to_numpy(dtype=np.int64),
        stop_mode=np.array([mode_index[m] for m in mode_arr], dtype=np.int8),
        stop_code=code,
        modes=tuple(modes),
        name_vocab=name_vocab,
        stop_name_code=name_code,
    )


@dataclass(frozen=True)
class EncodedTrips:
    """Trips reduced to what the release needs: no identifier, no minute times."""

    partitions: tuple[tuple[str, str], ...]  # (mode, YYYYMMDD), sorted
    frame: pd.DataFrame  # part, on_bin, off_bin, on_loc, off_loc
    vocab: dict[str, tuple[str, ...]]
    bin_minutes: int

    @property
    def n_bins(self) -> int:
        return 1440 // self.bin_minutes


def _lookup(index: LocationIndex, stop: np.ndarray, present: np.ndarray, mode_code: np.ndarray,
            names: bool = False) -> np.ndarray:
    """Each stop's location code (``names``: the code of its name's location id, :attr:`LocationIndex.name_vocab`)
    where it is ``present`` and a stop of the row's mode, else -1."""
    out = np.full(stop.size, -1, dtype=np.int32)
    if index.stop_ids.size == 0:
        return out
    if names and index.stop_name_code is None:
        raise ValueError("this location index has no stop names (saved by an earlier version)")
    if index.dense is not None:
        first, modes, codes = index.dense
        if names:
            codes = index.dense_names
        offset = stop - first
        inside = present & (offset >= 0) & (offset < modes.size)
        offset = np.where(inside, offset, 0)
        ok = inside & (modes[offset] == mode_code)
        out[ok] = codes[offset[ok]]
        return out
    pos = np.searchsorted(index.stop_ids, stop).clip(0, index.stop_ids.size - 1)
    ok = present & (index.stop_ids[pos] == stop) & (index.stop_mode[pos] == mode_code)
    out[ok] = (index.stop_name_code if names else index.stop_code)[pos[ok]]
    return out


_NAT = np.iinfo(np.int64).min
_NS_PER_MIN = 60_000_000_000


def encode_rows(mode_code: np.ndarray, on_ns: np.ndarray, on_stop: np.ndarray, off_ns: np.ndarray,
                off_stop: np.ndarray, index: LocationIndex, bin_minutes: int) -> dict[str, np.ndarray]:
    """Steps 2–3 for rows of known modes: time bins of the minute of the day (``-1`` for a missing tap-off)
    and location codes (``-1`` for a stop without a location). Times are int64 nanoseconds (a missing tap-off
    as the int64 minimum), stops int64 (a missing tap-off stop as ``-1``).

    A bin is ``(t mod day) // bin``, in nanoseconds: the same as the minute of the day's ``// bin_minutes``
    (nested floor divisions), in two passes over the times instead of three (0.2 s of the full-size week)."""
    day, width = 1440 * _NS_PER_MIN, bin_minutes * _NS_PER_MIN
    off_known = off_ns != _NAT
    off_bin = ((off_ns % day) // width).astype(np.int16)
    off_bin[~off_known] = -1
    return {
        "on_bin": ((on_ns % day) // width).astype(np.int16),
        "off_bin": off_bin,
        "on_loc": _lookup(index, on_stop, np.ones(on_stop.size, bool), mode_code),
        "off_loc": _lookup(index, off_stop, off_known & (off_stop >= 0), mode_code),
    }


def encode_trips(trips: pd.DataFrame, index: LocationIndex, bin_minutes: int,
                 kept: np.ndarray | None = None) -> EncodedTrips:
    """Steps 1–4: drop the card id, bin times, map stops to locations, partition.

    ``kept`` (card level) marks the trips that survived contribution bounding: only they are counted for the
    release; the others stay, flagged, so that the internal utility figures can compare with the whole data."""
    modes = index.modes
    mode_code = pd.Categorical(trips["mode"], categories=list(modes)).codes.astype(np.int8)
    keep = mode_code >= 0
    on_ns = trips["tap_on_time"].to_numpy(dtype="datetime64[ns]").view(np.int64)[keep]
    day = (on_ns // (1440 * _NS_PER_MIN)).astype("datetime64[D]")
    days, day_idx = np.unique(day, return_inverse=True)
    mc = mode_code[keep]
    raw_part = mc.astype(np.int64) * max(len(days), 1) + day_idx
    present_parts, part = np.unique(raw_part, return_inverse=True)
    partitions = tuple((modes[p // len(days)], pd.Timestamp(days[p % len(days)]).strftime("%Y%m%d"))
                       for p in present_parts)
    off_ns = trips["tap_off_time"].to_numpy(dtype="datetime64[ns]").view(np.int64)[keep]
    off_stop = trips["tap_off_stop"][keep].fillna(-1).to_numpy(dtype=np.int64)
    on_stop = trips["tap_on_stop"].to_numpy(dtype=np.int64)[keep]
    frame = pd.DataFrame({
        "part": part.astype(np.int32),
        **encode_rows(mc, on_ns, on_stop, off_ns, off_stop, index, bin_minutes),
        "kept": np.ones(int(keep.sum()), dtype=bool) if kept is None else np.asarray(kept, dtype=bool)[keep],
    })
    return EncodedTrips(partitions=partitions, frame=frame, vocab=index.vocab, bin_minutes=bin_minutes)


@dataclass(frozen=True)
class Histogram:
    """Counts of the points present in one (partition, marginal), keys ascending."""

    keys: np.ndarray  # int64 local keys
    counts: np.ndarray  # int64, all >= 1

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def partition_label(mode: str, date: str) -> str:
    """How a (mode, date) partition is named in messages and reports, e.g. ``bus/20160808``."""
    return f"{mode}/{date}"


@dataclass(frozen=True)
class PartitionHistograms:
    """The six histograms a partition's release is made from; ``unbounded`` (card level) those of all its trips,
    before contribution bounding, which only the internal utility figures use."""

    mode: str
    date: str
    n_trips: int
    histograms: dict[str, Histogram]
    unbounded: dict[str, Histogram] | None = None
    n_trips_unbounded: int | None = None

    @property
    def truth(self) -> dict[str, Histogram]:
        """What the release is measured against: all trips (before bounding, if there was any)."""
        return self.unbounded if self.unbounded is not None else self.histograms

    @property
    def partition(self) -> str:
        return partition_label(self.mode, self.date)


@dataclass(frozen=True)
class KeySpace:
    """How a marginal's (time bin, location code) pairs map to integer keys."""

    n_bins: int
    n_locations: int  # the largest vocabulary; codes are per mode

    def size(self, m: Marginal) -> int:
        t = self.n_bins + 1 if m.has_time else 1
        loc = self.n_locations + 1 if m.has_loc else 1
        return t * loc

    def encode(self, m: Marginal, time_bin: np.ndarray | None, loc: np.ndarray | None) -> np.ndarray:
        key = np.zeros(len(time_bin) if time_bin is not None else len(loc), dtype=np.int64)
        if m.has_time:
            key += time_bin.astype(np.int64) + 1
        if m.has_loc:
            key = key * (self.n_locations + 1) + loc.astype(np.int64) + 1
        return key

    def decode(self, m: Marginal, keys: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(time bin or -1, location code or -1) arrays."""
        keys = np.asarray(keys, dtype=np.int64)
        if m.has_loc:
            loc = keys % (self.n_locations + 1) - 1
            rest = keys // (self.n_locations + 1)
        else:
            loc, rest = None, keys
        return (rest - 1 if m.has_time else None), loc


def key_space(encoded: EncodedTrips) -> KeySpace:
    return KeySpace(encoded.n_bins, max((len(v) for v in encoded.vocab.values()), default=0))


def key_space_of(index: LocationIndex, bin_minutes: int) -> KeySpace:
    """The key space of a release over ``index``'s locations (the same as :func:`key_space` of its trips)."""
    return KeySpace(1440 // bin_minutes, index.max_locations)


#: The encoded columns the histograms read (a row's partition is where it is stored), and the bounding flag.
TRIP_COLUMNS = ("on_bin", "off_bin", "on_loc", "off_loc")
KEPT = "kept"


def split_by_partition(encoded: EncodedTrips) -> Iterator[tuple[tuple[str, str], pd.DataFrame]]:
    """((mode, date), that partition's rows of :data:`TRIP_COLUMNS`), one partition at a time, in order.

    Only one partition's rows are copied at a time; the row order within a
    partition does not matter to anything downstream (histograms are counts).
    """
    part = encoded.frame["part"].to_numpy(dtype=np.int64)
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(len(encoded.partitions) + 1))
    columns = encoded.frame[[*TRIP_COLUMNS, KEPT]]
    for p, key in enumerate(encoded.partitions):
        yield key, columns.iloc[order[bounds[p]:bounds[p + 1]]].reset_index(drop=True)


def histograms_of(rows: Mapping[str, np.ndarray], ks: KeySpace) -> dict[str, Histogram]:
    """Steps 5–6 for one partition: its six histograms, present points only, keys ascending."""
    out = {}
    for m in MARGINALS:
        tb = np.asarray(rows["on_bin" if m.tap == "on" else "off_bin"]) if m.has_time else None
        lc = np.asarray(rows["on_loc" if m.tap == "on" else "off_loc"]) if m.has_loc else None
        keys, counts = _present(ks.encode(m, tb, lc), ks.size(m))
        out[m.name] = Histogram(keys=keys, counts=counts)
    return out


def _present(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` (in ``0..size-1``), ascending, and how often each occurs: a bincount over the key
    space when it is not much larger than the rows, else one sort (a stop table of 200,000 stops makes a time-loc
    key space of 19 million, 150 MB of counts per partition for a few thousand rows)."""
    if size <= 8 * keys.size + (1 << 16):
        counts = np.bincount(keys, minlength=size)
        nz = np.flatnonzero(counts)
        return nz.astype(np.int64), counts[nz].astype(np.int64)
    sk = np.sort(keys)
    first = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if sk.size else np.zeros(0, dtype=np.int64)
    return sk[first].astype(np.int64), np.diff(np.r_[first, sk.size]).astype(np.int64)


def partition_of_rows(mode: str, date: str, rows: Mapping[str, np.ndarray], ks: KeySpace) -> PartitionHistograms:
    """A partition's histograms from its rows: of the kept rows, and of all rows when bounding dropped some."""
    kept = np.asarray(rows[KEPT], dtype=bool) if KEPT in rows else None
    if kept is None or kept.all():
        return PartitionHistograms(mode, date, len(rows[TRIP_COLUMNS[0]]), histograms_of(rows, ks))
    bounded = {c: np.asarray(rows[c])[kept] for c in TRIP_COLUMNS}
    return PartitionHistograms(mode, date, int(kept.sum()), histograms_of(bounded, ks),
                               unbounded=histograms_of(rows, ks), n_trips_unbounded=int(kept.size))


def partition_histograms(encoded: EncodedTrips) -> list[PartitionHistograms]:
    """The six histograms of every partition, held in memory together (tests, benchmarks).

    The release flow reads the partitions back one at a time from a Parquet
    dataset instead (:mod:`transit_release.files.partition_store`); both use
    :func:`partition_of_rows`.
    """
    ks = key_space(encoded)
    return [partition_of_rows(mode, date, {c: rows[c].to_numpy() for c in rows.columns}, ks)
            for (mode, date), rows in split_by_partition(encoded)]


def time_label(bins: np.ndarray, bin_minutes: int) -> np.ndarray:
    """``HH:MM`` of the window start, ``-1`` for unknown."""
    bins = np.asarray(bins, dtype=np.int64)
    if bins.size == 0:
        return np.zeros(0, dtype=object)
    minutes = bins * bin_minutes
    labels = np.char.add(np.char.add(np.char.zfill((minutes // 60).astype(str), 2), ":"),
                         np.char.zfill((minutes % 60).astype(str), 2))
    return np.where(bins < 0, UNKNOWN, labels).astype(object)


def location_label(codes: np.ndarray, vocab: tuple[str, ...]) -> np.ndarray:
    codes = np.asarray(codes, dtype=np.int64)
    table = np.array(list(vocab) + [UNKNOWN], dtype=object)
    return table[np.where(codes < 0, len(vocab), codes)]
