"""The home directory: prepared before anything else, checked before any spend, tidied after a failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from prefect import get_run_logger

from tasks import data_task
from transit_release.accounting.ledger_key import check_key_place
from transit_release.errors import ConfigError
from transit_release.files.home import UMASK, Home
from transit_release.integrity import recovery
from transit_release.noise import TEST_SEED_ENV
from transit_release.opendata import settings as open_data_settings


@data_task(name="prepare-home")
def prepare_home(home: str, ledger: str | None, quarantine_retention_days: float | None = None,
                 releasing: bool = True) -> Home:
    """Folders with their modes; a home that is a file or not writable, or a ledger key inside it, is refused at
    once; quarantined rows older than the retention are deleted. The process's umask becomes the tool's (nothing
    it writes is world-readable unless made so on purpose: the public release files), whoever started the run."""
    os.umask(UMASK)
    check_key_place(Path(home).resolve(), Path(ledger).resolve() if ledger else None)  # deployments start here
    where = Home.at(home, ledger).prepare()
    if releasing and os.environ.get(TEST_SEED_ENV) and where.releases.is_dir() and any(where.releases.iterdir()):
        raise ConfigError(f"{TEST_SEED_ENV} is set, but {where.root} holds public releases: the test-only seed makes "
                          "noise anyone can regenerate and would use up this home's budget and periods; unset it")
    if releasing:  # a malformed open-data settings file is refused before anything is charged
        open_data_settings.load(where.root)
    if quarantine_retention_days is not None:
        removed = recovery.purge_quarantine(where, quarantine_retention_days)
        if removed:
            get_run_logger().info("deleted %d quarantine file(s) older than %g days", len(removed),
                                  quarantine_retention_days)
    return where


@data_task(name="discard-failed-run")
def discard_run(home: Home, release_id: str, keep_reports: bool) -> list[str]:
    """After a refusal or failure: remove what this run created under ``release_reports/<id>/`` (unless the id
    is published, or ``keep_reports``: the flows pass it when the run wrote nothing there — refused at its
    charge, the folder is another run's of the same id); its working directory goes with the run itself."""
    from transit_release.accounting.ledger import Ledger

    out = home.reports / release_id
    if keep_reports or not out.exists() or (home.ledger.exists() and release_id in Ledger(home.ledger).published()):
        return []
    shutil.rmtree(out, ignore_errors=True)
    return [str(out.relative_to(home.root))]


def relative(home: Home, path: str | Path) -> str:
    return str(Path(path).resolve().relative_to(home.root))


@data_task(name="check-free-space")
def check_free_space(home: Home, needed: dict[str, int], release_id: str) -> None:
    """Before the charge: every filesystem the release writes to has the room the release still needs there (see
    :mod:`transit_release.files.storage`), or the release is refused with nothing charged."""
    from transit_release.files import storage
    from transit_release.noise import NoiseSource

    root = home.release_root(NoiseSource.from_environment().kind)
    spare = storage.check_free_space(home, needed, release_id, root)
    get_run_logger().info("free space: the release needs about %.0f MiB once charged; at least %.0f MiB stay free "
                          "on every filesystem it writes to", sum(needed.values()) / 2**20, spare / 2**20)


@data_task(name="records-space-needed")
def records_space_needed() -> dict[str, int]:
    """Bytes a passenger-level release still writes once charged (public: never from its input)."""
    from transit_release.files import storage

    return storage.records_release_needs()
