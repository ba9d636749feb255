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
  under) before any noise is drawn, and returns only entries it read back
  inside that transaction (a foreign trigger that silently drops a row cannot
  make it return spends that were never written); a crash afterwards leaves
  "charged, not published" entries that still count;
* recoverable publication: an *intent* (release id, manifest hash, staging
  directory) is committed before the release directory is renamed into place,
  and the ``published`` entry after; :mod:`transit_release.integrity.recovery` completes
  or rolls back an intent left by a crash;
* publication is recorded as its own entry, never by changing a spend;
* never older than the home's records: :meth:`Ledger.charge` refuses to write a spend unless the ledger
  holds every anchor the caller names (``anchors``: the heads in published manifests and in MLflow, the
  spends MLflow mirrors, the directories under ``releases/``) and, with a key, the keyed high-water mark
  kept beside the key (:class:`HighWaterMark`), so a restored older ledger cannot spend again what it forgot;
  a ledger that holds MACs but has no mark at its path, or that the key's records name and that is now empty or
  gone, is refused too (:func:`check_key_records`);
* its protections are checked, not silently restored: a ledger whose schema is not exactly the one this tool
  creates (names and SQL: append-only triggers dropped or rewritten, a foreign trigger, view or table added) is
  refused for writing (:func:`check_schema`); a ledger of an older schema version gets only the objects that
  version lacked.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import hmac
import json
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from transit_release.accounting.events import event_from_json
from transit_release.errors import (ConfigError, LedgerBusyError, LedgerIntegrityError, LedgerRetiredError,
                                   LedgerRollbackError, LedgerStorageError, ReleaseExistsError)

GENESIS_HASH = "0" * 64
SPEND = "spend"
PUBLISHED = "published"
#: Environment variable naming a file that holds the ledger's HMAC key (kept outside the home).
KEY_FILE_ENV = "TRANSIT_RELEASE_LEDGER_KEY_FILE"
#: ``PRAGMA user_version`` of a ledger whose schema (tables and triggers) this version wrote or checked: from it
#: on, a missing trigger means someone dropped it (older files get the triggers they lack when first opened).
SCHEMA_VERSION = 2
#: The triggers that make the ledger append-only and refuse spends that give budget back.
TRIGGERS = ("entries_no_update", "entries_no_delete", "entries_spend_is_a_cost", "entry_macs_no_update",
            "entry_macs_no_delete", "publication_intents_no_update", "publication_intents_no_delete",
            "intent_macs_no_update", "intent_macs_no_delete")
#: Where docs say how to reconcile a ledger older than the home's records.
RECONCILE_DOC = "docs/threat-model.md#ledger-integrity"

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


def _locked(exc: BaseException) -> bool:
    """SQLite's answer when another connection holds the lock past the busy timeout."""
    return isinstance(exc, sqlite3.OperationalError) and "database is locked" in str(exc)


#: What SQLite says when the storage under a file fails, not the file's contents: a full disk, an I/O error, a file
#: system gone read-only, a directory that cannot hold the write-ahead log's files.
_STORAGE_ERRORS = ("disk i/o error", "database or disk is full", "unable to open database file",
                   "attempt to write a readonly database", "out of memory", "readonly database")


def _on_a_read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def storage_error(path: Path, exc: BaseException) -> LedgerStorageError | None:
    """A storage failure behind ``exc`` (see :data:`_STORAGE_ERRORS`), as one line that never calls the ledger damaged
    and never advises restoring a backup (that would roll back every spend since it); None for anything else."""
    if not isinstance(exc, sqlite3.OperationalError) or not any(w in str(exc).lower() for w in _STORAGE_ERRORS):
        return None
    if _on_a_read_only_mount(Path(path).parent):
        return LedgerStorageError(
            f"{path}: the privacy ledger could not be read or written ({exc}): it lies on a read-only file system, "
            "which says nothing about its records; keep the file as it is. SQLite reads a ledger in write-ahead-log "
            "mode only where it can keep its shared-memory index beside it: to read it read-only, read a backup of "
            "it (`transit-release backup --to DIR`, one file) with `transit-release budget --home DIR`; to release, "
            "make the file system writable again")
    return LedgerStorageError(f"{path}: the privacy ledger could not be read or written ({exc}): the storage under it "
                              "failed (a full disk, an I/O error, a read-only file system), which says nothing about "
                              "its records; keep the file as it is (restoring a backup would roll spends back), free "
                              "space or repair the file system, and run the command again")


def _busy_message(ledger: "Ledger") -> str:
    return (f"{ledger.path}: the privacy ledger stayed locked by another process for more than "
            f"{ledger.timeout_s:g} s; nothing was written or charged. Try again when the other run has finished")


@functools.cache
def _schema_statements() -> tuple[str, ...]:
    """:data:`_SCHEMA` as single statements (a trigger's body holds semicolons), to run inside one transaction:
    ``executescript`` commits whatever transaction is open before it starts."""
    out, pending = [], ""
    for line in _SCHEMA.strip().splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    if pending.strip():
        raise AssertionError(f"an incomplete statement at the end of the ledger schema: {pending!r}")
    return tuple(out)


#: Objects created with another table than their own (``tbl_name``): a ledger of an older schema that holds that
#: table must hold them too (they were always created together).
_CREATED_WITH = {"entries_spend_is_a_cost": "entry_macs", "sqlite_sequence": "entries"}


@functools.cache
def _expected_schema() -> dict[str, tuple[str, str, str | None]]:
    """Name → (type, table, SQL) of every object :data:`_SCHEMA` creates, as SQLite records them."""
    with closing(sqlite3.connect(":memory:")) as con:
        con.executescript(_SCHEMA)
        return {name: (kind, table, sql)
                for kind, name, table, sql in con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")}


@dataclass(frozen=True)
class SchemaCheck:
    """The ledger's schema against exactly the one this tool creates (names and SQL).

    ``missing``: objects the file should hold and lacks (in a ledger of this schema version, any; in an older one,
    those created together with a table it holds: dropped, not merely older); ``older``: objects an older schema
    version lacks, which the next write adds; ``foreign``: objects this tool never creates (a trigger, view, table
    or index: a foreign trigger can drop or alter what a charge writes); ``altered``: objects whose SQL differs
    (e.g. an append-only trigger rewritten to refuse nothing). Each entry reads ``<type> <name>``.
    """

    missing: tuple[str, ...] = ()
    older: tuple[str, ...] = ()
    foreign: tuple[str, ...] = ()
    altered: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.missing or self.foreign or self.altered)

    def missing_triggers(self) -> list[str]:
        return [t for t in TRIGGERS if f"trigger {t}" in self.missing]

    def problem(self) -> str:
        """The first problem, as one clause."""
        triggers = self.missing_triggers()
        if triggers:
            return (f"the append-only trigger(s) {', '.join(triggers)} were dropped, so entries could have been edited "
                    "or deleted unseen")
        if self.missing:
            return f"its schema lacks {', '.join(self.missing)} (dropped)"
        if self.foreign:
            return (f"it holds {', '.join(self.foreign)}, which this tool never creates (a foreign trigger, view or "
                    "table can drop or alter what is written)")
        return (f"its {', '.join(self.altered)} differ(s) from what this tool creates (a rewritten trigger may refuse "
                "nothing)")


_HARMLESS = ("sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4")  # ANALYZE's statistics: plans only


def check_schema(con: sqlite3.Connection) -> SchemaCheck:
    """Compare ``sqlite_master`` with :func:`_expected_schema` (see :class:`SchemaCheck`)."""
    expected = _expected_schema()
    actual = {name: (kind, table, sql) for kind, name, table, sql
              in con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master") if name not in _HARMLESS}
    version = con.execute("PRAGMA user_version").fetchone()[0]
    tables = {n for n, (kind, _, _) in actual.items() if kind == "table"}
    missing, older = [], []
    for name, (kind, table, _) in expected.items():
        if name in actual:
            continue
        if version >= SCHEMA_VERSION or _CREATED_WITH.get(name, table) in tables:
            missing.append(f"{kind} {name}")
        else:
            older.append(f"{kind} {name}")
    foreign = [f"{kind} {name}" for name, (kind, _, _) in sorted(actual.items()) if name not in expected]
    altered = [f"{actual[n][0]} {n}" for n in expected if n in actual and actual[n] != expected[n]]
    return SchemaCheck(tuple(missing), tuple(older), tuple(foreign), tuple(altered))


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
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block every command on its read
            raise ConfigError(f"ledger key file {path}: not a regular file; put the key in a file of its own")
        mode = stat.S_IMODE(st.st_mode)
        with open(path, "rb") as fh:
            key = fh.read(1 << 16).strip()  # a key is 32 to a few hundred bytes
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


def key_file() -> Path | None:
    """The key file ``TRANSIT_RELEASE_LEDGER_KEY_FILE`` names (resolved), or None."""
    raw = os.environ.get(KEY_FILE_ENV)
    return Path(raw).expanduser().resolve() if raw else None


def keyed_ledgers_record() -> Path | None:
    """``<key file>.ledgers``: beside the key, outside the home, the ledgers this key has MACed (one path a line).

    Someone who can write the home but not the key's directory cannot remove a ledger from it, so a ledger
    whose MACs were stripped cannot have a key "adopted" again even if every anchor in the home was doctored.
    """
    key = key_file()
    return key.with_name(key.name + ".ledgers") if key else None


def high_water_file() -> Path | None:
    """``<key file>.heads``: beside the key, outside the home, each keyed ledger's high-water mark."""
    key = key_file()
    return key.with_name(key.name + ".heads") if key else None


def key_from_environment(home: Path | None = None) -> bytes | None:
    raw = os.environ.get(KEY_FILE_ENV)
    return read_key_file(raw, home) if raw else None


def check_key_place(home: Path, ledger: Path | None = None) -> bytes | None:
    """The configured key (None without one), refused if it lies inside ``home`` or in the ledger's directory, is
    readable by other accounts or too short. Every command checks it before it starts, so nothing is MACed, and no
    record of the key (``.ledgers``, ``.heads``) is written, with a key the home's writers could read."""
    key = key_from_environment(home)
    if key is not None and ledger is not None:
        read_key_file(os.environ[KEY_FILE_ENV], Path(ledger).resolve().parent)
    return key


def anchor_mac(key: bytes, seq: int, digest: str) -> str:
    """The MAC an MLflow anchor of a keyed ledger carries (``head_mac``): only the key's holder can make one."""
    return hmac.new(key, f"anchor:{int(seq)}:{digest}".encode("ascii"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class HighWaterMark:
    """A keyed ledger's newest head, kept beside the key (``<key file>.heads``), outside the home.

    Written, MACed, before a charge or a publication commits (``committed`` false, with the head it grew from),
    and again once it has committed. A ledger must hold the mark's entry; the one state accepted without it is a
    mark not yet confirmed whose ledger still ends exactly at the head it grew from (a process stopped between
    writing the mark and committing, or a charge whose confirmation failed: that run stops before any noise).
    Someone who can write the home but not the key's directory can neither lower the mark nor forge one.
    ``first``: the hash of the ledger's entry 1, which names its history wherever the file lies (re-adopting the
    key after a move requires the marks of that history kept under another path; None in marks written before).
    ``retired_to``: the path where the key was re-adopted for the same history (`repair --adopt-ledger-key` after
    a move): the ledger at this path is retired and charges nothing more, so a home that was copied rather than
    moved cannot spend the budget a second time (None: a live mark).
    """

    seq: int
    hash: str
    committed: bool
    prev_seq: int
    prev_hash: str
    first: str | None = None
    retired_to: str | None = None

    def mac(self, key: bytes, ledger: str) -> str:
        fields = ["high-water", ledger, self.seq, self.hash, self.committed, self.prev_seq, self.prev_hash]
        if self.first is not None or self.retired_to is not None:
            fields.append(self.first)
        if self.retired_to is not None:
            fields += ["retired-to", self.retired_to]
        body = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
        return hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()

    def held_by(self, lookup: Callable[[int], str | None], last: tuple[int, str]) -> bool:
        """Does a ledger hold this mark? ``lookup(seq)``: entry ``seq``'s hash or None; ``last``: its head."""
        if (lookup(self.seq) if self.seq else GENESIS_HASH) == self.hash:
            return True
        if self.retired_to is not None and not self.committed:  # frozen while a charge was not yet confirmed
            return (lookup(self.prev_seq) if self.prev_seq else GENESIS_HASH) == self.prev_hash
        return not self.committed and tuple(last) == (self.prev_seq, self.prev_hash)

    def record(self, key: bytes, ledger: str) -> dict:
        """What ``<key file>.heads`` holds for ``ledger``."""
        return {"seq": self.seq, "hash": self.hash, "committed": self.committed, "prev_seq": self.prev_seq,
                "prev_hash": self.prev_hash, "mac": self.mac(key, ledger),
                **({"first": self.first} if self.first is not None else {}),
                **({"retired_to": self.retired_to} if self.retired_to is not None else {})}


def retired_message(ledger: str | Path, to: str, outcome: str = "nothing was charged") -> str:
    """Why a ledger whose mark was retired is refused, and what to do."""
    return (f"{ledger}: the key's records say this ledger's history was adopted at {to} (`transit-release repair "
            "--adopt-ledger-key` there), so the ledger at this path is retired: it is a copy of that one, and two "
            f"copies of one ledger would each spend the same budget; {outcome}. Release from the home of {to}. If "
            "that adoption was a mistake, stop every run there and run `transit-release repair --adopt-ledger-key` "
            "here: it moves the history back (and retires the other path), only if this ledger holds everything "
            "recorded there")


def _read_marks(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError) as exc:
        raise LedgerIntegrityError(f"{path}: the keyed high-water marks cannot be read "
                                   f"({getattr(exc, 'strerror', None) or exc}): restore the file from a backup of the "
                                   "key's directory") from None
    if not isinstance(data, dict):
        raise LedgerIntegrityError(f"{path}: not a file of keyed high-water marks; restore it from a backup")
    return data


def _mark_of(path: Path, key: bytes, ledger: str, rec) -> HighWaterMark:
    try:
        first, retired = rec.get("first"), rec.get("retired_to")
        mark = HighWaterMark(int(rec["seq"]), str(rec["hash"]), bool(rec["committed"]), int(rec["prev_seq"]),
                             str(rec["prev_hash"]), None if first is None else str(first),
                             None if retired is None else str(retired))
        ok = hmac.compare_digest(str(rec["mac"]), mark.mac(key, ledger))
    except (AttributeError, KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise LedgerIntegrityError(f"{path}: the high-water mark of {ledger} does not carry the key's MAC (it was "
                                   "altered); restore the key's directory from a backup")
    return mark


def read_high_water(key: bytes, ledger: str) -> HighWaterMark | None:
    """The high-water mark of ``ledger`` (its resolved path), checked against the key; None if it has none."""
    path = high_water_file()
    if path is None:
        return None
    rec = _read_marks(path).get(ledger)
    return None if rec is None else _mark_of(path, key, ledger, rec)


def read_all_high_water(key: bytes) -> dict[str, HighWaterMark]:
    """Every ledger's high-water mark beside the key, each checked against the key."""
    path = high_water_file()
    if path is None:
        return {}
    return {name: _mark_of(path, key, name, rec) for name, rec in sorted(_read_marks(path).items())}


def records_name(ledger: Path) -> str:
    """A ledger's name in the key's records: its directory resolved, the file itself as named."""
    ledger = Path(ledger)
    return str(ledger.parent.resolve() / ledger.name)


def keyed_by_records(ledger: Path) -> bool:
    """Do the key's records (``.ledgers``, ``.heads``) name ``ledger`` as a ledger this key has MACed?"""
    name = records_name(ledger)
    record, heads = keyed_ledgers_record(), high_water_file()
    try:
        listed = record is not None and record.exists() and name in record.read_text(encoding="utf-8").splitlines()
    except OSError:
        listed = False
    try:
        marked = heads is not None and name in _read_marks(heads)
    except LedgerIntegrityError:
        marked = True  # unreadable marks: the mark check names them
    return listed or marked


def check_key_records(key: bytes | None, ledger: Path, con: sqlite3.Connection | None) -> None:
    """With a key (and its file, so its records): the ledger at ``ledger`` (``con`` open on it, or None when the
    file does not exist: a head of 0) agrees with what the key's records beside the key say of that path.

    * it holds its keyed high-water mark (:class:`HighWaterMark`);
    * a ledger that holds MACs has a mark: without one (the home moved or remounted, or the mark lost) nothing
      tells whether its newest entries were erased, so it is refused until the key is re-adopted here
      (:meth:`Ledger.adopt_mark`);
    * a ledger the key's records list as keyed is not empty or gone (emptied, or deleted with everything in the home
      that anchored it).

    Raises :class:`LedgerRollbackError` (or :class:`LedgerIntegrityError`) naming what is wrong.
    """
    heads = high_water_file()
    if not key or heads is None:
        return
    name = records_name(ledger)
    mark = read_high_water(key, name)
    if con is None:
        n_entries = n_macs = 0
        last = (0, GENESIS_HASH)
    else:
        n_entries = con.execute("SELECT count(*) FROM entries").fetchone()[0]
        n_macs = con.execute("SELECT count(*) FROM entry_macs").fetchone()[0]
        last = con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone() or (0, GENESIS_HASH)
    if mark is not None and mark.retired_to is not None:
        raise LedgerRetiredError(retired_message(ledger, mark.retired_to))
    if mark is None:
        if n_macs:
            raise LedgerIntegrityError(
                f"{ledger}: the ledger holds MACs of the key, but the key's high-water marks ({heads}) have none for "
                "this path, so nothing tells whether its newest entries were erased: the home was moved or remounted, "
                "or its mark was lost; nothing was charged. After a move you made yourself, check the home with "
                "`transit-release audit` (this should be all it reports) and run `transit-release repair "
                "--adopt-ledger-key`, which records the mark here once the ledger holds every mark of its history "
                "kept under another path; otherwise restore the key's directory from a backup")
        if n_entries == 0 and keyed_by_records(ledger):
            state = "does not exist" if con is None else "is empty"
            raise LedgerRollbackError(
                f"the ledger {ledger} {state}, but {keyed_ledgers_record()} lists it as a ledger this key has MACed: "
                f"it was emptied or deleted and would spend again what it forgot; nothing was charged. Restore the "
                f"newest backup, or reconcile as {RECONCILE_DOC} says")
        return

    def lookup(seq: int) -> str | None:
        row = con.execute("SELECT hash FROM entries WHERE seq = ?", (seq,)).fetchone() if con is not None else None
        return row[0] if row else None

    if mark.held_by(lookup, tuple(last)):
        return
    reason = f"entry {mark.seq} is missing" if lookup(mark.seq) is None else f"entry {mark.seq} has another hash"
    anchor = Anchor(f"the keyed high-water mark ({heads})", mark.seq, mark.hash)
    raise LedgerRollbackError(rollback_message(ledger, [(anchor, reason)], last[0]))


@contextmanager
def _marks_locked(outcome: str):
    """The key's marks (raw records), under the lock every ledger of the key shares; whatever the caller changes in
    the dict is written back (atomically, synced) when the block ends without an exception. A file that cannot be
    written raises :class:`ConfigError` ending in ``outcome``."""
    path = high_water_file()
    try:
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            marks = _read_marks(path)
            yield marks
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(marks, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except OSError as exc:
        raise ConfigError(f"cannot write the keyed high-water mark {path} ({exc.strerror}): the key's directory must "
                          f"be writable by the release account; {outcome}") from None


def write_high_water(key: bytes, ledger: str, mark: HighWaterMark, outcome: str = "nothing was charged") -> None:
    """Record ``mark`` for ``ledger`` (atomically, under a lock shared by every ledger of the key); a mark that
    cannot be written raises :class:`ConfigError` ending in ``outcome``. A ledger whose mark was retired (its
    history adopted at another path) gets no new mark: :class:`LedgerRetiredError`, before its charge commits."""
    path = high_water_file()
    if path is None:
        return
    with _marks_locked(outcome) as marks:
        if ledger in marks:
            now = _mark_of(path, key, ledger, marks[ledger])
            if now.retired_to is not None:
                raise LedgerRetiredError(retired_message(ledger, now.retired_to, outcome))
        marks[ledger] = mark.record(key, ledger)


@dataclass(frozen=True)
class Anchor:
    """Something recorded outside the ledger that the ledger must hold.

    With ``seq`` and ``hash``: a head (a manifest's, an MLflow anchor's): entry ``seq`` with that hash. With ``seq``
    and ``release_id`` only: a spend MLflow mirrors: entry ``seq`` is a spend of that release. With ``release_id``
    only: a directory under ``releases/``: the release is published or has a publication intent. ``problem``: an
    anchor that could not be read, never held.
    """

    where: str
    seq: int | None = None
    hash: str | None = None
    release_id: str | None = None
    mac: str | None = None
    problem: str | None = None


FORGED_ANCHOR = "its MAC does not match the key (not written by this tool)"


def unmet_anchors(entries: Sequence["LedgerEntry"], intent_release_ids: set[str], anchors: Sequence[Anchor],
                  key: bytes | None = None) -> list[tuple[Anchor, str]]:
    """The anchors ``entries`` do not hold, each with what is wrong (no value of any entry), newest first."""
    by_seq = {e.seq: e for e in entries}
    published = {e.release_id for e in entries if e.entry_type == PUBLISHED}
    out = []
    for a in anchors:
        if a.problem is not None:
            out.append((a, a.problem))
        elif a.seq is not None and a.hash is not None:
            e = by_seq.get(a.seq)
            if a.seq == 0:
                if a.hash != GENESIS_HASH:
                    out.append((a, "it anchors an empty ledger with a non-genesis hash"))
            elif e is None:
                out.append((a, f"entry {a.seq} is missing"))
            elif e.hash != a.hash:
                out.append((a, f"entry {a.seq} has another hash"))
            elif key and a.mac is not None and not hmac.compare_digest(a.mac, anchor_mac(key, a.seq, a.hash)):
                out.append((a, FORGED_ANCHOR))
        elif a.seq is not None:
            e = by_seq.get(a.seq)
            if e is None:
                out.append((a, f"spend {a.seq} of '{a.release_id}' is missing"))
            elif e.entry_type != SPEND or e.release_id != a.release_id:
                out.append((a, f"entry {a.seq} is not a spend of '{a.release_id}'"))
        elif a.release_id is not None and a.release_id not in published and a.release_id not in intent_release_ids:
            out.append((a, f"release '{a.release_id}' is neither published nor being published on the ledger"))
    return sorted(out, key=lambda x: -1 if x[0].seq is None else x[0].seq, reverse=True)


def rollback_message(path: Path, unmet: list[tuple[Anchor, str]], head: int,
                     outcome: str = "nothing was charged") -> str:
    """One line: the newest anchor the ledger lacks, what follows, and how to reconcile."""
    anchor, reason = unmet[0]
    more = f" ({len(unmet)} anchors unmet)" if len(unmet) > 1 else ""
    if reason.startswith(FORGED_ANCHOR):
        return (f"{anchor.where} carries a MAC that does not match the ledger key: it was not written by this tool"
                f"{more}; {outcome}. Run `transit-release audit` and see {RECONCILE_DOC}")
    return (f"the ledger {path} (head: entry {head}) lacks what {anchor.where} records: {reason}{more}. It is older "
            f"than this home's records (a restored backup?) and would spend again what it forgot; {outcome}. Restore "
            f"the newest backup (one that holds it), or reconcile as {RECONCILE_DOC} says; `transit-release audit` "
            "counts the spends MLflow mirrors that the ledger lacks")


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


def _unreadable_is_integrity(method):
    """A ledger file whose tables were dropped or whose bytes are not a database is an integrity failure (exit 4,
    one line), not a crash; a busy database stays what it is."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            if _locked(exc):
                raise LedgerBusyError(_busy_message(self)) from None
            storage = storage_error(self.path, exc)
            if storage is not None:
                raise storage from None
            if isinstance(exc, sqlite3.OperationalError) and not text.startswith(("no such", "table ")):
                raise
            raise LedgerIntegrityError(f"{self.path}: not a readable privacy ledger ({text}); restore it from a "
                                       "backup") from None
    return wrapper


def _refuse_hard_links(path: Path) -> None:
    """Refuse a ledger file that has another name (a hard link, ``st_nlink > 1``): SQLite keeps a database's
    write-ahead log and shared-memory index beside the name it was opened by, so two runs reaching one ledger by two
    names would not see each other's uncommitted-to-the-file writes, and could both charge against one budget; the
    key's records, too, name the ledger by its path (as for a symbolic link)."""
    try:
        links = os.stat(path).st_nlink
    except FileNotFoundError:
        return
    except OSError:
        return  # unreadable metadata is the connection's to report, with its storage wording
    if links > 1:
        raise LedgerIntegrityError(
            f"{path}: the privacy ledger file has {links} names (hard links); SQLite keeps its write-ahead log per "
            "name, so runs reaching it by two names would not see each other's writes. Remove the other names "
            f"(find / -xdev -samefile {path} lists them) and keep this one")


class Ledger:
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

    def _create_schema(self, con: sqlite3.Connection) -> None:
        """The schema :data:`_SCHEMA` and its version, in one write transaction that first looks again: processes
        that open a new ledger at once each wait for the lock, and one that comes second finds the schema whole
        (checked without the lock, another's half-made schema would read as dropped triggers)."""
        con.execute("BEGIN IMMEDIATE")
        try:
            if con.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                dropped = check_schema(con).missing
                if dropped:
                    raise LedgerIntegrityError(
                        f"{self.path}: {SchemaCheck(missing=dropped).problem()}; nothing was written (a ledger of "
                        "an older schema gets the objects it lacks, never those created with a table it holds). "
                        "Check it with `transit-release audit` and restore the ledger from a backup")
                for statement in _schema_statements():
                    con.execute(statement)
                con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def _write_ahead_log(self, con: sqlite3.Connection) -> None:
        """WAL mode, the ledger's journal (readers never wait for a charge). SQLite answers a switch it cannot make
        now (another process holds the file) with "database is locked" at once, without waiting for the busy
        timeout: it is tried again until the ledger's timeout."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                if con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    con.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

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

    def _remember_keyed(self) -> None:
        """Add this ledger to the key's record of keyed ledgers (best effort: the key's directory may be
        read-only, and then the record simply does not help)."""
        record = keyed_ledgers_record()
        if record is None:
            return
        me = records_name(self.path)
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
                    and records_name(self.path) in record.read_text(encoding="utf-8").splitlines())
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

    def _protections(self, con: sqlite3.Connection) -> None:
        """Refuse to write to a ledger whose schema is not exactly this tool's (:func:`check_schema`): append-only
        triggers dropped or rewritten, or a foreign trigger, view, table or index added."""
        checked = check_schema(con)
        if not checked.ok:
            raise LedgerIntegrityError(f"{self.path}: {checked.problem()}; nothing was written. Check it with "
                                       "`transit-release audit` and restore the ledger from a backup")

    def _check_high_water(self, con: sqlite3.Connection) -> None:
        """With a key: the ledger agrees with the key's records beside the key (:func:`check_key_records`)."""
        check_key_records(self.key, self.path, con)

    def _commit(self, con: sqlite3.Connection, written: Sequence["LedgerEntry"]) -> None:
        """COMMIT; with a key, the high-water mark is advanced before (unconfirmed) and confirmed after.

        A charge whose mark cannot be confirmed after its commit is refused (:class:`ConfigError`): its spends are
        on the ledger and count, but the run stops before any noise is drawn, so the one state the mark accepts
        without its entries (unconfirmed, the ledger ending where it grew from) only ever covers spends whose noise
        was never drawn. A publication entry's confirmation stays best effort: nothing follows it but bookkeeping,
        and its release directory, an anchor of its own, names it.
        """
        if not (self.key and written) or high_water_file() is None:
            con.execute("COMMIT")
            return
        name = records_name(self.path)
        prev = (written[0].seq - 1, written[0].prev_hash)
        new = written[-1]
        row = con.execute("SELECT hash FROM entries WHERE seq = 1").fetchone()
        first = row[0] if row else None
        write_high_water(self.key, name, HighWaterMark(new.seq, new.hash, False, *prev, first))
        self._remember_keyed()  # after the mark: a charge refused before it is recorded nowhere
        con.execute("COMMIT")
        try:
            write_high_water(self.key, name, HighWaterMark(new.seq, new.hash, True, *prev, first),
                             f"the {len(written)} spend(s) of '{new.release_id}' were committed and count, but the "
                             "mark is not confirmed, so the run stops here, before any noise is drawn (keep the "
                             "key's directory on another file system than the home)")
        except ConfigError:
            if new.entry_type == SPEND:
                raise
            # a publication: committed, and the unconfirmed mark already names this entry, which the ledger holds

    @_unreadable_is_integrity
    def schema(self) -> SchemaCheck:
        """The file's schema against exactly this tool's (:func:`check_schema`)."""
        with closing(self._connect()) as con:
            return check_schema(con)

    def schema_version(self) -> int:
        with closing(self._connect()) as con:
            return con.execute("PRAGMA user_version").fetchone()[0]

    def check_high_water(self) -> None:
        """Raise :class:`LedgerRollbackError` if, with a key, the ledger lacks its keyed high-water mark (or holds
        MACs without a mark, or the key's records list it as keyed and it is empty: :func:`check_key_records`)."""
        with closing(self._connect()) as con:
            self._check_high_water(con)

    def unmet(self, anchors: Sequence[Anchor]) -> list[tuple[Anchor, str]]:
        """The ``anchors`` this ledger does not hold (see :func:`unmet_anchors`)."""
        with closing(self._connect()) as con:
            entries = self._read(con)
            intents = {r[0] for r in con.execute("SELECT release_id FROM publication_intents")}
        return unmet_anchors(entries, intents, anchors, self.key)

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
        head = self.head()
        first = self.entries()[0].hash if head.seq else None
        write_high_water(self.key, records_name(self.path),
                         HighWaterMark(head.seq, head.hash, True, head.seq, head.hash, first))
        return len(rows)

    @_unreadable_is_integrity
    def adopt_mark(self, anchors: Callable[[], Sequence[Anchor]] | None = None) -> Head:
        """Record the high-water mark of a keyed ledger that has none at its path (its home was moved or remounted,
        or it was keyed before marks were kept), or whose mark was retired; returns the head it records.

        Only after the checks a charge makes (chain and MACs with the key, exact schema, every anchor ``anchors()``
        names) and only if the ledger holds every mark of its own history kept under another path (marks naming
        the same entry 1, or, in marks written before they named it, the same earlier head): a ledger moved after
        its newest entries were erased is refused. What was erased, together with every anchor of it, while no
        mark named the ledger at all (a ledger keyed before marks were kept) cannot be told.

        Every other path of the same history is retired in the same locked write (:attr:`HighWaterMark.retired_to`):
        adoption is a move, never a copy. A copy whose key was adopted leaves the original path charging nothing
        more (a charge there is refused before it commits, even one that checked its mark just before), so the two
        homes can never each spend the remaining budget.
        """
        if not self.key or high_water_file() is None:
            raise ConfigError(f"no ledger key: set {KEY_FILE_ENV}")
        name = records_name(self.path)
        heads = high_water_file()
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")  # no charge runs meanwhile
            try:
                if not con.execute("SELECT count(*) FROM entry_macs").fetchone()[0]:
                    raise LedgerIntegrityError(f"{self.path} holds no MAC: adopt the key with `transit-release repair "
                                               "--adopt-ledger-key` on a ledger that passes its audit")
                here = read_high_water(self.key, name)
                if here is not None and here.retired_to is None:
                    con.execute("ROLLBACK")
                    return self.head()
                existing = self._check_whole(con, anchors, marks=False)
                by_seq = {e.seq: e.hash for e in existing}
                last = (existing[-1].seq, existing[-1].hash) if existing else (0, GENESIS_HASH)
                first = existing[0].hash if existing else None
                with _marks_locked("no key was adopted") as marks:  # checked and retired under one lock
                    for other in sorted(marks):
                        mark = _mark_of(heads, self.key, other, marks[other])
                        same = (mark.first == first if mark.first is not None else
                                by_seq.get(mark.seq) == mark.hash or (mark.prev_seq > 0 and
                                                                     by_seq.get(mark.prev_seq) == mark.prev_hash))
                        if other == name or not same:
                            continue
                        if not mark.held_by(by_seq.get, last):
                            reason = f"entry {mark.seq} is missing" if mark.seq not in by_seq else \
                                f"entry {mark.seq} has another hash"
                            anchor = Anchor(f"the keyed high-water mark of {other} (a path of this ledger's history)",
                                            mark.seq, mark.hash)
                            raise LedgerRollbackError(rollback_message(self.path, [(anchor, reason)], last[0],
                                                                       "no key was adopted"))
                        marks[other] = replace(mark, retired_to=name).record(self.key, other)
                    marks[name] = HighWaterMark(last[0], last[1], True, *last, first).record(self.key, name)
                self._remember_keyed()
                con.execute("ROLLBACK")
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise
        return Head(*last)

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
