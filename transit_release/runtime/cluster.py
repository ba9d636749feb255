"""Checks on a Dask cluster before any privacy budget is spent on it.

A release that charges the ledger and then cannot sanitize would spend budget
for nothing, so when the partitions are to be sanitized on an existing Dask
scheduler, the flow first checks that the scheduler answers, that it has
workers, and that every worker can see the partition dataset (the workers read
their partition from it: a shared file system is required).
"""

from __future__ import annotations

import os
from pathlib import Path

from transit_release.errors import ClusterError, ConfigError

#: Local workers when none are asked for, on a machine with spare cores (:func:`default_local_workers`): two
#: processes, one thread each.
DEFAULT_LOCAL_WORKERS = 2
#: ``workers=0``: no Dask cluster; the partition steps run one after the other in the flow's own process (a small
#: network, a machine without spare cores, debugging). The results are the same as on any cluster.
IN_PROCESS = 0
#: Cores a machine needs for the default to be a local cluster: the flow's own process and Prefect's server
#: keep two busy, the workers need their own.
CORES_FOR_A_LOCAL_CLUSTER = 4


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's share; else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_local_workers() -> int:
    """Local workers when none are asked for: :data:`DEFAULT_LOCAL_WORKERS` with at least
    :data:`CORES_FOR_A_LOCAL_CLUSTER` usable cores, else none (:data:`IN_PROCESS`). On fewer cores the workers
    only compete with the flow and the server for the same cores and add their start and their transfers: the
    full-size week took 28.0 s on 2 local workers and 24.3 s without, on this project's 2-core machine. The
    published results are the same either way (``tests/test_scale_out.py``)."""
    return DEFAULT_LOCAL_WORKERS if usable_cores() >= CORES_FOR_A_LOCAL_CLUSTER else IN_PROCESS


def local_workers(workers: int | None) -> int:
    """The number of local workers a release uses: the one asked for, else :func:`default_local_workers`."""
    return default_local_workers() if workers is None else workers
#: Seconds to wait for a scheduler to answer.
CONNECT_TIMEOUT_S = 20


def check_workers_setting(workers: int | None, address: str | None) -> None:
    if address and workers is not None:
        raise ConfigError("give either a Dask scheduler address or a number of local workers, not both")
    if workers is not None and workers < IN_PROCESS:
        raise ConfigError(f"the number of local Dask workers must be at least 0 (0: no cluster, the partitions are "
                          f"prepared and sanitized in the flow's own process; got {workers})")


def probe_scheduler(address: str, dataset_root: Path, timeout: float | None = None) -> int:
    """Number of workers at ``address`` that can all read ``dataset_root``; :class:`ClusterError` otherwise
    (after ``timeout`` seconds, default :data:`CONNECT_TIMEOUT_S`, for a scheduler that does not answer)."""
    from distributed import Client

    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, ValueError) as exc:  # a timeout is an OSError; a malformed address a ValueError
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({exc}); nothing was spent") from None
    except TypeError:  # another Dask server (e.g. a worker) answers the scheduler's handshake with a TypeError
        raise ClusterError(f"cannot reach the Dask scheduler at {address} (another kind of Dask server answers "
                           "there, e.g. a worker: give the scheduler's address); nothing was spent") from None
    try:
        seen = client.run(os.path.isdir, str(dataset_root))
    finally:
        client.close()
    if not seen:
        raise ClusterError(f"the Dask scheduler at {address} has no workers; nothing was spent")
    blind = sorted(w for w, ok in seen.items() if not ok)
    if blind:
        raise ClusterError(f"{len(blind)} of {len(seen)} Dask workers cannot see {dataset_root} "
                           f"(e.g. {blind[0]}): the partition dataset must be on a file system every worker "
                           "mounts at the same path; nothing was spent")
    return len(seen)
