"""How fast the command answers when it needs no Prefect (not a test).

    python benchmarks/bench_cli_latency.py [--work DIR] [--weeks 30] [--repeat 3]

Times, from the command's start to its exit (a subprocess, as a custodian runs it):

1. refusals made before Prefect's server starts: a trips file whose header is wrong (a 1.5-million-row file,
   so the time shows the header check does not read the file), a missing release period, an ε the samplers
   cannot honour, a missing stop table, a stop table of the largest size read (``MAX_STOP_ROWS`` rows) whose last
   row has an unknown mode (the whole table is checked), and one of 2 million rows (refused by its size);
2. ``transit-release budget`` (and ``--json``) on a ledger of about 10,000 entries: ``--weeks`` trip-level
   weekly Opal releases and as many card-level ones (168 spends each: 4 modes × 7 days × 6 marginals), so the
   card cap's privacy-loss-distribution figure composes ``--weeks`` releases.

Prints one line per case (best and median of ``--repeat`` runs) and writes ``<work>/cli_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transit_release.accounting.ledger import Ledger  # noqa: E402
from transit_release.config import load_release_config  # noqa: E402
from transit_release.inputs.screening import Period  # noqa: E402
from transit_release.releases import opal  # noqa: E402

EXE = [sys.executable, "-m", "transit_release.cli"]
HEADER = "card_id,mode,tap_on_time,tap_on_stop,tap_off_time,tap_off_stop\n"
ROW = "1234567,bus,2016-08-08 07:15:00,2000,2016-08-08 07:40:00,2010\n"
STOPS = "stop_id,mode,name,postcode\n2000,bus,A,2000\n2010,bus,B,2010\n"


def big_stop_table(path: Path, rows: int) -> Path:
    """``rows`` bus stops with distinct names, the last of an unknown mode."""
    with open(path, "w") as fh:
        fh.write("stop_id,mode,name,postcode\n")
        fh.writelines(f"{i},bus,Stop {i} Road,{2000 + i % 1000}\n" for i in range(rows - 1))
        fh.write(f"{rows - 1},zeppelin,Last Stop,2999\n")
    return path


def make_inputs(work: Path, rows: int) -> dict[str, Path]:
    from transit_release.cli.preflight import MAX_STOP_ROWS

    good = work / "trips.csv"
    bad = work / "trips-bad-header.csv"
    stops = work / "stops.csv"
    stops.write_text(STOPS)
    big_stop_table(work / "stops-at-cap.csv", MAX_STOP_ROWS)
    big_stop_table(work / "stops-2m.csv", 2_000_000)
    body = ROW * rows
    good.write_text(HEADER + body)
    bad.write_text(HEADER.replace("tap_off_stop", "tap_off_stp") + body)
    return {"good": good, "bad": bad, "stops": stops, "stops_at_cap": work / "stops-at-cap.csv",
            "stops_2m": work / "stops-2m.csv"}


def make_ledger(home: Path, weeks: int) -> int:
    """``weeks`` trip-level and ``weeks`` card-level weekly releases, charged as the flows charge them."""
    home.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(home / "ledger.sqlite")
    first = date(2024, 1, 1)  # a Monday
    n = 0
    for unit, offset in (("trip", 0), ("card", weeks)):
        cfg = load_release_config(unit=unit)
        for w in range(weeks):
            start = first + timedelta(weeks=offset + w)
            period = Period(start, start + timedelta(days=6))
            rid = f"opal-{unit}-{start:%Y%m%d}"
            events = opal.plan_spends(period, cfg, rid, "f" * 64, "bench")
            ledger.charge(events)
            n += len(events)
    return n


def timed(args: list[str], expect: int, repeat: int, env: dict) -> dict:
    times, last = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        last = subprocess.run(EXE + args, capture_output=True, text=True, env=env, cwd=ROOT)
        times.append(time.perf_counter() - t)
        if last.returncode != expect:
            raise SystemExit(f"{args[0]}: exit {last.returncode}, expected {expect}:\n{last.stderr[-2000:]}")
    return {"best_s": round(min(times), 3), "median_s": round(statistics.median(times), 3),
            "exit": last.returncode, "message": (last.stderr.strip().splitlines() or [""])[-1][:160]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--weeks", type=int, default=30)
    ap.add_argument("--rows", type=int, default=1_500_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-cli-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)

    inputs = make_inputs(work, args.rows)
    home = work / "home"
    week = ["--period-start", "2016-08-08", "--period-end", "2016-08-14"]
    base = ["release", "--stops", str(inputs["stops"]), "--home", str(work / "refusals")]
    t = time.perf_counter()
    entries = make_ledger(home, args.weeks)
    built = time.perf_counter() - t
    cases = {
        "bad header": (base + ["--trips", str(inputs["bad"])] + week, 2),
        "no release period": (base + ["--trips", str(inputs["good"])], 2),
        "ε the samplers cannot honour": (base + ["--trips", str(inputs["good"]), "--epsilons",
                                                 "1e-5,1,1,1,2,2"] + week, 2),
        "missing stop table": (["release", "--trips", str(inputs["good"]), "--stops", str(work / "nope.csv"),
                                "--home", str(work / "refusals")] + week, 2),
        "stop table at the row cap, bad last row": (["release", "--trips", str(inputs["good"]), "--stops",
                                                     str(inputs["stops_at_cap"]), "--home", str(work / "refusals")]
                                                    + week, 2),
        "stop table of 2,000,000 rows": (["release", "--trips", str(inputs["good"]), "--stops",
                                          str(inputs["stops_2m"]), "--home", str(work / "refusals")] + week, 2),
        f"budget, {entries:,}-entry ledger": (["budget", "--home", str(home)], 0),
        f"budget --json, {entries:,}-entry ledger": (["budget", "--home", str(home), "--json"], 0),
    }
    size_mib = inputs["bad"].stat().st_size / 2**20
    print(f"trips files: {args.rows:,} rows ({size_mib:.0f} MiB); ledger: {entries:,} entries built in {built:.1f} s")
    results = {"rows": args.rows, "file_mib": round(size_mib, 1), "ledger_entries": entries}
    for name, (cli_args, expect) in cases.items():
        r = timed(cli_args, expect, args.repeat, env)
        results[name] = r
        print(f"{name:<42} best {r['best_s']:6.2f} s  median {r['median_s']:6.2f} s  exit {r['exit']}  "
              f"{r['message'][:90]}")
    (work / "cli_latency.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    print(f"results: {work / 'cli_latency.json'}")


if __name__ == "__main__":
    main()
