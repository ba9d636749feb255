"""Public location universes: every location a release may ever mention, given as an input.

A mechanism that can publish a location must be able to publish it whether or
not anybody used it; which locations are possible is therefore a **public
input**, fixed before the data is read, never the set of tokens found in the
data (one passenger at a station nobody else rode would otherwise put that
station into the universe, and into the release, with probability 1).

Three sources, each public:

* a locations file: one location id per line (``#`` or ``%`` starts a comment);
* a taxonomy file ``location,group[,line]`` (e.g. station,line, or station,group,line):
  its locations are the universe and its groups (and, with a ``line`` column, the
  lines above them) the taxonomy;
* the stop table, for releases built from tap data: the names of one mode's stops
  (:func:`from_stop_table`: sequences, trajectories), or every location of some modes as
  ``mode:location`` with the Opal release's locations — a bus stop's postcode,
  another mode's stop name — (:func:`from_stop_locations`: station sets).

Ids are sorted, so the mapping id → index, the fan-out taxonomy built from it
and everything computed from its size depend only on the list.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from transit_release.errors import InputDataError
from transit_release.inputs.text import INVISIBLE_CHECK, has_invisible
from transit_release.preprocessing import build_location_index

#: A location id: no white space, no '@' (the trajectory format's separator), not starting a comment.
_ID = re.compile(r"[^\s@#%][^\s@]*")
MAX_LOCATIONS = 1_000_000


@dataclass(frozen=True)
class LocationUniverse:
    """The public list of locations (sorted, distinct) and, from a taxonomy, each one's group (and line)."""

    ids: tuple[str, ...]
    source: str
    groups: tuple[str, ...] | None = None  # group of each id, from a taxonomy file
    lines: tuple[str, ...] | None = None  # the level above the groups (a taxonomy file's ``line`` column)

    def __post_init__(self):
        if not self.ids:
            raise InputDataError(f"{self.source}: the location universe is empty")
        if list(self.ids) != sorted(set(self.ids)):
            raise ValueError("universe ids must be sorted and distinct")
        if self.lines is not None and self.groups is None:
            raise ValueError("a universe with lines needs groups")

    def __len__(self) -> int:
        return len(self.ids)

    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.ids)}

    @property
    def sha256(self) -> str:
        """Fingerprint of the public list (ids and groups), for manifests: same list, same fingerprint."""
        h = hashlib.sha256()
        for i, t in enumerate(self.ids):
            line = b"\x1f" + self.lines[i].encode("utf-8") if self.lines else b""
            h.update(t.encode("utf-8") + b"\x1f" + (self.groups[i].encode("utf-8") if self.groups else b"") + line
                     + b"\n")
        return h.hexdigest()

    @property
    def taxonomy_levels(self) -> list[tuple[str, ...]]:
        """Each location's label per taxonomy level, coarsest first: ``[lines, groups]``, ``[groups]`` or ``[]``.
        A node is a label under its parent (a group's name may repeat on another line)."""
        return [level for level in (self.lines, self.groups) if level is not None]

    def describe(self) -> dict:
        """What a manifest says about the universe (public: it is an input)."""
        out = {"locations": len(self.ids), "source": self.source, "sha256": self.sha256,
               "groups": len(set(self.groups)) if self.groups else None}
        if self.lines:
            out["lines"] = len(set(self.lines))
        return out


def _check_ids(ids: list[str], lines: list[int], where: str) -> None:
    bad = [n for t, n in zip(ids, lines) if not _ID.fullmatch(t)]
    if bad:
        raise InputDataError(f"{where}: {len(bad)} location id(s) contain white space or '@' or start with '#' or "
                             f"'%', first at line(s) {', '.join(map(str, bad[:5]))}")
    hidden = [n for t, n in zip(ids, lines) if has_invisible(t)]
    if hidden:
        raise InputDataError(f"{where}: {len(hidden)} location id(s) {INVISIBLE_CHECK.replace('holds', 'hold', 1)}, "
                             f"first at line(s) {', '.join(map(str, hidden[:5]))}")
    seen: dict[str, int] = {}
    repeated = []
    for t, n in zip(ids, lines):
        if t in seen:
            repeated.append(n)
        seen.setdefault(t, n)
    if repeated:
        raise InputDataError(f"{where}: {len(repeated)} location id(s) listed twice, first repeat at line(s) "
                             f"{', '.join(map(str, repeated[:5]))}")
    if len(ids) > MAX_LOCATIONS:
        raise InputDataError(f"{where}: {len(ids):,} locations; at most {MAX_LOCATIONS:,} are supported")


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file (a BOM is dropped); a missing, unreadable or non-UTF-8 file is named, never quoted."""
    if not path.is_file():
        raise InputDataError(f"{what} {path}: not found")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputDataError(f"{what} {path.name}: the text is not valid UTF-8") from None
    except OSError as exc:
        raise InputDataError(f"{what} {path.name}: cannot be read ({exc.strerror})") from None


def require_public(universe, caller: str) -> "LocationUniverse":
    """``universe`` itself, if it is the public :class:`LocationUniverse` a reader must be given (never a
    vocabulary taken from the data)."""
    if not isinstance(universe, LocationUniverse):
        raise TypeError(f"{caller} needs the public LocationUniverse (never the data's own tokens)")
    return universe


def record_lines(path: str | Path, what: str) -> Iterator[tuple[int, list[str]]]:
    """(line number from 1, whitespace-separated tokens) of every record line of a one-record-a-line file
    (sequences, trajectories, sets): lines starting with ``%`` or ``#`` are comments and skipped, an empty line
    gives no tokens (the reader quarantines it). The file is read as :func:`read_text` reads it."""
    for number, line in enumerate(read_text(Path(path), what).splitlines(), start=1):
        stripped = line.strip()
        if not stripped.startswith(("%", "#")):
            yield number, stripped.split()


def read_locations_file(path: str | Path) -> LocationUniverse:
    """One location id per line; blank lines and lines starting with ``#`` or ``%`` are skipped."""
    path = Path(path)
    where = f"locations file {path.name}"
    ids, lines = [], []
    for number, line in enumerate(read_text(path, "locations file").splitlines(), start=1):
        token = line.strip()
        if not token or token.startswith(("#", "%")):
            continue
        ids.append(token)
        lines.append(number)
    _check_ids(ids, lines, where)
    return LocationUniverse(tuple(sorted(ids)), where)


def read_taxonomy_file(path: str | Path) -> LocationUniverse:
    """A CSV with columns ``location,group`` first: the universe and its groups. A ``line`` column, if any, is the
    level above the groups (stations → groups → lines); other columns (e.g. a name) are ignored."""
    path = Path(path)
    where = f"taxonomy file {path.name}"
    read_text(path, "taxonomy file")  # existence and encoding, with the file's own message
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        raise InputDataError(f"{where}: cannot be read as CSV") from None
    if list(df.columns[:2]) != ["location", "group"]:
        raise InputDataError(f"{where}: expected the columns 'location,group' first")
    ids = [t.strip() for t in df["location"]]
    groups = [g.strip() for g in df["group"]]
    lines = list(range(2, len(ids) + 2))
    _check_ids(ids, lines, where)
    empty = [n for g, n in zip(groups, lines) if not g]
    if empty:
        raise InputDataError(f"{where}: {len(empty)} location(s) have no group, first at line(s) "
                             f"{', '.join(map(str, empty[:5]))}")
    parents = [t.strip() for t in df["line"]] if "line" in df.columns else None
    if parents is not None and not all(parents):
        empty = [n for g, n in zip(parents, lines) if not g]
        raise InputDataError(f"{where}: {len(empty)} location(s) have an empty 'line', first at line(s) "
                             f"{', '.join(map(str, empty[:5]))}")
    order = sorted(range(len(ids)), key=ids.__getitem__)
    return LocationUniverse(tuple(ids[i] for i in order), where, tuple(groups[i] for i in order),
                            tuple(parents[i] for i in order) if parents is not None else None)


def stop_location_id(name: str) -> str:
    """A stop name as a location id: white space runs become ``_`` (ids are space-separated in sequence files)."""
    return re.sub(r"\s+", "_", str(name).strip())


def _refuse_merged(names: set[str], to_id, what: str) -> None:
    """Two distinct names must never become one location id (their passengers' taps would be counted as one
    place's): the stop-table contract refuses such names (:func:`transit_release.inputs.text.name_skeleton`); this
    is the universe's own guard, for a table that reached it another way."""
    ids: dict[str, str] = {}
    merged = 0
    for n in sorted(names):
        merged += to_id(n) in ids
        ids.setdefault(to_id(n), n)
    if merged:
        raise InputDataError(f"{what}: {merged} name(s) would be one location id with another (they differ only by "
                             "white space or '_', which an id writes as one '_'): rename them so each stop keeps "
                             "its own location")


def from_stop_table(stops: pd.DataFrame, mode: str, name: str = "stop table") -> LocationUniverse:
    """The names of one mode's stops (a validated stop table) as ids: the universe of releases built from taps."""
    given = set(stops.loc[stops["mode"] == mode, "name"].dropna().astype(str))
    _refuse_merged(given, stop_location_id, f"{name}: stop names of mode '{mode}'")
    names = sorted(set(n for n in map(stop_location_id, given) if n))
    if not names:
        raise InputDataError(f"{name}: no named stop of mode '{mode}'")
    bad = [n for n in names if not _ID.fullmatch(n)]
    if bad:
        raise InputDataError(f"{name}: {len(bad)} stop name(s) of mode '{mode}' contain '@' or start with '#' or '%'")
    return LocationUniverse(tuple(names), f"{name} ({mode} stop names)")


def with_taxonomy(universe: LocationUniverse, taxonomy: LocationUniverse) -> LocationUniverse:
    """A universe given on its own, with the groups of a taxonomy that must cover exactly its locations."""
    if set(universe.ids) != set(taxonomy.ids):
        missing = len(set(universe.ids) - set(taxonomy.ids))
        extra = len(set(taxonomy.ids) - set(universe.ids))
        raise InputDataError(f"{taxonomy.source} does not match {universe.source}: {missing} location(s) of the "
                             f"universe have no group, {extra} location(s) of the taxonomy are not in the universe")
    return LocationUniverse(universe.ids, universe.source, taxonomy.groups, taxonomy.lines)


def universe_required(taxonomy_flag: str = "--taxonomy") -> str:
    """The refusal of a release given no public universe."""
    return (f"give the public location universe: --locations FILE (one location id per line) or {taxonomy_flag} "
            "FILE (location,group; its locations are the universe); the universe is never read off the data")


def load_universe(locations: str | Path | None, taxonomy: str | Path | None,
                  taxonomy_flag: str = "--taxonomy") -> LocationUniverse:
    """The universe of a release from files: a locations file, a taxonomy file's locations, or both (they must
    agree; the taxonomy's groups and lines go with the locations file's list)."""
    if locations is None and taxonomy is None:
        raise InputDataError(universe_required(taxonomy_flag))
    tax = read_taxonomy_file(taxonomy) if taxonomy else None
    if locations is None:
        return tax
    loc = read_locations_file(locations)
    return with_taxonomy(loc, tax) if tax is not None else loc


def location_id(mode: str, location: str) -> str:
    """A mode-qualified location id, ``mode:location`` (white space runs in the location become ``_``)."""
    return f"{mode}:{stop_location_id(location)}"


def from_stop_locations(stops: pd.DataFrame, modes: Sequence[str] | None = None,
                        name: str = "stop table") -> LocationUniverse:
    """Every location of ``modes`` (default: every mode the table lists) as ``mode:location`` ids.

    A location is what the Opal release counts (:func:`transit_release.preprocessing.build_location_index`):
    a bus stop's postcode, another mode's stop name; a stop without one is no location. The universe of
    station sets built from taps (:func:`transit_release.inputs.sets.sets_from_trips` maps every tap with
    the same index, so its items are exactly these ids). Public: the stop table only, never the trips.
    """
    if modes is None:
        modes = sorted(stops["mode"].dropna().astype(str).unique())
    modes = tuple(sorted(set(modes)))
    index = build_location_index(stops, modes)
    for m in modes:
        _refuse_merged(set(map(str, index.vocab[m])), stop_location_id, f"{name}: locations of mode '{m}'")
    ids = sorted({location_id(m, loc) for m in modes for loc in index.vocab[m]} - {""})
    if not ids:
        raise InputDataError(f"{name}: no location of mode(s) {', '.join(modes) or '(none)'}")
    bad = [t for t in ids if not _ID.fullmatch(t)]
    if bad:
        raise InputDataError(f"{name}: {len(bad)} location(s) of mode(s) {', '.join(modes)} contain '@'")
    return LocationUniverse(tuple(ids), f"{name} ({', '.join(modes)} locations, as mode:location)")
