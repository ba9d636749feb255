"""What the command's child processes share (Prefect-free)."""

from __future__ import annotations

import signal


def die_with_parent() -> None:
    """In a child process (``preexec_fn``): be killed when the parent dies, even by SIGKILL (Linux), so that a
    killed command never leaves its children running (its Prefect server, a report being drawn). SIGKILL, not
    SIGTERM: the server's graceful shutdown can wait on connections of the dead parent for a long time; its
    state is an SQLite database, which a kill leaves consistent."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: the child is still stopped when the command ends normally


def own_session() -> None:
    """Leave the caller's process group and session (``setsid``): a terminal's Ctrl-C, sent to the terminal's
    foreground process group, no longer reaches this process; the command that started it stops it instead."""
    import os

    try:
        os.setsid()
    except OSError:
        pass  # already a session leader (a process group of its own)
