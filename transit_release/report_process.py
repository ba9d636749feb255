"""The Opal report's figures, drawn in a process of their own.

Drawing them (matplotlib: about a second for the full-size week, and half a second to import) is work only
for the report, and the flow has other work meanwhile — the release tables' checks and staging — on a
machine whose other core is then idle. :func:`draw` runs ``python -m transit_release.report_process`` and
waits for it, so the Prefect task that calls it can run in a thread beside the flow. The child reads what it
draws from its standard input (a pickle: nothing is written to disk but the figures) and writes the figures
into a folder that exists; it dies with its parent.

What the child prints on failure is the exception's type, never its message: the figures' data are true
counts, and a plotting library's message may quote a value.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from transit_release.errors import TransitReleaseError
from transit_release.subprocesses import die_with_parent


class ReportFiguresError(TransitReleaseError):
    """The report's figures could not be drawn."""


def draw(out_dir: Path, privacy: dict, utility: pd.DataFrame, points: dict[str, tuple[np.ndarray, np.ndarray]],
         timeout_s: float = 600.0) -> None:
    """:func:`transit_release.report.draw_figures` in a child process; returns once it has finished.
    ``out_dir`` must exist."""
    job = pickle.dumps({"out_dir": str(out_dir), "privacy": privacy, "utility": utility, "points": points},
                       protocol=pickle.HIGHEST_PROTOCOL)
    try:
        done = subprocess.run([sys.executable, "-m", "transit_release.report_process"], input=job,
                              capture_output=True, timeout=timeout_s, preexec_fn=die_with_parent,
                              env={**os.environ, "MPLBACKEND": "Agg"})
    except subprocess.TimeoutExpired:
        raise ReportFiguresError(f"the release report's figures were not drawn within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        what = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ReportFiguresError("the release report's figures could not be drawn: "
                                 f"{what[-1] if what else f'exit code {done.returncode}'} in the drawing process")


def main() -> int:
    """The child: read the job from standard input, draw, exit 0; on failure print the exception's type only."""
    try:
        job = pickle.loads(sys.stdin.buffer.read())
        from transit_release.report import draw_figures

        draw_figures(Path(job["out_dir"]), job["privacy"], job["utility"], job["points"])
    except BaseException as exc:  # noqa: BLE001 — reported by type only (see the module's docstring)
        print(type(exc).__name__, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
