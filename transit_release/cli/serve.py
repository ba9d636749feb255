"""The ``serve`` command: the schedules of a ``prefect.yaml`` served in this process, on the configured Prefect API
or on a loopback server it starts (:mod:`flows.deployments`). May touch the process environment and
``<home>/.prefect``; the scheduled runs touch what their flows touch."""

from __future__ import annotations

import argparse
import os
import warnings

from transit_release.files.home import Home


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``serve``."""
    v = sub.add_parser("serve", help="run the schedules of prefect.yaml in this process (Prefect's serve)")
    v.add_argument("--home", default=".", help="state directory (default: current directory); also the "
                   "default of TRANSIT_RELEASE_HOME for the deployments' parameters")
    v.add_argument("--deployments", metavar="FILE",
                   help="a deployments YAML in prefect.yaml's format, anywhere (default: the project's prefect.yaml); "
                        "its entrypoints and relative paths are the project's")
    v.add_argument("--only", metavar="NAME", action="append", default=[],
                   help="serve only deployment NAME (repeatable): the environment variables of the others' "
                        "parameters need not be set")
    v.add_argument("--run-now", metavar="NAME", action="append", default=[],
                   help="also start a run of deployment NAME at once (repeatable), then go on serving")


def serve(args, home: Home) -> int:
    """Serve the deployments until stopped; each finished run is printed as one line (its outcome). Without a
    configured API, on a loopback server of its own that serves Prefect's UI too."""
    from transit_release.cli.server import HOME_SERVER_SETTINGS

    # importing Prefect makes its home (<home>/.prefect) but not its parents, and warns when it cannot: a new home is
    # made here (a refusal below removes it); in a folder that does not exist yet, once the checks have passed
    if home.root.parent.is_dir():
        home.prefect_home.mkdir(parents=True, exist_ok=True)
    else:
        warnings.filterwarnings("ignore", message="Failed to create the Prefect home directory")
    from flows import deployments

    os.environ.setdefault("TRANSIT_RELEASE_HOME", str(home.root))
    path = args.deployments or deployments.DEFAULT_FILE
    # a missing variable or an unknown --only or --run-now name fails here, before any server starts
    deployments.check_run_now(deployments.read_deployments(path, args.only), args.run_now)
    if os.environ.get("PREFECT_API_URL"):
        print(f"transit-release serve: Prefect API {os.environ['PREFECT_API_URL']} (configured)", flush=True)
        # a scheduler that creates no runs stops it (SchedulerError, exit 2)
        deployments.serve(path, run_now=tuple(args.run_now), only=tuple(args.only))
    else:
        # the local server's scheduler errors are reported as they happen, not only at start-up
        health = deployments.SchedulerHealth(log_path=home.prefect_home / "server.log")
        with deployments.local_server(home.prefect_home, on_scheduler_error=health.error,
                                      settings=HOME_SERVER_SETTINGS, ui=True) as url:
            os.environ["PREFECT_API_URL"] = url  # for the runs' own processes
            print(f"transit-release serve: Prefect API {url} (its log: {health.log_path}); "
                  f"Prefect UI {deployments.ui_url(url)}", flush=True)
            deployments.serve(path, api_url=url, health=health, run_now=tuple(args.run_now), only=tuple(args.only))
    return 0
