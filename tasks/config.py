"""Loading the release configuration (file plus flag overrides)."""

from __future__ import annotations

from tasks import data_task
from transit_release.config import ReleaseConfig, load_release_config, release_unit
from transit_release.runtime.cluster import check_workers_setting


@data_task(name="load-release-config")
def load_config(path: str | None, epsilons: list[float] | None, delta: float | None,
                quarantine_limit: float | None = None, unit: str | None = None) -> ReleaseConfig:
    return load_release_config(path, release_unit(path, unit)).with_overrides(epsilons=epsilons, delta=delta,
                                                          quarantine_limit=quarantine_limit)


@data_task(name="check-scale-out")
def check_scale_out(workers: int | None, dask_address: str | None) -> None:
    """Either a number of local Dask workers (≥ 0; 0 for none) or a scheduler address, not both."""
    check_workers_setting(workers, dask_address)
