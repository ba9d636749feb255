"""Recovery after a crash, and the working files of live runs.

Publication is three steps (:func:`transit_release.files.publish.commit_release`):
an intent on the ledger, the rename into place, the ``published`` entry. A
process killed between them leaves an intent without a ``published`` entry;
:func:`repair` then completes the publication when the release directory (or
its complete staging directory) holds exactly the manifest the intent names,
and rolls it back (removes the staging directory) otherwise. The spends stay
on the ledger either way: noise may have been drawn.

Runs work in their own directory ``private/work/<release-id>-<run>/`` and hold
an exclusive lock on it while they live; :func:`leftovers` names the working
directories, staging directories and report folders that no live run holds
and no published release owns, and :func:`clean_leftovers` removes them.
Quarantined rows are never leftovers: they follow the quarantine's retention
(:func:`purge_quarantine`).

:func:`backup_ledger` copies the ledger with SQLite's online backup, together
with the anchors it held when copied (``anchors.json``); restoring it is a manual
step whose result every charge checks against the home's anchors.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from transit_release.accounting.ledger import Ledger, snapshot_ledger
from transit_release.accounting.ledger_anchors import Anchor, rollback_message
from transit_release.accounting.ledger_chain import PublicationIntent
from transit_release.errors import ConfigError, LedgerIntegrityError, LedgerRollbackError
from transit_release.files.home import (LOCK, RENAME_PROBE_PATTERN, Home, _locked, check_release_id, live_release_ids,
                                        public_tree)
from transit_release.files.publish import MANIFEST, open_to_the_public, sha256_file, verify_release
from transit_release.opendata.catalog import PART_PATTERN, dead_rewrites, repair_catalog


@dataclass
class RepairResult:
    completed: list[str] = field(default_factory=list)  # release ids whose publication was completed
    rolled_back: list[str] = field(default_factory=list)  # release ids whose interrupted publication was undone
    removed: list[str] = field(default_factory=list)  # leftover paths removed (relative to the home)
    catalogue_rewritten: bool = False  # releases/catalog.jsonld did not list what releases/ holds

    def to_dict(self) -> dict:
        return {"completed": self.completed, "rolled_back": self.rolled_back, "removed": self.removed,
                "catalogue_rewritten": self.catalogue_rewritten}


def refuse_a_dead_runs_charge(ledger: Ledger, release_id: str) -> None:
    """A release charged and not published, asked for by a run that knows no live run holds it (it holds the
    release's lock, or found it free: :mod:`transit_release.runtime.release_lock`): refused with what became of the
    run that charged it and what ``repair`` does (:class:`~transit_release.errors.ReleaseExistsError`)."""
    from transit_release.errors import ReleaseExistsError
    from transit_release.runtime.release_lock import charged_by_a_dead_run

    charged = ledger.charged_release_ids()
    if release_id in charged:
        reason = charged_by_a_dead_run(release_id, charged, set(ledger.published()),
                                       {i.release_id for i in pending_intents(ledger)})
        if reason:
            raise ReleaseExistsError(reason)


def pending_intents(ledger: Ledger) -> list[PublicationIntent]:
    """The newest intent of each release that has no ``published`` entry."""
    published = set(ledger.published())
    latest: dict[str, PublicationIntent] = {}
    for intent in ledger.intents():
        if intent.release_id not in published:
            latest[intent.release_id] = intent
    return sorted(latest.values(), key=lambda i: i.id)


def _holds(directory: Path, manifest_sha256: str) -> bool:
    m = directory / MANIFEST
    return directory.is_dir() and m.is_file() and sha256_file(m) == manifest_sha256 and not verify_release(directory)


def intent_paths(home: Home, intent: PublicationIntent) -> tuple[Path, Path]:
    """The intent's final and staging directories, if they are where this tool would have put them.

    Intents are not chained (they are written between a charge and its publication), so their paths are
    not trusted: the final one must lie directly under ``releases/`` (or, for test-seed releases,
    ``private/test-releases/``), named by the release id, and the staging one ``.tmp-<id>-<8 hex>`` directly
    under ``private/staging/`` or beside the final one. Anything else is refused rather than renamed or deleted.
    """
    final, staging = Path(intent.final_dir), Path(intent.staging_dir)
    roots = {home.releases.resolve(), home.test_releases.resolve()}
    try:
        check_release_id(intent.release_id)
        ok = (final.parent.resolve() in roots
              and staging.parent.resolve() in (final.parent.resolve(), home.staging.resolve())
              and final.name == intent.release_id
              and re.fullmatch(rf"\.tmp-{re.escape(intent.release_id)}-[0-9a-f]{{8}}", staging.name) is not None
              and not final.is_symlink() and not staging.is_symlink())
    except (ConfigError, OSError):
        ok = False
    if not ok:
        raise LedgerIntegrityError(f"publication intent {intent.id} names directories outside this home's releases "
                                   "(the ledger's intents were altered): nothing was renamed or removed; check the "
                                   "ledger with `transit-release audit`")
    return final, staging


def _manifest_release_id(directory: Path) -> str | None:
    try:
        return json.loads((directory / MANIFEST).read_text(encoding="utf-8")).get("release_id")
    except (OSError, ValueError, AttributeError):
        return None


def complete_or_roll_back(ledger: Ledger, intent: PublicationIntent, home: Home) -> bool:
    """Finish one interrupted publication (True) or undo it (False).

    Only a release the ledger charged is ever completed, and only with the manifest of that release: an
    intent for a release id without spends (written into the ledger by hand) is refused before anything moves.
    """
    ledger.check_intent(intent)
    final, staging = intent_paths(home, intent)
    if not ledger.spends(intent.release_id):
        raise LedgerIntegrityError(f"publication intent {intent.id} is for release '{intent.release_id}', which the "
                                   "ledger never charged: nothing is published without its spends; nothing was "
                                   "renamed or removed")
    for d in (staging, final):
        if d.is_dir() and (d / MANIFEST).is_file() and _manifest_release_id(d) != intent.release_id:
            raise LedgerIntegrityError(f"publication intent {intent.id}: the manifest in {d.name} is not release "
                                       f"'{intent.release_id}'s; nothing was renamed or removed")
    if not final.exists() and _holds(staging, intent.manifest_sha256):
        os.rename(staging, final)
    if _holds(final, intent.manifest_sha256):
        open_to_the_public(final)
        ledger.record_publication(intent.release_id, intent.manifest_sha256)
        return True
    shutil.rmtree(staging, ignore_errors=True)
    return False


@dataclass(frozen=True)
class WorkDir:
    """One run's private working directory, locked while the run lives."""

    path: Path
    release_id: str

    @property
    def partitions(self) -> Path:
        return self.path / "partitions"

    @property
    def spill(self) -> Path:
        """The streaming pass's clean rows per partition, with card ids (removed partition by partition)."""
        return self.path / "spill"

    @property
    def quarantine_parts(self) -> Path:
        """Quarantined raw rows, batch by batch and partition by partition, before they are gathered."""
        return self.path / "quarantine-parts"

    @property
    def pairs(self) -> Path:
        """Card level: each partition's (card, partition) pairs, for the partitions-per-card bound."""
        return self.path / "pairs"


@contextmanager
def work_dir(home: Home, release_id: str):
    """A fresh ``private/work/<id>-<run>/`` held (flock) for the duration, removed afterwards."""
    path = home.work / f"{release_id}-{secrets.token_hex(4)}"
    for attempt in range(3):  # another run may remove an empty private/work/ between our two mkdirs
        home.work.mkdir(mode=0o700, exist_ok=True)  # private/ exists (Home.prepare); 0700 like all in it
        try:
            path.mkdir(mode=0o700)
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
    fh = open(path / LOCK, "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield WorkDir(path, release_id)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()
        try:
            home.work.rmdir()  # only if no other run works there
        except OSError:
            pass


def leftovers(home: Home, ledger: Ledger | None) -> list[Path]:
    """What crashed or refused runs left behind: unlocked working directories, staging directories without a
    pending intent, legacy ``private/<id>/partitions`` datasets and report folders of unpublished releases."""
    published = set(ledger.published()) if ledger is not None else set()
    pending = {Path(i.staging_dir) for i in pending_intents(ledger)} if ledger is not None else set()
    live = live_release_ids(home)
    out: list[Path] = []
    if home.work.is_dir():
        out += [p for p in sorted(home.work.iterdir()) if p.is_dir() and not _locked(p)]
    for root in (home.releases, home.test_releases, home.staging):
        if root.is_dir():
            out += [p for p in sorted(root.glob(".tmp-*")) if p not in pending
                    and p.name[5:].rsplit("-", 1)[0] not in live]
    out += dead_rewrites(home.releases)  # a catalogue rewrite a killed run left (repair removes it under its lock)
    for root in (home.staging, home.releases):  # a rename test a killed run left (Home.staging_root); empty
        out += sorted(p for p in root.glob(".rename-probe-*") if RENAME_PROBE_PATTERN.fullmatch(p.name)
                      and p.is_dir() and not any(p.iterdir())) if root.is_dir() else []
    if home.private.is_dir():
        out += sorted(p for p in home.private.glob("*/partitions") if p.parent.name not in ("work", "quarantine"))
    if home.reports.is_dir():
        for p in sorted(home.reports.iterdir()):
            if (p.is_dir() and not p.name.startswith(("audit-", "experiments-", "privacy-audit", "."))
                    and p.name not in published and p.name not in live):
                out.append(p)
    return out


def clean_leftovers(home: Home, ledger: Ledger | None) -> list[str]:
    removed = []
    for p in leftovers(home, ledger):
        if PART_PATTERN.fullmatch(p.name):
            continue  # removed under the catalogue's lock (repair_catalog)
        shutil.rmtree(p, ignore_errors=True)
        removed.append(str(p.relative_to(home.root)))
    return removed


def repair(home: Home, ledger: Ledger) -> RepairResult:
    """Complete or roll back every interrupted publication, then remove the leftovers of dead runs."""
    result = RepairResult()
    for intent in pending_intents(ledger):
        done = complete_or_roll_back(ledger, intent, home)
        (result.completed if done else result.rolled_back).append(intent.release_id)
    # a completed public publication joins the DCAT catalogue, as after any other; a rewrite of the catalogue that a
    # killed run left goes, and a catalogue that misses a release (its run killed before writing it) is rebuilt
    if home.releases.is_dir():
        parts, result.catalogue_rewritten = repair_catalog(home.root, home.releases, home.private)
        result.removed += [f"releases/{name}" for name in parts]
    result.removed += clean_leftovers(home, ledger)
    return result


def adopt_ledger_key(home: Home, ledger: Ledger, mlflow_anchors: list[dict]) -> str:
    """``repair --adopt-ledger-key``: key a ledger that never had a key (:meth:`Ledger.adopt_key`, after
    :func:`check_never_keyed`), or re-adopt the key for a keyed ledger that has no high-water mark at its path (its
    home moved or remounted: :meth:`Ledger.adopt_mark`, after the checks a charge makes). Returns what was done."""
    from transit_release.integrity.anchors import check_records, home_anchors

    if ledger.keyed():
        check_records(home, ledger, live_release_ids(home))
        head = ledger.adopt_mark(lambda: home_anchors(home))
        return f"ledger key re-adopted at {ledger.path}: its high-water mark is entry {head.seq}"
    check_never_keyed(home, mlflow_anchors)
    return f"ledger key adopted: {ledger.adopt_key()} entr(y/ies) MACed"


def check_never_keyed(home: Home, mlflow_anchors: list[dict]) -> None:
    """Refuse to adopt a key when anything recorded outside the ledger says the ledger was already keyed.

    Someone who can write the home but not read the key could strip every MAC and re-chain the ledger;
    adopting a key then would vouch for the forgery. Published manifests and MLflow anchors record whether
    the ledger was keyed when they were written.
    """
    from transit_release.integrity.audit import keyed_anchors

    manifests = {}
    for root in (home.releases, home.test_releases):
        for m in sorted(root.glob(f"*/{MANIFEST}")) if root.is_dir() else []:
            try:
                manifests[m.parent.name] = json.loads(m.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
    found = keyed_anchors(manifests, mlflow_anchors)
    if found:
        where, what = found[0]
        raise LedgerIntegrityError(f"{what} ({where}) says the ledger was keyed: its entries without a MAC were "
                                   "written without the key, so no key is adopted; restore the ledger from a backup")


def purge_quarantine(home: Home, retention_days: float, now: float | None = None) -> list[str]:
    """Delete quarantine files older than ``retention_days`` (their raw rows are kept no longer than that)."""
    if not home.quarantine.is_dir():
        return []
    cutoff = (now or time.time()) - retention_days * 86400
    removed = []
    for f in sorted(home.quarantine.rglob("*")):
        if f.is_file() and f.stat().st_mtime < cutoff:
            f.unlink()
            removed.append(str(f.relative_to(home.root)))
    for d in sorted((p for p in home.quarantine.rglob("*") if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    return removed


BACKUP_LEDGER = "ledger.sqlite"
BACKUP_RECORD = "anchors.json"


def _reached_by_another_name(to: Path, home: Home) -> str | None:
    """Why ``to`` (resolved) lies inside the home's ``releases/`` or the home itself although its path says neither:
    an existing directory on its way is that directory under another name (a web root bind-mounted, or linked, as
    the home's ``releases/``; the home mounted elsewhere). Compared by device and inode, which a bind mount and a
    symbolic link keep; None if no such directory is on its way."""
    wanted = {}
    for name, d in (("the home's releases/ directory", home.releases), ("the home", home.root)):
        try:
            st = d.stat()
        except OSError:
            continue
        wanted.setdefault((st.st_dev, st.st_ino), (name, d))
    for p in (to, *to.parents):
        try:
            st = p.stat()
        except OSError:
            continue
        found = wanted.get((st.st_dev, st.st_ino))
        if found is not None:
            name, d = found
            what = ("which may be published" if d == home.releases else "and a backup must survive the home")
            return (f"--to {to} lies inside {name} ({d}, reached as {p}), {what}: a backup of the ledger is private; "
                    "choose a directory outside any home")
    return None


def backup_ledger(home: Home, ledger: Ledger, to: Path, anchors: list[Anchor]) -> dict:
    """Copy ``ledger`` into ``to/ledger.sqlite`` with SQLite's online backup (consistent while releases run) and
    write ``to/anchors.json``: the copy's head and every anchor of the home it holds. Refused, writing nothing, for
    a ledger that fails its own verification, lacks a trigger or any anchor (a backup of a ledger that already
    forgot would restore the forgetting), or a ``to`` inside the home or not empty. Returns the record."""
    given = Path(to).expanduser().absolute()
    to = Path(to).expanduser().resolve()
    if to == home.root or home.root in to.parents:
        raise ConfigError(f"--to {to} lies inside the home {home.root}: a backup must survive the home; choose a "
                          "directory elsewhere")
    public = public_tree(given) or public_tree(to)
    inside = _reached_by_another_name(to, home)
    if inside is not None:
        raise ConfigError(inside)
    other = next((p for p in (to, *to.parents) if Home.at(p).is_home()), None)
    if public is not None or other is not None:
        where = f"inside a releases/ directory ({public}), which may be published" if public is not None else \
            f"inside another home ({other})"
        raise ConfigError(f"--to {to} lies {where}: a backup of the ledger is private; choose a directory outside "
                          "any home")
    if to.exists() and (not to.is_dir() or any(to.iterdir())):
        raise ConfigError(f"--to {to} is not an empty directory: a backup never overwrites another")
    entries = ledger.verify()
    schema = ledger.schema()
    if not (schema.ok and not schema.older):
        problem = schema.problem() if not schema.ok else f"its schema lacks {', '.join(schema.older)} (older version)"
        raise LedgerIntegrityError(f"{ledger.path}: {problem}; not backed up: check it with `transit-release audit`")
    unmet = ledger.unmet(anchors)
    if unmet:
        raise LedgerRollbackError(rollback_message(ledger.path, unmet, ledger.head().seq, "it was not backed up"))
    made = not to.exists()
    to.mkdir(parents=True, exist_ok=True, mode=0o700)
    dest = to / BACKUP_LEDGER
    tmp = to / f".{BACKUP_LEDGER}.tmp"
    try:
        try:
            tmp.unlink(missing_ok=True)
            snapshot_ledger(ledger.path, tmp, ledger.timeout_s)
            copy = Ledger(tmp, key=ledger.key or b"", read_only=True)
            copy.verify()
            head = copy.head()
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        held = [asdict(a) for a in anchors if a.problem is None]
        record = {"created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "home": str(home.root),
                  "ledger": str(ledger.path.resolve()), "entries": entries, "head": head.to_dict(),
                  "keyed": ledger.keyed(), "anchors": held}
        fd = os.open(to / BACKUP_RECORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        # a backup stopped short (a full disk, Ctrl-C) is no backup: nothing of it stays to be restored later
        for name in (BACKUP_LEDGER, BACKUP_RECORD):
            (to / name).unlink(missing_ok=True)
        if made:
            try:
                to.rmdir()
            except OSError:
                pass
        raise
    return record
