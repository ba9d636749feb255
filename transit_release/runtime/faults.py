"""Fault injection for the crash-recovery and interruption tests: stop this process at a named step.

``TRANSIT_RELEASE_CRASH_AT=<step>`` makes :func:`crash_point` send SIGKILL to the
current process when the run reaches that step, so that tests can stop a
publication between any two of its steps (what a power cut or an OOM kill would
do) and check that ``transit-release repair`` and the audit recover.

``TRANSIT_RELEASE_PAUSE_AT=<step>`` makes the run wait at that step instead (after
writing the step's name to the file ``TRANSIT_RELEASE_PAUSE_FILE`` names, the
test's cue), until a signal ends the wait (a test sends a terminal's Ctrl-C to the
whole process group there and times the exit) or the test removes the cue (the run
goes on: another run of the same release was seen waiting meanwhile). Unset, both
do nothing.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CRASH_ENV = "TRANSIT_RELEASE_CRASH_AT"
PAUSE_ENV = "TRANSIT_RELEASE_PAUSE_AT"
PAUSE_FILE_ENV = "TRANSIT_RELEASE_PAUSE_FILE"
STEPS = ("after-charge", "after-staging", "after-mlflow-run", "after-intent", "after-rename",
         "after-publication-entry", "after-published-tag")
#: Where a run can also be paused: before anything is charged, and the steps above.
PAUSE_STEPS = ("before-charge", *STEPS)


def crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(PAUSE_ENV) == step:
        cue = os.environ.get(PAUSE_FILE_ENV)
        if cue:
            Path(cue).write_text(step, encoding="utf-8")
        while True:  # a signal's handler (Ctrl-C: KeyboardInterrupt) ends the wait, or the test removing its cue
            time.sleep(0.05)
            if cue and not Path(cue).exists():
                return
