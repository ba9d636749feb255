"""No usage telemetry from any library this tool runs: a privacy tool sends nothing anywhere.

Three of its libraries report usage to their makers unless told not to, each by its own setting, read from the
environment (Great Expectations once, when it is imported; MLflow 3 and Prefect's client at each call):

- Great Expectations: ``GX_ANALYTICS_ENABLED=false`` (offline, its client's flush at exit also held every Dask
  worker for seconds until killed);
- MLflow 3: ``MLFLOW_DISABLE_TELEMETRY=true`` (it records a usage event per client call, ~50 per release, and
  sends them in the background);
- Prefect: ``DO_NOT_TRACK=1`` for its client's SDK telemetry and ``PREFECT_SERVER_ANALYTICS_ENABLED=false`` for a
  server this tool starts.

:func:`telemetry_off` sets all of them (overriding a value that turns one on) and is called before any of these
libraries is imported: by the command at its start, and by a release flow and the workers' forkserver for runs
started another way (a Prefect worker, a test).
"""

from __future__ import annotations

import os

OFF = {
    "GX_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


def telemetry_off() -> None:
    """Turn every library's usage telemetry off in this process and those it starts."""
    os.environ.update(OFF)
