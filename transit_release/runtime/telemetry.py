"""No usage telemetry from any library this tool runs: a privacy tool sends nothing anywhere.

Libraries it runs report usage to their makers unless told not to, each by its own setting read from the
environment:

- MLflow 3: ``MLFLOW_DISABLE_TELEMETRY=true``. MLflow starts a telemetry client when it is imported (unless the
  setting is already there) and records a usage event per client call (~50 per release), sent in the
  background; it also honours ``DO_NOT_TRACK=true`` (and only that spelling).
- Prefect's client: ``DO_NOT_TRACK`` (it reports, e.g., the first flow defined and the first deployment
  created); a Prefect server: ``PREFECT_SERVER_ANALYTICS_ENABLED=false`` (set for the servers this tool starts;
  a server you start yourself needs it in its own environment, see the README).
- Great Expectations: ``GX_ANALYTICS_ENABLED=false``, for versions that have usage analytics (read when it
  is imported; an earlier version's client held every Dask worker for seconds at exit when offline).

:func:`telemetry_off` sets them all, overriding a value that turns one on. It runs when this package, ``flows``
or ``tasks`` is first imported, so before Prefect, MLflow or Great Expectations is imported by any entry point
of this tool (the command, ``serve``, a Prefect worker running a deployment, a Dask worker), and the processes
those start inherit it.
"""

from __future__ import annotations

import os

OFF = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "GX_ANALYTICS_ENABLED": "false",
}


def telemetry_off() -> None:
    """Turn every library's usage telemetry off in this process and those it starts."""
    os.environ.update(OFF)
