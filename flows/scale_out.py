"""Where the per-partition sanitization runs: Prefect's Dask task runner.

By default a local Dask cluster of ``workers`` single-threaded worker processes
is started for the sanitization and torn down after it; with an address, an
existing Dask scheduler (any machine) is used instead. Its workers must have
this project installed, see the partition dataset at the same path (shared file
system) and reach the same Prefect API as the flow (``PREFECT_API_URL``); a
local cluster's workers are pointed at this flow's API automatically.
"""

from __future__ import annotations

import logging

from prefect.context import FlowRunContext
from prefect_dask import DaskTaskRunner

from transit_release.cluster import DEFAULT_LOCAL_WORKERS


def sanitization_runner(dask_address: str | None = None, workers: int | None = None) -> DaskTaskRunner:
    """The task runner for the sanitization subflow (call inside a flow run)."""
    logging.getLogger("distributed").setLevel(logging.WARNING)  # Dask's per-worker INFO lines
    if dask_address:
        return DaskTaskRunner(address=dask_address)
    ctx = FlowRunContext.get()
    env = {"PREFECT_API_URL": str(ctx.client.api_url)} if ctx is not None else {}
    return DaskTaskRunner(cluster_kwargs={
        "n_workers": workers or DEFAULT_LOCAL_WORKERS, "threads_per_worker": 1, "processes": True,
        "dashboard_address": None, "env": env})
