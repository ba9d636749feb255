"""The ledger's file: its schema and migration, and what its failures mean.

* append-only: triggers refuse ``UPDATE`` and ``DELETE``;
* no spend that gives budget back: a trigger refuses, at the database level,
  any spend whose ε or δ is negative, not a finite number or absent (events
  refuse them at construction too);
* its protections are checked, not silently restored: a ledger whose schema is not exactly the one this tool
  creates (names and SQL: append-only triggers dropped or rewritten, a foreign trigger, view or table added) is
  refused for writing (:func:`check_schema`); a ledger of an older schema version gets only the objects that
  version lacked (:class:`LedgerFile`);
* the SQLite file's failures, each told for what it is: another process holding the lock (busy), the storage under
  it (:func:`storage_error`), bytes that are not a ledger (:func:`_unreadable_is_integrity`), a second name
  (:func:`_refuse_hard_links`).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from transit_release.errors import LedgerBusyError, LedgerIntegrityError, LedgerStorageError

#: ``PRAGMA user_version`` of a ledger whose schema (tables and triggers) this version wrote or checked: from it
#: on, a missing trigger means someone dropped it (older files get the triggers they lack when first opened).
SCHEMA_VERSION = 2
#: The triggers that make the ledger append-only and refuse spends that give budget back.
TRIGGERS = ("entries_no_update", "entries_no_delete", "entries_spend_is_a_cost", "entry_macs_no_update",
            "entry_macs_no_delete", "publication_intents_no_update", "publication_intents_no_delete",
            "intent_macs_no_update", "intent_macs_no_delete")

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


def _busy_message(ledger: LedgerFile) -> str:
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


class LedgerFile:
    """The ledger's methods that keep its file and schema (the base of
    :class:`~transit_release.accounting.ledger.Ledger`, whose ``path``, ``timeout_s`` and ``_connect`` they use)."""

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

    def _protections(self, con: sqlite3.Connection) -> None:
        """Refuse to write to a ledger whose schema is not exactly this tool's (:func:`check_schema`): append-only
        triggers dropped or rewritten, or a foreign trigger, view, table or index added."""
        checked = check_schema(con)
        if not checked.ok:
            raise LedgerIntegrityError(f"{self.path}: {checked.problem()}; nothing was written. Check it with "
                                       "`transit-release audit` and restore the ledger from a backup")

    @_unreadable_is_integrity
    def schema(self) -> SchemaCheck:
        """The file's schema against exactly this tool's (:func:`check_schema`)."""
        with closing(self._connect()) as con:
            return check_schema(con)

    def schema_version(self) -> int:
        with closing(self._connect()) as con:
            return con.execute("PRAGMA user_version").fetchone()[0]
