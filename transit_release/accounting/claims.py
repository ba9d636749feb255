"""One person, one population: what each release read, kept privately, and the refusal of an overlap.

A person's loss composes every release of their population (:mod:`transit_release.accounting.person`). That holds
only if the people of one population are never released under another, so every release records, before it is
charged, what it read (its *claim*):

* a keyed fingerprint of each private input on its own — the trips, sequence, trajectory or set file — over its
  order-independent content (:mod:`transit_release.inputs.content` says precisely what is compared: the clean rows
  or valid records as a multiset, never the bytes, so rows reordered, a comment line, a trailing newline, another
  format or a copied stop table do not change it; an id-less file also claims every record line it holds before
  the universe filter, whichever kind reads it, and a tap file each mode's clean rows on their own: atk40 N1-N3;
  sequences and trajectories, from a file or built from taps, also as their mechanism reads them, each record cut
  to its public cut length: atk4);
* where the records carry card ids (a tap file), keyed hashes of the distinct card ids it read: SipHash-2-4 under
  a 128-bit key derived from the home's secret (``private/fingerprint.key``), 64 bits each.

A release whose claim **overlaps** a release of another population that the ledger charged — one of its input
fingerprints equal to one of that release's, or one card hash in common — is refused (exit 3, nothing charged)
with one line naming the earlier release; never a card id. The check runs before the charge and again inside the
ledger's write transaction (:func:`overlap_check`, part of the charge's check), so two releases of different
populations charged at the same time cannot both pass. The same records under the same population compose, as
before.

**Storage.** ``<home>/private/claims.sqlite`` (0600; never under ``releases/``, never in MLflow): per attempt of a
release (its id and a random token), its input fingerprints and, as one blob of sorted little-endian uint64, the
card hashes that no release of *its own population* charged before it had (a weekly release of the same riders
stores only the cards new to its population: the store grows with the distinct cards ever released, 8 bytes
each, not with the releases). Rows of an attempt whose release the ledger never charged are ignored (and removed
by the run that was refused); a release's population is read from the ledger, never from this file. The checks
compare sorted arrays (a merge by binary search of sorted needles): no per-card Python work.

This is not the ledger: the ledger's schema is checked exactly and is left as it is; losing this file loses
the overlap check for the releases it recorded (docs/threat-model.md lists it among what an operator with bad
intent can still do).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from transit_release.errors import PopulationOverlapError, RecordsOfAnotherPeriodError
from transit_release.inputs.content import (ANY_MODE_PREFIXES, CUT_PREFIX, CUT_ROLES, DATED_PREFIXES, DAY_PREFIX,
                                             DAYS_PREFIX, LINES, MODE_PREFIX, NAMED, NAMED_PREFIX, ONS_PREFIX,
                                             NSHAPE_PREFIX, PLACES_PREFIX, PNSHAPE_PREFIX, PSHAPE_PREFIX, SHAPE_PREFIX,
                                             SSHAPE_PREFIX, STATIONS_PREFIX, USHAPE_PREFIX, ContentDigest,
                                             InputContent)
from transit_release.inputs.refusals import refusal

#: The store's file name under ``private/``.
STORE = "claims.sqlite"
FINGERPRINT_SCHEME = "claim-v1"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    attempt     TEXT PRIMARY KEY,
    release_id  TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    cards       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_release ON attempts (release_id);
CREATE TABLE IF NOT EXISTS inputs (
    attempt     TEXT NOT NULL,
    role        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    PRIMARY KEY (attempt, role)
);
CREATE INDEX IF NOT EXISTS inputs_fingerprint ON inputs (fingerprint);
CREATE TABLE IF NOT EXISTS card_hashes (
    attempt TEXT PRIMARY KEY,
    hashes  BLOB NOT NULL
);
"""


def _derive(key: bytes, label: str) -> bytes:
    return hmac.new(key, f"transit-release/claims/{label}".encode("ascii"), hashlib.sha256).digest()


#: The key of a claim's fingerprint taken whatever the digest's mode (``*ons:train``: :func:`claim_of`).
ANY_MODE = "*"
#: Every label-free count vector of tap-ons (a day's or the period's, of one mode or a union, per place or per bus
#: stop name) is one family: a regrouped, renamed or re-dated file's are another's (bus relabelled as train with
#: its stops renamed, atk10; a one-day extract's period is the original's day, atk12).
_FAMILY = {NSHAPE_PREFIX[:-1]: SHAPE_PREFIX[:-1], PNSHAPE_PREFIX[:-1]: SHAPE_PREFIX[:-1],
           PSHAPE_PREFIX[:-1]: SHAPE_PREFIX[:-1], USHAPE_PREFIX[:-1]: SHAPE_PREFIX[:-1]}


def input_fingerprint(key: bytes, digest: ContentDigest, any_mode: bool = False) -> str:
    """The keyed fingerprint of one private input's content (HMAC-SHA-256 of its digest under a key derived from
    the home's secret); ``any_mode``: of a digest whose value carries no mode
    (:data:`~transit_release.inputs.content.ANY_MODE_PREFIXES`), with its role's mode left out, so it equals the
    same content's of any mode (a re-extract that relabels a mode: atk5)."""
    role = _FAMILY.get(digest.role.split(":", 1)[0], digest.role.split(":", 1)[0]) + ":" + ANY_MODE if any_mode \
        else digest.role
    body = json.dumps([role, digest.records, *digest.lanes], separators=(",", ":"))
    mac = hmac.new(_derive(key, "input"), body.encode("ascii"), hashlib.sha256).hexdigest()
    return f"{FINGERPRINT_SCHEME}:{role}:{mac}"


def card_hashes(key: bytes, cards: np.ndarray) -> np.ndarray:
    """Keyed 64-bit hashes (SipHash-2-4, 128-bit key derived from the home's secret) of distinct int64 card ids,
    sorted. Each id is hashed as its 8 little-endian bytes (trailing zero bytes dropped: still one string per id)."""
    from pandas._libs.hashing import hash_object_array

    cards = np.asarray(cards, dtype="<i8")
    if cards.size == 0:
        return np.zeros(0, dtype=np.uint64)
    sip_key = _derive(key, "card-ids")[:16].decode("latin1")
    hashed = hash_object_array(cards.view("S8").astype(object), sip_key, "latin1")
    return np.sort(hashed.astype(np.uint64, copy=False))


def _common(a: np.ndarray, b: np.ndarray) -> int:
    """How many values two sorted arrays of distinct uint64 share."""
    if a.size == 0 or b.size == 0:
        return 0
    if a.size > b.size:
        a, b = b, a
    at = np.searchsorted(b, a)
    at[at == b.size] = 0
    return int((b[at] == a).sum())


def _without(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The values of sorted ``a`` not in sorted ``b``."""
    if a.size == 0 or b.size == 0:
        return a
    at = np.searchsorted(b, a)
    at[at == b.size] = 0
    return a[b[at] != a]


@dataclass(frozen=True)
class Claim:
    """What a release read, keyed: one fingerprint per private input (by role) and the sorted card hashes."""

    fingerprints: dict[str, str]
    cards: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    n_cards: int = 0  # every card the release read (``cards`` may hold only those new to its population)


def claim_of(key: bytes, content: InputContent) -> Claim:
    """Key ``content`` (:class:`~transit_release.inputs.content.InputContent`) with the home's secret."""
    hashes = card_hashes(key, content.cards)
    fingerprints = {d.role: input_fingerprint(key, d) for d in content.digests
                    if not d.role.startswith(DATED_PREFIXES)}
    # whatever the mode (and, for a day's tap-ons, whatever the date: those only so)
    fingerprints.update({ANY_MODE + d.role: input_fingerprint(key, d, any_mode=True) for d in content.digests
                         if d.role.startswith((*ANY_MODE_PREFIXES, *DATED_PREFIXES))})
    return Claim(fingerprints, hashes, int(hashes.size))


@dataclass(frozen=True)
class Overlap:
    """The first charged release of another population that read some of the same records."""

    release_id: str
    population: str
    roles: tuple[str, ...]  # inputs whose content is the same
    cards: int  # card hashes in common (at least)

    def describe(self, n_cards: int) -> str:
        parts = what_matched(self.roles)
        if self.cards:
            parts.append(f"at least {self.cards:,} of the {n_cards:,} cards" if n_cards else
                         f"at least {self.cards:,} cards")
        return " and ".join(parts)


#: In words, a kind's records as its mechanism reads them (``cut:<kind>``, atk4).
_AS_READ = {
    CUT_PREFIX + "sequences": "the same sequences as the mechanism reads them (each cut to the first locations it "
                              "keeps: the prefix tree's height, the n-gram model's lmax)",
    CUT_PREFIX + "trajectories": "the same trajectories as the mechanism reads them (each cut to its first h "
                                 "points, h the release's height)",
}


def what_matched(roles: Iterable[str]) -> list[str]:
    """In words, the inputs found the same (never a record): the most precise match said, the coarser ones it implies
    left out (the per-mode digests of a tap file the same trips imply; a record file's lines its content implies)."""
    roles = {r.removeprefix(ANY_MODE) for r in roles}
    parts = [f"the same {role} file content" for role in sorted(roles & {"sequences", "trajectories", "sets"})]
    parts += [_AS_READ[role] for role in sorted(roles & set(CUT_ROLES))
              if role[len(CUT_PREFIX):] not in roles]  # the same records imply the same records cut
    if LINES in roles and not parts:
        parts.append("the same record lines (each line's location ids, in any order, whichever kind read them)")
    if "trips" in roles:
        parts.append("the same trips (its clean rows, in any order)")
    else:
        modes = sorted(r[len(MODE_PREFIX):] for r in roles if r.startswith(MODE_PREFIX))
        if modes:
            which = "that mode" if len(modes) == 1 else "those modes"
            parts.append(f"the same {', '.join(modes)} trips (the clean rows of {which}, in any order)")
        elif NAMED in roles:
            parts.append("the same trips with the stops as location ids (its clean rows, in any order, a stop "
                         "name's white space aside)")
        else:
            modes = sorted(r[len(NAMED_PREFIX):] for r in roles if r.startswith(NAMED_PREFIX))
            if modes:
                which = "that mode" if len(modes) == 1 else "those modes"
                parts.append(f"the same {', '.join(modes)} trips with the stops as location ids (the clean rows "
                             f"of {which}, in any order, a stop name's white space aside)")
            else:
                parts.extend(_card_sets_matched(roles))
    return parts


#: In words, each per-card set digest of a tap file (:data:`~transit_release.inputs.content.CARD_SET_PREFIXES`).
_CARD_SETS = {
    ONS_PREFIX: "tap-ons per card (each card's set of tap-on stations by name; times and tap-offs aside)",
    PLACES_PREFIX: "tap-ons per card (each card's set of tap-on locations as the Opal release counts them, a bus "
                   "stop's postcode; stop names, times and tap-offs aside)",
    STATIONS_PREFIX: "stations per card (each card's set of tap-on and tap-off locations; times and which tap "
                     "aside)",
    DAYS_PREFIX: "tap-ons by day and location (each tap-on's date and location, whatever its card and its time "
                 "of day)",
    DAY_PREFIX: "tap-ons of a day (one day's tap-ons by location, whatever the date, the cards and the times of "
                "day)",
    SHAPE_PREFIX: "tap-on counts of a day (one day's tap-ons counted per location, whatever the locations' "
                  "names, the date, the cards and the times of day)",
    NSHAPE_PREFIX: "tap-on counts of a day by stop name (one day's tap-ons counted per stop name, whatever the "
                   "names, the postcodes, the date, the cards and the times of day)",
    PSHAPE_PREFIX: "tap-on counts of the period (its tap-ons counted per location, whatever the locations' names, "
                   "the cards and the times)",
    PNSHAPE_PREFIX: "tap-on counts of the period by stop name (its tap-ons counted per stop name, whatever the "
                    "names, the postcodes, the cards and the times)",
    USHAPE_PREFIX: "tap-on counts over those modes together (the period's or one day's tap-ons counted per "
                   "location, whatever the modes' and locations' names, the cards and the times)",
    SSHAPE_PREFIX: "tap-on and tap-off counts (the period's or one day's taps counted per location, whichever tap, "
                   "whatever the locations' names, the cards and the times)",
}


def _card_sets_matched(roles: set[str]) -> list[str]:
    """The first per-card set digest (or, failing those, the tap-ons by day) found the same, in words (the others
    say less)."""
    for prefix, words in _CARD_SETS.items():
        modes = sorted({m for r in roles if r.startswith(prefix) for m in r[len(prefix):].split("@")[0].split("+")})
        if modes:
            return [f"the same {', '.join(modes)} {words}"]
    return []


def charged_populations(entries: Iterable) -> dict[str, str]:
    """Release id → population of every release the ledger charged, in ledger order (spends only)."""
    out: dict[str, str] = {}
    for e in entries:
        if getattr(e, "entry_type", "spend") != "spend":
            continue
        ev = e.event() if hasattr(e, "event") else e
        out.setdefault(ev.release_id, ev.population)
    return out


class ClaimStore:
    """The home's private store of claims (module docstring)."""

    def __init__(self, path: str | Path, key: bytes, timeout_s: float = 60.0):
        self.path = Path(path)
        self.key = key
        self.timeout_s = timeout_s

    @classmethod
    def of(cls, home) -> "ClaimStore":
        return cls(home.private / STORE, home.fingerprint_key())

    def _connect(self, write: bool = False) -> sqlite3.Connection:
        if not write and not self.path.exists():
            return sqlite3.connect(":memory:")  # nothing recorded yet: an empty store, nothing created
        if write and not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        con = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        if write:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            con.executescript(_SCHEMA)
        return con

    @staticmethod
    def _tables(con: sqlite3.Connection) -> bool:
        return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'attempts'").fetchone() is not None

    def _attempts(self, con: sqlite3.Connection, release_ids: Sequence[str]) -> dict[str, list[str]]:
        """Release id → its recorded attempts, for ``release_ids``."""
        out: dict[str, list[str]] = {}
        if not release_ids or not self._tables(con):
            return out
        ids = list(release_ids)
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            for attempt, rid in con.execute(
                    f"SELECT attempt, release_id FROM attempts WHERE release_id IN ({','.join('?' * len(chunk))}) "
                    "ORDER BY recorded_at", chunk):
                out.setdefault(rid, []).append(attempt)
        return out

    @staticmethod
    def _hashes(con: sqlite3.Connection, attempt: str) -> np.ndarray:
        row = con.execute("SELECT hashes FROM card_hashes WHERE attempt = ?", (attempt,)).fetchone()
        return np.frombuffer(row[0], dtype="<u8").astype(np.uint64) if row else np.zeros(0, dtype=np.uint64)

    def record(self, release_id: str, claim: Claim, same_population: Sequence[str]) -> str:
        """Write ``claim`` as a new attempt of ``release_id`` before its charge; ``same_population``: the releases
        of its population the ledger charged (their cards are not stored again). Returns the attempt's token."""
        attempt = f"{release_id}.{secrets.token_hex(8)}"
        now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        with closing(self._connect(write=True)) as con:
            known = self._attempts(con, list(same_population))
            seen = [self._hashes(con, a) for attempts in known.values() for a in attempts]
            cards = claim.cards
            if seen and cards.size:
                cards = _without(cards, np.sort(np.concatenate(seen)))
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("INSERT INTO attempts (attempt, release_id, recorded_at, cards) VALUES (?, ?, ?, ?)",
                            (attempt, release_id, now, claim.n_cards))
                con.executemany("INSERT INTO inputs (attempt, role, fingerprint) VALUES (?, ?, ?)",
                                [(attempt, role, fp) for role, fp in sorted(claim.fingerprints.items())])
                con.execute("INSERT INTO card_hashes (attempt, hashes) VALUES (?, ?)",
                            (attempt, cards.astype("<u8").tobytes()))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return attempt

    def claim(self, attempt: str) -> Claim:
        """What an attempt recorded (its cards: those new to its population when it was recorded)."""
        with closing(self._connect()) as con:
            if not self._tables(con):
                return Claim({})
            row = con.execute("SELECT cards FROM attempts WHERE attempt = ?", (attempt,)).fetchone()
            fps = dict(con.execute("SELECT role, fingerprint FROM inputs WHERE attempt = ?", (attempt,)).fetchall())
            return Claim(fps, self._hashes(con, attempt), int(row[0]) if row else 0)

    def forget(self, attempt: str) -> None:
        """Remove an attempt that was refused before its charge (best effort: a row left of a release never
        charged is ignored anyway)."""
        if not self.path.exists():
            return
        with closing(self._connect(write=True)) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                for table in ("attempts", "inputs", "card_hashes"):
                    con.execute(f"DELETE FROM {table} WHERE attempt = ?", (attempt,))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def overlap(self, claim: Claim, others: dict[str, str]) -> Overlap | None:
        """The first release among ``others`` (release id → population, in ledger order: the charged releases of
        other populations) whose recorded claim shares an input fingerprint or a card hash with ``claim``."""
        if not others:
            return None
        with closing(self._connect()) as con:
            attempts = self._attempts(con, list(others))
            if not attempts:
                return None
            mine = set(claim.fingerprints.values())
            for rid, population in others.items():
                roles, common = set(), 0
                for attempt in attempts.get(rid, ()):
                    for role, fp in con.execute("SELECT role, fingerprint FROM inputs WHERE attempt = ?", (attempt,)):
                        if fp in mine:
                            roles.add(role)
                    if claim.cards.size:
                        common += _common(claim.cards, self._hashes(con, attempt))
                if roles or common:
                    return Overlap(rid, population, tuple(sorted(roles)), common)
        return None


def refuse_overlap(store: ClaimStore, claim: Claim, existing: Iterable, events: Sequence) -> None:
    """Refuse (:class:`~transit_release.errors.PopulationOverlapError`, exit 3) a release whose ``claim`` overlaps
    a release of another population the ledger charged (``existing``: its entries). A data-dependent refusal
    (registered: ``population-overlap``): it refuses, it never publishes."""
    if not events:
        return
    release_id, population = events[0].release_id, events[0].population
    others = {rid: p for rid, p in charged_populations(existing).items() if p != population and rid != release_id}
    found = store.overlap(claim, others)
    if found is not None:
        raise refusal("population-overlap", PopulationOverlapError(
            f"release '{release_id}' of population '{population}' reads records of people already released under "
            f"population '{found.population}': release '{found.release_id}' read {found.describe(claim.n_cards)}; "
            f"one person cannot be in two populations. Release it under population '{found.population}' "
            f"(--population {found.population}), or release other people's records; nothing was charged"))


#: The inputs whose records carry no dates: the period a release of them declares is the custodian's word only.
DATELESS_ROLES = ("sequences", "trajectories", "sets", LINES, *CUT_ROLES)


def charged_periods(entries: Iterable) -> dict[str, str]:
    """Release id → declared period (``YYYY-MM-DD..YYYY-MM-DD``) of every charged release whose spends are over a
    declared period (spends only; a free-text scope of older sequence records is no period and is left out)."""
    out: dict[str, str] = {}
    for e in entries:
        if getattr(e, "entry_type", "spend") != "spend":
            continue
        ev = e.event() if hasattr(e, "event") else e
        period = getattr(ev, "period", None)
        if period is not None and ev.release_id not in out:
            out[ev.release_id] = f"{period[0].isoformat()}..{period[1].isoformat()}"
    return out


def refuse_another_period(store: ClaimStore, claim: Claim, existing: Iterable, events: Sequence) -> None:
    """Refuse (:class:`~transit_release.errors.RecordsOfAnotherPeriodError`, exit 3) a release of a date-less
    record file (:data:`DATELESS_ROLES`) whose content a charged release read for another declared period.

    The accountant composes releases of disjoint periods in parallel (a passenger's records of January and of
    February are different records) and those of overlapping periods on their common days. That holds only if a
    period's records are that period's: a file without dates released for January and again for February would
    release every passenger's records twice while each period's cap and the per-unit statement count them once.
    One content is the export of one period, so it is released for that period only (as often as the period's cap
    allows: those releases compose sequentially). Releases charged before per-input claims were kept are not
    compared (nothing records their content). Data-dependent (registered: ``records-of-another-period``)."""
    if not events:
        return
    period = getattr(events[0], "period", None)
    mine = {fp for role, fp in claim.fingerprints.items() if role in DATELESS_ROLES}
    if "trips" in claim.fingerprints:  # a tap file's records carry their dates (its derived records' digests, #40,
        mine = set()                   # are compared to a date-less file's claim from that file's side)
    if period is None or not mine:
        return
    release_id = events[0].release_id
    label = f"{period[0].isoformat()}..{period[1].isoformat()}"
    others = {rid: p for rid, p in charged_periods(existing).items() if p != label and rid != release_id}
    if not others:
        return
    with closing(store._connect()) as con:
        attempts = store._attempts(con, list(others))
        for rid, other in others.items():
            roles = {role for attempt in attempts.get(rid, ())
                     for role, fp in con.execute("SELECT role, fingerprint FROM inputs WHERE attempt = ?", (attempt,))
                     if fp in mine}
            if roles:
                raise refusal("records-of-another-period", RecordsOfAnotherPeriodError(
                    f"release '{release_id}' for {label} reads {what_matched(roles)[0]} as release "
                    f"'{rid}' read for {other}: these records carry no dates, so one file is the export of "
                    f"one period; released for two, each passenger's records would be released twice while "
                    f"each period's cap and the per-unit statement count them once. Declare the period the "
                    f"file covers ({other}), or give the file of {label}; nothing was charged"))


def refuse_claim(store: ClaimStore, claim: Claim, existing: Iterable, events: Sequence) -> None:
    """Every refusal of a release's claim: records of another population (:func:`refuse_overlap`), a date-less
    file of another period (:func:`refuse_another_period`)."""
    existing = list(existing)
    refuse_overlap(store, claim, existing, events)
    refuse_another_period(store, claim, existing, events)


def overlap_check(store: ClaimStore, attempt: str):
    """The check the charge runs with the budget policy's, inside the ledger's write transaction: the attempt's
    recorded claim against every charged release of another population, and (a date-less file) of another
    period."""
    def check(existing: list, events: Sequence) -> None:
        refuse_claim(store, store.claim(attempt), existing, events)

    return check
