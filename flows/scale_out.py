"""Where the per-partition steps run: Prefect's Dask task runner on one Dask cluster per release.

The partition steps (preparing each partition from the streamed input, then
sanitizing it) are mapped over the partitions on Prefect's Dask task runner.
By default a local Dask cluster of ``workers`` single-threaded worker processes
is started once per release, when the input has passed its streaming pass
(its workers import what the partition steps need at once), and torn down
after the release; with an address, an existing Dask scheduler (any machine) is used
instead. Its workers must have this project installed, see the run's private
working directory at the same path (shared file system) and reach the same
Prefect API as the flow (``PREFECT_API_URL``); a local cluster's workers are
pointed at this flow's API automatically.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

from prefect.context import FlowRunContext
from prefect_dask import DaskTaskRunner

from transit_release.cluster import DEFAULT_LOCAL_WORKERS


def _warm_up() -> None:
    import tasks.sanitize  # noqa: F401
    import tasks.stream  # noqa: F401
    from schemas.expectations import warm_up

    warm_up()


class ReleaseCluster:
    """The scheduler address of the release's cluster: the one given, or a local cluster started on first use
    (after the input has passed its streaming pass: a file refused there never starts one)."""

    def __init__(self, dask_address: str | None, workers: int | None):
        self._given = dask_address
        self._workers = workers or DEFAULT_LOCAL_WORKERS
        self._cluster = self._client = None

    @property
    def local_workers(self) -> int:
        """The local cluster's number of workers (a given scheduler's are counted by its probe)."""
        return self._workers

    def address(self) -> str:
        if self._given:
            return self._given
        if self._cluster is None:
            from distributed import Client, LocalCluster

            ctx = FlowRunContext.get()
            env = {"PREFECT_API_URL": str(ctx.client.api_url)} if ctx is not None else {}
            self._cluster = LocalCluster(n_workers=self._workers, threads_per_worker=1, processes=True,
                                         dashboard_address=None, env=env)
            self._client = Client(self._cluster, set_as_default=False)
            self._client.run(_warm_up)  # both workers import at once, not in their first partition
        return self._cluster.scheduler_address

    def close(self) -> None:
        if self._cluster is None:
            return
        self._client.close()
        self._cluster.close()
        self._cluster = self._client = None


@contextmanager
def dask_cluster(dask_address: str | None = None, workers: int | None = None):
    """The release's cluster for the duration (call inside a flow run)."""
    logging.getLogger("distributed").setLevel(logging.WARNING)  # Dask's per-worker INFO lines
    cluster = ReleaseCluster(dask_address, workers)
    try:
        yield cluster
    finally:
        cluster.close()


#: Chunks of partitions mapped per worker: enough for the workers to balance a few large partitions (a
#: weekday of buses) against many small ones, few enough that Prefect's per-task cost (~0.3 s) stays small.
CHUNKS_PER_WORKER = 2


def partition_chunks(partitions: list[tuple[str, str]], workers: int) -> list[list[tuple[str, str]]]:
    """The public partitions dealt round-robin into ``CHUNKS_PER_WORKER × workers`` chunks (fewer if there are
    fewer partitions): from the public domain and the cluster's size only, never from the data."""
    n = max(1, min(len(partitions), CHUNKS_PER_WORKER * max(1, int(workers))))
    return [partitions[i::n] for i in range(n) if partitions[i::n]]


def partition_runner(cluster: ReleaseCluster) -> DaskTaskRunner:
    """The task runner of a subflow mapped over the partitions, on the release's cluster."""
    return DaskTaskRunner(address=cluster.address())
