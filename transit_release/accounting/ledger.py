"""The privacy ledger: an append-only, hash-chained SQLite file; this module holds the store, its charges and its
publication intents.

The ledger *records*; it does not interpret (that is the accountant's job).
Properties:

* append-only, no spend that gives budget back, its protections checked, not silently restored: the file and its
  schema (:mod:`transit_release.accounting.ledger_schema`);
* tamper-evident and keyed: the hash chain and its MACs (:mod:`transit_release.accounting.ledger_chain`);
* anchored outside the file: the head (sequence number and hash) is written
  into every public manifest and, by the flows, into MLflow after every charge
  and publication; :meth:`Ledger.check_anchor` tells whether an anchor still
  matches;
* charge-before-noise: :meth:`Ledger.charge` commits the spends (after the
  caller's budget check, made on a snapshot and confirmed in the same
  ``BEGIN IMMEDIATE`` transaction — the head unchanged, or the check made
  again — so two processes can never both pass a cap that only one fits
  under) before any noise is drawn, and returns only entries it read back
  inside that transaction (a foreign trigger that silently drops a row cannot
  make it return spends that were never written); a crash afterwards leaves
  "charged, not published" entries that still count;
* recoverable publication: an *intent* (release id, manifest hash, staging
  directory) is committed before the release directory is renamed into place,
  and the ``published`` entry after; :mod:`transit_release.integrity.recovery` completes
  or rolls back an intent left by a crash;
* publication is recorded as its own entry, never by changing a spend;
* never older than the home's records: the anchors it must hold (:mod:`transit_release.accounting.ledger_anchors`)
  and, with a key, the keyed high-water mark beside the key (:mod:`transit_release.accounting.ledger_key`).
"""

from __future__ import annotations

import hmac
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from transit_release.accounting.ledger_anchors import Anchor, rollback_message, unmet_anchors
from transit_release.accounting.ledger_chain import (GENESIS_HASH, PUBLISHED, SPEND, Head, LedgerEntry,
                                                     PublicationIntent, check_chain, entry_hash, entry_mac, intent_mac)
from transit_release.accounting.ledger_key import KEY_FILE_ENV, KeyedLedger, key_from_environment
from transit_release.accounting.ledger_schema import (SCHEMA_VERSION, LedgerFile, _busy_message, _locked,
                                                      _refuse_hard_links, _unreadable_is_integrity, storage_error)
from transit_release.errors import (ConfigError, LedgerBusyError, LedgerIntegrityError, LedgerRollbackError,
                                   ReleaseExistsError)


SpendCheck = Callable[[list[LedgerEntry], Sequence[Any]], None]


def refuse_second_charge(existing: Sequence["LedgerEntry"], release_id: str) -> None:
    """A release id is charged once: refuse it if ``existing`` entries already hold it."""
    if any(e.release_id == release_id for e in existing):
        raise ReleaseExistsError(
            f"release '{release_id}' was already charged by another run (running now, or an earlier "
            "run that did not publish: its spends count); choose another --release-id, or run "
            "`transit-release repair` if that run crashed while publishing")


class Ledger(KeyedLedger, LedgerFile):
    """One SQLite file; every method opens its own connection (safe across processes).

    ``key`` (bytes) turns on the keyed chain; by default it is read from the file named by
    ``TRANSIT_RELEASE_LEDGER_KEY_FILE`` when that is set (pass ``key=b""`` to ignore it). ``snapshot`` (read only):
    read this copy of the ledger at ``path`` (:func:`snapshot_ledger`), named and checked against the key's records
    as ``path``, so that every check of an audit sees one state of the ledger.
    """

    def __init__(self, path: str | Path, timeout_s: float = 60.0, key: bytes | None = None, read_only: bool = False,
                 snapshot: str | Path | None = None):
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.read_only = read_only or snapshot is not None
        self._db = Path(snapshot) if snapshot is not None else self.path
        # a key is never read from inside the ledger's own directory (the commands check the home too, first)
        self.key = key_from_environment(self.path.resolve().parent) if key is None else (key or None)
        if snapshot is None and self.path.is_symlink():  # its records beside the key name the path: a link
            raise LedgerIntegrityError(f"{self.path}: the privacy ledger is a symbolic link; put the ledger file "
                                       "itself there")
        _refuse_hard_links(self.path)  # the audit's too: its snapshot was read through this name
        if self.read_only:
            if not self._db.is_file():
                raise LedgerIntegrityError(f"{self.path}: the privacy ledger does not exist")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        try:
            with closing(self._connect()) as con:
                # a ledger of this schema version keeps what it has: a dropped trigger is not put back unseen
                # (writes are refused, the audit names it); an older or new file gets the schema it lacks, unless
                # it lacks what was always created with a table it holds (dropped, not older)
                if con.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                    self._create_schema(con)
                self._write_ahead_log(con)  # also a restored backup's copy, which is one file (snapshot_ledger)
        except sqlite3.DatabaseError as exc:
            if _locked(exc):
                raise LedgerBusyError(_busy_message(self)) from None
            storage = storage_error(self.path, exc)
            if storage is not None:
                raise storage from None
            raise LedgerIntegrityError(f"{self.path}: not a readable privacy ledger ({exc}); restore it from a "
                                       "backup") from None
        if new:
            os.chmod(self.path, 0o600)

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            return sqlite3.connect(f"{self._db.resolve().as_uri()}?mode=ro", uri=True, timeout=self.timeout_s,
                                   isolation_level=None)
        con = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        con.execute("PRAGMA synchronous=FULL")
        return con

    @staticmethod
    def _read(con: sqlite3.Connection, after: int = 0) -> list[LedgerEntry]:
        rows = con.execute(
            "SELECT seq, recorded_at, entry_type, release_id, payload, prev_hash, hash FROM entries WHERE seq > ? "
            "ORDER BY seq", (after,)).fetchall()
        return [LedgerEntry(*row) for row in rows]

    @_unreadable_is_integrity
    def entries(self) -> list[LedgerEntry]:
        with closing(self._connect()) as con:
            return self._read(con)

    @_unreadable_is_integrity
    def head(self) -> Head:
        """The newest entry's sequence number and hash (``0`` and the genesis hash when empty)."""
        with closing(self._connect()) as con:
            row = con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
        return Head(row[0], row[1]) if row else Head(0, GENESIS_HASH)

    def _append(self, con: sqlite3.Connection, entry_type: str, release_id: str, payloads: Sequence[str]) -> list[LedgerEntry]:
        """Insert the entries (and their MACs) and read them back before the caller commits: an entry a foreign
        trigger or rule dropped or altered would otherwise be returned as written (and its noise drawn)."""
        last = con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (last[0], last[1]) if last else (0, GENESIS_HASH)
        now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        written = []
        for payload in payloads:
            seq += 1
            digest = entry_hash(prev, seq, now, entry_type, release_id, payload)
            cur = con.execute(
                "INSERT INTO entries (seq, recorded_at, entry_type, release_id, payload, prev_hash, hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (seq, now, entry_type, release_id, payload, prev, digest),
            )
            if cur.rowcount != 1:
                raise self._not_written(f"entry {seq}")
            written.append(LedgerEntry(seq, now, entry_type, release_id, payload, prev, digest))
            prev = digest
        macs = {e.seq: entry_mac(self.key, e.hash) for e in written} if self.key else {}
        for s, mac in macs.items():
            if con.execute("INSERT INTO entry_macs (seq, mac) VALUES (?, ?)", (s, mac)).rowcount != 1:
                raise self._not_written(f"the MAC of entry {s}")
        first = written[0].seq if written else seq + 1
        if self._read(con, after=first - 1) != written:
            raise self._not_written(f"entries {first}-{seq} as given")
        if macs and dict(con.execute("SELECT seq, mac FROM entry_macs WHERE seq >= ?", (first,)).fetchall()) != macs:
            raise self._not_written(f"the MACs of entries {first}-{seq} as given")
        return written

    def _not_written(self, what: str) -> LedgerIntegrityError:
        return LedgerIntegrityError(f"{self.path}: {what} could not be written (a foreign trigger or rule dropped or "
                                    "altered it); nothing was written. Check it with `transit-release audit` and "
                                    "restore the ledger from a backup")

    def unmet(self, anchors: Sequence[Anchor]) -> list[tuple[Anchor, str]]:
        """The ``anchors`` this ledger does not hold (see :func:`unmet_anchors`)."""
        with closing(self._connect()) as con:
            entries = self._read(con)
            intents = {r[0] for r in con.execute("SELECT release_id FROM publication_intents")}
        return unmet_anchors(entries, intents, anchors, self.key)

    @_unreadable_is_integrity
    def charge(self, events: Sequence[Any], check: SpendCheck | None = None,
               anchors: Callable[[], Sequence[Anchor]] | None = None) -> list[LedgerEntry]:
        """Atomically check and record spends; returns the written entries.

        ``check(existing_entries, events)`` raises to refuse; then nothing is written. A release id that already
        has spends (an earlier or concurrent run under the same id) is refused here too, so two runs can never
        both spend under one id. The budget checks run on a snapshot first, without the write lock
        (:meth:`_checked_head`). Inside the write transaction the ledger must be whole (:meth:`_check_whole`: its
        chain and MACs, its exact schema, the keyed high-water mark and every anchor ``anchors()`` names;
        :class:`LedgerRollbackError` otherwise: a ledger older than the home's records would spend again what it
        forgot), and the budget checks run again there only if another run appended since the snapshot.
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
                existing = self._check_whole(con, anchors)
                if self._head_row(con) != checked:  # another run appended since the snapshot: check again
                    refuse_second_charge(existing, release_id)
                    if check is not None:
                        check(existing, events)
                written = self._append(con, SPEND, release_id, [e.to_json() for e in events])
                self._commit(con, written)
            except BaseException:
                if con.in_transaction:  # a confirmation refused after the commit leaves nothing to roll back
                    con.execute("ROLLBACK")
                raise
        return written

    @staticmethod
    def _head_row(con: sqlite3.Connection) -> tuple | None:
        return con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()

    def _checked_head(self, release_id: str, events: Sequence[Any], check: SpendCheck | None) -> tuple | None:
        """The budget checks of :meth:`charge` on a consistent snapshot of the ledger, read without the write lock
        (the budget policy's composition can take seconds, during which other runs may publish): the chain (an
        entry edited in place to give budget back is refused here, not only by a later audit), a second charge of
        the id, ``check``. Returns the head row they were made against."""
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

    def _check_whole(self, con: sqlite3.Connection, anchors: Callable[[], Sequence[Anchor]] | None,
                     outcome: str = "nothing was charged", marks: bool = True) -> list[LedgerEntry]:
        """What every charge checks before it writes (and the dry run, read only); returns the entries."""
        self._check_keying(con)
        existing = self._read(con)
        # the budget is checked against a ledger whose history is intact (an entry edited in place
        # to give budget back is refused here, not only by a later audit)
        self._check_chain(existing, dict(con.execute("SELECT seq, mac FROM entry_macs").fetchall()))
        self._protections(con)
        if marks:
            self._check_high_water(con)
        if anchors is not None:
            intents = {r[0] for r in con.execute("SELECT release_id FROM publication_intents")}
            unmet = unmet_anchors(existing, intents, anchors(), self.key)
            if unmet:
                head = existing[-1].seq if existing else 0
                raise LedgerRollbackError(rollback_message(self.path, unmet, head, outcome))
        return existing

    @_unreadable_is_integrity
    def check_before_charge(self, anchors: Callable[[], Sequence[Anchor]] | None = None,
                            outcome: str = "it would charge nothing") -> list[LedgerEntry]:
        """Run, read only, every check a charge makes before it writes (keying, chain and MACs, exact schema, the
        key's records, every anchor ``anchors()`` names) in one read transaction; returns the entries it checked."""
        with closing(self._connect()) as con:
            con.execute("BEGIN")
            try:
                return self._check_whole(con, anchors, outcome)
            finally:
                con.execute("ROLLBACK")

    @_unreadable_is_integrity
    def record_intent(self, release_id: str, manifest_sha256: str, staging_dir: Path, final_dir: Path,
                      mlflow_run_id: str | None) -> PublicationIntent:
        """Before the rename: what is about to be published, so a crash can be completed or rolled back."""
        now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                self._protections(con)
                cur = con.execute("INSERT INTO publication_intents (recorded_at, release_id, manifest_sha256, "
                                  "staging_dir, final_dir, mlflow_run_id) VALUES (?, ?, ?, ?, ?, ?)",
                                  (now, release_id, manifest_sha256, str(staging_dir), str(final_dir),
                                   mlflow_run_id))
                intent = PublicationIntent(cur.lastrowid, now, release_id, manifest_sha256, str(staging_dir),
                                           str(final_dir), mlflow_run_id)
                row = con.execute("SELECT id, recorded_at, release_id, manifest_sha256, staging_dir, final_dir, "
                                  "mlflow_run_id FROM publication_intents WHERE id = ?", (intent.id,)).fetchone()
                if cur.rowcount != 1 or row is None or PublicationIntent(*row) != intent:
                    raise self._not_written(f"the publication intent of '{release_id}'")
                if self.key:
                    mac = intent_mac(self.key, intent)
                    added = con.execute("INSERT INTO intent_macs (id, mac) VALUES (?, ?)", (intent.id, mac)).rowcount
                    if added != 1 or con.execute("SELECT mac FROM intent_macs WHERE id = ?",
                                                 (intent.id,)).fetchone() != (mac,):
                        raise self._not_written(f"the MAC of the publication intent of '{release_id}'")
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

    @_unreadable_is_integrity
    def intents(self) -> list[PublicationIntent]:
        with closing(self._connect()) as con:
            rows = con.execute("SELECT id, recorded_at, release_id, manifest_sha256, staging_dir, final_dir, "
                               "mlflow_run_id FROM publication_intents ORDER BY id").fetchall()
        return [PublicationIntent(*r) for r in rows]

    @_unreadable_is_integrity
    def record_publication(self, release_id: str, manifest_sha256: str) -> LedgerEntry:
        payload = json.dumps({"release_id": release_id, "manifest_sha256": manifest_sha256},
                             sort_keys=True, separators=(",", ":"))
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                self._protections(con)
                self._check_keying(con)
                self._check_high_water(con)
                if con.execute("SELECT 1 FROM entries WHERE entry_type = 'published' AND release_id = ?",
                               (release_id,)).fetchone():
                    raise ReleaseExistsError(f"release '{release_id}' is already recorded as published")
                (entry,) = self._append(con, PUBLISHED, release_id, [payload])
                self._commit(con, [entry])
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise
        return entry

    @_unreadable_is_integrity
    def charged_release_ids(self) -> set[str]:
        """Every release id with at least one spend."""
        with closing(self._connect()) as con:
            return {r[0] for r in con.execute("SELECT DISTINCT release_id FROM entries WHERE entry_type = ?",
                                              (SPEND,))}

    def spends(self, release_id: str | None = None) -> list[LedgerEntry]:
        return [e for e in self.entries()
                if e.entry_type == SPEND and (release_id is None or e.release_id == release_id)]

    @_unreadable_is_integrity
    def published(self) -> dict[str, LedgerEntry]:
        """Release id → its publication entry."""
        with closing(self._connect()) as con:
            rows = con.execute("SELECT seq, recorded_at, entry_type, release_id, payload, prev_hash, hash FROM entries "
                               "WHERE entry_type = ? ORDER BY seq", (PUBLISHED,)).fetchall()
        return {e.release_id: e for e in (LedgerEntry(*r) for r in rows)}

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

    @_unreadable_is_integrity
    def keyed(self) -> bool:
        """Does the ledger hold MACs (was it ever written with a key)?"""
        with closing(self._connect()) as con:
            return con.execute("SELECT count(*) FROM entry_macs").fetchone()[0] > 0

    def _check_chain(self, entries: list[LedgerEntry], macs: dict[int, str]) -> None:
        """The hash chain, every spend's validity and (with a key) every MAC; raises on the first problem
        (:func:`~transit_release.accounting.ledger_chain.check_chain`)."""
        check_chain(entries, macs, self.key, self.path)

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


def snapshot_ledger(path: Path, dest: Path, timeout_s: float = 60.0) -> None:
    """Copy the ledger at ``path`` into the new file ``dest`` (mode 0600) with SQLite's online backup API: one
    consistent state of it, whatever happens to the file afterwards (the audit reads only this copy)."""
    os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    src = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s)
    with closing(src), closing(sqlite3.connect(dest)) as dst:
        src.backup(dst)
        # one file: the copy of a WAL-mode ledger is in WAL mode too, and every reader of it would leave -wal and
        # -shm files beside it (a read-only one cannot remove them); the ledger that opens it switches back to WAL
        dst.execute("PRAGMA journal_mode=DELETE")
