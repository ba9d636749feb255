"""Audit steps: take one snapshot of the ledger, verify each record, reconcile them, account, report.

Every step reads the ledger through one snapshot (:func:`snapshot_ledger`: SQLite's online backup into a private
temporary file), so the checks and the loss all describe one state of it: a ledger swapped or changed while the
audit runs cannot show one step a state and another step a different one.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
import sqlite3
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from tasks import data_task
from transit_release.accounting import ledger as ledger_records
from transit_release.accounting import ledger_chain, ledger_key, ledger_schema
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.ledger_key import key_from_environment
from transit_release.errors import ConfigError, LedgerStorageError, TransitReleaseError
from transit_release.files.home import Home, live_release_ids
from transit_release.integrity import audit, recovery
from transit_release.reports import release_index

SNAPSHOT = "ledger.sqlite"
_STORAGE_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT)


@data_task(name="snapshot-ledger")
def snapshot_ledger(home: Home) -> dict:
    """One consistent copy of the ledger for the whole audit: ``{"path": copy or None, "problem": why none}``
    (no path and no problem: there is no ledger file). Remove it with :func:`discard_snapshot`."""
    path = home.ledger
    if not (path.exists() or path.is_symlink()):
        return {"path": None, "problem": None}
    if path.is_symlink():
        return {"path": None, "problem": f"{path}: the privacy ledger is a symbolic link; put the ledger file itself "
                                         "there"}
    if not path.is_file():
        return {"path": None, "problem": f"{path}: the privacy ledger is not a file"}
    tmp = Path(tempfile.mkdtemp(prefix="transit-release-audit-"))
    try:
        ledger_records.snapshot_ledger(path, tmp / SNAPSHOT)
    except (OSError, sqlite3.Error) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        storage = ledger_schema.storage_error(path, exc) if isinstance(exc, sqlite3.Error) else None
        if storage is not None or (isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS):
            # the audit cannot read it now: it fails (exit 1) without calling the ledger damaged
            raise storage or LedgerStorageError(f"{path}: the privacy ledger could not be copied for the audit "
                                                f"({exc.strerror}): a storage error, which says nothing about its "
                                                "records; free space and run the audit again") from None
        return {"path": None, "problem": f"{path.name} is not a readable privacy ledger ({exc}): restore it from a "
                                         "backup"}
    return {"path": str(tmp / SNAPSHOT), "problem": None}


@data_task(name="discard-ledger-snapshot")
def discard_snapshot(snapshot: dict) -> None:
    if snapshot.get("path"):
        shutil.rmtree(Path(snapshot["path"]).parent, ignore_errors=True)


def _ledger(home: Home, snapshot: dict, key: bytes | None = b"") -> Ledger | None:
    """The snapshot as a read-only ledger named as the home's; None without one."""
    return Ledger(home.ledger, key=key or b"", snapshot=snapshot["path"]) if snapshot.get("path") else None


@data_task(name="read-ledger")
def read_ledger(home: Home, snapshot: dict) -> list:
    """The ledger's entries; none from a file that is not a readable ledger (its verification says so)."""
    try:
        ledger = _ledger(home, snapshot)
        return ledger.entries() if ledger else []
    except (sqlite3.Error, TransitReleaseError):
        return []


@data_task(name="verify-ledger")
def verify_ledger(home: Home, snapshot: dict) -> list:
    """The hash chain, the database's integrity, the exact schema (append-only triggers, nothing foreign) and,
    with a key, every MAC."""
    if snapshot.get("problem"):
        return [audit.Discrepancy("ledger", "database", snapshot["problem"])]
    try:
        ledger = _ledger(home, snapshot, key_from_environment(home.root))
        if ledger is None:
            return []
        ledger.entries()
    except TransitReleaseError as exc:
        return [audit.Discrepancy("ledger", "database", str(exc))]
    except sqlite3.Error as exc:
        return [audit.Discrepancy("ledger", "database", f"{home.ledger.name} is not a readable privacy ledger "
                                  f"({exc}): restore it from a backup")]
    problems, trouble = audit.guarded("ledger", "hash chain", audit.check_ledger, ledger.verify)
    checked, more = audit.guarded("ledger", "triggers", audit.check_protections, ledger.schema)
    return (problems or trouble) + (checked or more)


@data_task(name="reconcile-records")
def reconcile(home: Home, entries: list, ledger_problems: list, mirror: list, anchors: list,
              delta_prime: float, mirrored: dict | None = None, allow_unbounded_person_loss: bool = False, *,
              snapshot: dict, policy=None) -> dict:
    """Every record against the others; whatever a tampered home holds gives discrepancies, never a crash.
    ``snapshot``: the one the entries were read from (:func:`snapshot_ledger`)."""
    problems = list(ledger_problems)
    unreadable = [p for p in problems if p.record == "ledger" and p.subject == "database"]
    if unreadable and not entries and not _emptied(home.ledger):
        # a ledger that cannot be opened (a hard link, a symbolic link, not a database) says nothing of the
        # releases: with no entries to check them against, each would read as "never recorded" (atk40 N4). The
        # audit fails on that one discrepancy, and says nothing else it cannot know. (A file of 0 bytes holds no
        # records: that the ledger records none of the published releases is then true, and said.)
        return audit.AuditResult(discrepancies=unreadable[:1], ledger_unreadable=True).to_dict()
    live_ids = live_release_ids(home)  # before the records are read: a run alive now was alive then
    valid = audit.valid_entries(entries)
    published_ids, charged, spends, published = audit.summarise(valid)
    key = key_from_environment(home.root)
    try:
        ledger = _ledger(home, snapshot, key)
        keyed = ledger.keyed() if ledger else False
        intents = ledger.intents() if ledger else []
    except (sqlite3.Error, TransitReleaseError):
        ledger, keyed, intents = None, False, []  # reported by the ledger's verification
    try:
        pending = [i.release_id for i in recovery.pending_intents(ledger)] if ledger else []
    except (sqlite3.Error, TransitReleaseError):
        ledger, keyed, intents, pending = None, False, [], []  # reported by the ledger's verification
    # with a key, the key's records beside it are checked whatever the ledger holds: a ledger emptied or deleted
    # (with everything in the home that anchored it) is not "not keyed" if they name it
    recorded_keyed = key is not None and ledger_key.keyed_by_records(home.ledger)
    # what the ledger recorded after the snapshot (a live run's charge or publication): the home's records of it
    # (an anchor run, a renamed directory) may be read after the snapshot; the ledger read again now holds them
    current, current_intents = _current_ledger(home)
    head = _head(entries)
    in_flight = audit.in_flight_ids(live_ids, head, current, current_intents, {i.release_id for i in intents})
    later = {e.seq: e.hash for e in current if e.seq > head[0]}
    later_ids = {e.release_id for e in current if e.seq > head[0]}
    if head[0] and not any(e.seq == head[0] and e.hash == head[1] for e in current):
        later, later_ids, current_intents = {}, set(), set()  # the ledger was replaced after the snapshot: nothing
        # after it is trusted
    known_staging = None
    if keyed and key is not None:
        vouched = []
        for i in intents:
            if i.release_id in pending and not audit.check_intents([i], ledger.check_intent):
                vouched.append(Path(i.staging_dir).name)
        live = live_release_ids(home)
        known_staging = set(vouched) | {p.name for root in (home.releases, home.test_releases, home.staging)
                                        if root.is_dir() for p in root.glob(".tmp-*")
                                        if p.name[5:].rsplit("-", 1)[0] in live}
        problems += audit.check_intents(intents, ledger.check_intent)
    if key is not None and ledger is not None:
        marked = audit.check_high_water(ledger.check_high_water)
        if marked and later and _mark_held_now(key, home, current):
            marked = []  # the mark moved on with a live run's entries after the snapshot, which the ledger holds now
        problems += marked
    elif key is not None and not snapshot.get("problem"):  # no ledger file: a head of 0
        problems += audit.check_high_water(lambda: ledger_key.check_key_records(key, home.ledger, None))
    checked, trouble = audit.guarded("release", "releases/", audit.check_releases, home, published,
                                     {e.release_id for e in spends}, known_staging)
    release_problems, staging, manifests = checked or (trouble, [], {})

    def check_anchor(seq: int, digest: str) -> str | None:
        err = ledger.check_anchor(seq, digest)
        return None if err and seq > head[0] and later.get(seq) == digest else err

    anchor_problems, matched = [], {}
    if ledger:
        checked, trouble = audit.guarded("anchor", "anchors", audit.check_anchors, check_anchor, manifests,
                                         anchors, keyed, published_ids if home.mlflow_db.exists() else (), key)
        anchor_problems, matched = checked or (trouble, {})
    mirror_problems, trouble = audit.guarded("mlflow", "mirror", audit.check_mirror, spends, published, mirror)
    extra = audit.mirrored_entries(valid, mirrored or {})
    counted: dict[str, int] = {}
    for e in extra:
        counted[e.release_id] = counted.get(e.release_id, 0) + 1
    loss, loss_trouble = audit.guarded("ledger", "loss", audit.cumulative_loss,
                                       sorted(valid + extra, key=lambda e: e.seq), delta_prime)
    statement_problems, statement_trouble = audit.guarded("release", "statements", audit.check_person_statements,
                                                          valid, manifests)
    # a release being made while the audit reads the home is in flight, not a discrepancy nor a leftover
    discrepancies, in_flight_seen = audit.set_aside_in_flight(
        problems + release_problems + anchor_problems + (mirror_problems or trouble) + loss_trouble
        + (statement_problems or statement_trouble), in_flight, set(published), live_ids,
        {i.release_id for i in intents} | current_intents | set(later_ids))
    try:
        left = [str(p.relative_to(home.root)) for p in recovery.leftovers(home, ledger)
                if not any(p.name == r or p.name.startswith((f".tmp-{r}-", f"{r}-")) for r in in_flight)]
    except (sqlite3.Error, TransitReleaseError):
        left = []
    result = audit.AuditResult(
        entries=len(entries), releases_published=published_ids, charged_not_published=charged,
        pending_publications=pending, staging_leftovers=staging, leftovers=left,
        anchors_checked=matched, keyed=keyed,
        threat_model=audit.threat_model(keyed, key is not None, matched, counted, allow_unbounded_person_loss,
                                        recorded_keyed),
        discrepancies=discrepancies, in_flight=in_flight_seen,
        card_unbounded_periods=audit.card_unbounded_periods(valid),
        loss=loss or {}, loss_counts_mirrored=counted,
        populations=policy.population_list(valid) if policy is not None else [])
    return result.to_dict()


def _emptied(path: Path) -> bool:
    """The ledger file is there, itself, and of 0 bytes (truncated): it holds no records, which is known."""
    try:
        return not path.is_symlink() and path.is_file() and path.stat().st_size == 0
    except OSError:
        return False


def _head(entries: list) -> tuple[int, str]:
    return (entries[-1].seq, entries[-1].hash) if entries else (0, ledger_chain.GENESIS_HASH)


def _mark_held_now(key: bytes, home: Home, current: list) -> bool:
    """Does the ledger as it is now (``current``, which holds the snapshot's head) hold the keyed high-water mark?"""
    try:
        mark = ledger_key.read_high_water(key, ledger_key.records_name(home.ledger))
    except TransitReleaseError:
        return False
    by_seq = {e.seq: e.hash for e in current}
    return mark is not None and mark.held_by(by_seq.get, _head(current))


def _current_ledger(home: Home) -> tuple[list, set[str]]:
    """The ledger as it is now (its entries, the release ids of its publication intents), read again after the
    snapshot; nothing if it cannot be read now (then nothing is in flight but live runs)."""
    try:
        if not home.ledger.is_file() or home.ledger.is_symlink():
            return [], set()
        now = Ledger(home.ledger, key=b"", read_only=True)
        return now.entries(), {i.release_id for i in now.intents()}
    except (sqlite3.Error, TransitReleaseError, OSError):
        return [], set()


@data_task(name="write-audit-report")
def write_audit_report(home: Home, result: dict, caps: dict, folder: str | None = None) -> str:
    """The audit's report under ``release_reports/audit-<UTC stamp>/``, or under ``release_reports/<folder>/``,
    replacing the audit there (built aside, then swapped in); either way its figures are added to the audit
    history the index shows."""
    if folder is not None and not re.fullmatch(r"audit-[a-z0-9][a-z0-9-]*", folder):
        raise ConfigError(f"report folder {folder!r}: name it audit-<lowercase letters, digits, dashes>, "
                          "e.g. audit-scheduled")
    now = datetime.now(timezone.utc)
    from transit_release.reports import report  # matplotlib: imported when a report is drawn
    name = folder or f"audit-{now.strftime('%Y%m%dT%H%M%S%fZ')}"
    out = home.reports / (f".{name}.{now.strftime('%Y%m%dT%H%M%S%fZ')}.tmp" if folder else name)
    path = report.write_audit_report(out, result, caps)
    summary = {**release_index.audit_summary(result), "at": now.isoformat(timespec="seconds")}
    (path.parent / release_index.AUDIT_SUMMARY).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    if folder:
        final = home.reports / folder
        old = home.reports / f".{name}.{now.strftime('%Y%m%dT%H%M%S%fZ')}.old"
        if final.exists():
            final.rename(old)
        out.rename(final)
        shutil.rmtree(old, ignore_errors=True)
        path = final / path.name
    release_index.add_audit_to_history(home.reports, name, summary)
    return str(path)
