"""The Opal report's figures, drawn in a process of their own.

Drawing them (matplotlib: about a second for the full-size week, and half a second to import) is work only
for the report, and the flow has other work meanwhile — the release tables' checks and staging — on a
machine whose other core is then idle. :func:`draw` runs ``python -m transit_release.reports.report_process`` and
waits for it, so the Prefect task that calls it can run in a thread beside the flow. The child reads what it
draws from its standard input (a pickle: nothing is written to disk but the figures) and writes the figures
into a folder that exists; it dies with its parent.

What the child prints on failure is the exception's type, never its message, and its standard error is
discarded: the figures' data are true counts, and a plotting library's message or warning may quote a value.
It runs with ``-P`` (the working directory is not on its module path), in a session of its own (a terminal's
Ctrl-C reaches the command, which stops it: :func:`draw` kills it when interrupted) and dies with its parent.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from transit_release.errors import TransitReleaseError
from transit_release.runtime.subprocesses import die_with_parent


class ReportFiguresError(TransitReleaseError):
    """The report's figures could not be drawn."""


def _spawn() -> subprocess.Popen:
    """A drawing process, importing its libraries until it reads its job."""
    # -P: not the working directory first on the module path (a stray pandas.py there would get the counts);
    # no preexec_fn (unsafe in a threaded parent: the child may hang before it runs): the child arranges to die
    # with its parent itself
    return subprocess.Popen([sys.executable, "-P", "-m", "transit_release.reports.report_process", str(os.getpid())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "MPLBACKEND": "Agg"}, start_new_session=True)


#: Drawing processes started ahead of their job (:func:`prestart`), not yet given one.
_READY: list[subprocess.Popen] = []
_READY_LOCK = threading.Lock()


def prestart() -> None:
    """Start the next drawing process now (an Opal release: once its input has passed the screen): it imports
    matplotlib and pandas (about a second of CPU) while the run goes on, on a core the run leaves idle, and
    :func:`draw` gives it its job. One at most is waiting; one that is never used is stopped by
    :func:`discard_prestarted` (and dies with this process)."""
    with _READY_LOCK:
        if not _READY:
            _READY.append(_spawn())


def discard_prestarted() -> None:
    """Stop a drawing process started ahead and never given a job (a run that stopped before its report)."""
    with _READY_LOCK:
        ready, _READY[:] = list(_READY), []
    for child in ready:
        with contextlib.suppress(OSError):
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            with contextlib.suppress(OSError):
                stream.close()


def _ready_or_new() -> subprocess.Popen:
    with _READY_LOCK:
        while _READY:
            child = _READY.pop()
            if child.poll() is None:
                return child
    return _spawn()


def draw(out_dir: Path, privacy: dict, utility: pd.DataFrame, points: dict[str, tuple[np.ndarray, np.ndarray]],
         timeout_s: float = 600.0) -> None:
    """:func:`transit_release.reports.report.draw_figures` in a child process (one :func:`prestart` started, if any);
    returns once it has finished. ``out_dir`` must exist."""
    job = pickle.dumps({"out_dir": str(out_dir), "privacy": privacy, "utility": utility, "points": points},
                       protocol=pickle.HIGHEST_PROTOCOL)
    with _ready_or_new() as child:
        _DRAWING.add(child)
        try:
            out, _ = child.communicate(job, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            raise ReportFiguresError(f"the release report's figures were not drawn within {timeout_s:.0f} s") from None
        finally:
            _DRAWING.discard(child)
            if child.poll() is None:  # interrupted while waiting: the drawing goes with it
                child.kill()
    if child.returncode != 0:
        name = out.decode("ascii", "replace").strip()
        what = name if child.returncode == 1 and _TYPE_NAME.match(name) else (
            f"exit code {child.returncode}" if child.returncode > 0 else f"signal {-child.returncode}")
        raise ReportFiguresError(f"the release report's figures could not be drawn: {what} in the drawing process")


#: The drawing processes running now (in any thread of this process).
_DRAWING: set[subprocess.Popen] = set()


def stop_drawing() -> None:
    """Kill every drawing process this process started (the command's Ctrl-C: the figures are of no use once the
    run stops, and :func:`draw` then returns at once, raising)."""
    for child in list(_DRAWING) + list(_READY):
        try:
            child.kill()
        except OSError:
            pass


#: What the child may report of a failure: an exception's type name, nothing else.
_TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,79}$")


def main(parent: int) -> int:
    """The child: read the job from standard input, draw, exit 0; on failure print the exception's type only (to
    standard output, which the parent reads; its standard error goes nowhere: a library's warning may quote a
    value)."""
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the line above took effect
        return 1
    try:
        from transit_release.reports import report  # with matplotlib, before the job arrives (started ahead: prestart)

        report._pyplot()
        job = pickle.loads(sys.stdin.buffer.read())
        report.draw_figures(Path(job["out_dir"]), job["privacy"], job["utility"], job["points"])
    except BaseException as exc:  # noqa: BLE001 — reported by type only (see the module's docstring)
        print(type(exc).__name__, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
