"""The ``transit-release`` command.

    transit-release synth       --out DIR [--scale F] [--seed N] [--format csv|parquet]
    transit-release release     --trips FILE --stops FILE --period-start D --period-end D [options] [--dry-run]
    transit-release demo        [--home DIR] [--scale F]
    transit-release sequences   --input FILE (--locations FILE | --taxonomy FILE) --epsilon E
                                [--mechanism prefix-tree --height H | --mechanism ngram [--lmax 20] [--nmax 5]]
                                --period-start D --period-end D [options] [--dry-run]
    transit-release trajectories --input FILE (--locations FILE | --location-taxonomy FILE) --epsilon E
                                --height H --period-start MONDAY --period-end SUNDAY [options] [--dry-run]
    transit-release sets        (--input FILE --locations FILE | --trips FILE --stops FILE [--mode M]) --epsilon E
                                [--fanout F] --period-start D --period-end D [options] [--dry-run]
    transit-release budget      [--home DIR] [--policy YAML]
    transit-release audit       [--home DIR] [--json]
    transit-release repair      [--home DIR] [--adopt-ledger-key]
    transit-release backup      --to DIR [--home DIR]
    transit-release serve       [--home DIR] [--deployments prefect.yaml]

What can be checked without Prefect (arguments, files, headers, periods,
configuration, policy, the home) is checked first (a release's while its
temporary Prefect server starts), so a bad invocation is refused at once.
Flows run on a Prefect server on loopback that the command starts and that
dies with it (or the one ``PREFECT_API_URL`` names), with all
state under ``--home`` (default: the current directory). An expected failure
prints one line and exits 2 (bad input or configuration), 3 (budget) or 4
(audit failed, or a ledger that fails its integrity checks: nothing charged);
``--verbose`` shows Prefect's logs and tracebacks. The ledger key's place is
checked first, on every command that has a home.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path

from transit_release.cluster import IN_PROCESS, local_workers
from transit_release.errors import (BudgetError, ConfigError, InputDataError, LedgerIntegrityError,
                                   TransitReleaseError)
from transit_release.home import UMASK, Home, check_release_id
from transit_release.telemetry import telemetry_off
from transit_release.warmup import RELEASE_MODULES

EXIT_INPUT = 2
EXIT_BUDGET = 3
EXIT_UNEXPECTED = 1
EXIT_AUDIT_FAILED = 4


def _prepare_environment(home: Home, verbose: bool) -> None:
    """Settings that must be in place before Prefect or MLflow is imported. Without ``--verbose`` Prefect's console
    logs are off (its API logs stay, for the server's UI); a terminal shows progress instead."""
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_HOME", str(home.prefect_home))
    telemetry_off()  # no library reports usage to its maker
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, e.g. 1,1,1,1,2,2; got {text!r}") from None


def _add_home(p: argparse.ArgumentParser, ledger: bool = True) -> None:
    p.add_argument("--home", default=".", help="state directory (default: current directory)")
    if ledger:
        p.add_argument("--ledger", help="privacy ledger file (default: <home>/ledger.sqlite)")


def _add_record_inputs(p: argparse.ArgumentParser, record: str, records: str, input_help: str, period: str) -> None:
    """A passenger-level release's inputs: a file of records or tap data, and the public universe."""
    _add_home(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help=input_help)
    src.add_argument("--trips", help=f"tap data (CSV or Parquet, like `release`): one {record} per card over the "
                                    f"{period}; needs --stops, whose --mode stations are the universe")
    p.add_argument("--stops", help="stop table of the tap data (its station names are the public universe)")
    p.add_argument("--mode", default="train", choices=("bus", "ferry", "lightrail", "train"),
                   help=f"with --trips: the mode whose taps make the {records} (default train)")
    p.add_argument("--locations", help="the public location universe: one location id per line")


_POPULATION_HELP = ("the population the release is about (default: the home's one population; name another only for "
                    "genuinely different people, e.g. another city's riders): a passenger's loss adds up over every "
                    "release of their population")


def _add_release_options(p: argparse.ArgumentParser, default_id: str) -> None:
    p.add_argument("--release-id", help=f"default: {default_id}")
    p.add_argument("--population", help=_POPULATION_HELP)
    p.add_argument("--policy", help="budget policy YAML")
    p.add_argument("--quarantine-limit", type=float, default=0.01)
    p.add_argument("--queries", type=int, default=40_000, help="count queries of the utility workload")
    p.add_argument("--dry-run", action="store_true", help="validate, print the spend and the policy's verdict, stop")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="transit-release", description=__doc__.split("\n\n")[0])
    p.add_argument("--verbose", action="store_true", help="show Prefect's logs and the traceback of any error")
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
        _add_home(r)
        r.add_argument("--unit", choices=("card", "trip"),
                       help="unit of privacy: card (default: each card's contribution bounded first, so a "
                            "passenger's loss is bounded) or trip (the Opal paper's, to compare with the Opal files: "
                            "it leaves a passenger's loss unbounded, which the default budget policy refuses)")
        r.add_argument("--population", help=_POPULATION_HELP)
        r.add_argument("--config", help="release config YAML (default: the built-in defaults of --unit)")
        r.add_argument("--epsilons", type=_floats, help="ε_1..ε_6 overriding the config, e.g. 1,1,1,1,2,2")
        r.add_argument("--delta", type=float, help="δ_j for every marginal, overriding the config")
        r.add_argument("--release-id", help="default: opal-<unit>-<first date>-<last date>")
        r.add_argument("--policy", help="budget policy YAML (default: the built-in policy)")
        r.add_argument("--quarantine-limit", type=float,
                       help="largest share of quarantined rows that still allows a release (default 0.01)")
        r.add_argument("--dry-run", action="store_true",
                       help="validate everything, print the spends and the policy's verdict, and stop: nothing is "
                            "charged, drawn or written under releases/ or release_reports/")
        where = r.add_mutually_exclusive_group()
        where.add_argument("--workers", type=int,
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
            r.add_argument("--scale", type=float, default=0.1)
            r.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")

    q = sub.add_parser("sequences", help="release passenger sequences (variable-length n-grams, recommended, or a "
                                         "noisy prefix tree)")
    _add_record_inputs(q, "sequence", "sequences", "one sequence per line (location ids separated by spaces)", "period")
    q.add_argument("--taxonomy", help="CSV location,group (e.g. station,line): the hybrid tree's taxonomy; its "
                                      "locations are the universe unless --locations is given too")
    q.add_argument("--epsilon", type=float, required=True)
    q.add_argument("--mechanism", choices=("prefix-tree", "ngram"), default="prefix-tree",
                   help="ngram is recommended (variable-length n-grams, Chen, Ács & Castelluccia, CCS 2012; also "
                        "publishes the noisy n-gram table): on the synthetic metro at ε = 1 its count-query error is "
                        "0.13-0.14x the prefix tree's and it finds 97 of the 100 most frequent runs of stations "
                        "against 82-91 (README). prefix-tree (Chen et al., KDD 2012; needs --height, the default) "
                        "keeps journeys from their first station")
    q.add_argument("--height", type=int, help="prefix tree: the longest sequence released (required for it)")
    q.add_argument("--lmax", type=int, help="n-grams: locations kept per sequence, longer ones are cut (default 20)")
    q.add_argument("--nmax", type=int, help="n-grams: the longest gram, end marker included (default 5)")
    q.add_argument("--period-start", required=True, help="first day the sequences cover, YYYY-MM-DD (public)")
    q.add_argument("--period-end", required=True, help="last day the sequences cover, YYYY-MM-DD")
    q.add_argument("--variant", choices=("simple", "hybrid"), help="prefix tree: the variant (default hybrid)")
    q.add_argument("--fanout", type=int, help="build the taxonomy by grouping F locations of the universe per parent")
    _add_release_options(q, "sequences-<mechanism>-<start>-<end>")

    t = sub.add_parser("trajectories", help="release passenger trajectories (station, hour of the week): SafePath's "
                                            "tree, or the factored Markov model (--mechanism markov, recommended)")
    _add_record_inputs(t, "trajectory", "trajectories", "one trajectory per line: station@hour tokens, the hour of "
                       "the week 0-167 from Monday 00:00", "week")
    tax = t.add_mutually_exclusive_group()
    tax.add_argument("--location-taxonomy", help="CSV location,group[,line]: the location taxonomy (groups, and lines "
                                                 "above them); its locations are the universe unless --locations "
                                                 "(or --trips) gives it")
    tax.add_argument("--location-fanout", type=int, help="build the location taxonomy with F locations of the "
                                                        "universe per node (default 2, the paper's)")
    t.add_argument("--location-taxonomy-height", type=int, help="with a fan-out: levels of groups (default 6)")
    t.add_argument("--time-fanout", type=int, help="blocks of F consecutive hours per node (default 2)")
    t.add_argument("--time-taxonomy-height", type=int, help="levels of hour blocks (default 6)")
    t.add_argument("--mechanism", choices=("safepath", "markov"), default="safepath",
                   help="safepath (the SafePath prefix tree, default) or markov (days, stations and hours of the day "
                        "as three noisy models, trajectories drawn from them): on a commuter week at ε = 1 markov "
                        "keeps the frequent points, ordered pairs and patterns the tree loses (see the README)")
    t.add_argument("--budget", choices=("paper", "joint"), default="paper",
                   help="SafePath's budget split: paper (over two taxonomies, default) or joint (one test of the "
                        "(station, hour) pair per level; near noise-free at large ε)")
    t.add_argument("--nmax", type=int, help="markov: the longest gram of its station and hour models (default 3)")
    t.add_argument("--thresholds", choices=("paper", "node"),
                   help="SafePath's paper budget: threshold rule (default paper)")
    t.add_argument("--epsilon", type=float, required=True)
    t.add_argument("--height", type=int, required=True, help="longest released trajectory (taps)")
    t.add_argument("--period-start", required=True, help="the Monday of the week the trajectories cover, YYYY-MM-DD")
    t.add_argument("--period-end", required=True, help="the Sunday of that week, YYYY-MM-DD")
    _add_release_options(t, "trajectories-<mechanism>-<start>-<end>")

    st = sub.add_parser("sets", help="release passengers' station sets with DiffPart")
    _add_home(st)
    src = st.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help="one set per line (location ids separated by spaces; order and repeats "
                                    "ignored; %% or # starts a comment)")
    src.add_argument("--trips", help="tap data (CSV or Parquet, like `release`): one set per card over the period, "
                                    "its distinct tap-on and tap-off locations; needs --stops")
    st.add_argument("--locations", help="with --input: the public location universe, one location id per line")
    st.add_argument("--stops", help="with --trips: the stop table, whose locations (mode:location) are the universe")
    st.add_argument("--mode", choices=("bus", "ferry", "lightrail", "train"),
                    help="with --trips: keep the taps of this mode only (default: every mode of the stop table)")
    st.add_argument("--epsilon", type=float, required=True)
    st.add_argument("--fanout", type=int, help="locations per group of DiffPart's taxonomy (default: from the universe "
                                              "size, round(log2 |I|) within 4..6; see the README)")
    st.add_argument("--period-start", required=True, help="first day the sets cover, YYYY-MM-DD (public)")
    st.add_argument("--period-end", required=True, help="last day the sets cover, YYYY-MM-DD")
    st.add_argument("--release-id", help="default: sets-diffpart-<start>-<end>")
    st.add_argument("--population", help=_POPULATION_HELP)
    st.add_argument("--policy", help="budget policy YAML")
    st.add_argument("--quarantine-limit", type=float, default=0.01)
    st.add_argument("--queries", type=int, default=50_000, help="count queries of the utility workload")
    st.add_argument("--dry-run", action="store_true", help="validate, print the spend and the policy's verdict, stop")

    m = sub.add_parser("synth-metro", help="write a synthetic Montréal-shaped metro: sequences, a week of trajectories, "
                                           "station sets, taxonomies and the station list")
    m.add_argument("--out", required=True, help="output directory (sequences.txt, trajectories.txt, sets.txt, "
                                                "taxonomy.csv, stations.csv, locations.txt)")
    m.add_argument("--passengers", type=int, default=850_000, help="passengers of each file (default 850,000)")
    m.add_argument("--seed", type=int, default=0)

    b = sub.add_parser("budget", help="what each unit of privacy has spent and what remains under each cap")
    _add_home(b)
    b.add_argument("--policy", help="budget policy YAML (default: the built-in policy)")
    b.add_argument("--json", action="store_true", help="print the result as JSON")

    a = sub.add_parser("audit", help="verify the ledger, releases and MLflow; report the cumulative privacy loss")
    _add_home(a)
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.add_argument("--delta-prime", type=float, default=1e-7, help="slack δ' of the advanced-composition bound")
    a.add_argument("--policy", help="budget policy YAML whose caps the report draws (default: the built-in policy)")

    rp = sub.add_parser("repair", help="complete or roll back interrupted publications; remove what dead runs left")
    _add_home(rp)
    rp.add_argument("--adopt-ledger-key", action="store_true",
                    help="MAC the existing ledger entries with the key of TRANSIT_RELEASE_LEDGER_KEY_FILE "
                         "(introducing a key on a ledger with history), or record the high-water mark of a keyed "
                         "ledger whose home was moved; check the audit first")

    bk = sub.add_parser("backup", help="copy the ledger (SQLite's online backup) with the anchors it holds into DIR")
    _add_home(bk)
    bk.add_argument("--to", required=True, help="a new or empty directory outside the home")

    v = sub.add_parser("serve", help="run the schedules of prefect.yaml in this process (Prefect's serve)")
    v.add_argument("--home", default=".", help="state directory (default: current directory); also the "
                   "default of TRANSIT_RELEASE_HOME for the deployments' parameters")
    v.add_argument("--deployments", help="a prefect.yaml (default: the project's)")
    return p


# ---- output: plain lines that never wrap a command or cut a column ------------------------------------------

def _print_summary(summary: dict) -> None:
    if "spends" in summary:  # a dry run
        print(f"Release {summary['release_id']}: {summary['status']}")
        print(f"  period: {summary['period']}" + ("" if summary["period_declared"] else
                                                 "  (suggested by the tap-on dates: declare it to publish)"))
        if summary.get("quarantine"):
            print(f"  input: {json.dumps(summary['quarantine'], sort_keys=True)}")
        print(f"  spends: {summary['events']} event(s)")
        for s in summary["spends"]:
            print(f"    {s['unit_of_privacy']} {s['scope']}: ε={s['epsilon']:g}, δ={s['delta']:.3g}")
        print("  budget policy: " + ("allows it" if summary["allowed"] else f"REFUSES it: {summary['reason']}"))
        return
    print(f"Release {summary['release_id']}: {summary['status']}")
    print(f"  period: {summary['period']}")
    print(f"  privacy: (ε={summary['epsilon']:g}, δ={summary['delta']:.3g})-DP per {summary['unit_of_privacy']} "
          f"({summary['neighbouring']})")
    person = summary.get("person")
    if person:
        from transit_release.releases.loss_statement import rounded_up

        pld = (f"; PLD ε={rounded_up(person['pld']['epsilon'], 4)} at δ={rounded_up(person['pld']['delta'], 3)}"
               if person["pld"] else "")
        figures = (f"ε={rounded_up(person['basic']['epsilon'], 4)}, δ={rounded_up(person['basic']['delta'], 3)}"
                   f"{pld}")
        print(f"  a passenger of population '{person['population']}' at publication: "
              + (figures if person["bounded"] else
                 "UNBOUNDED (trip-level release(s) " + ", ".join(u["release_id"] for u in person["unbounded_by"])
                 + f"); with no trip in their periods: {figures}") + f" over {person['releases']} release(s)")
    if summary.get("cumulative"):
        c = summary["cumulative"]
        print(f"  per {summary['unit_of_privacy']} at publication: ε={c['epsilon']:g}, δ={c['delta']:.3g} over "
              f"{c['releases']} release(s)")
    bounding = (summary.get("quarantine") or {}).get("bounding")
    if bounding:
        print(f"  contribution bounding: {bounding['rows_kept']:,} of {bounding['rows_in']:,} trips kept "
              f"(internal figure)")
    for f, n in summary["rows"].items():
        print(f"  {f}: {n:,} rows")
    if summary.get("thresholds"):
        print("  thresholds: " + ", ".join(f"{k}={v}" for k, v in summary["thresholds"].items()))
    if summary.get("metrics"):
        from transit_release.passenger_report import headline

        for label, value in headline(summary.get("kind", ""), summary["metrics"], summary["epsilon"]):
            print(f"  {label}: {value}")
    print(f"  release: {summary['release_dir']}")
    if summary.get("noise_source") == "test-seed":
        print("  (made with the test-only noise seed: kept under private/test-releases/, never published)")
    print(f"  report: {summary['report']}")
    if summary.get("mlflow_run_id"):
        print(f"  MLflow run: {summary['mlflow_run_id']}")
    print("Open the MLflow UI on it:")
    print(f"  {summary['mlflow_ui']}")


def _print_audit(result: dict) -> None:
    print(f"Privacy audit {'PASSED' if result['ok'] else 'FAILED'}: {result['entries']} ledger entries, "
          f"{len(result['releases_published'])} published release(s)")
    for d in result["discrepancies"]:
        print(f"  discrepancy: {d}")
    for rid, n in result["charged_not_published"].items():
        print(f"  charged, not published: {rid} ({n} spends, counted)")
    for rid in result.get("pending_publications", []):
        print(f"  interrupted publication: {rid} (run `transit-release repair`)")
    for x in result.get("staging_leftovers", []) + result.get("leftovers", []):
        print(f"  left behind by a run that stopped: {x}")
    if result.get("leftovers") or result.get("staging_leftovers"):
        print("  remove them with: transit-release repair --home <home>")
    for t in result.get("threat_model", []):
        print(f"  note: {t}")
    if result.get("card_unbounded_periods"):
        print("  per card: unbounded over " + ", ".join(result["card_unbounded_periods"]) + " (trip-level releases put "
              "no bound on a card's trips)")
    from transit_release.audit import PERSON, unit_losses

    for population, person in result["loss"].get(PERSON, {}).items():
        print(f"Cumulative privacy loss of one passenger of population '{population}' ({person['releases']} "
              "release(s), every kind):")
        for u in person["unbounded_by"]:
            print(f"  UNBOUNDED: trip-level release {u['release_id']} covers {u['period']} (it bounds a trip, not a "
                  "passenger)")
        where = "  for a passenger with no trip in those periods: " if person["unbounded_by"] else "  "
        line = f"{where}basic composition: ε={person['basic']['epsilon']:.4g}, δ={person['basic']['delta']:.3g}"
        if person["pld"]:
            line += f"; PLD: ε={person['pld']['epsilon']:.4g} at δ={person['pld']['delta']:.3g}"
        print(line)
        for kind, share in person["per_kind"].items():
            basic = share["basic"]
            print(f"  {kind}: {len(share['releases'])} release(s), "
                  + ("unbounded" if basic is None else f"ε={basic['epsilon']:.4g}, δ={basic['delta']:.3g}"))
    for unit, loss in unit_losses(result["loss"]).items():
        print(f"Cumulative privacy loss per {unit} ({loss['neighbouring']}):")
        line = f"  basic composition: ε={loss['basic']['epsilon']:g}, δ={loss['basic']['delta']:.3g}"
        if loss.get("pld"):
            line += f"; PLD: ε={loss['pld']['epsilon']:.4g} at δ={loss['pld']['delta']:.3g}"
        if loss.get("advanced"):
            line += f"; advanced composition: ε={loss['advanced']['epsilon']:.4g}, δ={loss['advanced']['delta']:.3g}"
        print(line)
        year = loss.get("year_projection")
        if year:
            print(f"  {year['releases']} weekly releases like {year['like_release']} would cost a card: basic "
                  f"ε={year['basic']['epsilon']:g} (δ={year['basic']['delta']:.3g}); PLD ε={year['pld']['epsilon']:.4g} "
                  f"at δ={year['pld']['delta']:.3g}")
        for mode, x in loss["per_mode"].items():
            print(f"  mode {mode}: ε={x['epsilon']:g}, δ={x['delta']:.3g}")
        for part, x in loss["per_partition"].items():
            print(f"  {part}: ε={x['epsilon']:g}, δ={x['delta']:.3g}, {x['spends']} spend(s)")
    print(f"report: {result['report']}")


def _budget(args, home: Home) -> int:
    """Spent and remaining under each cap, from the ledger and the policy alone (no Prefect, no MLflow)."""
    from transit_release.accounting.ledger import Ledger
    from transit_release.accounting.policy import load_budget_policy

    policy = load_budget_policy(args.policy)
    entries = Ledger(home.ledger, key=b"", read_only=True).entries() if home.ledger.exists() else []
    status = policy.status(entries)
    if args.json:
        print(json.dumps([{"cap": s.cap.name, "unit_of_privacy": s.cap.unit_of_privacy, "per": s.cap.per,
                           "period": s.cap.period, "scope": s.scope, "used_epsilon": s.used.epsilon,
                           "used_delta": s.used.delta, "remaining_epsilon": s.remaining.epsilon,
                           "remaining_delta": s.remaining.delta, **({"note": s.note} if s.note else {})}
                          for s in status], indent=1))
        return 0
    print(f"Privacy budget of {home.root} ({len(entries)} ledger entries)")
    for cap in policy.caps:
        mine = [s for s in status if s.cap == cap]
        where = f", modes {', '.join(cap.modes)}" if cap.modes else ""
        print(f"cap '{cap.name}': {cap.unit_of_privacy}, ε ≤ {cap.epsilon:g}, δ ≤ {cap.delta:g} per {cap.per}{where}, "
              f"{'all time' if cap.period == 'all-time' else 'this calendar year'}")
        if not mine:
            print("  nothing spent: the whole cap remains")
            continue
        worst = max(mine, key=lambda s: (s.used.epsilon_exact, s.scope))
        print(f"  most spent: {worst.scope}: used ε={worst.used.epsilon:g}, δ={worst.used.delta:.3g}; remaining "
              f"ε={worst.remaining.epsilon:g}, δ={worst.remaining.delta:.3g}")
        modes: dict[str, list] = {}
        for s in mine:
            modes.setdefault(s.scope.split("/", 1)[0] if "/" in s.scope else "", []).append(s)
        for mode, rows in sorted(modes.items()):
            if mode:
                w = max(rows, key=lambda s: s.used.epsilon_exact)
                print(f"  mode {mode}: {len(rows)} partition(s), most spent ε={w.used.epsilon:g} "
                      f"(remaining ε={w.remaining.epsilon:g})")
        for s in sorted(mine, key=lambda s: s.scope):
            print(f"  {s.scope}: used ε={s.used.epsilon:g}, δ={s.used.delta:.3g}; remaining ε={s.remaining.epsilon:g}, "
                  f"δ={s.remaining.delta:.3g}" + (f" ({s.note})" if s.note else ""))
    return 0


# ---- running flows ---------------------------------------------------------------------------------------------

def _quiet_logging(verbose: bool) -> None:
    """Other libraries' chatter only with ``--verbose``; on a terminal, progress is shown instead."""
    from transit_release import progress

    for name in ("alembic", "mlflow", "distributed", "great_expectations"):
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.ERROR)
    if not verbose and sys.stderr.isatty():
        progress.install(progress.RichReporter())


@contextmanager
def _prefect(home: Home, verbose: bool, preload: tuple[str, ...] = (), prewarm_workers: bool = False,
             checks: Callable[[], None] | None = None, warm: tuple[str, ...] = ()):
    """The Prefect API for this command: the configured one (``PREFECT_API_URL``, or the settings of a process that
    already runs Prefect) if any, else a loopback server that dies with us. Prefect is not imported before the
    choice is made: its settings are read once, when it is imported.

    ``checks()`` is the invocation's own checks (files, headers, period, configuration): with a configured API
    they run first; with a loopback server they run while it starts (seconds), and a refusal stops the server
    at once (it has done nothing but start) and removes its new folder; the home is prepared only once they
    have passed (what else a refusal created is removed by :func:`main`). After them,
    while the server goes on starting, the ``preload`` modules are imported and, with ``prewarm_workers``, the
    forkserver of the local Dask workers starts importing their libraries; then the ``warm`` modules, one after
    the other until the server answers (the flow imports the others later, see :mod:`transit_release.warmup`)."""
    configured = os.environ.get("PREFECT_API_URL")
    if not configured and "prefect" in sys.modules:
        from prefect.settings import get_current_settings

        configured = get_current_settings().api.url

    def start_forkserver() -> None:
        if prewarm_workers:  # its own process imports the workers' libraries while this one imports Prefect
            from flows.scale_out import prewarm_workers as start

            start()

    if configured:
        if checks is not None:
            checks()
        home.prepare()  # Prefect makes its home (<home>/.prefect) as soon as it is imported
        start_forkserver()
        _quiet_logging(verbose)
        yield
        return
    from flows.deployments import local_server, server_answers

    checked = False

    def while_starting(url: str) -> None:  # the command's checks, then the modules of its flow, meanwhile
        nonlocal checked
        if checks is not None:
            checks()
        checked = True
        home.prepare()  # only once the invocation has passed its checks
        os.environ["PREFECT_API_URL"] = url  # before Prefect is imported, and for the flows' own processes
        start_forkserver()
        for module in preload:
            importlib.import_module(module)
        for module in warm:
            if server_answers(url):
                break
            importlib.import_module(module)

    server_home_existed = home.prefect_home.exists()
    try:
        with local_server(home.prefect_home, while_starting=while_starting) as url:
            os.environ["PREFECT_API_URL"] = url
            from prefect.logging.handlers import APILogHandler
            from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

            try:
                # no heartbeats: they let a long-lived server find crashed runs, and this server dies with the
                # command; a flow run's end joins its heartbeat thread, which sleeps in 1 s steps (up to 1 s per
                # release, and per stop after a Ctrl-C)
                with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
                    _quiet_logging(verbose)
                    try:
                        yield
                    finally:
                        APILogHandler().flush()  # the run's last logs (a refusal's too) before the server stops
            finally:
                os.environ.pop("PREFECT_API_URL", None)
    except BaseException:
        if not checked and not server_home_existed:  # refused by its checks: the server it started only started
            shutil.rmtree(home.prefect_home, ignore_errors=True)
        raise


def _check_release_args(args, trips: str, stops: str, home: Home) -> None:
    """Everything about a release invocation that needs no Prefect: files, headers, period, config, policy, id."""
    from transit_release import preflight
    from transit_release.cluster import check_workers_setting
    from transit_release.inputs.stored_types import STOP_COLUMN_TYPES, TRIP_COLUMN_TYPES

    check_workers_setting(args.workers, args.dask_address)
    preflight.readable_file(trips, "trips")
    preflight.readable_file(stops, "stops")
    preflight.check_parquet_types(trips, "trips", TRIP_COLUMN_TYPES)  # first: pyarrow alone, before pandas
    preflight.check_parquet_types(stops, "stops", STOP_COLUMN_TYPES)
    from transit_release.accounting.policy import load_budget_policy
    from transit_release.config import load_release_config, population_named, release_unit
    from transit_release.inputs.screening import PERIOD_REQUIRED, parse_period

    if args.period_start is None and args.period_end is None:
        if not args.dry_run:
            raise InputDataError(PERIOD_REQUIRED)
    else:
        parse_period(args.period_start, args.period_end)
    if args.release_id is not None:
        check_release_id(args.release_id)
    population_named(args.population)
    load_release_config(args.config, release_unit(args.config, args.unit)).with_overrides(
        epsilons=args.epsilons, delta=args.delta, quarantine_limit=args.quarantine_limit)
    load_budget_policy(args.policy)
    preflight.check_trip_inputs(trips, stops)
    preflight.check_stop_table(stops)


def _release(args, trips: str, stops: str, home: Home) -> int:
    with _prefect(home, args.verbose, preload=("flows.opal_release",), warm=RELEASE_MODULES,
                  prewarm_workers=not args.dask_address and local_workers(args.workers) != IN_PROCESS,
                  checks=lambda: _check_release_args(args, trips, stops, home)):
        from flows.opal_release import opal_release

        summary = opal_release(trips=str(Path(trips).resolve()), stops=str(Path(stops).resolve()),
                               period_start=args.period_start, period_end=args.period_end, home=str(home.root),
                               config=args.config, epsilons=args.epsilons, delta=args.delta,
                               release_id=args.release_id, policy=args.policy, ledger=args.ledger,
                               quarantine_limit=args.quarantine_limit, dask_address=args.dask_address,
                               workers=args.workers, dry_run=args.dry_run, unit=args.unit,
                               population=args.population)
    _print_summary(summary)
    return 0


def _check_passenger_release_args(args) -> None:
    """What every passenger-level kind checks first, without Prefect: the declared period, the id, the population,
    the policy."""
    from transit_release.accounting.policy import load_budget_policy
    from transit_release.config import population_named
    from transit_release.inputs.screening import parse_period

    parse_period(args.period_start, args.period_end)
    if args.release_id is not None:
        check_release_id(args.release_id)
    population_named(args.population)
    load_budget_policy(args.policy)


def _validated_stops(args):
    """(stop table, its name in messages) of a release built from taps, after the trips and stops files' checks."""
    from transit_release import preflight

    preflight.check_trip_inputs(args.trips, args.stops)
    return preflight.check_stop_table(args.stops), f"stops file {Path(args.stops).name}"


def _stop_table_universe(args):
    """The universe of a release from tap data: the stop table's stations of ``--mode`` (files checked first)."""
    from transit_release.inputs.universe import from_stop_table

    stops, name = _validated_stops(args)
    return from_stop_table(stops, args.mode, name)


def _sequences(args, home: Home) -> int:
    from transit_release import preflight
    from transit_release.inputs.universe import load_universe
    from transit_release.releases.sequences import budget_for

    _check_passenger_release_args(args)
    if args.trips:
        if not args.stops or args.locations or args.taxonomy:
            raise InputDataError("with --trips give --stops (its stations are the universe), not --locations or "
                                 "--taxonomy")
        universe = _stop_table_universe(args)
    else:
        preflight.readable_file(args.input, "sequence")
        universe = load_universe(args.locations, args.taxonomy)
    # refuses the other mechanism's flags, an impossible ε or a tree too large before Prefect starts
    budget_for(args.mechanism, universe, args.epsilon, args.height, args.variant, args.fanout, args.lmax, args.nmax)
    with _prefect(home, args.verbose):
        from flows.sequence_release import sequence_release

        resolve = lambda p: str(Path(p).resolve()) if p else None  # noqa: E731
        result = sequence_release(
            input=resolve(args.input), trips=resolve(args.trips), stops=resolve(args.stops), mode=args.mode,
            epsilon=args.epsilon, height=args.height, mechanism=args.mechanism, lmax=args.lmax, nmax=args.nmax,
            period_start=args.period_start, period_end=args.period_end, variant=args.variant,
            locations=resolve(args.locations), taxonomy=resolve(args.taxonomy), fanout=args.fanout,
            home=str(home.root), release_id=args.release_id, policy=args.policy, ledger=args.ledger,
            quarantine_limit=args.quarantine_limit, queries=args.queries, dry_run=args.dry_run,
            population=args.population)
    _print_summary(result)
    return 0


def _trajectories(args, home: Home) -> int:
    from transit_release import preflight
    from transit_release.inputs.screening import parse_period
    from transit_release.inputs.universe import load_universe, read_taxonomy_file, with_taxonomy
    from transit_release.releases.trajectories import check_period, trajectory_setup

    _check_passenger_release_args(args)
    check_period(parse_period(args.period_start, args.period_end))
    if args.trips:
        if not args.stops or args.locations:
            raise InputDataError("with --trips give --stops (its stations are the universe), not --locations")
        universe = _stop_table_universe(args)
        if args.location_taxonomy:
            universe = with_taxonomy(universe, read_taxonomy_file(args.location_taxonomy))
    else:
        preflight.readable_file(args.input, "trajectory")
        universe = load_universe(args.locations, args.location_taxonomy, "--location-taxonomy")
    # refuses a configuration the public universe cannot carry (flags, the ε_ng guard, scales, sizes) before Prefect
    trajectory_setup(universe, args.epsilon, args.height, mechanism=args.mechanism, budget=args.budget,
                     location_fanout=args.location_fanout, location_taxonomy_height=args.location_taxonomy_height,
                     time_fanout=args.time_fanout, time_taxonomy_height=args.time_taxonomy_height,
                     rule=args.thresholds, max_gram=args.nmax)
    with _prefect(home, args.verbose):
        from flows.trajectory_release import trajectory_release

        resolve = lambda p: str(Path(p).resolve()) if p else None  # noqa: E731
        result = trajectory_release(
            input=resolve(args.input), trips=resolve(args.trips), stops=resolve(args.stops), mode=args.mode,
            epsilon=args.epsilon, height=args.height, period_start=args.period_start, period_end=args.period_end,
            locations=resolve(args.locations), location_taxonomy=resolve(args.location_taxonomy),
            location_fanout=args.location_fanout, location_taxonomy_height=args.location_taxonomy_height,
            time_fanout=args.time_fanout, time_taxonomy_height=args.time_taxonomy_height, thresholds=args.thresholds,
            mechanism=args.mechanism, budget=args.budget, nmax=args.nmax, home=str(home.root),
            release_id=args.release_id, policy=args.policy, ledger=args.ledger,
            quarantine_limit=args.quarantine_limit, queries=args.queries, dry_run=args.dry_run,
            population=args.population)
    _print_summary(result)
    return 0


def _sets(args, home: Home) -> int:
    from transit_release import preflight
    from transit_release.inputs.universe import from_stop_locations, read_locations_file
    from transit_release.releases.sets import set_budget

    _check_passenger_release_args(args)
    if args.trips:
        if not args.stops or args.locations:
            raise InputDataError("with --trips give --stops (its locations are the universe), not --locations")
        stops, name = _validated_stops(args)
        universe = from_stop_locations(stops, (args.mode,) if args.mode else None, name)
    else:
        if args.stops or args.mode:
            raise InputDataError("--stops and --mode go with --trips; with --input give --locations")
        preflight.readable_file(args.input, "set")
        if args.locations is None:
            raise InputDataError("give the public location universe: --locations FILE (one location id per line); "
                                 "the universe is never read off the data")
        universe = read_locations_file(args.locations)
    set_budget(universe, args.epsilon, args.fanout)  # refuses a bad ε or an exploding partitioning before Prefect
    with _prefect(home, args.verbose):
        from flows.sets_release import set_release

        resolve = lambda p: str(Path(p).resolve()) if p else None  # noqa: E731
        result = set_release(
            input=resolve(args.input), locations=resolve(args.locations), trips=resolve(args.trips),
            stops=resolve(args.stops), mode=args.mode, epsilon=args.epsilon, fanout=args.fanout,
            period_start=args.period_start, period_end=args.period_end, home=str(home.root),
            release_id=args.release_id, policy=args.policy, ledger=args.ledger,
            quarantine_limit=args.quarantine_limit, queries=args.queries, dry_run=args.dry_run,
            population=args.population)
    _print_summary(result)
    return 0


def _audit(args, home: Home) -> int:
    from transit_release.accounting.policy import load_budget_policy

    if not home.root.is_dir():
        raise ConfigError(f"--home {home.root}: no such directory: nothing to audit")
    load_budget_policy(args.policy)
    with _prefect(home, args.verbose):
        from flows.audit import privacy_audit

        result = privacy_audit(home=str(home.root), ledger=args.ledger, delta_prime=args.delta_prime,
                               policy=args.policy)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        _print_audit(result)
    if not result["ok"]:
        print("transit-release: audit failed: " + "; ".join(result["discrepancies"]), file=sys.stderr)
        return EXIT_AUDIT_FAILED
    return 0


def _repair(args, home: Home) -> int:
    """No Prefect needed: the ledger, the file system and MLflow's store directly."""
    from tasks.track import read_anchors, tag_published_runs
    from transit_release import recovery
    from transit_release.accounting.ledger import Ledger

    home.prepare()
    ledger = Ledger(home.ledger)
    if args.adopt_ledger_key:
        print(recovery.adopt_ledger_key(home, ledger, read_anchors.fn(home)))
    result = recovery.repair(home, ledger)
    tagged = tag_published_runs.fn(home, sorted(ledger.published())) if home.mlflow_db.exists() else []
    for rid in result.completed:
        print(f"completed the interrupted publication of {rid}")
    for rid in result.rolled_back:
        print(f"rolled back the interrupted publication of {rid} (its spends stay counted)")
    for rid in tagged:
        print(f"tagged the MLflow run of {rid} as published")
    for p in result.removed:
        print(f"removed {p}")
    if not (result.completed or result.rolled_back or tagged or result.removed):
        print("nothing to repair")
    return 0


def _backup(args, home: Home) -> int:
    """No Prefect, no MLflow import: the ledger, the release directories and MLflow's store read directly."""
    from transit_release import recovery
    from transit_release.accounting.ledger import Ledger
    from transit_release.anchors import home_anchors

    if not home.ledger.is_file():
        raise ConfigError(f"{home.ledger}: no ledger to back up")
    record = recovery.backup_ledger(home, Ledger(home.ledger, read_only=True), Path(args.to), home_anchors(home))
    print(f"backed up {record['entries']} ledger entries (head: entry {record['head']['seq']}) and "
          f"{len(record['anchors'])} anchor(s) to {Path(args.to).resolve()}")
    print("to restore: stop every run, copy ledger.sqlite over the home's (removing its -wal and -shm files); the "
          "next charge refuses it if the home recorded anything after this backup")
    return 0


def _check_ledger_key(home: Home) -> None:
    """Before anything starts (Prefect, a flow, a read of the ledger): a configured key lies outside the home and
    the ledger's directory and is private (:func:`~transit_release.accounting.ledger.check_key_place`)."""
    from transit_release.accounting.ledger import check_key_place

    check_key_place(home.root, home.ledger)


def _serve(args, home: Home) -> int:
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


def _synth(args) -> int:
    from transit_release.synth.opal_week import write_synthetic_week

    paths = write_synthetic_week(args.out, scale=args.scale, seed=args.seed, fmt=args.format,
                                 show_progress=not args.quiet)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _synth_metro(args) -> int:
    import pandas as pd

    from transit_release.inputs.sequences import format_sequences
    from transit_release.synth.metro import synthesize_metro

    from transit_release.inputs.trajectories import write_trajectory_file
    from transit_release.mechanisms.diffpart import ItemSets
    from transit_release.synth.trajectories import metro_location_table, synthesize_metro_trajectories

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
    (out / "locations.txt").write_text("# the metro's stations: the public universe\n" + "\n".join(ids) + "\n",
                                       encoding="utf-8")
    # the same passengers' station sets, and a week of (other) passengers' trajectories with the stations' taxonomy
    sets = ItemSets.from_arrays(seqs.locations, seqs.offsets, metro.n_stations)
    set_counts: dict[tuple[int, ...], int] = {}
    for s in sets.to_lists():
        set_counts[s] = set_counts.get(s, 0) + 1
    lines = "".join((" ".join(ids[i] for i in s) + "\n") * c for s, c in sorted(set_counts.items()))
    (out / "sets.txt").write_text("# synthetic metro: the stations of each passenger, one a line\n" + lines,
                                  encoding="utf-8")
    trajs, _ = synthesize_metro_trajectories(args.passengers, seed=args.seed)
    write_trajectory_file(out / "trajectories.txt", [(t, 1) for t in trajs.to_lists()], ids,
                          header="synthetic metro week: station@hour of the week (0-167 from Monday 00:00), "
                                 "one passenger a line")
    metro_location_table(metro).to_csv(out / "stations.csv", index=False)
    for name in ("sequences.txt", "trajectories.txt", "sets.txt", "taxonomy.csv", "stations.csv", "locations.txt"):
        print(f"{name.split('.')[0]}: {out / name}")
    return 0


def _demo(args, home: Home) -> int:
    from transit_release.synth.opal_week import week_period, write_synthetic_week

    home.prepare()
    data = home.private / "demo-input"
    if not (data / "trips.csv").exists() or not (data / "stops.csv").exists():
        write_synthetic_week(data, scale=args.scale, seed=args.seed, show_progress=sys.stderr.isatty())
    args.period_start, args.period_end = week_period()  # the synthetic week's own, public period
    return _release(args, str(data / "trips.csv"), str(data / "stops.csv"), home)


def _dispatch(args, home: Home) -> int:
    _prepare_environment(home, args.verbose)
    _check_ledger_key(home)
    if args.command == "backup":
        return _backup(args, home)
    if args.command == "budget":
        return _budget(args, home)
    if args.command == "repair":
        return _repair(args, home)
    if args.command == "serve":
        return _serve(args, home)
    if args.command == "release":
        return _release(args, args.trips, args.stops, home)
    if args.command == "sequences":
        return _sequences(args, home)
    if args.command == "trajectories":
        return _trajectories(args, home)
    if args.command == "sets":
        return _sets(args, home)
    if args.command == "audit":
        return _audit(args, home)
    return _demo(args, home)


def _entries(home: Home) -> set[Path] | None:
    """The home's top-level entries before a command (``None``: the home did not exist)."""
    return set(home.root.iterdir()) if home.root.is_dir() else None


def _remove_what_a_refusal_created(home: Home, before: set[Path] | None) -> None:
    """A refused command leaves nothing behind: what it created at the top of the home (its folders, Prefect's
    database, the home itself if it was new) goes, except the quarantine (the custodian's record of the rows that
    were refused, kept for its retention), and unless something is on the ledger (this run's charge or a
    concurrent run's) or another run is working in the home."""
    from transit_release.accounting.ledger import Ledger

    if not home.root.is_dir():
        return
    try:
        if home.ledger.exists() and Ledger(home.ledger, key=b"", read_only=True).head().seq > 0:
            return
        if home.work.is_dir():  # (runs work there; recovery imports pandas, seconds on a busy machine)
            from transit_release.recovery import live_release_ids

            if live_release_ids(home):
                return  # another run works in this home now
    except (TransitReleaseError, OSError, ValueError):
        return
    keep_private = home.quarantine.is_dir() and any(p.is_file() for p in home.quarantine.rglob("*"))
    ours = {home.private, home.reports, home.releases, home.mlflow_db, home.mlflow_artifacts, home.prefect_home,
            home.root / ".mlflow.lock"}
    ledger_names = {home.ledger.name + suffix for suffix in ("", "-wal", "-shm", "-journal")}
    for p in set(home.root.iterdir()) - (before or set()):
        if p not in ours and not (p.parent == home.ledger.parent and p.name in ledger_names):
            continue  # only what this tool makes: a file someone else put there meanwhile stays
        if p == home.private and keep_private:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:  # an empty ledger, MLflow's store: made by this run before it was refused
            p.unlink(missing_ok=True)
    if before is None and not any(home.root.iterdir()):
        home.root.rmdir()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.umask(UMASK)
    state = ""  # what a run that stopped left (charged, published, interrupted publication)
    try:
        if args.command == "synth":
            return _synth(args)
        if args.command == "synth-metro":
            return _synth_metro(args)
        home = Home.at(args.home, getattr(args, "ledger", None)).check_usable()  # created only when a flow runs
        before, head, results = _entries(home), _ledger_head(home), _prefect_results(home)
        try:
            with _interruptible() if args.command != "serve" else nullcontext():  # serve: Prefect's own handling
                return _dispatch(args, home)
        except BaseException as exc:
            if not isinstance(exc, (TransitReleaseError, KeyboardInterrupt)) and _storage_failure(exc) is None:
                raise  # a bug: its traceback
            _remove_failure_records(home, results)
            _remove_what_a_refusal_created(home, before)
            state = _state_since(home, head)
            raise
    except TransitReleaseError as exc:
        if args.verbose:
            raise
        print(f"transit-release: error: {exc}" + (f" ({state})" if state else ""), file=sys.stderr)
        if isinstance(exc, LedgerIntegrityError):
            return EXIT_AUDIT_FAILED
        return EXIT_BUDGET if isinstance(exc, BudgetError) else EXIT_INPUT
    except KeyboardInterrupt:
        print("transit-release: interrupted: " + (state or "nothing was charged or published"), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException as exc:
        failure = _storage_failure(exc)
        if failure is None or args.verbose:
            raise
        print(f"transit-release: error: {failure}; " + (state or "nothing was charged or published"),
              file=sys.stderr)
        return EXIT_UNEXPECTED


# ---- failures and interruptions: stop in order, say what is left ------------------------------------------------

EXIT_INTERRUPTED = 130


@contextmanager
def _interruptible():
    """A terminal's Ctrl-C (SIGINT to the command's process group: the command's children are in groups of their
    own and do not get it) stops the command in order: the report-drawing processes at once, then, as the
    ``KeyboardInterrupt`` unwinds, the run's cleanup, the Dask workers, the flow's final state on Prefect's
    server and the server itself. Further Ctrl-Cs are ignored meanwhile, so that the stop is not cut short. A
    command started with SIGINT ignored (in the background by a shell) keeps it ignored."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return

    def stop(signum, frame):
        from transit_release.report_process import stop_drawing

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_drawing()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ledger_head(home: Home) -> int:
    """The ledger's head before the command (0 if there is none yet)."""
    from transit_release.accounting.ledger import Ledger

    try:
        return Ledger(home.ledger, key=b"", read_only=True).head().seq if home.ledger.exists() else 0
    except Exception:  # noqa: BLE001 — an unreadable ledger is the command's own to report
        return 0


def _state_since(home: Home, head: int) -> str:
    """What the ledger recorded since ``head`` of the releases this process charged (its charge, publication
    intent, publication; not a concurrent run's), and what ``repair`` does about it; empty if nothing."""
    budget = sys.modules.get("tasks.budget")  # imported by every release flow, which runs in this process
    ours = set(getattr(budget, "CHARGED_HERE", ()))
    if not ours or not home.ledger.exists():
        return ""
    from transit_release.accounting.ledger import Ledger
    from transit_release.recovery import pending_intents

    try:
        ledger = Ledger(home.ledger, key=b"", read_only=True)
        new = [e for e in ledger.entries() if e.seq > head and e.release_id in ours]
        pending = {i.release_id for i in pending_intents(ledger)}
    except Exception:  # noqa: BLE001 — the state is a courtesy; the audit says it in full
        return ""
    said = []
    for rid in dict.fromkeys(e.release_id for e in new):
        types = {e.entry_type for e in new if e.release_id == rid}
        spends = sum(e.entry_type == "spend" for e in new if e.release_id == rid)
        if "published" in types:
            said.append(f"release '{rid}' was published")
        elif rid in pending:
            said.append(f"the publication of release '{rid}' was interrupted: `transit-release repair` completes "
                        "it or rolls it back")
        elif spends:
            said.append(f"release '{rid}' was charged ({spends} spends, which stay counted) and not published; "
                        "`transit-release repair` removes what the run left; the same id cannot be charged again")
    return "; ".join(said)


def _storage_failure(exc: BaseException) -> BaseException | None:
    """The storage error behind ``exc`` (an OSError such as a full disk, or SQLite's "database or disk is full"
    under MLflow's or the ledger's exceptions), if any."""
    import sqlite3

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) or (isinstance(exc, sqlite3.OperationalError)
                                        and any(w in str(exc) for w in ("disk is full", "disk I/O error"))):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _prefect_results(home: Home) -> set[str]:
    """The files of Prefect's result storage under the home before the command."""
    storage = home.prefect_home / "storage"
    return {p.name for p in storage.iterdir()} if storage.is_dir() else set()


def _remove_failure_records(home: Home, before: set[str]) -> None:
    """The results Prefect stored for a run that failed, were refused or was interrupted: its engine persists a
    failed flow's exception (pickled, with its message: counts and row numbers) whatever the flow's
    ``persist_result``. The tool keeps no result there, so every file the command added goes."""
    storage = home.prefect_home / "storage"
    for p in (storage.iterdir() if storage.is_dir() else ()):
        if p.name not in before and p.is_file():
            p.unlink(missing_ok=True)


def run() -> None:
    """The ``transit-release`` command: :func:`main`, then a quick exit.

    Once the command has returned — its output printed, its files closed and committed — the interpreter's exit
    steps run in its order (non-daemon threads joined and Prefect's event and log queues drained, then the exit
    handlers: MLflow's, logging's) and the process ends without the
    interpreter's own teardown, which frees the modules of Prefect, MLflow, Great Expectations and pandas one
    object at a time: about 2 s after every release, for nothing. A command that raises ends the usual way."""
    import atexit
    import threading

    code = main()
    threading._shutdown()  # as the interpreter's exit: joins non-daemon threads, drains Prefect's event queues
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
