"""The Opal release commands, ``release`` and ``demo``: their options, and running the Opal flow on a Prefect API
(:mod:`~transit_release.cli.server`) after the checks of :mod:`~transit_release.cli.checks`. May touch what the
flow touches (the home); ``demo`` also writes its synthetic week under ``<home>/private/demo-input``."""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

from transit_release.cli import checks, server
from transit_release.cli.options import POPULATION_HELP, add_home, floats, integer, number
from transit_release.cli.printing import print_expectation, print_summary, summary_exit
from transit_release.files.home import Home
from transit_release.runtime import custodian
from transit_release.runtime.cluster import IN_PROCESS, local_workers
from transit_release.runtime.warmup import RELEASE_MODULES


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``release`` and ``demo``."""
    for name, help_text in (("release", "run the Opal release flow on given files"),
                            ("demo", "synthesise a week at scale 0.1 and release it with the defaults")):
        r = sub.add_parser(name, help=help_text)
        add_home(r)
        r.add_argument("--unit", choices=("card", "trip"),
                       help="unit of privacy: card (default: each card's contribution bounded first, so a "
                            "passenger's loss is bounded) or trip (the Opal paper's, to compare with the Opal files: "
                            "it leaves a passenger's loss unbounded, which the default budget policy refuses)")
        r.add_argument("--population", help=POPULATION_HELP)
        r.add_argument("--config", help="release config YAML (default: the built-in defaults of --unit)")
        r.add_argument("--epsilons", type=floats, help="ε_1..ε_6 overriding the config, e.g. 1,1,1,1,2,2")
        r.add_argument("--delta", type=number, help="δ_j for every marginal, overriding the config")
        r.add_argument("--release-id", help="default: opal-<unit>-<first date>-<last date>")
        r.add_argument("--policy", help="budget policy YAML (default: the built-in policy)")
        r.add_argument("--quarantine-limit", type=number,
                       help="largest share of quarantined rows that still allows a release (default 0.01)")
        r.add_argument("--dry-run", action="store_true",
                       help="validate everything, print the spends and the policy's verdict, and stop: nothing is "
                            "charged, drawn or written under releases/ or release_reports/")
        where = r.add_mutually_exclusive_group()
        where.add_argument("--workers", type=integer,
                           help="prepare and sanitize the partitions on a local Dask cluster of N worker processes "
                                "(default: 2 on a machine with at least 4 cores, else 0); 0: no cluster, one "
                                "partition after the other in this process")
        where.add_argument("--dask-address", metavar="ADDR",
                           help="sanitize on an existing Dask scheduler, e.g. tcp://10.0.0.5:8786 (its workers "
                                "need this project installed, the home directory at the same path and "
                                "PREFECT_API_URL set)")
        if name == "release":
            r.add_argument("--trips", required=True, help="raw trips, CSV or Parquet")
            r.add_argument("--stops", required=True, help="stop table, CSV or Parquet")
            r.add_argument("--period-start", help="first day of the release period, YYYY-MM-DD (required, except "
                                                  "with --dry-run, which shows the period the data suggest)")
            r.add_argument("--period-end", help="last day of the release period, YYYY-MM-DD")
        else:
            r.add_argument("--scale", type=number, default=0.1,
                           help="size of the synthetic week: 1.0 ≈ 13.5 million trips (default 0.1)")
            r.add_argument("--seed", type=integer, default=0, help="seed of the synthetic data")


def release(args, trips: str, stops: str, home: Home) -> int:
    """Release ``trips`` and ``stops`` (checked while the server starts; the population before it starts) with the
    Opal flow; before the charge, what it can be expected to publish is printed here, on the custodian's terminal
    (:mod:`transit_release.runtime.custodian`); a release the home has published from the same input and parameters is
    said so at once (no flow runs: nothing is drawn or spent)."""
    checks.check_population(args, home)  # an undeclared population: refused before anything is read or started
    try:
        with _custodian_listening(), server.prefect_api(
                home, args.verbose, preload=("flows.opal_release",), warm=RELEASE_MODULES,
                prewarm_workers=not args.dask_address and local_workers(args.workers) != IN_PROCESS,
                checks=lambda: checks.check_release_args(args, trips, stops, home)):
            summary = _run_flow(args, trips, stops, home)
    except checks.AlreadyPublished as published:
        summary = published.summary
    print_summary(summary)
    checks.warn_if_publisher_unset(home)
    return summary_exit(summary)


@contextmanager
def _custodian_listening():
    custodian.install(print_expectation)
    try:
        yield
    finally:
        custodian.install(None)


def _run_flow(args, trips: str, stops: str, home: Home) -> dict:
    from flows.opal_release import opal_release

    return opal_release(trips=str(Path(trips).resolve()), stops=str(Path(stops).resolve()),
                        period_start=args.period_start, period_end=args.period_end, home=str(home.root),
                        config=args.config, epsilons=args.epsilons, delta=args.delta, release_id=args.release_id,
                        policy=args.policy, ledger=args.ledger, quarantine_limit=args.quarantine_limit,
                        dask_address=args.dask_address, workers=args.workers, dry_run=args.dry_run, unit=args.unit,
                        population=args.population)


def demo(args, home: Home) -> int:
    """Synthesise a week under ``<home>/private/demo-input`` (once) and release it."""
    from transit_release.synth.opal_week import week_period, write_synthetic_week

    # the home's state first (its settings, the ledger's integrity: exit 4), then the population: a home the release
    # would refuse gets no demo input written into it (at the default scale, over a million rows)
    checks.check_home_state(home, args)
    checks.check_population(args, home)
    home.prepare()
    data = home.private / "demo-input"
    if not (data / "trips.csv").exists() or not (data / "stops.csv").exists():
        write_synthetic_week(data, scale=args.scale, seed=args.seed, show_progress=sys.stderr.isatty())
    args.period_start, args.period_end = week_period()  # the synthetic week's own, public period
    return release(args, str(data / "trips.csv"), str(data / "stops.csv"), home)
