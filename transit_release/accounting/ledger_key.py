"""The ledger's key and its records beside it, outside the home.

Never older than the home's records, with a key: :meth:`transit_release.accounting.ledger.Ledger.charge` also
requires the keyed high-water mark kept beside the key (:class:`HighWaterMark`), so a restored older ledger cannot
spend again what it forgot; a ledger that holds MACs but has no mark at its path, or that the key's records name and
that is now empty or gone, is refused too (:func:`check_key_records`). :class:`KeyedLedger` holds the ledger's methods
that check and keep those records (keying, the mark advanced around each commit, adopting a key or a mark).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import sqlite3
import stat
from collections.abc import Callable, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from transit_release.accounting.ledger_anchors import RECONCILE_DOC, Anchor, rollback_message
from transit_release.accounting.ledger_chain import (GENESIS_HASH, SPEND, Head, LedgerEntry, PublicationIntent,
                                                     entry_mac, intent_mac)
from transit_release.accounting.ledger_schema import _unreadable_is_integrity
from transit_release.errors import ConfigError, LedgerIntegrityError, LedgerRetiredError, LedgerRollbackError

#: Environment variable naming a file that holds the ledger's HMAC key (kept outside the home).
KEY_FILE_ENV = "TRANSIT_RELEASE_LEDGER_KEY_FILE"


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


class KeyedLedger:
    """The ledger's methods that check and keep the key's records (the base of
    :class:`~transit_release.accounting.ledger.Ledger`, whose ``path``, ``key``, ``_connect``, ``entries``, ``head``,
    ``keyed`` and ``_check_whole`` they use)."""

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

    def check_high_water(self) -> None:
        """Raise :class:`LedgerRollbackError` if, with a key, the ledger lacks its keyed high-water mark (or holds
        MACs without a mark, or the key's records list it as keyed and it is empty: :func:`check_key_records`)."""
        with closing(self._connect()) as con:
            self._check_high_water(con)

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
