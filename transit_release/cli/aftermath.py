"""What a command leaves when it stops short, and what it says about it: the home's entries and the ledger's head
before it runs; after a refusal, failure or Ctrl-C, what it created at the top of the home (unless something is
charged or another run works there) and the failure records Prefect stored go; what the ledger recorded of this
process's releases is put in words. May remove only what this tool makes under the home; reads the ledger
read-only."""

from __future__ import annotations

import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from transit_release.errors import TransitReleaseError
from transit_release.files.home import Home


def entries(home: Home) -> set[Path] | None:
    """The home's top-level entries before a command (``None``: the home did not exist)."""
    return set(home.root.iterdir()) if home.root.is_dir() else None


def remove_what_a_refusal_created(home: Home, before: set[Path] | None) -> None:
    """A refused command, and a dry run in a directory that was no home, leave nothing behind: what it created at
    the top of the home (its folders, Prefect's database, the home itself if it was new) goes, except the quarantine (the custodian's record of the rows that
    were refused, kept for its retention), and unless something is on the ledger (this run's charge or a
    concurrent run's) or another run is working in the home."""
    from transit_release.accounting.ledger import Ledger

    if not home.root.is_dir():
        return
    try:
        if home.ledger.exists() and Ledger(home.ledger, key=b"", read_only=True).head().seq > 0:
            return
        if home.work.is_dir():  # (runs work there)
            from transit_release.files.home import live_release_ids

            if live_release_ids(home):
                return  # another run works in this home now
    except (TransitReleaseError, OSError, ValueError):
        return
    keep_private = home.quarantine.is_dir() and any(p.is_file() for p in home.quarantine.rglob("*"))
    ours = {home.private, home.reports, home.releases, home.mlflow_db, home.mlflow_artifacts, home.prefect_home,
            home.root / ".mlflow.lock"}
    ledger_names = {home.ledger.name + suffix for suffix in ("", "-wal", "-shm", "-journal")}
    for p in set(home.root.iterdir()) - (before or set()):
        if p not in ours and not (p.parent == home.ledger.parent and p.name in ledger_names):
            continue  # only what this tool makes: a file someone else put there meanwhile stays
        if p == home.private and keep_private:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:  # an empty ledger, MLflow's store: made by this run before it was refused
            p.unlink(missing_ok=True)
    if before is None and not any(home.root.iterdir()):
        home.root.rmdir()


@contextmanager
def interruptible():
    """A terminal's Ctrl-C (SIGINT to the command's process group: the command's children are in groups of their
    own and do not get it) stops the command in order: the report-drawing processes at once, then, as the
    ``KeyboardInterrupt`` unwinds, the run's cleanup, the Dask workers, the flow's final state on Prefect's
    server and the server itself. Further Ctrl-Cs are ignored meanwhile, so that the stop is not cut short. A
    command started with SIGINT ignored (in the background by a shell) keeps it ignored."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return

    def stop(signum, frame):
        from transit_release.reports.report_process import stop_drawing

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_drawing()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def uninterruptible():
    """While a command cleans up after a refusal, a failure or a first Ctrl-C (what a refused run left in the home
    and in its Prefect server), further Ctrl-Cs are ignored: the clean-up is finished, never left half done, and
    the command then exits as it would have. The previous disposition is restored after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ledger_head(home: Home) -> int:
    """The ledger's head before the command (0 if there is none yet)."""
    from transit_release.accounting.ledger import Ledger

    try:
        return Ledger(home.ledger, key=b"", read_only=True).head().seq if home.ledger.exists() else 0
    except Exception:  # noqa: BLE001 — an unreadable ledger is the command's own to report
        return 0


def charged_here() -> set[str]:
    """The release ids this process has charged (none before a release flow has run in it)."""
    budget = sys.modules.get("tasks.budget")  # imported by every release flow, which runs in this process
    return set(getattr(budget, "CHARGED_HERE", ()))


def forgettable(exc: BaseException) -> bool:
    """A run that stopped on ``exc`` leaves nothing in the command's Prefect database: a refusal or a storage
    failure, before this process charged anything (a run that spent budget keeps its record, as its ledger entries
    stay; a Ctrl-C exits at once; an unexpected error keeps its record for the bug report)."""
    if charged_here():
        return False
    return isinstance(exc, TransitReleaseError) or (not isinstance(exc, KeyboardInterrupt)
                                                    and storage_failure(exc) is not None)


def state_since(home: Home, head: int) -> str:
    """What the ledger recorded since ``head`` of the releases this process charged (its charge, publication
    intent, publication; not a concurrent run's), and what ``repair`` does about it; empty if nothing."""
    ours = charged_here()
    if not ours or not home.ledger.exists():
        return ""
    from transit_release.accounting.ledger import Ledger
    from transit_release.integrity.recovery import pending_intents

    try:
        ledger = Ledger(home.ledger, key=b"", read_only=True)
        new = [e for e in ledger.entries() if e.seq > head and e.release_id in ours]
        pending = {i.release_id for i in pending_intents(ledger)}
    except Exception:  # noqa: BLE001 — the state is a courtesy; the audit says it in full
        return ""
    said = []
    for rid in dict.fromkeys(e.release_id for e in new):
        types = {e.entry_type for e in new if e.release_id == rid}
        spends = sum(e.entry_type == "spend" for e in new if e.release_id == rid)
        if "published" in types:
            said.append(f"release '{rid}' was published")
        elif rid in pending:
            said.append(f"the publication of release '{rid}' was interrupted: `transit-release repair` completes "
                        "it or rolls it back")
        elif spends:
            said.append(f"release '{rid}' was charged ({spends} spends, which stay counted) and not published; "
                        "`transit-release repair` removes what the run left; the same id cannot be charged again")
    return "; ".join(said)


def storage_failure(exc: BaseException) -> BaseException | None:
    """The storage error behind ``exc`` (an OSError such as a full disk, or SQLite's "database or disk is full"
    under MLflow's or the ledger's exceptions), if any."""
    import sqlite3

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) or (isinstance(exc, sqlite3.OperationalError)
                                        and any(w in str(exc) for w in ("disk is full", "disk I/O error"))):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def prefect_results(home: Home) -> set[str]:
    """The files of Prefect's result storage under the home before the command."""
    storage = home.prefect_home / "storage"
    return {p.name for p in storage.iterdir()} if storage.is_dir() else set()


def remove_failure_records(home: Home, before: set[str]) -> None:
    """The results Prefect stored for a run that failed, were refused or was interrupted: its engine persists a
    failed flow's exception (pickled, with its message: counts and row numbers) whatever the flow's
    ``persist_result``. The tool keeps no result there, so every file the command added goes."""
    storage = home.prefect_home / "storage"
    for p in (storage.iterdir() if storage.is_dir() else ()):
        if p.name not in before and p.is_file():
            p.unlink(missing_ok=True)
