"""The privacy ledger: an append-only, hash-chained SQLite file.

The ledger *records*; it does not interpret (that is the accountant's job).
Properties:

* append-only: triggers refuse ``UPDATE`` and ``DELETE``;
* tamper-evident: each entry stores the SHA-256 of the previous entry and of
  itself, over a canonical serialisation, so an edit behind the triggers' back
  or a removed row breaks the chain (:meth:`Ledger.verify`);
* charge-before-noise: :meth:`Ledger.charge` commits the spends (after the
  caller's budget check, in the same ``BEGIN IMMEDIATE`` transaction, so two
  processes can never both pass a cap that only one fits under) before any
  noise is drawn; a crash afterwards leaves "charged, not published" entries
  that still count;
* publication is recorded as its own entry, never by changing a spend.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from transit_release.accounting.events import event_from_json
from transit_release.errors import LedgerIntegrityError

GENESIS_HASH = "0" * 64
SPEND = "spend"
PUBLISHED = "published"

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
"""


def entry_hash(prev_hash: str, seq: int, recorded_at: str, entry_type: str, release_id: str, payload: str) -> str:
    body = json.dumps([prev_hash, seq, recorded_at, entry_type, release_id, payload],
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


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


SpendCheck = Callable[[list[LedgerEntry], Sequence[Any]], None]


class Ledger:
    """One SQLite file; every method opens its own connection (safe across processes)."""

    def __init__(self, path: str | Path, timeout_s: float = 60.0):
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
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
        return written

    def charge(self, events: Sequence[Any], check: SpendCheck | None = None) -> list[LedgerEntry]:
        """Atomically check and record spends; returns the written entries.

        ``check(existing_entries, events)`` runs inside the write transaction and
        raises to refuse; then nothing is written.
        """
        if not events:
            return []
        release_ids = {e.release_id for e in events}
        if len(release_ids) != 1:
            raise ValueError(f"one charge covers one release; got {len(release_ids)} release ids")
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                if check is not None:
                    check(self._read(con), events)
                written = self._append(con, SPEND, release_ids.pop(), [e.to_json() for e in events])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return written

    def record_publication(self, release_id: str, manifest_sha256: str) -> LedgerEntry:
        payload = json.dumps({"release_id": release_id, "manifest_sha256": manifest_sha256},
                             sort_keys=True, separators=(",", ":"))
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
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

    def verify(self) -> int:
        """Check the database's integrity and the hash chain; returns the number of entries."""
        with closing(self._connect()) as con:
            status = con.execute("PRAGMA integrity_check").fetchone()[0]
            if status != "ok":
                raise LedgerIntegrityError(f"{self.path}: SQLite integrity check failed: {status}")
            entries = self._read(con)
        prev = GENESIS_HASH
        for expected_seq, e in enumerate(entries, start=1):
            if e.seq != expected_seq:
                raise LedgerIntegrityError(
                    f"{self.path}: entry {expected_seq} is missing (found entry {e.seq} after entry {expected_seq - 1})")
            if e.prev_hash != prev:
                raise LedgerIntegrityError(f"{self.path}: entry {e.seq} does not link to entry {e.seq - 1}")
            if entry_hash(e.prev_hash, e.seq, e.recorded_at, e.entry_type, e.release_id, e.payload) != e.hash:
                raise LedgerIntegrityError(f"{self.path}: entry {e.seq} was modified after it was recorded")
            prev = e.hash
        return len(entries)
