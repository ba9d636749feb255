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
* **cut:sequences**, **cut:trajectories** (a passenger kind's records, from a record file or built from taps; atk4):
  the records *as the kind's mechanism reads them*, each cut to the mechanism's public cut length (the prefix
  tree's height or the n-gram's ℓmax; a trajectory release's height ``h``), ordered as ``sequences`` and
  ``trajectories`` are (:func:`of_cut_records`). A file or an extract cut to what the mechanism reads (each card's
  first ``h`` taps) matches the full records. Station sets have none: their mechanisms read whole sets;
* **trips:<mode>** (a tap file; atk40 N3): the trips digest of one mode's clean rows, one per mode the rows hold,
  so that a re-extract of one mode (with fresh card pseudonyms) matches the full file, and the other way round.
* **taps**, **taps:<mode>** (a tap file; #40, third review): as ``trips`` and ``trips:<mode>`` with a non-bus stop
  keyed by its location id (:func:`~transit_release.inputs.universe.stop_location_id` of its name), so a name's
  white space does not make other content;
* **ons:<mode>**, **places:bus**, **stations:<mode>**, **days:<mode>** (a tap file, whichever kind reads it;
  #40, third to eleventh reviews): per card, the set of the location ids of its tap-ons of that mode by name; of its
  bus tap-ons' places (postcodes); of the places of its tap-ons and tap-offs (:func:`card_sets`); and, with no
  card, each tap-on as its date and place (:func:`tap_on_days`); and **day:**, **shape:** and **nshape:bus@<date>**
  (atk6–atk8), one day's tap-ons by place alone, and its sorted counts per place (bus: per stop name too) with no
  label, compared whatever the date (:func:`tap_ons_of_day`); and **pshape:<mode>**, **pnshape:bus** (atk9), the
  period's sorted counts (:func:`period_shapes`), and **ushape:**, **sshape:<modes>** (atk11) over unions of modes
  and both taps (:func:`union_shapes`). The streamed Opal release's partitions save their
  part (:func:`save_card_taps`). Times, card ids and what each leaves out take no part, nor
  the mode's name: their tokens carry none, and the claims compare them whatever their mode;
* and a tap file read by a passenger kind also claims the records that kind built from it, under the kind's own
  role and ``lines`` (:func:`of_derived_records`), as a record file holding them would.

The digest is the number of records and, over the records, the sums modulo 2⁶⁴ of a 64-bit hash of each record
under two seeds (a multiset hash: order-independent, one record more or less changes it). It is computed
here without a key and never stored: :mod:`~transit_release.accounting.claims` keys it with the home's secret
(HMAC) before anything is written. The card ids of a tap file (sorted, distinct) go along as they are, to be keyed
there too (:func:`card_ids`); id-less record files carry none.
"""

from __future__ import annotations

import re
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
#: A tap file's digest of one mode's tap-ons per card as the Opal release and the station sets count them (atk4):
#: per card, the set of the *places* of its tap-ons (a bus stop's postcode, another mode's location id; what
#: :func:`location_keys` keys), for the modes whose places are not their stops' names (bus: a re-extract that
#: renames or blanks the bus stops' names, postcodes kept, reads the same).
PLACES_PREFIX = "places:"
PLACE_MODES = ("bus",)
#: A tap file's digest of one mode's stations per card (atk4): per card, the set of the places of its tap-ons
#: *and* tap-offs, what a station set built from taps reads of it (a re-extract with each trip's tap-on and
#: tap-off swapped reads the same sets).
STATIONS_PREFIX = "stations:"
#: The per-card set digests of a tap file, in the order a match is said.
CARD_SET_PREFIXES = (ONS_PREFIX, PLACES_PREFIX, STATIONS_PREFIX)
#: A tap file's digest of one mode's tap-ons as (date, place), with no card and no time of day (atk5):
#: :func:`tap_on_days`.
DAYS_PREFIX = "days:"
#: Digests whose value does not depend on the mode's name (their tokens carry no mode): their claims are also
#: compared whatever mode they are of (:func:`~transit_release.accounting.claims.claim_of`), so a re-extract that
#: relabels a mode (train as lightrail, in the trips and the stop table) matches (atk5).
#: A tap file's digest of one mode's tap-on counts per place over the whole period, sorted, the places' labels
#: left out (``pshape:<mode>``; and per bus stop name, ``pnshape:bus``; atk9): a small mode (a few stations, or
#: days of few tap-ons: no ``shape``) re-extracted with its stations renamed and fresh card pseudonyms matches.
PSHAPE_PREFIX = "pshape:"
PNSHAPE_PREFIX = "pnshape:"
#: A period's shape is claimed only over at least this many tap-ons and places (public constants).
MIN_PERIOD_TAP_ONS = 50
MIN_PERIOD_PLACES = 2
#: The period's tap-on counts per place over a *union* of two or more modes (``ushape:lightrail+train``), and its
#: tap-on **and** tap-off counts per place over one mode or a union (``sshape:train``), sorted, labels aside
#: (atk11): a re-extract that regroups the rows (part of a mode relabelled as another, two modes merged) or swaps
#: each trip's taps, with the stations renamed and fresh pseudonyms, holds the same counts over some union.
USHAPE_PREFIX = "ushape:"
SSHAPE_PREFIX = "sshape:"
ANY_MODE_PREFIXES = (*CARD_SET_PREFIXES, DAYS_PREFIX, PSHAPE_PREFIX, PNSHAPE_PREFIX, USHAPE_PREFIX, SSHAPE_PREFIX)
_UNION_ROLE = re.compile(r"(ushape|sshape):(bus|ferry|lightrail|train|other)(\+(bus|ferry|lightrail|train|other))*"
                         r"(@\d{8})?")
#: A tap file's digest of one day of one mode's tap-ons, each as its place only (``day:train@20160808``; atk6):
#: compared whatever its mode **and its date**, so a re-extract that moves every date (a week re-dated as another,
#: with a fresh card per card and day) or holds some of the days matches day by day (:func:`tap_ons_of_day`).
DAY_PREFIX = "day:"
#: A tap file's digest of one day of one mode's tap-on counts per place, the places' labels left out (the counts
#: sorted: ``shape:train@20160808``; atk7): compared whatever the mode and the date, so a re-extract that renames
#: the stations (a newer stop table's spelling) with fresh card pseudonyms matches day by day.
SHAPE_PREFIX = "shape:"
#: The same of a :data:`PLACE_MODES` mode's tap-ons counted per stop *name* (``nshape:bus@20160808``; atk8): the
#: sequences and trajectories from taps read a bus stop by its name, so a newer stop table that renames the bus
#: stops and corrects a postcode reads the same of them.
NSHAPE_PREFIX = "nshape:"
#: The digests of one day, compared whatever the mode and the date (:func:`tap_ons_of_day`).
DATED_PREFIXES = (DAY_PREFIX, SHAPE_PREFIX, NSHAPE_PREFIX)
#: A day's digest is claimed only when it holds at least this many tap-ons with a place (a public constant): two
#: genuinely different populations' days of a few tap-ons each could hold the same places by chance.
MIN_DAY_TAP_ONS = 50
#: A day's ``shape`` is claimed only over at least this many places (a public constant): the sorted counts of a
#: mode with one or two stations are little more than its day's total, which other people's day could share.
MIN_SHAPE_PLACES = 5
_DAY_ROLE = re.compile(r"(day|shape|nshape):(bus|ferry|lightrail|train|other)@\d{8}")
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
        if self.role in CUT_ROLES:  # a kind's records as its mechanism reads them (of_cut_records)
            return
        if (self.role.startswith(DATED_PREFIXES) and _DAY_ROLE.fullmatch(self.role)) or _UNION_ROLE.fullmatch(
                self.role):
            return
        if self.role not in ROLES and self.role not in (LINES, NAMED) and not any(
                self.role.startswith(p) and self.role[len(p):] in (*_MODES, "other")
                for p in (MODE_PREFIX, NAMED_PREFIX, *ANY_MODE_PREFIXES)):
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
    return _tokens(*_token_table(index, "named keys" if named else "keys"), mode_index, codes).view(np.int64)


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


def of_record_input(role: str, data, cut: int | None = None) -> InputContent:
    """The content of a record file as its reader returned it (a sequence, trajectory or set input): the digest of
    the records it kept, by kind (as claims have recorded since #40), the kind-independent digest of every
    record line it read (:class:`RecordLines`, when the reader gives it) and, with ``cut`` (the mechanism's public
    cut length), the records as the mechanism reads them (:func:`of_cut_records`)."""
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
    cuts = of_cut_records(role, data, cut) if cut is not None else ()
    return InputContent((kept, *(() if lines is None or not lines.records else (lines,)), *cuts))


def _set_digest(token: np.ndarray, line: np.ndarray, n: int) -> ContentDigest:
    """The :data:`LINES` digest of ``n`` records, each the *set* of its tokens (``token[i]`` belongs to record
    ``line[i]``; any order, repeats allowed); a record without a token is no record."""
    order = np.lexsort((token, line))
    token, line = token[order], line[order]
    fresh = np.r_[True, (line[1:] != line[:-1]) | (token[1:] != token[:-1])] if line.size else np.zeros(0, bool)
    token, line = token[fresh], line[fresh]
    at = np.searchsorted(line, np.arange(n + 1, dtype=np.int64))
    with np.errstate(over="ignore"):
        parts = mix(token)
        distinct = np.diff(at).astype(np.uint64)
        hashes = mix(_segment_sums(parts, at) ^ mix(distinct * np.uint64(0x2545F4914F6CDD1D)))
    return _digest(LINES, hashes[distinct > 0])


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
    token = name_hashes(names)[locations] if locations.size else np.zeros(0, dtype=np.uint64)
    return _set_digest(token, np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets)), n)


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


#: The prefix of the digest of a passenger kind's records *as its mechanism reads them* (atk4): ``cut:<kind>``.
CUT_PREFIX = "cut:"
#: The kinds whose mechanisms read only a prefix of each record: the sequences' prefix tree (its height) and
#: n-gram model (ℓmax), every trajectory mechanism (SafePath, its joint rule, the Markov model: the height ``h``).
#: Station sets have no cut (DiffPart and the set histogram read every item of a set).
CUT_KINDS = ("sequences", "trajectories")
CUT_ROLES = tuple(CUT_PREFIX + kind for kind in CUT_KINDS)


def _first(offsets: np.ndarray, cut: int) -> tuple[np.ndarray, np.ndarray]:
    """The positions of each record's first ``cut`` tokens (records by ``offsets``), and the offsets of the cut
    records, an empty one left out (no record)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    keep, starts = np.minimum(lengths[lengths > 0], int(cut)), offsets[:-1][lengths > 0]
    out = np.zeros(keep.size + 1, dtype=np.int64)
    np.cumsum(keep, out=out[1:])
    pos = np.repeat(starts, keep) + (np.arange(int(out[-1]), dtype=np.int64) - np.repeat(out[:-1], keep))
    return pos, out


def of_cut_records(role: str, data, cut: int) -> tuple[ContentDigest, ...]:
    """The ``cut:<kind>`` digest (:data:`CUT_PREFIX`; atk4) of a passenger kind's records ``data`` (a record file
    as its reader returned it, or the records built from taps) as the kind's mechanism reads them: each record cut
    to the mechanism's public cut length ``cut`` and digested as the kind's own digest digests a record
    (:func:`_ordered`: sequences their location ids in order, trajectories their (location id, hour) points).

    * sequences: each sequence's first ``cut`` locations (the prefix tree's height, the n-gram model's ℓmax:
      :func:`~transit_release.releases.sequences.workload_height`);
    * trajectories: each trajectory's first ``cut`` points up to its first decrease of the hour, what
      :meth:`~transit_release.mechanisms.safepath.Trajectories.truncated` keeps and every trajectory mechanism
      reads (SafePath's tree and joint rule, the Markov model).

    So a re-extract cut to what the mechanism reads (each card's first ``h`` taps, renumbered) gives the digest of
    the full records, from a file or from taps, and the release's outputs are the same in distribution. The cut
    length is a public parameter and takes no part: two cuts give other records unless every record is shorter
    than both, and then the mechanism reads the same. A record empty after the cut is no record (the mechanisms
    skip it). Empty for a kind without a cut (station sets) and for no record at all."""
    if role not in CUT_KINDS:
        return ()
    names = data.universe.ids
    if role == "sequences":
        s = data.sequences
        lengths = np.diff(np.asarray(s.offsets, dtype=np.int64))
        if lengths.size and (lengths.min() < 1 or lengths.max() > cut):  # else every record is read whole
            pos, offsets = _first(s.offsets, cut)
            digest = sequence_records(names, np.asarray(s.locations, dtype=np.int64)[pos], offsets)
        else:
            digest = sequence_records(names, s.locations, s.offsets)
    else:
        t = data.trajectories.truncated(int(cut))
        if (t.lengths < 1).any():
            t = t.select(t.lengths > 0)
        digest = trajectory_records(names, t.locations, t.hours, t.offsets)
    return (digest.as_role(CUT_PREFIX + role),) if digest.records else ()


def with_derived(taps: InputContent, role: str, data, cut: int | None = None) -> InputContent:
    """A tap file's content with the digests of the records ``data`` its kind built from it
    (:func:`of_derived_records`) and, with ``cut``, of those records as the mechanism reads them
    (:func:`of_cut_records`)."""
    cuts = of_cut_records(role, data, cut) if cut is not None else ()
    return InputContent((*taps.digests, *of_derived_records(role, data), *cuts), taps.cards)


def _token_table(index, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """A hash table of ``index``'s locations, one per ``kind``: ``keys`` and ``named keys`` for
    :func:`location_keys` (``mode:location``, a non-bus location as its location id with ``named``; "no location"
    :data:`_NO_LOCATION`), ``names`` for :func:`tap_on_tokens` (each mode's stop names' location ids) and
    ``places`` for :func:`place_tokens` (the location without its mode); none 0. Each mode's tokens then its "none",
    a last "none" for an unknown mode, and each mode's start. Made once per index (the last index seen is kept, as a
    process keeps one), not once per partition and tap: a stop table of 200,000 names made the keys 4 times for
    each of 28 partitions, about 15 s of a release."""
    from transit_release.inputs.universe import stop_location_id

    with _TOKEN_TABLES_LOCK:
        cached = _TOKEN_TABLES.get(kind)
    if cached is not None and cached[0] is index:
        return cached[1], cached[2]
    as_id = lambda m, loc: loc if m == "bus" else stop_location_id(loc)  # noqa: E731
    texts = {"keys": lambda m: (f"{m}:{loc}" for loc in index.vocab.get(m, ())),
             "named keys": lambda m: (f"{m}:{as_id(m, loc)}" for loc in index.vocab.get(m, ())),
             "names": lambda m: index.name_vocab.get(m, ()),
             "places": lambda m: (as_id(m, loc) for loc in index.vocab.get(m, ()))}[kind]
    none = _NO_LOCATION if kind.endswith("keys") else np.uint64(0)
    tables = [np.append(name_hashes(tuple(texts(m))), none) for m in index.modes]
    starts = np.cumsum([0] + [t.size for t in tables])
    table = np.concatenate([*tables, [none]]).astype(np.uint64)
    with _TOKEN_TABLES_LOCK:
        for stale in [k for k, v in _TOKEN_TABLES.items() if v[0] is not index]:
            del _TOKEN_TABLES[stale]
        _TOKEN_TABLES[kind] = (index, table, starts)
    return table, starts


#: The tables of the last index :func:`_token_table` was given, by kind.
_TOKEN_TABLES: dict[str, tuple[object, np.ndarray, np.ndarray]] = {}
_TOKEN_TABLES_LOCK = threading.Lock()


def _tokens(table: np.ndarray, starts: np.ndarray, mode_index, codes: np.ndarray) -> np.ndarray:
    """Each code's entry of a :func:`_token_table` (a mode's "none" for a code below 0, the last for an unknown
    mode)."""
    codes = np.asarray(codes, dtype=np.int64)
    mc = np.broadcast_to(np.asarray(mode_index, dtype=np.int64), codes.shape)
    known = (mc >= 0) & (mc < starts.size - 1)
    mc = np.where(known, mc, 0)
    return table[np.where(known, np.where(codes >= 0, starts[mc] + codes, starts[mc + 1] - 1), table.size - 1)]


def tap_on_tokens(index, stops: np.ndarray, mode_index: np.ndarray | int) -> np.ndarray:
    """Per tap-on stop id, the (unkeyed) hash of the location id of its stop's name
    (:attr:`~transit_release.preprocessing.LocationIndex.name_vocab`, a bus stop's too), and 0 where the stop is
    no named stop of the row's mode (``mode_index``: positions in ``index.modes``)."""
    from transit_release.preprocessing import _lookup

    stops = np.asarray(stops, dtype=np.int64)
    mc = np.broadcast_to(np.asarray(mode_index, dtype=np.int8), stops.shape)
    code = _lookup(index, stops, np.ones(stops.size, dtype=bool), mc, names=True)
    return _tokens(*_token_table(index, "names"), mc, code)


def place_tokens(index, mode_index: np.ndarray | int, codes: np.ndarray) -> np.ndarray:
    """Per stop (its location code under ``index``; ``mode_index`` its mode's position in ``index.modes``), the
    hash of its place as the Opal release counts it (a bus stop's postcode, another mode's location id), **without
    its mode** (a re-extract that relabels a mode reads the same places: atk5), 0 for none."""
    return _tokens(*_token_table(index, "places"), mode_index, codes)


def tap_on_days(day: np.ndarray | int, on_place: np.ndarray, mode: str) -> ContentDigest:
    """The ``days:<mode>`` digest (:data:`DAYS_PREFIX`) of one mode's tap-ons: the multiset of (the tap-on's date,
    as days since 1970-01-01; its place, :func:`place_tokens`), each tap-on with a place one record. No card, no
    time of day, no tap-off: what an Opal release reads of its taps whatever card each is on and wherever in the
    day it falls (atk5: a fresh card per card and day, times moved inside their bins). Digests of parts add up."""
    on_place = np.asarray(on_place, dtype=np.uint64)
    days = np.broadcast_to(np.asarray(day, dtype=np.int64), on_place.shape)
    placed = on_place != 0
    with np.errstate(over="ignore"):
        hashes = mix(on_place[placed] ^ mix(days[placed].view(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
                                            + np.uint64(0x9E3779B97F4A7C15)))
    return _digest(LINES, hashes).as_role(mode_role(mode_code(mode), DAYS_PREFIX))


def token_counts(tokens: np.ndarray) -> np.ndarray:
    """The non-zero tokens' counts: a (2, k) int64 table of (token as int64, count) (a partition's part of
    :func:`period_shapes`)."""
    tokens = np.asarray(tokens, dtype=np.uint64)
    tok, cnt = np.unique(tokens[tokens != 0], return_counts=True)
    return np.stack([tok.view(np.int64), cnt.astype(np.int64)])


def _merged_counts(tables: list[np.ndarray]) -> np.ndarray:
    """:func:`token_counts` tables added up."""
    both = np.concatenate([t for t in tables if t.size] or [np.zeros((2, 0), dtype=np.int64)], axis=1)
    tok, at = np.unique(both[0], return_inverse=True)
    return np.stack([tok, np.bincount(at, weights=both[1], minlength=tok.size).astype(np.int64)])


def period_shapes(mode: str, places: np.ndarray, names: np.ndarray | None = None) -> tuple[ContentDigest, ...]:
    """``pshape:<mode>`` (:data:`PSHAPE_PREFIX`): the period's tap-on counts per place (``places``, a
    :func:`token_counts` table), sorted, labels aside; for a :data:`PLACE_MODES` mode with ``names``, ``pnshape:``
    the same per stop name. Each over :data:`MIN_PERIOD_TAP_ONS` tap-ons and :data:`MIN_PERIOD_PLACES` places or
    more."""
    out = []
    tables = [(PSHAPE_PREFIX, places)] + ([(PNSHAPE_PREFIX, names)] if names is not None and mode in PLACE_MODES
                                          else [])
    for prefix, table in tables:
        counts = np.asarray(table)[1] if np.asarray(table).size else np.zeros(0, dtype=np.int64)
        if counts.sum() >= MIN_PERIOD_TAP_ONS and counts.size >= MIN_PERIOD_PLACES:
            out.append(_digest(LINES, _ranked(counts)).as_role(mode_role(mode_code(mode), prefix)))
    return tuple(out)


def union_shapes(tables: dict[str, tuple[np.ndarray, np.ndarray]], date: str | None = None,
                 ) -> tuple[ContentDigest, ...]:
    """Per union of the modes of ``tables`` (mode → its period's :func:`token_counts` of tap-on and of tap-off
    places): ``ushape:<modes>`` over two modes or more, the tap-on counts per place added up; and ``sshape:<modes>``
    over one mode or more, the tap-on and tap-off counts per place added up; each sorted, labels aside, over
    :data:`MIN_PERIOD_TAP_ONS` taps and :data:`MIN_PERIOD_PLACES` places or more (atk11). With ``date``, one day's
    (``…@<YYYYMMDD>``, over :data:`MIN_DAY_TAP_ONS` taps and :data:`MIN_SHAPE_PLACES` places: atk12)."""
    from itertools import combinations

    floor_taps, floor_places = (MIN_PERIOD_TAP_ONS, MIN_PERIOD_PLACES) if date is None else (MIN_DAY_TAP_ONS,
                                                                                            MIN_SHAPE_PLACES)
    at = "" if date is None else f"@{date}"

    modes = sorted((m for m, (on, off) in tables.items() if np.asarray(on).size or np.asarray(off).size),
                   key=lambda m: mode_role(mode_code(m), ""))  # a mode without a located tap takes no part
    out = []
    for k in range(1, len(modes) + 1):
        for union in combinations(modes, k):
            name = "+".join(mode_role(mode_code(m), "") for m in union)
            for prefix, parts in ((USHAPE_PREFIX, [tables[m][0] for m in union]),
                                  (SSHAPE_PREFIX, [t for m in union for t in tables[m]])):
                if prefix == USHAPE_PREFIX and k < 2:
                    continue  # one mode's is ``pshape``
                counts = _merged_counts(parts)[1]
                if counts.sum() >= floor_taps and counts.size >= floor_places:
                    out.append(_digest(LINES, _ranked(counts)).as_role(prefix + name + at))
    return tuple(out)


def _ranked(counts: np.ndarray) -> np.ndarray:
    """Counts sorted, each hashed with its rank."""
    counts = np.sort(np.asarray(counts).astype(np.uint64))[::-1]
    with np.errstate(over="ignore"):
        return mix(np.arange(counts.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                   ^ mix(counts * np.uint64(0xC2B2AE3D27D4EB4F) + np.uint64(0x165667B19E3779F9)))


def tap_ons_of_day(date: str, on_place: np.ndarray, mode: str,
                   on_name: np.ndarray | None = None) -> tuple[ContentDigest, ...]:
    """One day of one mode's tap-ons (``on_place``: :func:`place_tokens`), with no card, no time of day and no date
    in the value (the date is in the role only, to tell a claim's days apart): ``day:<mode>@<YYYYMMDD>``
    (:data:`DAY_PREFIX`), each tap-on as its place; ``shape:<mode>@<YYYYMMDD>`` (:data:`SHAPE_PREFIX`), the day's
    tap-on counts per place, sorted, the places' labels left out; and for a :data:`PLACE_MODES` mode, with
    ``on_name`` (:func:`tap_on_tokens`), ``nshape:`` the same per stop name. A shape over fewer than
    :data:`MIN_SHAPE_PLACES` places is left out; nothing under :data:`MIN_DAY_TAP_ONS` located tap-ons."""
    on_place = np.asarray(on_place, dtype=np.uint64)
    placed = on_place[on_place != 0]
    if placed.size < MIN_DAY_TAP_ONS:
        return ()
    role = f"{mode_role(mode_code(mode), '')}@{date}"
    with np.errstate(over="ignore"):
        out = [_digest(LINES, mix(placed ^ np.uint64(0xA0761D6478BD642F))).as_role(DAY_PREFIX + role)]
    shapes = [(SHAPE_PREFIX, placed)]
    if on_name is not None and mode in PLACE_MODES:
        on_name = np.asarray(on_name, dtype=np.uint64)
        shapes.append((NSHAPE_PREFIX, on_name[on_name != 0]))
    for prefix, tokens in shapes:
        if tokens.size >= MIN_DAY_TAP_ONS and np.unique(tokens).size >= MIN_SHAPE_PLACES:
            out.append(_digest(LINES, _ranked(np.unique(tokens, return_counts=True)[1])).as_role(prefix + role))
    return tuple(out)


def _set_hashes(line: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Per record (``line``: each token's record, ascending, every record from 0 present), the hash of the set of
    its non-zero tokens (as :func:`lines_of_records` hashes a line); a record without one hashes as no record
    (its hash is dropped by the caller through ``distinct``). Returns (hashes, distinct tokens per record)."""
    named = tokens != 0
    line, tokens = line[named], tokens[named]
    n = int(line[-1]) + 1 if line.size else 0
    if not line.size:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    code, distinct_tokens = pd.factorize(tokens.view(np.int64), sort=False)
    width = np.int64(len(distinct_tokens))
    key = np.sort(line * width + code, kind="stable")  # in record order already: runs of one record's codes
    key = key[np.r_[True, key[1:] != key[:-1]]]  # each (record, token) once
    line, token = key // width, distinct_tokens[key % width].view(np.uint64)
    at = np.searchsorted(line, np.arange(n + 1, dtype=np.int64))
    with np.errstate(over="ignore"):
        distinct = np.diff(at).astype(np.uint64)
        hashes = mix(_segment_sums(mix(token), at) ^ mix(distinct * np.uint64(0x2545F4914F6CDD1D)))
    return hashes, distinct


def card_sets(cards: np.ndarray, on_name: np.ndarray, on_place: np.ndarray, off_place: np.ndarray,
              mode: str) -> tuple[ContentDigest, ...]:
    """A mode's per-card set digests of its taps, given per clean row (any order; a 0 token: no such stop):
    ``ons:<mode>`` (the set of the card's tap-on location ids by name, what the sequences and trajectories from
    taps read), ``places:<mode>`` for the :data:`PLACE_MODES` (the set of its tap-on places, what the Opal release
    reads of its tap-ons) and ``stations:<mode>`` (the set of its tap-on and tap-off places, what a station set
    reads). Each as :func:`lines_of_records` digests such records: a record file of them matches. Few passes over
    the rows, whatever their number (the full-size week's bus rows are millions): one stable sort by card, then
    one sort of (card rank, token code) keys already in card order per digest. Empty digests are left out."""
    code = mode_code(mode)
    cards = np.asarray(cards, dtype=np.int64)
    if not cards.size:
        return ()
    order = np.argsort(cards, kind="stable")
    sorted_cards = cards[order]
    line = np.cumsum(np.r_[False, sorted_cards[1:] != sorted_cards[:-1]], dtype=np.int64)
    del sorted_cards
    out = []

    def digest(prefix: str, lines: np.ndarray, tokens: np.ndarray) -> None:
        hashes, distinct = _set_hashes(lines, tokens)
        d = _digest(LINES, hashes[distinct > 0]).as_role(mode_role(code, prefix))
        if d.records:
            out.append(d)

    digest(ONS_PREFIX, line, np.asarray(on_name, dtype=np.uint64)[order])
    on_place = np.asarray(on_place, dtype=np.uint64)[order]
    if mode in PLACE_MODES:
        digest(PLACES_PREFIX, line, on_place)
    both = np.empty(2 * line.size, dtype=np.int64)
    both[0::2], both[1::2] = line, line  # each row's tap-on and tap-off, in card order
    tokens = np.empty(2 * line.size, dtype=np.uint64)
    tokens[0::2], tokens[1::2] = on_place, np.asarray(off_place, dtype=np.uint64)[order]
    digest(STATIONS_PREFIX, both, tokens)
    return tuple(out)


def _shard(cards: np.ndarray, shards: int) -> np.ndarray:
    """A card's shard, as the card level's pairs are sharded (a bijective 64-bit mix, then modulo)."""
    from transit_release.mechanisms.contribution_bounding import _fmix64

    return (_fmix64(np.asarray(cards, dtype=np.int64).view(np.uint64).copy()) % np.uint64(shards)).astype(np.uint8)


def save_card_taps(path: Path, cards: np.ndarray, on_name: np.ndarray, on_place: np.ndarray,
                   off_place: np.ndarray, shards: int) -> None:
    """A partition's part of :func:`card_sets`: its rows' (card id, tap-on name token, tap-on place token, tap-off
    place token) at ``path`` (``.npy``: four rows, ordered by the card's shard) and its ``.offsets.npy`` (the
    ``shards + 1`` slice bounds): the gathering takes the period's rows one shard of cards at a time (a shard's
    cards are all its cards' rows, so the digests of the shards add up)."""
    cards = np.asarray(cards, dtype=np.int64)
    tokens = [np.asarray(t, dtype=np.uint64) for t in (on_name, on_place, off_place)]
    any_stop = (tokens[0] != 0) | (tokens[1] != 0) | (tokens[2] != 0)
    cards, tokens = cards[any_stop], [t[any_stop] for t in tokens]
    by_card = np.argsort(cards)  # each shard's rows by card: the gathering's sort then merges sorted runs
    cards, tokens = cards[by_card], [t[by_card] for t in tokens]
    shard = _shard(cards, shards)
    order = np.argsort(shard, kind="stable")  # a radix sort of one byte
    np.save(path, np.stack([cards[order], *(t[order].view(np.int64) for t in tokens)]))
    np.save(Path(path).with_suffix(".offsets.npy"), np.searchsorted(shard[order], np.arange(shards + 1)))


def _gather_card_sets(folder: Path) -> tuple[ContentDigest, ...]:
    """Per mode, :func:`card_sets` of the rows its partitions saved (:func:`save_card_taps`; a card's taps span
    its dates), one shard of cards at a time (the full-size week's bus rows are millions)."""
    by_mode_files: dict[str, list[Path]] = {}
    for f in sorted(Path(folder).glob("*.taps.npy")):
        by_mode_files.setdefault(f.name[:-len(".taps.npy")].rsplit("-", 3)[0], []).append(f)
    out = []
    for mode, files in sorted(by_mode_files.items()):
        offsets = [np.load(f.with_suffix(".offsets.npy")) for f in files]
        totals: dict[str, ContentDigest] = {}
        for s in range(offsets[0].size - 1):
            parts = []
            for f, o in zip(files, offsets):
                table = np.load(f, mmap_mode="r")
                parts.append(np.array(table[:, o[s]:o[s + 1]]))
                del table
            rows = np.concatenate(parts, axis=1)
            for d in card_sets(rows[0], *(rows[i].view(np.uint64) for i in (1, 2, 3)), mode):
                totals[d.role] = totals[d.role] + d if d.role in totals else d
        out.extend(d for _, d in sorted(totals.items(), key=lambda kv: CARD_SET_PREFIXES.index(
            kv[0].split(":")[0] + ":")))
    return tuple(d for d in out if d.records)


def card_sets_of_frame(clean: pd.DataFrame, stops: pd.DataFrame) -> tuple[ContentDigest, ...]:
    """Per mode the clean rows hold, :func:`card_sets` (``ons:<mode>``, ``places:<mode>``, ``stations:<mode>``)
    and :func:`tap_on_days` (``days:<mode>``),
    from the gate's clean trips in one frame and the validated stop table: what the kinds read of each card, and
    nothing more, so a re-extract that changes the times (seconds or minutes), empties the tap-offs (``ons``,
    ``places``), changes a postcode or a name's white space (``ons``), renames the bus stops (``places``), swaps
    each trip's tap-on and tap-off (``stations``) or renumbers the cards gives the same digests (a mode without
    such taps claims nothing). The streamed Opal release claims the same digests (:func:`save_card_taps`)."""
    from transit_release.inputs.screening import _ints, _ns
    from transit_release.preprocessing import _lookup, build_location_index

    modes = tuple(sorted(stops["mode"].dropna().astype(str).unique()))
    index = build_location_index(stops, modes)
    mode_all = clean["mode"].astype(str)
    at = pd.Categorical(mode_all, categories=list(modes)).codes.astype(np.int8)
    at = np.where(at < 0, len(modes), at).astype(np.int8)
    on_stop, off_stop = _ints(clean["tap_on_stop"]), _ints(clean["tap_off_stop"])
    off_present = (_ns(clean["tap_off_time"]) != np.iinfo(np.int64).min) & (off_stop >= 0)
    on_name = tap_on_tokens(index, on_stop, at)
    on_place = place_tokens(index, at, _lookup(index, on_stop, np.ones(on_stop.size, dtype=bool), at))
    off_place = place_tokens(index, at, _lookup(index, off_stop, off_present, at))
    cards = _ints(clean["card_id"])
    day = _ns(clean["tap_on_time"]) // 86_400_000_000_000
    out = []
    tables: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # per mode, its tap-on and tap-off places' counts
    for mode in sorted(set(mode_all.unique())):
        sel = (mode_all == mode).to_numpy()
        out.extend(card_sets(cards[sel], on_name[sel], on_place[sel], off_place[sel], mode))
        days = tap_on_days(day[sel], on_place[sel], mode)
        if days.records:
            out.append(days)
        for d in np.unique(day[sel]):
            on_day = day[sel] == d
            out.extend(tap_ons_of_day(pd.Timestamp(int(d), unit="D").strftime("%Y%m%d"), on_place[sel][on_day], mode,
                                      on_name[sel][on_day]))
        tables[mode] = (token_counts(on_place[sel]), token_counts(off_place[sel]))
        out.extend(period_shapes(mode, tables[mode][0], token_counts(on_name[sel])))
    daily = []
    for d in np.unique(day):
        on_day = day == d
        daily.extend(union_shapes(
            {mode: (token_counts(on_place[sel]), token_counts(off_place[sel]))
             for mode in sorted(set(mode_all[on_day].unique())) for sel in [on_day & (mode_all == mode).to_numpy()]},
            pd.Timestamp(int(d), unit="D").strftime("%Y%m%d")))
    return (*out, *union_shapes(tables), *daily)


def of_clean_trips(clean: pd.DataFrame, stops: pd.DataFrame) -> InputContent:
    """The content of a tap file as the passenger kinds read it (the gate's clean trips in one frame, ``stops``
    the validated stop table): its trips digests and, per mode, its cards' tap-on location sets
    (:func:`card_sets_of_frame`)."""
    from transit_release.inputs.screening import _ints

    return InputContent((*trips_of_frame(clean, stops), *card_sets_of_frame(clean, stops)),
                        card_ids(_ints(clean["card_id"])))


# ---- a tap file streamed partition by partition (the Opal release) -----------------------------------------------

def save_partition(folder: Path, mode: str, date: str, digest: ContentDigest, cards: np.ndarray,
                   named: ContentDigest | None = None, taps: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                   shards: int = 1, days: ContentDigest | None = None, day: tuple[ContentDigest, ...] = (),
                   counts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
    """One partition's digest (and ``named``, the same with its stops keyed by location id: :data:`NAMED`),
    distinct card ids and, with ``taps`` (each row's tap-on name token, tap-on and tap-off place tokens:
    :func:`tap_on_tokens`, :func:`place_tokens`), its rows' part of the per-card set digests in ``shards`` card
    shards (:func:`save_card_taps`), under the run's private work directory."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    np.save(folder / f"{mode}-{date}.cards.npy", card_ids(cards))
    if taps is not None:
        save_card_taps(folder / f"{mode}-{date}.taps.npy", cards, *taps, shards)
    if counts is not None:  # the partition's part of the shapes (:func:`token_counts` of its tap-ons' places and
        for suffix, table in zip(("pcount", "ncount", "ocount"), counts):  # stop names, and its tap-offs' places)
            np.save(folder / f"{mode}-{date}.{suffix}.npy", table)
    if days is not None:  # the partition's part of ``days:<mode>``
        np.save(folder / f"{mode}-{date}.days.npy", np.array([days.records, *days.lanes], dtype=np.uint64))
    for d in day:  # the partition's day, whatever its date (``day:``, ``shape:<mode>@<date>``)
        np.save(folder / f"{mode}-{date}.{d.role.split(':')[0]}.npy", np.array([d.records, *d.lanes], dtype=np.uint64))
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
    days: dict[str, ContentDigest] = {}
    for f in sorted(folder.glob("*.days.npy")):
        mode = f.name[:-len(".days.npy")].rsplit("-", 3)[0]
        n, a, b = (int(x) for x in np.load(f))
        part = ContentDigest(mode_role(mode_code(mode), DAYS_PREFIX), n, (a, b))
        days[mode] = days[mode] + part if mode in days else part
    sets: dict[str, list[ContentDigest]] = {}  # per mode: its card sets, then its days (as one frame gives them)
    for d in _gather_card_sets(folder):
        sets.setdefault(d.role.split(":", 1)[1], []).append(d)
    for mode, d in days.items():
        if d.records:
            sets.setdefault(mode_role(mode_code(mode), ""), []).append(d)
    for f in sorted(folder.glob("*.day.npy")):  # each day's pair, as one frame gives them
        for prefix in DATED_PREFIXES:
            g = f.with_name(f.name.replace(".day.npy", f".{prefix[:-1]}.npy"))
            if not g.exists():  # a day of too few places claims no shape
                continue
            mode, date = f.name[:-len(".day.npy")].rsplit("-", 1)
            n, a, b = (int(x) for x in np.load(g))
            key = mode_role(mode_code(mode), "")
            sets.setdefault(key, []).append(ContentDigest(f"{prefix}{key}@{date}", n, (a, b)))
    counted: dict[str, dict[str, list[np.ndarray]]] = {}  # per mode, its partitions' count tables, by kind
    by_date: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}  # per date, each mode's tap-on, tap-off
    for f in sorted(folder.glob("*.pcount.npy")):
        mode, date = f.name[:-len(".pcount.npy")].rsplit("-", 1)
        tables = {kind: np.load(f.with_name(f.name.replace(".pcount.npy", f".{kind}count.npy"))) for kind in "pno"}
        for kind, table in tables.items():
            counted.setdefault(mode, {"p": [], "n": [], "o": []})[kind].append(table)
        by_date.setdefault(date, {})[mode] = (tables["p"], tables["o"])
    for mode, tables in sorted(counted.items()):
        for d in period_shapes(mode, _merged_counts(tables["p"]), _merged_counts(tables["n"])):
            sets.setdefault(mode_role(mode_code(mode), ""), []).append(d)
    per_mode = tuple(d for m in sorted(sets) for d in sets[m])
    unions = [*union_shapes({mode: (_merged_counts(t["p"]), _merged_counts(t["o"])) for mode, t in counted.items()}),
              *(d for date, tables in sorted(by_date.items()) for d in union_shapes(tables, date))]
    return InputContent((*by_mode(*sums["digest"], named=sums.get("named")), *per_mode, *unions),
                        merge_card_ids(parts))

