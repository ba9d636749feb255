"""Bounded memory (issue 18): the full-size week and a four-week month, end to end, side by side with an earlier
commit, with the peak memory of every process (not a test).

    python benchmarks/bench_streaming.py --baseline 2de8baf [--work DIR] [--units trip,card] [--month]
    python benchmarks/bench_streaming.py --workers 0,2

For each run, ``transit-release release`` as a subprocess (Prefect's temporary server, the local Dask cluster of
2 workers, MLflow, report: everything), as the custodian runs it: the wall time, the peak resident memory
(``VmHWM``, sampled from ``/proc``) of every process — the flow, each Dask worker, Prefect's server — and the
durations of the flow's main steps from Prefect's own database. ``--baseline REF`` runs the same week with the
code of ``REF`` (a git worktree of it, the same virtual environment), one after the other in this run.
``--workers 0,2`` runs the current code once per number of local workers (0: no cluster, in the flow's
process; the baseline runs with its default; the month with the last of them). ``--month`` adds the synthetic month (the week repeated four times, about 54 M trips) with the current code,
and a per-row cost model: seconds and the largest process's memory per million trips, and a year extrapolated.
``--long-lived-server`` runs every release against one Prefect server the benchmark starts first and
keeps (as a scheduled deployment runs: ``serve`` or a Prefect server the agency runs), instead of the
temporary server each command otherwise starts and stops.
Writes ``<work>/results.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_opal_release import watch_peaks  # noqa: E402

STEPS = ("stream-trips", "validate-trips-file", "screen-trips", "check-raw-quality", "encode-trips",
         "write-partitions", "bound-contributions", "bound-partitions-per-card", "check-release-tables",
         "write-report", "track-in-mlflow", "check-mlflow-store")
SUBFLOWS = ("prepare-partitions", "sanitize-partitions")


def _timeline(prefect_db: Path, since: str = "") -> dict:
    """The main flow's and its subflows' durations, and the named steps' (seconds, from Prefect's database; runs
    that started after ``since`` only, for a server that outlives the release)."""
    def seconds(expr: str) -> str:
        return f"(julianday({expr}) - julianday('1970-01-01')) * 86400"

    out = {}
    with sqlite3.connect(prefect_db) as db:
        for name, total in db.execute(f"SELECT f.name, {seconds('r.total_run_time')} FROM flow_run r "
                                      "JOIN flow f ON f.id = r.flow_id WHERE r.start_time > ?", (since,)):
            out[f"flow:{name}"] = round(total, 2)
        for name, total in db.execute(f"SELECT name, {seconds('total_run_time')} FROM task_run "
                                      "WHERE start_time > ?", (since,)):
            base = name.rsplit("-", 1)[0]
            if base in STEPS or base in ("prepare-chunk", "sanitize-chunk"):
                key = f"task:{base}" + ("(sum)" if base in ("prepare-chunk", "sanitize-chunk") else "")
                out[key] = round(out.get(key, 0.0) + total, 2)
    return out


def release(label: str, src: Path, trips: Path, stops: Path, period: tuple[str, str], home: Path,
            unit: str, workers: int | None = None, server: tuple[str, Path] | None = None) -> dict:
    """One ``transit-release release`` with the code at ``src``: wall time, per-process peaks, steps."""
    shutil.rmtree(home, ignore_errors=True)
    # the command as ``python -m`` (the module's own entry point: an older commit has no ``cli.run``)
    cmd = [sys.executable, "-m", "transit_release.cli", "release", "--trips", str(trips), "--stops", str(stops),
           "--home", str(home), "--release-id", f"bench-{label}-{unit}", "--unit", unit, "--period-start", period[0],
           "--period-end", period[1], *(["--workers", str(workers)] if workers is not None else [])]
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "WARNING", "PYTHONPATH": str(src),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    since = ""
    if server:  # the long-lived server: its API for the command, its database for the steps
        env["PREFECT_API_URL"] = server[0]
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    home.parent.mkdir(parents=True, exist_ok=True)
    log = home.parent / f"{label}-{unit}.log"
    t = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=src)
        # the peaks are sampled in a thread; the wall time ends when the command does (the sampler sleeps
        # 0.2 s between scans: waited for in this thread, it added up to 0.2 s)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            watching = pool.submit(watch_peaks, proc)
            proc.wait()
            wall = time.perf_counter() - t
            peaks = watching.result()
    if proc.returncode != 0:
        raise SystemExit(f"{label} ({unit}) failed; see {log}")
    by_role: dict[str, list[float]] = {}
    for role, kib in peaks.values():
        by_role.setdefault(role, []).append(round(kib / 2**20, 2))
    result = {"code": label, "unit": unit, "workers": workers, "wall_s": round(wall, 1),
              "prefect_server": "long-lived" if server else "temporary (started and stopped by the command)",
              "peak_rss_gib": {r: sorted(v, reverse=True) for r, v in sorted(by_role.items())},
              "largest_process_gib": max(max(v) for v in by_role.values()),
              "steps_s": _timeline(server[1] if server else home / ".prefect" / "prefect.db", since)}
    print(json.dumps(result), flush=True)
    shutil.rmtree(home, ignore_errors=True)  # the next run starts from a fresh home, as this one did
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--baseline", default=None, help="a git commit to run side by side (e.g. the previous one)")
    ap.add_argument("--units", default="trip")
    ap.add_argument("--month", action="store_true", help="also the four-week month with the current code")
    ap.add_argument("--workers", default=None,
                    help="numbers of local workers for the current code, e.g. 0,2 (default: the command's default)")
    ap.add_argument("--long-lived-server", action="store_true",
                    help="run every release against one Prefect server started first (as a deployment does)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    work.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        server = None
        if args.long_lived_server:
            from flows.deployments import local_server

            shutil.rmtree(work / "server", ignore_errors=True)
            url = stack.enter_context(local_server(work / "server"))
            server = (url, work / "server" / "prefect.db")
        _runs(args, work, server)


def _runs(args, work: Path, server) -> None:
    from transit_release.synth.opal_week import week_period, weeks_period, write_synthetic_week, write_synthetic_weeks

    week = work / "week"
    if not (week / "trips.csv").exists():
        write_synthetic_week(week, scale=1.0, seed=0, show_progress=False)
    counts = [int(w) for w in args.workers.split(",")] if args.workers else [None]
    codes = [("current" if w is None else f"current-w{w}", ROOT, w) for w in counts]
    if args.baseline:
        src = work / f"baseline-{args.baseline}"
        if not src.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(src), args.baseline],
                           check=True, capture_output=True)
        codes.insert(0, (f"baseline-{args.baseline}", src, None))
    results: dict = {"cores": os.cpu_count(), "week_trips_csv_mib": round((week / "trips.csv").stat().st_size / 2**20),
                     "runs": []}
    for unit in args.units.split(","):
        for label, src, workers in codes:
            results["runs"].append(release(label, src, week / "trips.csv", week / "stops.csv", week_period(),
                                           work / "homes" / f"{label}-{unit}", unit, workers, server))
    if args.month:
        month = work / "month"
        if not (month / "trips.csv").exists():
            write_synthetic_weeks(month, 4)
        results["month_trips_csv_mib"] = round((month / "trips.csv").stat().st_size / 2**20)
        for unit in args.units.split(","):
            label, _, workers = codes[-1]
            run = release(f"{label}-month", ROOT, month / "trips.csv", month / "stops.csv", weeks_period(4),
                          work / "homes" / f"month-{unit}", unit, workers, server)
            results["runs"].append(run)
            wk = next(r for r in results["runs"] if r["code"] == label and r["unit"] == unit)
            results[f"month_over_week_{unit}"] = round(run["wall_s"] / wk["wall_s"], 2)
            # a per-row cost model from the two sizes (13.5 M and 54 M trips): fixed + per million trips
            per_m = (run["wall_s"] - wk["wall_s"]) / (3 * 13.5)
            fixed = wk["wall_s"] - 13.5 * per_m
            results[f"cost_model_{unit}"] = {
                "fixed_s": round(fixed, 1), "per_million_trips_s": round(per_m, 2),
                "year_52_weeks_s_estimate": round(fixed + 52 * 13.5 * per_m),
                "largest_process_gib_week_month": [wk["largest_process_gib"], run["largest_process_gib"]]}
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
