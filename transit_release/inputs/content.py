"""What a private input holds, whatever its order or form: the digest the overlap check between populations keys.

A release of one population must not read the records of people already released under another population
(:mod:`transit_release.accounting.claims`). Two inputs are compared by what they hold, not by their bytes, so a
copy of a file with its rows reordered, a comment line added, a trailing newline, another quoting, CSV instead of
Parquet or another (copied) stop table or universe still matches. Precisely:

* **trips** (a tap file, read by the Opal release or by a passenger kind ``--trips``): the *multiset of its clean
  rows* — the rows the validation gate kept in the declared period, exact repeats removed — each row as
  ``(mode, tap-on time, tap-on location, tap-off time, tap-off location)`` at the file's resolution (the times in
  nanoseconds, a missing tap-off as missing), **without the card id** (a copy whose card ids were renumbered
  still matches) and **without the stop ids**: each stop counts as the public location the stop table maps it
  to (:func:`location_keys`: its mode and location, a bus stop's postcode or another mode's stop name, what
  every release counts), so a copy whose stop ids were relabelled in both the stop table and the trips still
  matches, also with its cards renumbered (atk40 M1); stops of one location are one; quarantined rows and
  rows outside the period take no part;
* **sequences**: the multiset of the valid records (lines the reader kept), each record the ordered list of its
  location ids (the ids as written, e.g. station names, not their position in the universe);
* **trajectories**: the multiset of the valid records, each the ordered list of its ``(location id, hour of the
  week)`` points;
* **sets**: the multiset of the valid records, each the *set* of its location ids (their order and repeats on a
  line are ignored, as the reader ignores them);
* **lines** (every id-less record file, whichever kind reads it; atk40 N1, N2): the multiset of *every* record
  line the reader read, before it screened them against the universe, each the set of its location ids (a
  trajectory point's ``@hour`` dropped): :class:`RecordLines`. The same file gives it whatever the locations file
  and whichever kind reads it; the three above stay as claims have recorded them since #40;
* **trips:<mode>** (a tap file; atk40 N3): the trips digest of one mode's clean rows, one per mode the rows hold,
  so that a re-extract of one mode (with fresh card pseudonyms) matches the full file, and the other way round.
* **taps**, **taps:<mode>** (a tap file; #40's known gap): as ``trips`` and ``trips:<mode>`` with a non-bus stop
  keyed by its location id (:func:`~transit_release.inputs.universe.stop_location_id` of its name), so a name's
  white space does not make other content;
* **ons:<mode>** (a tap file read by a passenger kind; #40's known gap): per card, the set of the location ids of
  its tap-ons of that mode (:func:`tap_ons_of_frame`): times, tap-offs, postcodes take no part;
* and a tap file read by a passenger kind also claims the records that kind built from it, under the kind's own
  role and ``lines`` (:func:`of_derived_records`), as a record file holding them would.

The digest is the number of records and, over the records, the sums modulo 2⁶⁴ of a 64-bit hash of each record
under two seeds (a multiset hash: order-independent, one record more or less changes it). It is computed
here without a key and never stored: :mod:`~transit_release.accounting.claims` keys it with the home's secret
(HMAC) before anything is written. The card ids of a tap file (sorted, distinct) go along as they are, to be keyed
there too (:func:`card_ids`); id-less record files carry none.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

#: The private inputs a release reads, by kind of record: the role of a digest.
ROLES = ("trips", "sequences", "trajectories", "sets")
#: The kind-independent digest of an id-less record file (a sequence, trajectory or set file): every record line
#: read before the universe filter, each as the set of its location ids (atk40 N1, N2).
LINES = "lines"
#: The prefix of a tap file's digest of one mode's clean rows (``trips:train``; atk40 N3).
MODE_PREFIX = "trips:"
#: A tap file's digest of its clean rows with each non-bus stop keyed by its *location id* (the normalised name,
#: :func:`~transit_release.inputs.universe.stop_location_id`, what the passenger kinds count) rather than its raw
#: name: ``taps`` for every mode, ``taps:<mode>`` per mode (issue #40, fix 2). The ``trips`` digests stay as claims
#: have recorded them since #40, so an earlier claim still compares as before.
NAMED = "taps"
NAMED_PREFIX = "taps:"
#: A tap file's digest of what the kinds built from taps read of one mode (issue #40): per card, the *set* of the
#: location ids of its tap-on stops of that mode (``ons:train``). Times, tap-offs, postcodes and a name's white
#: space take no part, nor which kind reads it.
ONS_PREFIX = "ons:"
#: Seeds of the two lanes of the multiset hash (public constants: the digest is keyed afterwards).
_LANES = (np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707344))
_NAMES_KEY = "transit-release1"  # a fixed SipHash key for location ids: an unkeyed hash of their text
_MODES = ("bus", "ferry", "lightrail", "train")  # transit_release.config.KNOWN_MODES, in a fixed order for the digest
_MASK = (1 << 64) - 1


def mix(x: np.ndarray, inplace: bool = False) -> np.ndarray:
    """SplitMix64's finaliser on uint64 values (a bijection that spreads every input bit over the output);
    ``inplace``: ``x`` is a temporary of the caller's, changed in place."""
    x = np.asarray(x, dtype=np.uint64)
    if not inplace:
        x = x.copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


#: Odd multipliers of the columns of a row (public constants; the digest is keyed afterwards).
_COLUMN_KEYS = tuple(np.uint64(k) for k in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                                            0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53))


def _fold(*columns: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of int64 columns: each column times its odd constant added in, mixed after every
    two columns and at the end (few passes over the rows: the full-size week's partitions hold 13.5 M)."""
    n = np.asarray(columns[0]).size
    h = np.full(n, 0x243F6A8885A308D3, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i, c in enumerate(columns):
            term = np.asarray(c, dtype=np.int64).view(np.uint64) * _COLUMN_KEYS[i % len(_COLUMN_KEYS)]
            h += term
            if i % 2 == 1:
                h = mix(h, inplace=True)
        return mix(h, inplace=True)


@dataclass(frozen=True)
class ContentDigest:
    """The unkeyed, order-independent digest of one private input (module docstring): its role, its number of
    records and the two lane sums. Digests of parts of one input (a tap file's partitions) add up."""

    role: str
    records: int
    lanes: tuple[int, int]

    def __post_init__(self) -> None:
        if self.role not in ROLES and self.role not in (LINES, NAMED) and not any(
                self.role.startswith(p) and self.role[len(p):] in (*_MODES, "other")
                for p in (MODE_PREFIX, NAMED_PREFIX, ONS_PREFIX)):
            raise ValueError(f"unknown role of a private input {self.role!r}; known: {ROLES}, {LINES!r}, "
                             f"{MODE_PREFIX}<mode>")

    def as_role(self, role: str) -> "ContentDigest":
        return ContentDigest(role, self.records, self.lanes)

    def __add__(self, other: "ContentDigest") -> "ContentDigest":
        if other.role != self.role:
            raise ValueError(f"cannot add a digest of {other.role} to one of {self.role}")
        return ContentDigest(self.role, self.records + other.records,
                             tuple((a + b) & _MASK for a, b in zip(self.lanes, other.lanes)))

    @classmethod
    def empty(cls, role: str) -> "ContentDigest":
        return cls(role, 0, (0, 0))


def _digest(role: str, record_hashes: np.ndarray) -> ContentDigest:
    """Sum each lane's hash of the records' hashes (modulo 2⁶⁴)."""
    lanes = []
    for seed in _LANES:
        with np.errstate(over="ignore"):
            lanes.append(int(mix(record_hashes ^ seed, inplace=True).sum(dtype=np.uint64))
                         if record_hashes.size else 0)
    return ContentDigest(role, int(record_hashes.size), (lanes[0], lanes[1]))


def mode_code(mode: str) -> int:
    return _MODES.index(mode) if mode in _MODES else len(_MODES)


def trip_rows(mode: np.ndarray | int, on_ns: np.ndarray, on_location: np.ndarray, off_ns: np.ndarray,
              off_location: np.ndarray) -> ContentDigest:
    """The digest of clean trip rows (exact repeats already removed) given as int64 columns: ``mode`` a code of
    :func:`mode_code` per row (or one for all), times in nanoseconds (a missing tap-off time as the int64 minimum),
    stops as the keys of their public locations (:func:`location_keys`; never the stop ids). The card id takes no
    part."""
    n = np.asarray(on_ns).size
    modes = np.broadcast_to(np.asarray(mode, dtype=np.int64), (n,))
    return _digest("trips", _fold(modes, on_ns, on_location, off_ns, off_location))


#: The key of "no public location" (a stop without one, a missing tap-off, a stop of another mode).
_NO_LOCATION = np.uint64(0x5DEECE66D1CE4E5B)


def location_keys(index, mode_index: np.ndarray | int, codes: np.ndarray, named: bool = False) -> np.ndarray:
    """An int64 key per row for the public location of its stop: ``codes`` are the rows' location codes under
    ``index`` (a :class:`~transit_release.preprocessing.LocationIndex`, -1 for none) and ``mode_index`` their modes'
    positions in ``index.modes``. The key hashes the ``mode:location`` text, so it does not depend on the stop
    ids, nor on which other stops or modes the stop table lists. ``named``: a non-bus stop as its location id
    (:func:`~transit_release.inputs.universe.stop_location_id` of its name: white space runs as ``_``, trimmed),
    what the passenger kinds count (the :data:`NAMED` digests); a bus stop stays its postcode."""
    table, starts = _key_table(index, named)
    codes = np.asarray(codes, dtype=np.int64)
    mc = np.broadcast_to(np.asarray(mode_index, dtype=np.int64), codes.shape)
    known = (mc >= 0) & (mc < len(index.modes))
    mc = np.where(known, mc, 0)
    at = np.where(codes >= 0, starts[mc] + codes, starts[mc + 1] - 1)
    at = np.where(known, at, table.size - 1)
    return table[at].view(np.int64)


#: The key tables of the last index :func:`location_keys` was given, by ``named`` (one release's index at a time,
#: as :func:`~transit_release.preprocessing.load_location_index` keeps one per process)
_KEY_TABLES: dict[bool, tuple[object, np.ndarray, np.ndarray]] = {}
_KEY_TABLES_LOCK = threading.Lock()


def _key_table(index, named: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`location_keys`' table (each mode's locations' keys, then its "no location" key; a last "no location"
    for an unknown mode) and each mode's start in it: made once per index, not once per partition and tap (a stop
    table of 200,000 names made it 4 times for each of 28 partitions: about 15 s of a release)."""
    with _KEY_TABLES_LOCK:
        cached = _KEY_TABLES.get(named)
    if cached is not None and cached[0] is index:
        return cached[1], cached[2]
    from transit_release.inputs.universe import stop_location_id

    as_id = (lambda m, loc: stop_location_id(loc) if m != "bus" else loc) if named else (lambda m, loc: loc)
    tables = [np.append(name_hashes(tuple(f"{m}:{as_id(m, loc)}" for loc in index.vocab.get(m, ()))), _NO_LOCATION)
              for m in index.modes]
    starts = np.cumsum([0] + [t.size for t in tables])
    table = np.concatenate([*tables, [_NO_LOCATION]]).astype(np.uint64)
    with _KEY_TABLES_LOCK:
        for stale in [k for k, v in _KEY_TABLES.items() if v[0] is not index]:
            del _KEY_TABLES[stale]
        _KEY_TABLES[named] = (index, table, starts)
    return table, starts


def mode_role(code: int, prefix: str = MODE_PREFIX) -> str:
    """The role of a tap file's digest of one mode's clean rows (``trips:<mode>``, or ``taps:<mode>`` with
    ``prefix``), by :func:`mode_code`."""
    return prefix + (_MODES[code] if 0 <= code < len(_MODES) else "other")


def by_mode(total: ContentDigest, per_mode: dict[int, ContentDigest],
            named: tuple[ContentDigest, dict[int, ContentDigest]] | None = None) -> tuple[ContentDigest, ...]:
    """A tap file's digests: of all its clean rows (``trips``, as before) and of each mode's clean rows it holds
    (``trips:<mode>``; a mode without rows claims nothing: every file without ferries would match); with
    ``named`` (the same with the stops keyed by location id), also ``taps`` and ``taps:<mode>``."""
    out = (total, *(d.as_role(mode_role(c)) for c, d in sorted(per_mode.items()) if d.records))
    if named is not None:
        n_total, n_per_mode = named
        out += (n_total.as_role(NAMED),
                *(d.as_role(mode_role(c, NAMED_PREFIX)) for c, d in sorted(n_per_mode.items()) if d.records))
    return out


def trips_of_frame(clean: pd.DataFrame, stops: pd.DataFrame) -> tuple[ContentDigest, ...]:
    """:func:`trip_rows` of a frame of clean trips (the validation gate's clean rows, exact repeats quarantined),
    their stops mapped to public locations through the (validated) stop table ``stops``: of all the rows and of
    each mode's (:func:`by_mode`)."""
    from transit_release.inputs.screening import _ints, _ns
    from transit_release.preprocessing import _lookup, build_location_index

    mode = pd.Categorical(clean["mode"].astype(str), categories=list(_MODES)).codes.astype(np.int64)
    mode = np.where(mode < 0, len(_MODES), mode)
    modes = tuple(sorted(stops["mode"].dropna().astype(str).unique()))
    index = build_location_index(stops, modes)
    at = pd.Categorical(clean["mode"].astype(str), categories=list(modes)).codes.astype(np.int8)
    on_stop, off_stop, off_ns = _ints(clean["tap_on_stop"]), _ints(clean["tap_off_stop"]), _ns(clean["tap_off_time"])
    on = _lookup(index, on_stop, np.ones(on_stop.size, dtype=bool), at)
    off = _lookup(index, off_stop, (off_ns != np.iinfo(np.int64).min) & (off_stop >= 0), at)
    on_ns = _ns(clean["tap_on_time"])
    digests = []
    for named in (False, True):
        on_key, off_key = location_keys(index, at, on, named), location_keys(index, at, off, named)
        per_mode = {int(c): trip_rows(c, on_ns[mode == c], on_key[mode == c], off_ns[mode == c], off_key[mode == c])
                    for c in np.unique(mode)}
        total = ContentDigest.empty("trips")
        for d in per_mode.values():
            total = total + d
        digests.append((total, per_mode))
    return by_mode(*digests[0], named=digests[1])


def card_ids(cards: np.ndarray) -> np.ndarray:
    """The distinct card ids of ``cards``, sorted (int64). A sort and a diff: ``np.unique`` takes seconds on
    millions of ids with this project's NumPy."""
    s = np.sort(np.asarray(cards, dtype=np.int64))
    return s[np.r_[True, s[1:] != s[:-1]]] if s.size else s


def merge_card_ids(parts) -> np.ndarray:
    """The distinct card ids of several sorted distinct arrays (a tap file's partitions)."""
    parts = [np.asarray(p, dtype=np.int64) for p in parts if np.asarray(p).size]
    return card_ids(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def name_hashes(names: tuple[str, ...]) -> np.ndarray:
    """An unkeyed 64-bit hash of each location id's text (SipHash under a fixed key)."""
    from pandas._libs.hashing import hash_object_array

    if not names:
        return np.zeros(0, dtype=np.uint64)
    return hash_object_array(np.asarray(names, dtype=object), _NAMES_KEY, "utf8")


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per record (``offsets``), the sum of its ``values`` modulo 2⁶⁴ (0 for an empty record)."""
    n = offsets.size - 1
    if values.size == 0:
        return np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        csum = np.concatenate([[np.uint64(0)], np.cumsum(values, dtype=np.uint64)])
        return csum[offsets[1:]] - csum[offsets[:-1]]


def _positions(offsets: np.ndarray) -> np.ndarray:
    lengths = np.diff(offsets)
    return np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], lengths)


def _ordered(role: str, token: np.ndarray, offsets: np.ndarray) -> ContentDigest:
    """Records as ordered lists of token hashes: each token mixed with its position, summed, with the length."""
    offsets = np.asarray(offsets, dtype=np.int64)
    pos = _positions(offsets)
    with np.errstate(over="ignore"):
        parts = mix(token ^ mix(pos.view(np.uint64) + np.uint64(0x5851F42D4C957F2D)))
        lengths = np.diff(offsets).astype(np.uint64)
        return _digest(role, mix(_segment_sums(parts, offsets) ^ mix(lengths * np.uint64(0x2545F4914F6CDD1D))))


def sequence_records(names: tuple[str, ...], locations: np.ndarray, offsets: np.ndarray) -> ContentDigest:
    """The digest of sequences (location indices into ``names``, the universe's ids; records by ``offsets``)."""
    return _ordered("sequences", name_hashes(names)[np.asarray(locations, dtype=np.int64)], offsets)


def trajectory_records(names: tuple[str, ...], locations: np.ndarray, hours: np.ndarray,
                       offsets: np.ndarray) -> ContentDigest:
    """The digest of trajectories (each point a location index into ``names`` and an hour of the week)."""
    with np.errstate(over="ignore"):
        token = mix(name_hashes(names)[np.asarray(locations, dtype=np.int64)]
                    ^ mix(np.asarray(hours, dtype=np.int64).view(np.uint64) + np.uint64(0x94D049BB133111EB)))
    return _ordered("trajectories", token, offsets)


def set_records(names: tuple[str, ...], items: np.ndarray, offsets: np.ndarray) -> ContentDigest:
    """The digest of sets (each record's items distinct): each item hashed, summed, with the set's size."""
    offsets = np.asarray(offsets, dtype=np.int64)
    with np.errstate(over="ignore"):
        parts = mix(name_hashes(names)[np.asarray(items, dtype=np.int64)])
        sizes = np.diff(offsets).astype(np.uint64)
        return _digest("sets", mix(_segment_sums(parts, offsets) ^ mix(sizes * np.uint64(0x2545F4914F6CDD1D))))


class RecordLines:
    """The kind-independent digest (role :data:`LINES`) of an id-less record file, fed by its reader with every
    record line it reads (:func:`~transit_release.inputs.universe.record_lines`: comments skipped), **before** any
    screening against the universe or the reader's limits: the multiset of the lines, each the *set* of its
    location ids, a token's trailing ``@<hour>`` (a trajectory point) dropped. The same file gives the same digest
    whatever the locations file (atk40 N2) and whichever kind reads it (a file released as sequences and as sets:
    atk40 N1); so does a copy converted between kinds line by line (the hours dropped, a line's order or repeats
    changed). A line without a token is no record and takes no part.

    Tokens are buffered and digested by chunks (the digest of a union is the sum of the digests)."""

    _CHUNK = 1 << 18

    def __init__(self) -> None:
        self._tokens: list[str] = []
        self._sizes: list[int] = []
        self._total = ContentDigest.empty(LINES)

    def add(self, tokens: list[str]) -> None:
        if tokens:
            self._tokens.extend(tokens)
            self._sizes.append(len(tokens))
            if len(self._tokens) >= self._CHUNK:
                self._flush()

    def _flush(self) -> None:
        if not self._sizes:
            return
        codes, distinct = pd.factorize(np.asarray(self._tokens, dtype=object))  # a file repeats its stations
        names = pd.Series(distinct, dtype=object).str.replace(r"@[0-9]+$", "", regex=True)
        token = name_hashes(tuple(names))[codes]
        line = np.repeat(np.arange(len(self._sizes), dtype=np.int64), self._sizes)
        order = np.lexsort((token, line))
        token, line = token[order], line[order]
        fresh = np.r_[True, (line[1:] != line[:-1]) | (token[1:] != token[:-1])]  # a line's ids as a set
        token, line = token[fresh], line[fresh]
        offsets = np.searchsorted(line, np.arange(len(self._sizes) + 1, dtype=np.int64))
        with np.errstate(over="ignore"):
            parts = mix(token)
            sizes = np.diff(offsets).astype(np.uint64)
            hashes = mix(_segment_sums(parts, offsets) ^ mix(sizes * np.uint64(0x2545F4914F6CDD1D)))
        self._total = self._total + _digest(LINES, hashes)
        self._tokens, self._sizes = [], []

    def digest(self) -> ContentDigest:
        self._flush()
        return self._total


@dataclass(frozen=True)
class InputContent:
    """What a release read from its private inputs: one digest per private input and, where the records carry
    card ids, the distinct card ids (sorted int64; private: never a parameter, a log line or a published figure).
    """

    digests: tuple[ContentDigest, ...]
    cards: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def n_cards(self) -> int:
        return int(self.cards.size)


def of_record_input(role: str, data) -> InputContent:
    """The content of a record file as its reader returned it (a sequence, trajectory or set input): the digest of
    the records it kept, by kind (as claims have recorded since #40), and the kind-independent digest of every
    record line it read (:class:`RecordLines`, when the reader gives it)."""
    names = data.universe.ids
    if role == "sequences":
        s = data.sequences
        kept = sequence_records(names, s.locations, s.offsets)
    elif role == "trajectories":
        t = data.trajectories
        kept = trajectory_records(names, t.locations, t.hours, t.offsets)
    elif role == "sets":
        s = data.sets
        kept = set_records(names, s.items, s.offsets)
    else:
        raise ValueError(f"no record file of role {role!r}")
    lines = getattr(data, "lines_digest", None)
    return InputContent((kept,) if lines is None or not lines.records else (kept, lines))


def lines_of_records(names: tuple[str, ...], locations: np.ndarray, offsets: np.ndarray) -> ContentDigest:
    """The :data:`LINES` digest of records given as location indices into ``names`` (records by ``offsets``): each
    record the *set* of its location ids, exactly as :class:`RecordLines` digests a file holding one line per
    record (a sequence's order and repeats, a trajectory point's hour dropped). A file written from these records
    gives the same digest (issue #40: a tap file claims the records its kind builds from it)."""
    locations = np.asarray(locations, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = offsets.size - 1
    if n <= 0:
        return ContentDigest.empty(LINES)
    sizes = np.diff(offsets)
    keep = sizes > 0  # a line without a token is no record
    token = name_hashes(names)[locations] if locations.size else np.zeros(0, dtype=np.uint64)
    line = np.repeat(np.arange(n, dtype=np.int64), sizes)
    order = np.lexsort((token, line))
    token, line = token[order], line[order]
    fresh = np.r_[True, (line[1:] != line[:-1]) | (token[1:] != token[:-1])] if line.size else np.zeros(0, bool)
    token, line = token[fresh], line[fresh]
    at = np.searchsorted(line, np.arange(n + 1, dtype=np.int64))
    with np.errstate(over="ignore"):
        parts = mix(token)
        distinct = np.diff(at).astype(np.uint64)
        hashes = mix(_segment_sums(parts, at) ^ mix(distinct * np.uint64(0x2545F4914F6CDD1D)))
    return _digest(LINES, hashes[keep])


def of_derived_records(role: str, data) -> tuple[ContentDigest, ...]:
    """The digests of the records a passenger kind built from a tap file (issue #40): the kind's own digest of
    them (as of a record file holding them, :func:`of_record_input`) and the kind-independent :data:`LINES` digest
    (each record the set of its location ids). A re-extract of the taps that differs only in what the kind does
    not read (a stop name's white space, a bus stop's postcode for the kinds that count names, the tap-offs for
    those that read tap-ons, seconds) builds the same records, so claims the same digests; so does a record file
    written from them. None when the kind built no record (every empty build would match)."""
    names = data.universe.ids
    if role == "sequences":
        locations, offsets = data.sequences.locations, data.sequences.offsets
    elif role == "trajectories":
        locations, offsets = data.trajectories.locations, data.trajectories.offsets
    elif role == "sets":
        locations, offsets = data.sets.items, data.sets.offsets
    else:
        raise ValueError(f"no record kind of role {role!r}")
    kept = of_record_input(role, data).digests[0]
    lines = lines_of_records(names, locations, offsets)
    return tuple(d for d in (kept, lines) if d.records)


def with_derived(taps: InputContent, role: str, data) -> InputContent:
    """A tap file's content with the digests of the records ``data`` its kind built from it
    (:func:`of_derived_records`)."""
    return InputContent((*taps.digests, *of_derived_records(role, data)), taps.cards)


def tap_ons_of_frame(clean: pd.DataFrame, stops: pd.DataFrame) -> tuple[ContentDigest, ...]:
    """Per mode the clean rows hold (``ons:<mode>``, :data:`ONS_PREFIX`): the :data:`LINES`-style digest of one
    record per card, the set of the location ids (:func:`~transit_release.inputs.universe.stop_location_id` of the
    stop's name, a bus stop's too: the sequences and trajectories from taps count bus stops by name) of its tap-ons
    of that mode at a named stop of the stop table. What every passenger kind built from taps reads of a card, and
    nothing more: a re-extract that changes the times (seconds or minutes), empties the tap-offs, changes a
    postcode or a name's white space, or renumbers the cards gives the same digest (a mode without such taps
    claims nothing)."""
    from transit_release.inputs.screening import _ints
    from transit_release.inputs.universe import stop_location_id

    out = []
    cards_all, on_all, mode_all = _ints(clean["card_id"]), _ints(clean["tap_on_stop"]), clean["mode"].astype(str)
    for mode in sorted(set(mode_all.unique())):
        named = stops[stops["mode"].astype(str) == mode].dropna(subset=["name"])
        if named.empty:
            continue
        ids = tuple(sorted(set(named["name"].map(stop_location_id))))
        where = dict(zip(named["stop_id"].astype(np.int64), pd.Index(ids).get_indexer(
            named["name"].map(stop_location_id))))
        sel = (mode_all == mode).to_numpy()
        loc = pd.Series(on_all[sel]).map(where).to_numpy(dtype=float)
        known = ~np.isnan(loc)
        card, loc = cards_all[sel][known], loc[known].astype(np.int64)
        if not card.size:
            continue
        order = np.lexsort((loc, card))
        card, loc = card[order], loc[order]
        offsets = np.concatenate([[0], np.flatnonzero(card[1:] != card[:-1]) + 1, [card.size]]).astype(np.int64)
        out.append(lines_of_records(ids, loc, offsets).as_role(mode_role(mode_code(mode), ONS_PREFIX)))
    return tuple(d for d in out if d.records)


def of_clean_trips(clean: pd.DataFrame, stops: pd.DataFrame) -> InputContent:
    """The content of a tap file as the passenger kinds read it (the gate's clean trips in one frame, ``stops``
    the validated stop table): its trips digests and, per mode, its cards' tap-on location sets
    (:func:`tap_ons_of_frame`)."""
    from transit_release.inputs.screening import _ints

    return InputContent((*trips_of_frame(clean, stops), *tap_ons_of_frame(clean, stops)),
                        card_ids(_ints(clean["card_id"])))


# ---- a tap file streamed partition by partition (the Opal release) -----------------------------------------------

def save_partition(folder: Path, mode: str, date: str, digest: ContentDigest, cards: np.ndarray,
                   named: ContentDigest | None = None) -> None:
    """One partition's digest (and ``named``, the same with its stops keyed by location id: :data:`NAMED`) and
    distinct card ids, under the run's private work directory."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    np.save(folder / f"{mode}-{date}.cards.npy", card_ids(cards))
    for suffix, d in (("digest", digest), ("named", named)):
        if d is not None:
            np.save(folder / f"{mode}-{date}.{suffix}.npy", np.array([d.records, *d.lanes], dtype=np.uint64))


def gather_partitions(folder: Path) -> InputContent:
    """The tap file's content from its partitions' files (:func:`save_partition`), whatever the partitions."""
    folder = Path(folder)
    sums = {}
    parts = []
    files = sorted(folder.glob("*.digest.npy"))
    for suffix in ("digest", "named"):
        total = ContentDigest.empty("trips")
        per_mode: dict[int, ContentDigest] = {}
        for f in files:
            f = f.with_name(f.name.replace(".digest.npy", f".{suffix}.npy"))
            if not f.exists():
                break  # a partition without it: no named digest (every partition writes both)
            n, a, b = (int(x) for x in np.load(f))
            part = ContentDigest("trips", n, (a, b))
            total = total + part
            code = mode_code(f.name[:-len(f".{suffix}.npy")].rsplit("-", 3)[0])  # <mode>-<YYYY-MM-DD>
            per_mode[code] = per_mode.get(code, ContentDigest.empty("trips")) + part
        else:
            sums[suffix] = (total, per_mode)
    for f in files:
        parts.append(np.load(f.with_name(f.name.replace(".digest.npy", ".cards.npy"))))
    return InputContent(by_mode(*sums["digest"], named=sums.get("named")), merge_card_ids(parts))
