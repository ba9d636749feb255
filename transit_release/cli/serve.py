"""The ``serve`` command: the schedules of a ``prefect.yaml`` served in this process, on the configured Prefect API
or on a loopback server it starts (:mod:`flows.deployments`). May touch the process environment and
``<home>/.prefect``; the scheduled runs touch what their flows touch."""

from __future__ import annotations

import argparse
import os

from transit_release.home import Home


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``serve``."""
    v = sub.add_parser("serve", help="run the schedules of prefect.yaml in this process (Prefect's serve)")
    v.add_argument("--home", default=".", help="state directory (default: current directory); also the "
                   "default of TRANSIT_RELEASE_HOME for the deployments' parameters")
    v.add_argument("--deployments", help="a prefect.yaml (default: the project's)")


def serve(args, home: Home) -> int:
    """Serve the deployments until stopped."""
    from flows import deployments

    os.environ.setdefault("TRANSIT_RELEASE_HOME", str(home.root))
    path = args.deployments or deployments.DEFAULT_FILE
    deployments.read_deployments(path)  # a missing variable fails here, before any server starts
    if os.environ.get("PREFECT_API_URL"):
        deployments.serve(path)  # a scheduler that creates no runs stops it (SchedulerError, exit 2)
    else:
        # the local server's scheduler errors are reported as they happen, not only at start-up
        health = deployments.SchedulerHealth(log_path=home.prefect_home / "server.log")
        with deployments.local_server(home.prefect_home, on_scheduler_error=health.error) as url:
            os.environ["PREFECT_API_URL"] = url  # for the runs' own processes
            print(f"local Prefect server: {url} (log: {health.log_path})", flush=True)
            deployments.serve(path, api_url=url, health=health)
    return 0
