"""The process of a command's own Prefect server: Prefect's API app under uvicorn, as Prefect's own temporary server
runs it (:func:`flows.deployments.local_server` with ``command=True``), with Python's cyclic collector set for a
process that imports a great deal and lives for one command (:data:`transit_release.runtime.collector.THRESHOLDS`: its
start-up imports cost about a sixth less CPU).

    python -m transit_release.runtime.command_server <uvicorn's arguments>
"""

from __future__ import annotations

import gc
import sys

from transit_release.runtime.collector import THRESHOLDS


def main() -> None:
    gc.set_threshold(*THRESHOLDS)
    from uvicorn.main import main as uvicorn

    sys.argv = ["uvicorn", *sys.argv[1:]]
    uvicorn()


if __name__ == "__main__":
    main()
