"""The ``transit-release`` command.

    transit-release synth   --out DIR [--scale F] [--seed N] [--format csv|parquet]
    transit-release release --trips FILE --stops FILE [--config YAML] [--epsilons ...] [--delta D]
                            [--release-id ID] [--home DIR] [--workers N | --dask-address ADDR]
    transit-release demo    [--home DIR] [--scale F] [--workers N | --dask-address ADDR]
    transit-release audit   [--home DIR] [--ledger FILE] [--json]
    transit-release serve   [--home DIR] [--deployments prefect.yaml]

Flows run on Prefect's temporary local server, with all state (releases,
reports, ledger, MLflow store, Prefect's database) under ``--home`` (default:
the current directory). A failure exits non-zero with the reason on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from transit_release.errors import TransitReleaseError
from transit_release.home import Home

EXIT_INPUT = 2
EXIT_BUDGET = 3
EXIT_UNEXPECTED = 1
EXIT_AUDIT_FAILED = 4


def _prepare_environment(home: Home) -> None:
    """Prefect settings must be in place before Prefect is imported."""
    home.root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(home.prefect_home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, e.g. 1,1,1,1,2,2; got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="transit-release", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("synth", help="write a synthetic Opal-like week (trips.csv, stops.csv)")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--scale", type=float, default=1.0, help="1.0 ≈ 13.5 million trips (default 1.0)")
    s.add_argument("--seed", type=int, default=0, help="seed of the synthetic data (not of any privacy noise)")
    s.add_argument("--format", choices=("csv", "parquet"), default="csv")
    s.add_argument("--quiet", action="store_true", help="no progress bar")

    for name, help_text in (("release", "run the Opal release flow on given files"),
                            ("demo", "synthesise a week at scale 0.1 and release it with the defaults")):
        r = sub.add_parser(name, help=help_text)
        r.add_argument("--home", default=".", help="state directory (default: current directory)")
        r.add_argument("--config", help="release config YAML (default: the built-in Opal defaults)")
        r.add_argument("--epsilons", type=_floats, help="ε_1..ε_6 overriding the config, e.g. 1,1,1,1,2,2")
        r.add_argument("--delta", type=float, help="δ_j for every marginal, overriding the config")
        r.add_argument("--release-id", help="default: opal-<first date>-<last date>")
        r.add_argument("--policy", help="budget policy YAML (default: the built-in policy, ε ≤ 8 and "
                                        "δ ≤ 1e-6 per trip-partition, all time)")
        r.add_argument("--ledger", help="privacy ledger file (default: <home>/ledger.sqlite)")
        r.add_argument("--period-start", help="first day of the release period, YYYY-MM-DD "
                                              "(default: inferred from the tap-on dates)")
        r.add_argument("--period-end", help="last day of the release period, YYYY-MM-DD")
        r.add_argument("--quarantine-limit", type=float,
                       help="largest share of quarantined rows that still allows a release (default 0.01)")
        where = r.add_mutually_exclusive_group()
        where.add_argument("--workers", type=int,
                           help="sanitize the partitions on a local Dask cluster of N worker processes (default 2)")
        where.add_argument("--dask-address", metavar="ADDR",
                           help="sanitize on an existing Dask scheduler, e.g. tcp://10.0.0.5:8786 (its workers "
                                "need this project installed, the home directory at the same path and "
                                "PREFECT_API_URL set)")
        if name == "release":
            r.add_argument("--trips", required=True, help="raw trips, CSV or Parquet")
            r.add_argument("--stops", required=True, help="stop table, CSV or Parquet")
        else:
            r.add_argument("--scale", type=float, default=0.1)
            r.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    q = sub.add_parser("sequences", help="release passenger sequences with the noisy prefix tree")
    q.add_argument("--input", required=True, help="one sequence per line (location ids separated by spaces)")
    q.add_argument("--epsilon", type=float, required=True)
    q.add_argument("--height", type=int, required=True)
    q.add_argument("--variant", choices=("simple", "hybrid"), default="hybrid")
    q.add_argument("--taxonomy", help="CSV location,group (e.g. station,line)")
    q.add_argument("--fanout", type=int, help="build the taxonomy by grouping F locations per parent")
    q.add_argument("--home", default=".", help="state directory (default: current directory)")
    q.add_argument("--release-id", help="default: sequences-<input file name>")
    q.add_argument("--scope", help="what the data set covers, for the accountant (default: the input's name)")
    q.add_argument("--policy", help="budget policy YAML")
    q.add_argument("--ledger", help="privacy ledger file (default: <home>/ledger.sqlite)")
    q.add_argument("--queries", type=int, default=40_000, help="count queries of the utility workload")

    m = sub.add_parser("synth-metro", help="write a synthetic Montréal-shaped metro: sequences and taxonomy")
    m.add_argument("--out", required=True, help="output directory (sequences.txt, taxonomy.csv)")
    m.add_argument("--passengers", type=int, default=850_000)
    m.add_argument("--seed", type=int, default=0)

    a = sub.add_parser("audit", help="verify the ledger, releases and MLflow; report the cumulative privacy loss")
    a.add_argument("--home", default=".", help="state directory (default: current directory)")
    a.add_argument("--ledger", help="privacy ledger file (default: <home>/ledger.sqlite)")
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.add_argument("--delta-prime", type=float, default=1e-7, help="slack δ' of the advanced-composition bound")

    v = sub.add_parser("serve", help="run the schedules of prefect.yaml in this process (Prefect's serve)")
    v.add_argument("--home", default=".", help="state directory (default: current directory); also the "
                   "default of TRANSIT_RELEASE_HOME for the deployments' parameters")
    v.add_argument("--deployments", help="a prefect.yaml (default: the project's)")
    return p


def _print_audit(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    status = "[green]PASSED[/green]" if result["ok"] else "[red]FAILED[/red]"
    console.print(f"Privacy audit {status}: {result['entries']} ledger entries, "
                  f"{len(result['releases_published'])} published release(s)")
    for d in result["discrepancies"]:
        console.print(f"  [red]discrepancy[/red] {d}")
    for rid, n in result["charged_not_published"].items():
        console.print(f"  charged, not published: {rid} ({n} spends, counted)")
    for unit, loss in result["loss"].items():
        t = Table(title=f"Cumulative privacy loss per {unit} ({loss['neighbouring']})")
        for col in ("scope", "ε (basic)", "δ (basic)", "ε (advanced)", "δ (advanced)", "spends"):
            t.add_column(col, no_wrap=col == "scope")
        t.add_row("overall", f"{loss['basic']['epsilon']:g}", f"{loss['basic']['delta']:.3g}",
                  f"{loss['advanced']['epsilon']:.4g}", f"{loss['advanced']['delta']:.3g}", "")
        for mode, x in loss["per_mode"].items():
            t.add_row(f"mode {mode}", f"{x['epsilon']:g}", f"{x['delta']:.3g}", "", "", "")
        for part, x in loss["per_partition"].items():
            t.add_row(part, f"{x['epsilon']:g}", f"{x['delta']:.3g}", f"{x['advanced_epsilon']:.4g}",
                      f"{x['advanced_delta']:.3g}", str(x["spends"]))
        console.print(t)
        console.print(f"Advanced composition: {loss['advanced']['theorem']}")
    console.print(f"report: {result['report']}")


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title=f"Release {summary['release_id']}: {summary['status']}", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("period", summary["period"])
    t.add_row("privacy", f"(ε={summary['epsilon']:g}, δ={summary['delta']:.3g})-DP per "
                         f"{summary['unit_of_privacy']} (replace-one)")
    for f, n in summary["rows"].items():
        t.add_row(f, f"{n:,} rows")
    t.add_row("thresholds", ", ".join(f"{k}={v}" for k, v in summary["thresholds"].items()))
    t.add_row("release", summary["release_dir"])
    t.add_row("report", summary["report"])
    if summary.get("mlflow_run_id"):
        t.add_row("MLflow run", summary["mlflow_run_id"])
    console.print(t)
    console.print(f"Open the MLflow UI on it:\n  {summary['mlflow_ui']}")


def _synth(args) -> int:
    from transit_release.synth.opal_week import write_synthetic_week

    paths = write_synthetic_week(args.out, scale=args.scale, seed=args.seed, fmt=args.format,
                                 show_progress=not args.quiet)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _synth_metro(args) -> int:
    import pandas as pd

    from transit_release.sequence_io import format_sequences
    from transit_release.synth.metro import synthesize_metro

    seqs, metro = synthesize_metro(args.passengers, seed=args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[tuple[int, ...], int] = {}
    for s in seqs.to_lists():
        counts[s] = counts.get(s, 0) + 1
    ids = tuple(str(i) for i in range(metro.n_stations))
    (out / "sequences.txt").write_text(format_sequences(sorted(counts.items()), ids,
                                                        header="synthetic metro: station ids, one passenger a line"),
                                       encoding="utf-8")
    pd.DataFrame({"location": ids, "group": [metro.lines[g] for g in metro.line_of],
                  "name": metro.names}).to_csv(out / "taxonomy.csv", index=False)
    print(f"sequences: {out / 'sequences.txt'}\ntaxonomy: {out / 'taxonomy.csv'}")
    return 0


def _release(args, trips: str, stops: str, home: Home) -> int:
    from flows.opal_release import opal_release

    summary = opal_release(trips=str(Path(trips).resolve()), stops=str(Path(stops).resolve()),
                           home=str(home.root), config=args.config, epsilons=args.epsilons,
                           delta=args.delta, release_id=args.release_id, policy=args.policy,
                           ledger=args.ledger, period_start=args.period_start, period_end=args.period_end,
                           quarantine_limit=args.quarantine_limit, dask_address=args.dask_address,
                           workers=args.workers)
    _print_summary(summary)
    return 0


def _serve(args, home: Home) -> int:
    from flows import deployments

    os.environ.setdefault("TRANSIT_RELEASE_HOME", str(home.root))
    path = args.deployments or deployments.DEFAULT_FILE
    deployments.read_deployments(path)  # a missing variable fails here, before any server starts
    if os.environ.get("PREFECT_API_URL"):
        deployments.serve(path)
    else:
        with deployments.local_server(home.prefect_home) as url:
            os.environ["PREFECT_API_URL"] = url  # for the runs' own processes
            print(f"local Prefect server: {url}", flush=True)
            deployments.serve(path, api_url=url)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "synth":
            return _synth(args)
        if args.command == "synth-metro":
            return _synth_metro(args)
        home = Home.at(args.home, getattr(args, "ledger", None))  # every other command has a home
        _prepare_environment(home)
        if args.command == "serve":
            return _serve(args, home)
        if args.command == "release":
            return _release(args, args.trips, args.stops, home)
        if args.command == "sequences":
            from flows.sequence_release import sequence_release

            result = sequence_release(input=str(Path(args.input).resolve()), epsilon=args.epsilon, height=args.height,
                                      variant=args.variant, taxonomy=args.taxonomy, fanout=args.fanout,
                                      home=str(home.root), release_id=args.release_id, scope=args.scope,
                                      policy=args.policy, ledger=args.ledger, queries=args.queries)
            for k, v in result.items():
                print(f"{k}: {v}")
            return 0
        if args.command == "audit":
            from flows.audit import privacy_audit

            result = privacy_audit(home=str(home.root), ledger=args.ledger, delta_prime=args.delta_prime)
            if args.json:
                import json

                print(json.dumps(result, indent=2, ensure_ascii=False))
            else:
                _print_audit(result)
            if not result["ok"]:
                print("transit-release: audit failed: " + "; ".join(result["discrepancies"]), file=sys.stderr)
                return EXIT_AUDIT_FAILED
            return 0
        from transit_release.synth.opal_week import write_synthetic_week

        data = home.private / "demo-input"
        if not (data / "trips.csv").exists() or not (data / "stops.csv").exists():
            write_synthetic_week(data, scale=args.scale, seed=args.seed)
        return _release(args, str(data / "trips.csv"), str(data / "stops.csv"), home)
    except TransitReleaseError as exc:
        from transit_release.errors import BudgetExceededError

        print(f"transit-release: error: {exc}", file=sys.stderr)
        return EXIT_BUDGET if isinstance(exc, BudgetExceededError) else EXIT_INPUT
    except KeyboardInterrupt:
        print("transit-release: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
