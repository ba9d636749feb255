"""Where the per-partition steps run: Prefect's Dask task runner on one Dask cluster per release, or, with
``workers=0``, Prefect's thread pool of one thread in the flow's own process (no cluster).

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

A local cluster's workers are forked from a *forkserver* that has imported the
heavy third-party libraries (Great Expectations alone takes about 4 s, Prefect
about 1.4 s) once per flow process, started in the background when the release
begins: a worker is ready in under a second instead of about 8 s, and a
long-lived process (``serve``, a test session) pays the imports once for all
its releases. Each worker first takes the flow's environment exactly
(variables removed from the flow's environment since the forkserver started
are removed from the worker's too) and then has Prefect read its settings
again from it (``refresh_global_settings_context``: Prefect reads them once,
when it is imported, and calls this itself after its plugins change the
environment); this project's modules are imported after that.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from contextlib import contextmanager

from distributed.diagnostics.plugin import WorkerPlugin
from prefect.context import FlowRunContext
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from prefect_dask import DaskTaskRunner

from transit_release.files.home import cache_dir
from transit_release.runtime.cluster import IN_PROCESS, local_workers


#: What the forkserver imports before it forks a local cluster's workers: first :mod:`transit_release.runtime.detached`
#: (the forkserver and its workers leave the command's process group: a terminal's Ctrl-C reaches the command
#: alone), then third-party libraries only (see above). (``dask.dataframe``: pandera imports it the first time it
#: builds a schema, about 0.8 s in every worker.)
WORKER_PRELOAD = ("transit_release.runtime.detached", "distributed", "numpy", "pandas", "pyarrow", "pyarrow.dataset", "pyarrow.parquet", "pandera",
                  "dask.dataframe", "great_expectations", "prefect", "prefect.task_engine", "prefect_dask")
_START_METHOD = "distributed.worker.multiprocessing-method"


def _forkserver_available() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods()


def prewarm_workers() -> None:
    """Start (once per process, in the background) the forkserver that local workers are forked from."""
    if not _forkserver_available():
        return
    import dask
    from distributed.utils import get_mp_context
    from multiprocessing import forkserver

    with dask.config.set({_START_METHOD: "forkserver"}):
        ctx = get_mp_context()  # Dask's own preload list is set here, once per process; ours replaces it
    ctx.set_forkserver_preload(list(WORKER_PRELOAD))  # no effect once the forkserver runs: then it has them
    # Importing Prefect makes its home directory: the forkserver's is in the user's cache, not in the release's
    # home (a refused run removes what it created there, possibly before the forkserver gets to Prefect)
    home = cache_dir() / "forkserver-prefect-home"
    saved = os.environ.get("PREFECT_HOME")
    os.environ["PREFECT_HOME"] = str(home)
    try:
        forkserver.ensure_running()  # returns at once; the imports happen in the forkserver
    finally:
        if saved is None:
            del os.environ["PREFECT_HOME"]
        else:
            os.environ["PREFECT_HOME"] = saved


def _warm_up(environ: dict[str, str]) -> None:
    """A worker's first job: the flow's environment exactly (a forked worker inherited the forkserver's, which
    may hold variables the flow has since removed, such as a test's noise seed), then the partition steps'
    imports, so that its first partition does not pay them."""
    for name in set(os.environ) - set(environ):
        del os.environ[name]
    os.environ.update(environ)
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()  # Prefect's settings from this environment, not the forkserver's
    import tasks.sanitize  # noqa: F401
    import tasks.stream  # noqa: F401
    from schemas.expectations import warm_up

    warm_up()


class FlowEnvironment(WorkerPlugin):
    """:func:`_warm_up` on every worker of a local cluster, including one Dask's nanny starts again after its
    worker died (it is forked from the forkserver too, with the forkserver's environment)."""

    def __init__(self, environ: dict[str, str]):
        self.environ = dict(environ)

    def setup(self, worker) -> None:
        _warm_up(self.environ)


class ReleaseCluster:
    """The scheduler address of the release's cluster: the one given, or a local cluster started on first use
    (after the input has passed its streaming pass: a file refused there never starts one); with ``workers=0``
    none (the partition steps run in the flow's process)."""

    def __init__(self, dask_address: str | None, workers: int | None):
        self._given = dask_address
        self._workers = local_workers(workers)
        self._cluster = self._client = None
        if not dask_address and not self.in_process:
            prewarm_workers()  # the forkserver imports while the flow validates and streams the input

    @property
    def in_process(self) -> bool:
        """No cluster: the partition steps run one after the other in the flow's own process."""
        return not self._given and self._workers == IN_PROCESS

    @property
    def local_workers(self) -> int:
        """The local cluster's number of workers, 0 for none (a given scheduler's are counted by its probe)."""
        return self._workers

    def address(self) -> str:
        if self._given:
            return self._given
        if self.in_process:
            raise RuntimeError("no Dask cluster with workers=0: the partition steps run in the flow's process")
        if self._cluster is None:
            from distributed import Client, LocalCluster

            import dask

            ctx = FlowRunContext.get()
            env = {**os.environ, **({"PREFECT_API_URL": str(ctx.client.api_url)} if ctx is not None else {})}
            method = "forkserver" if _forkserver_available() else "spawn"
            with dask.config.set({_START_METHOD: method}):
                self._cluster = LocalCluster(n_workers=self._workers, threads_per_worker=1, processes=True,
                                             dashboard_address=None, env=env)
            self._client = Client(self._cluster, set_as_default=False)
            # on both workers at once (not in their first partition), and on any worker started again later
            self._client.register_plugin(FlowEnvironment(env), name="transit-release-flow-environment")
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


def partition_runner(cluster: ReleaseCluster) -> TaskRunner:
    """The task runner of a subflow mapped over the partitions: on the release's cluster, or, with no cluster,
    Prefect's thread pool of one thread in the flow's process (one chunk at a time: a partition's rows at most,
    as on a worker)."""
    if cluster.in_process:
        return ThreadPoolTaskRunner(max_workers=1)
    return DaskTaskRunner(address=cluster.address())


def run_on_partitions(subflow, cluster: ReleaseCluster, *args):
    """Call a partition subflow (its tasks mapped over the partitions) on :func:`partition_runner`, without a
    heartbeat of its own.

    A subflow runs inside its parent's flow run, in the parent's process, and the parent keeps sending its
    heartbeat meanwhile, so a crash is still seen. Prefect 3.8 ends every flow run by joining its heartbeat
    thread, which sleeps in steps of one second: about 1 s of idle waiting per subflow, two per release."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    run = subflow.with_options(task_runner=partition_runner(cluster))
    if PREFECT_FLOWS_HEARTBEAT_FREQUENCY.value() is None:  # none already (a command's run): Prefect's settings
        return run(*args)  # are rebuilt at each temporary_settings, about 0.3 s
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        return run(*args)
