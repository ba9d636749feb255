"""The synthetic-data commands, ``synth`` and ``synth-metro``: no home, no Prefect, no ledger; they write the files
of synthetic riders under ``--out`` only."""

from __future__ import annotations

import argparse
from pathlib import Path

from transit_release.cli.options import integer, number


def add_synth(sub: argparse._SubParsersAction) -> None:
    """``synth``."""
    s = sub.add_parser("synth", help="write a synthetic Opal-like week (trips.csv, stops.csv)")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--scale", type=number, default=1.0, help="1.0 ≈ 13.5 million trips (default 1.0)")
    s.add_argument("--seed", type=integer, default=0, help="seed of the synthetic data (not of any privacy noise)")
    s.add_argument("--format", choices=("csv", "parquet"), default="csv", help="file format of the week (default csv)")
    s.add_argument("--week-start", type=monday, metavar="DATE",
                   help="the Monday the week starts on (default 2016-08-08, the calibration week): e.g. 2016-08-15 "
                        "for the next week, whose period is then 2016-08-15..2016-08-21")
    s.add_argument("--quiet", action="store_true", help="no progress bar")


def add_synth_metro(sub: argparse._SubParsersAction) -> None:
    """``synth-metro``."""
    m = sub.add_parser("synth-metro", help="write a synthetic Montréal-shaped metro: sequences, a week of trajectories, "
                                           "station sets, taxonomies and the station list")
    m.add_argument("--out", required=True, help="output directory (sequences.txt, trajectories.txt, sets.txt, "
                                                "taxonomy.csv, stations.csv, locations.txt)")
    m.add_argument("--passengers", type=integer, default=850_000, help="passengers of each file (default 850,000)")
    m.add_argument("--seed", type=integer, default=0, help="seed of the synthetic data (not of any privacy noise)")


def monday(text: str):
    """An ISO date that is a Monday (an argparse type)."""
    from datetime import date

    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD; got {text!r}") from None
    if day.weekday() != 0:
        raise argparse.ArgumentTypeError(f"{day.isoformat()} is a {day:%A}: a week starts on a Monday")
    return day


def synth(args) -> int:
    """A synthetic Opal-like week."""
    from datetime import date, timedelta

    from transit_release.synth.opal_week import week_period, write_synthetic_week

    paths = write_synthetic_week(args.out, scale=args.scale, seed=args.seed, fmt=args.format,
                                 show_progress=not args.quiet, week_start=args.week_start)
    for name, path in paths.items():
        print(f"{name}: {path}")
    start = args.week_start or date.fromisoformat(week_period()[0])
    end = start + timedelta(days=6)
    print(f"period: {start.isoformat()} .. {end.isoformat()} (release it with --period-start {start.isoformat()} "
          f"--period-end {end.isoformat()})")
    return 0


def synth_metro(args) -> int:
    """A synthetic metro's files (sequences, a week of trajectories, station sets, taxonomies, stations)."""
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
