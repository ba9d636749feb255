"""The privacy ledger: an append-only, hash-chained SQLite file.

The ledger *records*; it does not interpret (that is the accountant's job).
Properties:

* append-only: triggers refuse ``UPDATE`` and ``DELETE``;
* no spend that gives budget back: a trigger refuses, at the database level,
  any spend whose ε or δ is negative, not a finite number or absent (events
  refuse them at construction too);
* tamper-evident: each entry stores the SHA-256 of the previous entry and of
  itself, over a canonical serialisation, so an edit behind the triggers' back
  or a removed row breaks the chain (:meth:`Ledger.verify`);
* keyed, when the operator gives a key kept outside the home
  (``TRANSIT_RELEASE_LEDGER_KEY_FILE``): every entry also gets an HMAC-SHA256 of
  its hash in the table ``entry_macs``, so that someone who can write the home
  but cannot read the key cannot recompute a forged chain;
* anchored outside the file: the head (sequence number and hash) is written
  into every public manifest and, by the flows, into MLflow after every charge
  and publication; :meth:`Ledger.check_anchor` tells whether an anchor still
  matches;
* charge-before-noise: :meth:`Ledger.charge` commits the spends (after the
  caller's budget check, made on a snapshot and confirmed in the same
  ``BEGIN IMMEDIATE`` transaction — the head unchanged, or the check made
  again — so two processes can never both pass a cap that only one fits
  under) before any noise is drawn; a crash afterwards leaves "charged, not
  published" entries that still count;
* recoverable publication: an *intent* (release id, manifest hash, staging
  directory) is committed before the release directory is renamed into place,
  and the ``published`` entry after; :mod:`transit_release.recovery` completes
  or rolls back an intent left by a crash;
* publication is recorded as its own entry, never by changing a spend.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
import stat
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from transit_release.accounting.events import event_from_json
from transit_release.errors import ConfigError, LedgerIntegrityError, ReleaseExistsError

GENESIS_HASH = "0" * 64
SPEND = "spend"
PUBLISHED = "published"
#: Environment variable naming a file that holds the ledger's HMAC key (kept outside the home).
KEY_FILE_ENV = "TRANSIT_RELEASE_LEDGER_KEY_FILE"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    entry_type  TEXT NOT NULL CHECK (entry_type IN ('spend', 'published')),
    release_id  TEXT NOT NULL,
    payload     TEXT NOT NULL,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS entries_release ON entries (release_id);
CREATE TRIGGER IF NOT EXISTS entries_no_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: UPDATE refused'); END;
CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: DELETE refused'); END;
CREATE TRIGGER IF NOT EXISTS entries_spend_is_a_cost BEFORE INSERT ON entries
WHEN NEW.entry_type = 'spend' AND NOT IFNULL(CASE WHEN json_valid(NEW.payload) THEN (
    json_type(NEW.payload, '$.epsilon') IN ('integer', 'real')
    AND json_type(NEW.payload, '$.delta') IN ('integer', 'real')
    AND json_extract(NEW.payload, '$.epsilon') >= 0
    AND json_extract(NEW.payload, '$.epsilon') < 1e300
    AND json_extract(NEW.payload, '$.delta') >= 0
    AND json_extract(NEW.payload, '$.delta') < 1) ELSE 0 END, 0)
BEGIN SELECT RAISE(ABORT, 'the privacy ledger refuses a spend whose epsilon or delta is negative, not a finite number or absent'); END;
CREATE TABLE IF NOT EXISTS entry_macs (
    seq INTEGER PRIMARY KEY,
    mac TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS entry_macs_no_update BEFORE UPDATE ON entry_macs
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: UPDATE refused'); END;
CREATE TRIGGER IF NOT EXISTS entry_macs_no_delete BEFORE DELETE ON entry_macs
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: DELETE refused'); END;
CREATE TABLE IF NOT EXISTS publication_intents (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at     TEXT NOT NULL,
    release_id      TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    staging_dir     TEXT NOT NULL,
    final_dir       TEXT NOT NULL,
    mlflow_run_id   TEXT
);
CREATE TRIGGER IF NOT EXISTS publication_intents_no_update BEFORE UPDATE ON publication_intents
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: UPDATE refused'); END;
CREATE TRIGGER IF NOT EXISTS publication_intents_no_delete BEFORE DELETE ON publication_intents
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: DELETE refused'); END;
CREATE TABLE IF NOT EXISTS intent_macs (
    id  INTEGER PRIMARY KEY,
    mac TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS intent_macs_no_update BEFORE UPDATE ON intent_macs
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: UPDATE refused'); END;
CREATE TRIGGER IF NOT EXISTS intent_macs_no_delete BEFORE DELETE ON intent_macs
BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only: DELETE refused'); END;
"""


def entry_hash(prev_hash: str, seq: int, recorded_at: str, entry_type: str, release_id: str, payload: str) -> str:
    body = json.dumps([prev_hash, seq, recorded_at, entry_type, release_id, payload],
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def entry_mac(key: bytes, entry_hash_hex: str) -> str:
    return hmac.new(key, entry_hash_hex.encode("ascii"), hashlib.sha256).hexdigest()


def intent_mac(key: bytes, intent: "PublicationIntent") -> str:
    """Intents are not chained (they come and go between a charge and its publication); with a key each is MACed,
    so that `repair` acts only on intents this tool wrote."""
    body = json.dumps(["intent", intent.id, intent.recorded_at, intent.release_id, intent.manifest_sha256,
                       intent.staging_dir, intent.final_dir], separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()


def read_key_file(path: str | Path, home: Path | None = None) -> bytes:
    """The ledger key from ``path`` (at least 32 bytes); refused if it lies inside the home it protects."""
    path = Path(path).expanduser().resolve()
    if home is not None:
        root = Path(home).resolve()
        if path == root or root in path.parents:
            raise ConfigError(f"ledger key file {path} lies inside the home {root}: keep it elsewhere, or anyone "
                              "who can rewrite the ledger can also recompute its keyed chain")
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        key = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"ledger key file {path}: cannot be read ({exc.strerror})") from None
    if mode & 0o077:
        raise ConfigError(f"ledger key file {path}: other accounts may read or change it (mode {mode:04o}); "
                          f"`chmod 600 {path}`")
    if len(key) < 32:
        raise ConfigError(f"ledger key file {path}: holds {len(key)} bytes; use at least 32 random bytes "
                          "(e.g. `head -c 48 /dev/urandom | base64 > FILE`)")
    return key


def refuse_second_charge(existing: Sequence["LedgerEntry"], release_id: str) -> None:
    """A release id is charged once: refuse it if ``existing`` entries already hold it."""
    if any(e.release_id == release_id for e in existing):
        raise ReleaseExistsError(
            f"release '{release_id}' was already charged by another run (running now, or an earlier "
            "run that did not publish: its spends count); choose another --release-id, or run "
            "`transit-release repair` if that run crashed while publishing")


def keyed_ledgers_record() -> Path | None:
    """``<key file>.ledgers``: beside the key, outside the home, the ledgers this key has MACed (one path a line).

    Someone who can write the home but not the key's directory cannot remove a ledger from it, so a ledger
    whose MACs were stripped cannot have a key "adopted" again even if every anchor in the home was doctored.
    """
    raw = os.environ.get(KEY_FILE_ENV)
    if not raw:
        return None
    key = Path(raw).expanduser().resolve()
    return key.with_name(key.name + ".ledgers")


def key_from_environment(home: Path | None = None) -> bytes | None:
    raw = os.environ.get(KEY_FILE_ENV)
    return read_key_file(raw, home) if raw else None


@dataclass(frozen=True)
class LedgerEntry:
    seq: int
    recorded_at: str
    entry_type: str
    release_id: str
    payload: str
    prev_hash: str
    hash: str

    def event(self):
        """The privacy event of a ``spend`` entry."""
        if self.entry_type != SPEND:
            raise ValueError(f"ledger entry {self.seq} is a {self.entry_type!r} entry, not a spend")
        return event_from_json(self.payload)

    def data(self) -> dict[str, Any]:
        return json.loads(self.payload)


@dataclass(frozen=True)
class Head:
    """The newest entry of the chain: what manifests and MLflow anchor."""

    seq: int
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "hash": self.hash}


@dataclass(frozen=True)
class PublicationIntent:
    id: int
    recorded_at: str
    release_id: str
    manifest_sha256: str
    staging_dir: str
    final_dir: str
    mlflow_run_id: str | None


SpendCheck = Callable[[list[LedgerEntry], Sequence[Any]], None]


class Ledger:
    """One SQLite file; every method opens its own connection (safe across processes).

    ``key`` (bytes) turns on the keyed chain; by default it is read from the file named by
    ``TRANSIT_RELEASE_LEDGER_KEY_FILE`` when that is set (pass ``key=b""`` to ignore it).
    """

    def __init__(self, path: str | Path, timeout_s: float = 60.0, key: bytes | None = None, read_only: bool = False):
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.read_only = read_only
        self.key = key_from_environment() if key is None else (key or None)
        if read_only:
            if not self.path.is_file():
                raise LedgerIntegrityError(f"{self.path}: the privacy ledger does not exist")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        with closing(self._connect()) as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)
        if new:
            os.chmod(self.path, 0o600)

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=self.timeout_s,
                                   isolation_level=None)
        con = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        con.execute("PRAGMA synchronous=FULL")
        return con

    @staticmethod
    def _read(con: sqlite3.Connection) -> list[LedgerEntry]:
        rows = con.execute(
            "SELECT seq, recorded_at, entry_type, release_id, payload, prev_hash, hash FROM entries ORDER BY seq"
        ).fetchall()
        return [LedgerEntry(*row) for row in rows]

    def entries(self) -> list[LedgerEntry]:
        with closing(self._connect()) as con:
            return self._read(con)

    def head(self) -> Head:
        """The newest entry's sequence number and hash (``0`` and the genesis hash when empty)."""
        with closing(self._connect()) as con:
            row = con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
        return Head(row[0], row[1]) if row else Head(0, GENESIS_HASH)

    def _append(self, con: sqlite3.Connection, entry_type: str, release_id: str, payloads: Sequence[str]) -> list[LedgerEntry]:
        last = con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (last[0], last[1]) if last else (0, GENESIS_HASH)
        now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        written = []
        for payload in payloads:
            seq += 1
            digest = entry_hash(prev, seq, now, entry_type, release_id, payload)
            con.execute(
                "INSERT INTO entries (seq, recorded_at, entry_type, release_id, payload, prev_hash, hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (seq, now, entry_type, release_id, payload, prev, digest),
            )
            written.append(LedgerEntry(seq, now, entry_type, release_id, payload, prev, digest))
            prev = digest
        if self.key:
            con.executemany("INSERT INTO entry_macs (seq, mac) VALUES (?, ?)",
                            [(e.seq, entry_mac(self.key, e.hash)) for e in written])
            self._remember_keyed()
        return written

    def _remember_keyed(self) -> None:
        """Add this ledger to the key's record of keyed ledgers (best effort: the key's directory may be
        read-only, and then the record simply does not help)."""
        record = keyed_ledgers_record()
        if record is None:
            return
        me = str(self.path.resolve())
        try:
            if me not in (record.read_text(encoding="utf-8").splitlines() if record.exists() else []):
                fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    fh.write(me + "\n")
        except OSError:
            pass

    def was_keyed_by_this_key(self) -> bool:
        record = keyed_ledgers_record()
        try:
            return (record is not None and record.exists()
                    and str(self.path.resolve()) in record.read_text(encoding="utf-8").splitlines())
        except OSError:
            return False

    def _check_keying(self, con: sqlite3.Connection) -> None:
        """Refuse to append when the key configuration and the ledger disagree.

        A keyed ledger is never appended to without its key (the new entries could not be told from
        forged ones), and a key is never used to vouch silently for entries written without it: a key
        is introduced on a ledger with history only by :meth:`adopt_key`, an explicit operator step.
        """
        n_entries = con.execute("SELECT count(*) FROM entries").fetchone()[0]
        n_macs = con.execute("SELECT count(*) FROM entry_macs").fetchone()[0]
        if self.key is None and n_macs:
            raise ConfigError(f"the ledger {self.path} is keyed: set {KEY_FILE_ENV} to its key file")
        if self.key is not None and n_macs < n_entries:
            raise LedgerIntegrityError(
                f"{self.path}: {n_entries - n_macs} entr(y/ies) carry no MAC. If this ledger has never had a key "
                "and you are introducing one, check it with `transit-release audit` and run `transit-release repair "
                "--adopt-ledger-key`; if it had a key, entries were written or rewritten without it: restore the "
                "ledger from a backup")

    def adopt_key(self) -> int:
        """MAC every entry that has none (introducing a key on a ledger with history); returns how many.

        Only for a ledger that never had a key: the caller first checks the anchors recorded outside the
        ledger (``recovery.check_never_keyed``), and a ledger holding any MAC is refused here.
        """
        if not self.key:
            raise ConfigError(f"no ledger key: set {KEY_FILE_ENV}")
        if self.keyed():
            raise LedgerIntegrityError(f"{self.path} already holds MACs: a key is adopted only by a ledger that "
                                       "never had one; entries without a MAC were written without the key")
        if self.was_keyed_by_this_key():
            raise LedgerIntegrityError(f"{keyed_ledgers_record()} records {self.path} as keyed by this key: its MACs "
                                       "were removed, so no key is adopted; restore the ledger from a backup")
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                rows = con.execute("SELECT e.seq, e.hash FROM entries e LEFT JOIN entry_macs m ON m.seq = e.seq "
                                   "WHERE m.seq IS NULL ORDER BY e.seq").fetchall()
                con.executemany("INSERT INTO entry_macs (seq, mac) VALUES (?, ?)",
                                [(seq, entry_mac(self.key, h)) for seq, h in rows])
                intents = [PublicationIntent(*r) for r in con.execute(
                    "SELECT i.id, i.recorded_at, i.release_id, i.manifest_sha256, i.staging_dir, i.final_dir, "
                    "i.mlflow_run_id FROM publication_intents i LEFT JOIN intent_macs m ON m.id = i.id "
                    "WHERE m.id IS NULL ORDER BY i.id").fetchall()]
                con.executemany("INSERT INTO intent_macs (id, mac) VALUES (?, ?)",
                                [(i.id, intent_mac(self.key, i)) for i in intents])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        self._remember_keyed()
        return len(rows)

    def charge(self, events: Sequence[Any], check: SpendCheck | None = None) -> list[LedgerEntry]:
        """Atomically check and record spends; returns the written entries.

        ``check(existing_entries, events)`` raises to refuse; then nothing is written. A release id that already
        has spends (an earlier or concurrent run under the same id) is refused here too, so two runs can never
        both spend under one id. The checks run on a snapshot first, without the write lock
        (:meth:`_checked_head`); inside the write transaction the ledger's head is only compared with the
        snapshot's, and the checks run again there only if another run appended meanwhile.
        """
        if not events:
            return []
        release_ids = {e.release_id for e in events}
        if len(release_ids) != 1:
            raise ValueError(f"one charge covers one release; got {len(release_ids)} release ids")
        release_id = release_ids.pop()
        checked = self._checked_head(release_id, events, check)
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                self._check_keying(con)
                if self._head_row(con) != checked:  # another run appended since the snapshot: check again
                    existing = self._read(con)
                    self._check_chain(existing, dict(con.execute("SELECT seq, mac FROM entry_macs").fetchall()))
                    refuse_second_charge(existing, release_id)
                    if check is not None:
                        check(existing, events)
                written = self._append(con, SPEND, release_id, [e.to_json() for e in events])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return written

    @staticmethod
    def _head_row(con: sqlite3.Connection) -> tuple | None:
        return con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()

    def _checked_head(self, release_id: str, events: Sequence[Any], check: SpendCheck | None) -> tuple | None:
        """The checks of :meth:`charge` on a consistent snapshot of the ledger, read without the write lock (the
        budget policy's composition can take seconds, during which other runs may publish): the chain (an entry
        edited in place to give budget back is refused here, not only by a later audit), a second charge of the
        id, ``check``. Returns the head row they were made against."""
        with closing(self._connect()) as con:
            con.execute("BEGIN")  # one read transaction: entries and MACs of the same moment
            try:
                self._check_keying(con)
                existing = self._read(con)
                macs = dict(con.execute("SELECT seq, mac FROM entry_macs").fetchall())
                head = self._head_row(con)
            finally:
                con.execute("COMMIT")
        self._check_chain(existing, macs)
        refuse_second_charge(existing, release_id)
        if check is not None:
            check(existing, events)
        return head

    def record_intent(self, release_id: str, manifest_sha256: str, staging_dir: Path, final_dir: Path,
                      mlflow_run_id: str | None) -> PublicationIntent:
        """Before the rename: what is about to be published, so a crash can be completed or rolled back."""
        now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                cur = con.execute("INSERT INTO publication_intents (recorded_at, release_id, manifest_sha256, "
                                  "staging_dir, final_dir, mlflow_run_id) VALUES (?, ?, ?, ?, ?, ?)",
                                  (now, release_id, manifest_sha256, str(staging_dir), str(final_dir),
                                   mlflow_run_id))
                intent = PublicationIntent(cur.lastrowid, now, release_id, manifest_sha256, str(staging_dir),
                                           str(final_dir), mlflow_run_id)
                if self.key:
                    con.execute("INSERT INTO intent_macs (id, mac) VALUES (?, ?)",
                                (intent.id, intent_mac(self.key, intent)))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return intent

    def check_intent(self, intent: PublicationIntent) -> None:
        """Refuse an intent of a keyed ledger that carries no valid MAC (not written by this tool with the key)."""
        if self.key is None:
            if self.keyed():
                raise ConfigError(f"the ledger {self.path} is keyed: set {KEY_FILE_ENV} to its key file")
            return
        with closing(self._connect()) as con:
            row = con.execute("SELECT mac FROM intent_macs WHERE id = ?", (intent.id,)).fetchone()
        if row is None or not hmac.compare_digest(row[0], intent_mac(self.key, intent)):
            raise LedgerIntegrityError(f"publication intent {intent.id} carries no valid MAC: it was not written "
                                       "with the ledger key; nothing was renamed or removed")

    def intents(self) -> list[PublicationIntent]:
        with closing(self._connect()) as con:
            rows = con.execute("SELECT id, recorded_at, release_id, manifest_sha256, staging_dir, final_dir, "
                               "mlflow_run_id FROM publication_intents ORDER BY id").fetchall()
        return [PublicationIntent(*r) for r in rows]

    def record_publication(self, release_id: str, manifest_sha256: str) -> LedgerEntry:
        payload = json.dumps({"release_id": release_id, "manifest_sha256": manifest_sha256},
                             sort_keys=True, separators=(",", ":"))
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                self._check_keying(con)
                if con.execute("SELECT 1 FROM entries WHERE entry_type = 'published' AND release_id = ?",
                               (release_id,)).fetchone():
                    raise ReleaseExistsError(f"release '{release_id}' is already recorded as published")
                (entry,) = self._append(con, PUBLISHED, release_id, [payload])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return entry

    def spends(self, release_id: str | None = None) -> list[LedgerEntry]:
        return [e for e in self.entries()
                if e.entry_type == SPEND and (release_id is None or e.release_id == release_id)]

    def published(self) -> dict[str, LedgerEntry]:
        """Release id → its publication entry."""
        return {e.release_id: e for e in self.entries() if e.entry_type == PUBLISHED}

    def check_anchor(self, seq: int, digest: str) -> str | None:
        """None if entry ``seq`` still has hash ``digest``; otherwise what is wrong (no value of any entry)."""
        if seq == 0:
            return None if digest == GENESIS_HASH else "anchors an empty ledger with a non-genesis hash"
        with closing(self._connect()) as con:
            row = con.execute("SELECT hash FROM entries WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            return f"entry {seq} it anchors is missing (the ledger was truncated or rebuilt)"
        if row[0] != digest:
            return f"entry {seq} it anchors has a different hash (history before it was rewritten)"
        return None

    def keyed(self) -> bool:
        """Does the ledger hold MACs (was it ever written with a key)?"""
        with closing(self._connect()) as con:
            return con.execute("SELECT count(*) FROM entry_macs").fetchone()[0] > 0

    def _check_chain(self, entries: list[LedgerEntry], macs: dict[int, str]) -> None:
        """The hash chain, every spend's validity and (with a key) every MAC; raises on the first problem."""
        prev = GENESIS_HASH
        for expected_seq, e in enumerate(entries, start=1):
            if e.seq != expected_seq:
                raise LedgerIntegrityError(
                    f"{self.path}: entry {expected_seq} is missing (found entry {e.seq} after entry {expected_seq - 1})")
            if e.prev_hash != prev:
                raise LedgerIntegrityError(f"{self.path}: entry {e.seq} does not link to entry {e.seq - 1}")
            if entry_hash(e.prev_hash, e.seq, e.recorded_at, e.entry_type, e.release_id, e.payload) != e.hash:
                raise LedgerIntegrityError(f"{self.path}: entry {e.seq} was modified after it was recorded")
            if e.entry_type == SPEND:
                try:
                    e.event()
                except ValueError as exc:
                    raise LedgerIntegrityError(f"{self.path}: entry {e.seq} is not a valid spend ({exc})") from None
            prev = e.hash
        if self.key:
            unkeyed = [e.seq for e in entries if e.seq not in macs]
            if unkeyed:
                raise LedgerIntegrityError(f"{self.path}: {len(unkeyed)} entr(y/ies) carry no MAC although a key is "
                                           f"configured (first: entry {unkeyed[0]})")
            for e in entries:
                if not hmac.compare_digest(macs[e.seq], entry_mac(self.key, e.hash)):
                    raise LedgerIntegrityError(f"{self.path}: entry {e.seq}'s MAC does not match the key: the entry "
                                               "was forged or the chain recomputed without the key")

    def verify(self) -> int:
        """Check the database's integrity, the hash chain and (with a key) every MAC; returns the number of entries."""
        with closing(self._connect()) as con:
            status = con.execute("PRAGMA integrity_check").fetchone()[0]
            if status != "ok":
                raise LedgerIntegrityError(f"{self.path}: SQLite integrity check failed: {status}")
            entries = self._read(con)
            macs = dict(con.execute("SELECT seq, mac FROM entry_macs").fetchall())
        self._check_chain(entries, macs)
        return len(entries)
