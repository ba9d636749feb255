"""One run at a time of one release in a home, and whether the run that charged a release is still alive.

Runs of the same release (a schedule's cron run and a run fired by hand, two workers, a retry) each hold
``private/locks/<release-id>.lock`` (an exclusive ``flock``) from the moment they resolve the release's id until
they end. A second run waits for the first and then resolves the id again: published meanwhile, it ends as
"published by another run" (nothing drawn or spent). A lock is held by a live process only: the kernel releases it
when its holder exits or is killed, so a run that finds the release charged but not published *while holding the
lock* knows that the run that charged it is dead (:func:`charged_by_a_dead_run`) — no timeout is guessed.

The lock file is removed by its holder when it ends (a waiter that opened the removed file tries again on the
new one), and the folder with the last one; a killed run leaves an empty file the next run reuses. Prefect-free.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

LOCKS = Path("private") / "locks"


@dataclass(frozen=True)
class Held:
    """A held release lock: whether this run had to wait for another run of the release first."""

    path: Path
    waited: bool


def lock_path(home_root: Path, release_id: str) -> Path:
    return Path(home_root) / LOCKS / f"{release_id}.lock"


def holder(path: Path) -> str:
    """What the lock's holder wrote into it (its process id and host), or '' if unknown."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


@contextmanager
def release_lock(home_root: Path, release_id: str,
                 waiting: Callable[[str], AbstractContextManager] | None = None) -> Iterator[Held]:
    """Hold the lock of ``release_id`` for the duration. If another run holds it, wait for it inside
    ``waiting(holder)`` (e.g. a progress stage saying so); a signal, such as Ctrl-C, ends the wait."""
    path = lock_path(home_root, release_id)
    waited = False
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # no locks/ folder (yet, or again: the last run to end removes it)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                with (waiting or (lambda _: nullcontext()))(holder(path)):
                    fcntl.flock(fd, fcntl.LOCK_EX)
                waited = True
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)  # its holder removed the file as it ended: lock the one now at the path
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {os.uname().nodename}\n".encode())
        yield Held(path, waited)
    finally:
        try:
            path.unlink(missing_ok=True)  # still ours: nobody else can hold it while we do
        finally:
            os.close(fd)
        try:
            path.parent.rmdir()  # the last run to end leaves no folder behind (a refused run leaves nothing)
        except OSError:
            pass  # another run's lock is there


def is_held(home_root: Path, release_id: str) -> bool:
    """Does a live run hold the lock of ``release_id`` now?"""
    path = lock_path(home_root, release_id)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def charged_by_a_dead_run(release_id: str, charged: set[str], published: set[str], pending: set[str]) -> str | None:
    """The refusal of a run that holds the lock of ``release_id`` and finds it charged: no run of it is alive (this
    run holds its lock), so the run that charged it ended without publishing it (it crashed, was killed or was
    refused after its charge). ``pending``: releases whose publication was interrupted (an intent without its
    ``published`` entry). None if the release was not charged, or is published."""
    if release_id not in charged or release_id in published:
        return None
    if release_id in pending:
        return (f"release '{release_id}' was charged by a run that stopped while publishing it, and no run of it is "
                "alive now: run `transit-release repair`, which completes or rolls back that publication (completed, "
                "this release is then found published); its spends stay counted")
    return (f"release '{release_id}' was charged by a run that ended without publishing it, and no run of it is "
            "alive now: its spends stay counted and the id cannot be charged again; choose another --release-id "
            "(`transit-release repair` removes what that run left)")
