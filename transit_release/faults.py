"""Fault injection for the crash-recovery tests: kill this process at a named step.

``TRANSIT_RELEASE_CRASH_AT=<step>`` makes :func:`crash_point` send SIGKILL to the
current process when the run reaches that step, so that tests can stop a
publication between any two of its steps (what a power cut or an OOM kill would
do) and check that ``transit-release repair`` and the audit recover. Unset, it
does nothing.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "TRANSIT_RELEASE_CRASH_AT"
STEPS = ("after-charge", "after-staging", "after-intent", "after-rename", "after-publication-entry",
         "after-mlflow-run", "after-published-tag")


def crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
