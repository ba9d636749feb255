"""Python's cyclic garbage collector, kept out of the way of bulk work.

A release builds millions of small objects at a time (a passenger file's records, a tree's nodes, the evaluation's
queries), in a process that holds the millions of objects of Prefect, Great Expectations, MLflow and pandas. Each
of the collector's passes walks them all: reading a million sequences took 4.5 s of CPU in such a process, 1.3 s
with the collector paused, and parsing releases no cyclic garbage worth collecting meanwhile. So:

- :func:`bulk` pauses it for one step (nested and from several threads alike: it runs again when the last step
  ends);
- :func:`settle` is for a short-lived process (the ``transit-release`` command) once its libraries are imported:
  they are moved out of the collector's sight (``gc.freeze``) and collections come less often. A long-lived process
  (``serve``, a test session) keeps the collector as it is.

Memory: objects are freed as before when their last reference goes; only cycles wait for the collector.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

_lock = threading.Lock()
_paused = 0
_was_enabled = True

#: Allocations between the youngest generation's collections (Python's default: 700), and the older generations'
#: ratios (10, 10), for a command's process after :func:`settle`.
THRESHOLDS = (50_000, 20, 20)


@contextmanager
def bulk():
    """No cyclic collection while the block builds its objects."""
    global _paused, _was_enabled
    with _lock:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _lock:
            _paused -= 1
            if _paused == 0 and _was_enabled:
                gc.enable()


_settled = False
#: Set by the ``transit-release`` command's entry point: this process runs one command and exits.
SHORT_LIVED = False


def settle() -> None:
    """In a short-lived process (:data:`SHORT_LIVED`) whose libraries are imported: keep them out of every
    collection from now on, and collect less often. Nothing elsewhere (a test session calling the command's
    ``main``, ``serve``)."""
    global _settled
    if not SHORT_LIVED:
        return
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    _settled = True


def settle_again() -> None:
    """:func:`settle` again if this process settled (a command's): what it imported since is kept out too."""
    if _settled:
        gc.freeze()
