"""Recovery after a crash, and the working files of live runs.

Publication is three steps (:func:`transit_release.publish.commit_release`):
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
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from transit_release.accounting.ledger import Ledger, PublicationIntent
from transit_release.home import Home
from transit_release.publish import MANIFEST, sha256_file, verify_release

LOCK = ".lock"


@dataclass
class RepairResult:
    completed: list[str] = field(default_factory=list)  # release ids whose publication was completed
    rolled_back: list[str] = field(default_factory=list)  # release ids whose interrupted publication was undone
    removed: list[str] = field(default_factory=list)  # leftover paths removed (relative to the home)

    def to_dict(self) -> dict:
        return {"completed": self.completed, "rolled_back": self.rolled_back, "removed": self.removed}


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


def complete_or_roll_back(ledger: Ledger, intent: PublicationIntent) -> bool:
    """Finish one interrupted publication (True) or undo it (False)."""
    final, staging = Path(intent.final_dir), Path(intent.staging_dir)
    if not final.exists() and _holds(staging, intent.manifest_sha256):
        os.rename(staging, final)
    if _holds(final, intent.manifest_sha256):
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


@contextmanager
def work_dir(home: Home, release_id: str):
    """A fresh ``private/work/<id>-<run>/`` held (flock) for the duration, removed afterwards."""
    home.work.mkdir(parents=True, exist_ok=True)
    path = home.work / f"{release_id}-{secrets.token_hex(4)}"
    path.mkdir(mode=0o700)
    fh = open(path / LOCK, "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield WorkDir(path, release_id)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def _locked(path: Path) -> bool:
    """Does a live run hold ``path``'s lock?"""
    lock = path / LOCK
    if not lock.exists():
        return False
    with open(lock, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def live_release_ids(home: Home) -> set[str]:
    """Release ids some live run is working on."""
    if not home.work.is_dir():
        return set()
    return {p.name.rsplit("-", 1)[0] for p in home.work.iterdir() if p.is_dir() and _locked(p)}


def leftovers(home: Home, ledger: Ledger | None) -> list[Path]:
    """What crashed or refused runs left behind: unlocked working directories, staging directories without a
    pending intent, legacy ``private/<id>/partitions`` datasets and report folders of unpublished releases."""
    published = set(ledger.published()) if ledger is not None else set()
    pending = {Path(i.staging_dir) for i in pending_intents(ledger)} if ledger is not None else set()
    live = live_release_ids(home)
    out: list[Path] = []
    if home.work.is_dir():
        out += [p for p in sorted(home.work.iterdir()) if p.is_dir() and not _locked(p)]
    for root in (home.releases, home.test_releases):
        if root.is_dir():
            out += [p for p in sorted(root.glob(".tmp-*")) if p not in pending
                    and p.name[5:].rsplit("-", 1)[0] not in live]
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
        shutil.rmtree(p, ignore_errors=True)
        removed.append(str(p.relative_to(home.root)))
    return removed


def repair(home: Home, ledger: Ledger) -> RepairResult:
    """Complete or roll back every interrupted publication, then remove the leftovers of dead runs."""
    result = RepairResult()
    for intent in pending_intents(ledger):
        (result.completed if complete_or_roll_back(ledger, intent) else result.rolled_back).append(intent.release_id)
    result.removed = clean_leftovers(home, ledger)
    return result


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
