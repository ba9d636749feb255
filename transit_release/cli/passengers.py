"""The passenger-level release commands, ``sequences``, ``trajectories`` and ``sets``: their options, and
running their flows on a Prefect API (:mod:`~transit_release.cli.server`) once the checks of
:mod:`~transit_release.cli.checks` have passed. May touch what the flows touch (the home)."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from transit_release.cli import checks, server
from transit_release.cli.options import add_home, add_record_inputs, add_release_options, integer, number
from transit_release.cli.printing import print_summary, summary_exit
from transit_release.files.home import Home


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``sequences``, ``trajectories`` and ``sets``."""
    q = sub.add_parser("sequences", help="release passenger sequences (variable-length n-grams, recommended, or a "
                                         "noisy prefix tree)")
    add_record_inputs(q, "sequence", "sequences", "one sequence per line (location ids separated by spaces)", "period")
    q.add_argument("--taxonomy", help="CSV location,group (e.g. station,line): the hybrid tree's taxonomy; its "
                                      "locations are the universe unless --locations is given too")
    q.add_argument("--epsilon", type=number, required=True, help="ε of the release, per passenger's sequence")
    q.add_argument("--mechanism", choices=("prefix-tree", "ngram"),
                   help="ngram (the default; variable-length n-grams, Chen, Ács & Castelluccia, CCS 2012; also "
                        "publishes the noisy n-gram table): on the synthetic metro at ε = 1 its count-query error is "
                        "0.13-0.14x the prefix tree's and it finds 97 of the 100 most frequent runs of stations "
                        "against 82-91 (docs/sequences.md). prefix-tree (Chen et al., KDD 2012; needs --height) "
                        "keeps journeys from their first station; --height, --variant or --fanout without "
                        "--mechanism choose it, as when it was the default")
    q.add_argument("--height", type=integer, help="prefix tree: the longest sequence released (required for it)")
    q.add_argument("--lmax", type=integer, help="n-grams: locations kept per sequence, longer ones are cut (default 20)")
    q.add_argument("--nmax", type=integer, help="n-grams: the longest gram, end marker included (default 5)")
    q.add_argument("--period-start", required=True, help="first day the sequences cover, YYYY-MM-DD (public)")
    q.add_argument("--period-end", required=True, help="last day the sequences cover, YYYY-MM-DD")
    q.add_argument("--variant", choices=("simple", "hybrid"), help="prefix tree: the variant (default hybrid)")
    q.add_argument("--fanout", type=integer, help="build the taxonomy by grouping F locations of the universe per parent")
    add_release_options(q, "sequences-<mechanism>-<start>-<end>")

    t = sub.add_parser("trajectories", help="release passenger trajectories (station, hour of the week): the "
                                            "factored Markov model (the default), or SafePath's tree")
    add_record_inputs(t, "trajectory", "trajectories", "one trajectory per line: station@hour tokens, the hour of "
                       "the week 0-167 from Monday 00:00", "week")
    tax = t.add_mutually_exclusive_group()
    tax.add_argument("--location-taxonomy", help="CSV location,group[,line]: the location taxonomy (groups, and lines "
                                                 "above them); its locations are the universe unless --locations "
                                                 "(or --trips) gives it")
    tax.add_argument("--location-fanout", type=integer, help="build the location taxonomy with F locations of the "
                                                        "universe per node (default 2, the paper's)")
    t.add_argument("--location-taxonomy-height", type=integer, help="with a fan-out: levels of groups (default 6)")
    t.add_argument("--time-fanout", type=integer, help="blocks of F consecutive hours per node (default 2)")
    t.add_argument("--time-taxonomy-height", type=integer, help="levels of hour blocks (default 6)")
    t.add_argument("--mechanism", choices=("safepath", "markov"),
                   help="markov (the default: days, stations and hours of the day as three noisy models, "
                        "trajectories drawn from them) or safepath (the SafePath prefix tree): on a commuter week at "
                        "ε = 1 markov keeps the frequent points, ordered pairs and patterns the tree loses "
                        "(docs/trajectories.md). SafePath's own options (--budget, --thresholds, --location-fanout, "
                        "--location-taxonomy-height, --time-fanout, --time-taxonomy-height) without --mechanism "
                        "choose safepath, as when it was the default")
    t.add_argument("--budget", choices=("paper", "joint"),
                   help="SafePath's budget split: paper (over two taxonomies, SafePath's default) or joint (one test "
                        "of the (station, hour) pair per level; near noise-free at large ε)")
    t.add_argument("--nmax", type=integer, help="markov: the longest gram of its station and hour models (default 3)")
    t.add_argument("--thresholds", choices=("paper", "node"),
                   help="SafePath's paper budget: threshold rule (default paper)")
    t.add_argument("--epsilon", type=number, required=True, help="ε of the release, per passenger's trajectory")
    t.add_argument("--height", type=integer, help="longest released trajectory (taps; default 6)")
    t.add_argument("--period-start", required=True, help="the Monday of the week the trajectories cover, YYYY-MM-DD")
    t.add_argument("--period-end", required=True, help="the Sunday of that week, YYYY-MM-DD")
    add_release_options(t, "trajectories-<mechanism>-<start>-<end>")

    st = sub.add_parser("sets", help="release passengers' station sets (a noisy histogram of every set of a small "
                                     "universe, or DiffPart)")
    add_home(st)
    src = st.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help="one set per line (location ids separated by spaces; order and repeats "
                                    "ignored; %% or # starts a comment)")
    src.add_argument("--trips", help="tap data (CSV or Parquet, like `release`): one set per card over the period, "
                                    "its distinct tap-on and tap-off locations; needs --stops")
    st.add_argument("--locations", help="with --input: the public location universe, one location id per line")
    st.add_argument("--stops", help="with --trips: the stop table, whose locations (mode:location) are the universe")
    st.add_argument("--mode", choices=("bus", "ferry", "lightrail", "train"),
                    help="with --trips: keep the taps of this mode only (default: every mode of the stop table)")
    st.add_argument("--epsilon", type=number, required=True, help="ε of the release, per passenger's set")
    st.add_argument("--mechanism", choices=("histogram", "diffpart"),
                    help="histogram (every set of the public universe a noisy count, the rarer sets' passengers "
                         "kept in aggregate) or diffpart (DiffPart, Chen et al., VLDB 2011). Default: from the "
                         "public universe size and ε, histogram where 2^|I| <= 2^20·ε² (20 locations at ε = 1), diffpart otherwise; --fanout without "
                         "--mechanism keeps diffpart. On 989,818 heavy-tailed sets over 17 items at ε = 1 the "
                         "histogram's error on queries of 1-3 stations is 0.033 against DiffPart's 0.278, both "
                         "finding 98 of the 100 most frequent itemsets (docs/sets.md)")
    st.add_argument("--fanout", type=integer, help="DiffPart: locations per group of its taxonomy (default: from the "
                                              "universe size, round(log2 |I|) within 4..6; see docs/sets.md)")
    st.add_argument("--period-start", required=True, help="first day the sets cover, YYYY-MM-DD (public)")
    st.add_argument("--period-end", required=True, help="last day the sets cover, YYYY-MM-DD")
    add_release_options(st, "sets-<mechanism>-<start>-<end>", queries=50_000)


def _resolved(path: str | None) -> str | None:
    """An input path as the flow gets it: absolute (the flow runs with the home as its reference)."""
    return str(Path(path).resolve()) if path else None


def _publish(args, home: Home, check, flow_module: str, flow_name: str, **own) -> int:
    """Run the kind's flow with the parameters every passenger-level release takes and the kind's ``own``, once
    ``check(args, home)`` has passed (it runs while the command's Prefect server starts, and the flow's module is
    imported meanwhile); print its summary."""
    with server.prefect_api(home, args.verbose, preload=(flow_module,), checks=lambda: check(args, home)):
        flow = getattr(importlib.import_module(flow_module), flow_name)
        result = flow(
            input=_resolved(args.input), trips=_resolved(args.trips), stops=_resolved(args.stops), mode=args.mode,
            locations=_resolved(args.locations), epsilon=args.epsilon, period_start=args.period_start,
            period_end=args.period_end, home=str(home.root), release_id=args.release_id, policy=args.policy,
            ledger=args.ledger, quarantine_limit=args.quarantine_limit, queries=args.queries, dry_run=args.dry_run,
            population=args.population, **own)
    print_summary(result)
    checks.warn_if_publisher_unset(home)
    return summary_exit(result)


def sequences(args, home: Home) -> int:
    """Release passenger sequences (checked before Prefect starts)."""
    return _publish(args, home, checks.check_sequence_args, "flows.sequence_release", "sequence_release",
                    height=args.height, mechanism=args.mechanism, lmax=args.lmax, nmax=args.nmax, variant=args.variant,
                    taxonomy=_resolved(args.taxonomy), fanout=args.fanout)


def trajectories(args, home: Home) -> int:
    """Release passenger trajectories (checked before Prefect starts)."""
    return _publish(args, home, checks.check_trajectory_args, "flows.trajectory_release", "trajectory_release",
                    height=args.height, location_taxonomy=_resolved(args.location_taxonomy),
                    location_fanout=args.location_fanout, location_taxonomy_height=args.location_taxonomy_height,
                    time_fanout=args.time_fanout,
                    time_taxonomy_height=args.time_taxonomy_height, thresholds=args.thresholds,
                    mechanism=args.mechanism, budget=args.budget, nmax=args.nmax)


def sets(args, home: Home) -> int:
    """Release passengers' station sets (checked before Prefect starts)."""
    return _publish(args, home, checks.check_set_args, "flows.sets_release", "set_release", mechanism=args.mechanism,
                    fanout=args.fanout)
