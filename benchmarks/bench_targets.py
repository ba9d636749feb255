"""Every target of issue 41, measured in one run, as a custodian runs the commands (not a test).

    python benchmarks/bench_targets.py [--work DIR] [--repeat 5] [--skip full,kinds] [--baseline-python PY --baseline-src DIR]

Each case runs ``transit-release`` as a subprocess (``python -m transit_release.cli``, the code of this checkout
unless ``--src``), ``--repeat`` times, and prints the median wall time, the median CPU (user + system of the
command and every process it waited for: Prefect's server, the figures' process, Dask workers) and the load
average when the case started. With ``--baseline-python`` and ``--baseline-src`` (another checkout and its
virtual environment, e.g. main's) each run of a case is followed by the same run with that code, so that both
see the same load, and the ratio is printed too.

The cases (the issue's targets, on a quiet 2-core machine):

- ``tiny-new``: the README's tiny week (``synth --scale 0.002``, about 27,000 trips) released in a new home
  (target ≤ 8 s); ``tiny-again``: another week released in a home that has released before (≤ 6 s);
- before the flow (≤ 3 s each): the same release again (already published), an id taken by other input, a
  declared period the data do not fit, a header the contract refuses, a missing stop table, a budget the policy
  refuses; ``first-line``: the first byte on a terminal (a pseudo-terminal; ≤ 1 s) and the longest silence on it
  during the tiny release (a progress line for any step longer than 2 s);
- ``files``: the home's internal files (everything but ``releases/``) after the tiny release in a new home, and
  what another week adds (≤ 5 MiB);
- ``full``: the full-size card-level week (13.5 M trips) against a bare pyarrow read of the same CSV in the same
  run (≤ 6×, stretch 4×), with the largest process's peak resident memory (≤ 1.5 GiB);
- ``kinds``: each passenger kind at 1 M records (sequences by prefix tree and n-grams, trajectories by SafePath and
  Markov, sets; ≤ 30 s each, evaluation included) and the longest gap between two of its tasks (≤ 0.5 s), from
  Prefect's own database.

Prints a table of the targets at the end and writes ``<work>/targets.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import resource
import select
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_opal_release import watch_peaks  # noqa: E402

WEEK = ("2016-08-08", "2016-08-14")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


#: The steps of a tiny release the per-step table shows (Prefect's task names; the ``-chunk`` tasks summed).
STEPS = ("stream-trips", "prepare-chunk", "check-raw-quality", "plan-spends", "precheck-budget",
         "check-mlflow-store", "charge-budget", "anchor-ledger-head", "sanitize-chunk", "draw-report-figures",
         "check-release-tables", "stage-release", "write-report", "track-in-mlflow", "commit-release",
         "update-release-index", "update-catalog")


def steps_of(home: Path, started: float, ended: float) -> dict[str, float]:
    """Seconds of a release's phases: before its flow started (the command's checks, imports and Prefect's server),
    the flow, after it (the server's stop, the exit); and the named steps (Prefect's own records)."""
    from datetime import datetime

    def t(x: str) -> float:
        return datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp()

    out: dict[str, float] = {}
    with sqlite3.connect(home / ".prefect" / "prefect.db") as db:
        root = db.execute("SELECT start_time, end_time FROM flow_run WHERE parent_task_run_id IS NULL "
                          "ORDER BY start_time DESC LIMIT 1").fetchone()
        if root is None or root[1] is None:
            return out
        out["before the flow"] = t(root[0]) - started
        out["the flow"] = t(root[1]) - t(root[0])
        out["after the flow"] = ended - t(root[1])
        for name, start, end in db.execute("SELECT name, start_time, end_time FROM task_run WHERE end_time IS NOT "
                                           "NULL AND start_time IS NOT NULL"):
            base = name.rsplit("-", 1)[0]
            if base in STEPS:
                out[base] = out.get(base, 0.0) + t(end) - t(start)
    return out


def run(python: str, src: Path, args: list[str], expect: int | None = 0, env: dict | None = None,
        peaks: bool = False) -> dict:
    """``python -m transit_release.cli ARGS`` from ``src``: wall seconds, CPU seconds of it and its children,
    exit code (checked against ``expect``), and with ``peaks`` the largest process's peak memory."""
    env = {**os.environ, "PYTHONPATH": str(src), **(env or {})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start, started_at = time.perf_counter(), time.time()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([python, "-m", "transit_release.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=src)
        seen = watch_peaks(proc) if peaks else {}
        proc.wait()
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if expect is not None and proc.returncode != expect:
        raise SystemExit(f"{' '.join(args[:1])}: exit {proc.returncode}, expected {expect}:\n{text[-3000:]}")
    result = {"wall_s": wall, "cpu_s": cpu, "exit": proc.returncode, "output": text,
              "started_at": started_at, "ended_at": started_at + wall}
    if peaks:
        result["peak_gib"] = max((kib for _, kib in seen.values()), default=0) / 2**20
    return result


def median_case(name: str, target: str, runs: list[dict], base: list[dict] | None, started: str) -> dict:
    out = {"case": name, "target": target, "load": started, "runs": len(runs),
           "wall_s": statistics.median(r["wall_s"] for r in runs), "cpu_s": statistics.median(r["cpu_s"] for r in runs),
           "wall_min_max": [min(r["wall_s"] for r in runs), max(r["wall_s"] for r in runs)]}
    if base:
        out["baseline_wall_s"] = statistics.median(r["wall_s"] for r in base)
        out["baseline_cpu_s"] = statistics.median(r["cpu_s"] for r in base)
        out["ratio"] = statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(runs, base))
    print(json.dumps(out), flush=True)
    return out


def release_args(trips: Path, stops: Path, home: Path, period=WEEK, *more: str) -> list[str]:
    return ["release", "--trips", str(trips), "--stops", str(stops), "--period-start", period[0],
            "--period-end", period[1], "--home", str(home), *more]


# ---- inputs -----------------------------------------------------------------------------------------------------

def tiny_weeks(work: Path, weeks: int) -> list[dict]:
    """The README's tiny week (scale 0.002) and ``weeks - 1`` later weeks (the same trips, dates moved by 7, 14, …
    days): each its own trips file, for releases of new periods in one home."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from transit_release.synth.opal_week import synthesize_week

    week = synthesize_week(scale=0.002, seed=0)
    out = []
    for w in range(weeks):
        d = work / "inputs" / f"week{w}"
        d.mkdir(parents=True, exist_ok=True)
        pacsv.write_csv(pa.Table.from_pandas(week.stops, preserve_index=False), d / "stops.csv")
        shifted = week.trips.assign(**{c: (week.trips[c] + pd.Timedelta(days=7 * w)).astype("datetime64[s]")
                                       for c in ("tap_on_time", "tap_off_time")})
        pacsv.write_csv(pa.Table.from_pandas(shifted, preserve_index=False), d / "trips.csv")
        first = pd.Timestamp(WEEK[0]) + pd.Timedelta(days=7 * w)
        out.append({"trips": d / "trips.csv", "stops": d / "stops.csv",
                    "period": (f"{first:%Y-%m-%d}", f"{first + pd.Timedelta(days=6):%Y-%m-%d}")})
    return out


def tree_bytes(root: Path, skip: tuple[str, ...] = ()) -> int:
    return sum(p.stat().st_size for p in root.rglob("*")
               if p.is_file() and not any(part in skip for part in p.relative_to(root).parts))


# ---- the cases ------------------------------------------------------------------------------------------------

class Runner:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.current = (sys.executable, Path(args.src).resolve())
        self.baseline = (args.baseline_python, Path(args.baseline_src).resolve()) if args.baseline_python else None
        self.results: list[dict] = []

    def paired(self, name: str, target: str, make, n: int | None = None) -> dict:
        """``make(code, label, i)`` returns one run's result; the case's median (and the baseline's, interleaved)."""
        started, runs, base = load(), [], []
        for i in range(n or self.args.repeat):
            runs.append(make(self.current, "now", i))
            if self.baseline:
                base.append(make(self.baseline, "base", i))
        case = median_case(name, target, runs, base, started)
        self.results.append(case)
        return case

    def tiny(self, weeks: list[dict]) -> None:
        w0 = weeks[0]

        steps: dict[str, list[dict]] = {"now": [], "base": []}

        def new_home(code, label, i):
            home = self.work / "homes" / f"new-{label}-{i}"
            shutil.rmtree(home, ignore_errors=True)
            r = run(*code, release_args(w0["trips"], w0["stops"], home))
            steps[label].append(steps_of(home, r["started_at"], r["ended_at"]))
            return r

        self.paired("tiny-new", "tiny week, new home ≤ 8 s", new_home)
        self.steps = steps

        homes = {}

        def again(code, label, i):  # week i+1 in a home that published week 0 (set up untimed, once per code)
            home = self.work / "homes" / f"again-{label}"
            if label not in homes:
                shutil.rmtree(home, ignore_errors=True)
                run(*code, release_args(w0["trips"], w0["stops"], home))
                homes[label] = home
            w = weeks[1 + i]
            return run(*code, release_args(w["trips"], w["stops"], home, w["period"]))

        self.paired("tiny-again", "tiny week, a home that released before ≤ 6 s", again)

        published = self.work / "homes" / "again-now"
        base_home = self.work / "homes" / "again-base"

        def home_of(label):
            return published if label == "now" else base_home

        before = "before the flow ≤ 3 s"
        self.paired("already-published", before,
                    lambda code, label, i: run(*code, release_args(w0["trips"], w0["stops"], home_of(label))))
        self.paired("id-taken", before, lambda code, label, i: run(*code, release_args(
            weeks[1]["trips"], weeks[1]["stops"], home_of(label), weeks[1]["period"], "--release-id",
            "opal-card-20160808-20160814"), expect=2))
        self.paired("period-not-in-data", before, lambda code, label, i: run(*code, release_args(
            w0["trips"], w0["stops"], self.work / "homes" / f"period-{label}-{i}", ("2016-09-05", "2016-09-11")),
            expect=2))
        bad = self.work / "inputs" / "bad-header.csv"
        if not bad.exists():
            text = w0["trips"].read_text()
            bad.write_text(text.replace("tap_off_stop", "tap_off_stp", 1))
        self.paired("bad-header", before, lambda code, label, i: run(*code, release_args(
            bad, w0["stops"], self.work / "homes" / f"bad-{label}-{i}"), expect=2))
        self.paired("missing-stops", before, lambda code, label, i: run(*code, release_args(
            w0["trips"], self.work / "inputs" / "no-such-stops.csv", self.work / "homes" / f"nostops-{label}-{i}"),
            expect=2))
        self.paired("budget-refused", before, lambda code, label, i: run(*code, release_args(
            w0["trips"], w0["stops"], self.work / "homes" / f"budget-{label}-{i}", WEEK, "--epsilons",
            "20,20,20,20,20,20"), expect=3))

    def terminal(self, weeks: list[dict]) -> None:
        """The tiny release on a pseudo-terminal: the first byte's time and the longest silence."""
        w0 = weeks[0]
        firsts, silences, walls = [], [], []
        started = load()
        for i in range(self.args.repeat):
            home = self.work / "homes" / f"tty-{i}"
            shutil.rmtree(home, ignore_errors=True)
            python, src = self.current
            leader, follower = pty.openpty()
            start = time.perf_counter()
            proc = subprocess.Popen([python, "-m", "transit_release.cli", *release_args(w0["trips"], w0["stops"],
                                                                                     home)],
                                    stdin=follower, stdout=follower, stderr=follower, cwd=src,
                                    env={**os.environ, "PYTHONPATH": str(src), "COLUMNS": "100"})
            os.close(follower)
            times = []
            while True:
                ready, _, _ = select.select([leader], [], [], 0.05)
                if ready:
                    try:
                        if not os.read(leader, 65536):
                            break
                    except OSError:
                        break
                    times.append(time.perf_counter() - start)
                elif proc.poll() is not None:
                    break
            proc.wait()
            end = time.perf_counter() - start
            os.close(leader)
            if proc.returncode != 0:
                raise SystemExit("the release on a terminal failed")
            firsts.append(times[0] if times else end)
            marks = [0.0, *times, end]
            silences.append(max(b - a for a, b in zip(marks, marks[1:])))
            walls.append(end)
        case = {"case": "first-line", "target": "first line ≤ 1 s; no silence > 2 s", "load": started,
                "first_line_s": statistics.median(firsts), "longest_silence_s": statistics.median(silences),
                "wall_s": statistics.median(walls), "runs": len(walls)}
        print(json.dumps(case), flush=True)
        self.results.append(case)

    def files(self, weeks: list[dict]) -> None:
        home = self.work / "homes" / "files"
        shutil.rmtree(home, ignore_errors=True)
        python, src = self.current
        run(python, src, release_args(weeks[0]["trips"], weeks[0]["stops"], home))
        first = tree_bytes(home, skip=("releases",))
        run(python, src, release_args(weeks[1]["trips"], weeks[1]["stops"], home, weeks[1]["period"]))
        second = tree_bytes(home, skip=("releases",))
        parts = {p.name: tree_bytes(p) if p.is_dir() else p.stat().st_size for p in home.iterdir()
                 if p.name != "releases"}
        case = {"case": "files", "target": "internal files per tiny release ≤ 5 MiB", "load": load(),
                "new_home_mib": first / 2**20, "next_release_mib": (second - first) / 2**20,
                "parts_mib": {k: round(v / 2**20, 2) for k, v in sorted(parts.items())}}
        print(json.dumps(case), flush=True)
        self.results.append(case)

    def full(self) -> None:
        """The full-size card-level week against a bare pyarrow read of its CSV, in turns."""
        import pyarrow.csv as pacsv

        from transit_release.synth.opal_week import write_synthetic_week

        data = self.work / "inputs" / "full"
        if not (data / "trips.csv").exists():
            write_synthetic_week(data, scale=1.0, seed=0, show_progress=False)
        reads, releases = [], []
        started = load()
        for i in range(self.args.full_repeat):
            t = time.perf_counter()
            pacsv.read_csv(data / "trips.csv")
            reads.append(time.perf_counter() - t)
            home = self.work / "homes" / f"full-{i}"
            shutil.rmtree(home, ignore_errors=True)
            releases.append(run(*self.current, release_args(data / "trips.csv", data / "stops.csv", home),
                                peaks=True))
            shutil.rmtree(home, ignore_errors=True)
        read, wall = statistics.median(reads), statistics.median(r["wall_s"] for r in releases)
        case = {"case": "full", "target": "full card-level week ≤ 6× the bare read (stretch 4×); peak ≤ 1.5 GiB",
                "load": started, "bare_read_s": read, "wall_s": wall, "ratio": wall / read,
                "cpu_s": statistics.median(r["cpu_s"] for r in releases),
                "peak_gib": max(r["peak_gib"] for r in releases), "runs": len(releases)}
        print(json.dumps(case), flush=True)
        self.results.append(case)

    def kinds(self) -> None:
        """Each passenger kind at 1 M records: wall time and the longest gap between two of its tasks."""
        metro = self.work / "inputs" / "metro-1m"
        python, src = self.current
        if not (metro / "sets.txt").exists():
            run(python, src, ["synth-metro", "--out", str(metro), "--passengers", str(self.args.records)])
        cases = {
            "sequences-prefix-tree": ["sequences", "--input", str(metro / "sequences.txt"), "--taxonomy",
                                      str(metro / "taxonomy.csv"), "--mechanism", "prefix-tree", "--height", "8"],
            "sequences-ngram": ["sequences", "--input", str(metro / "sequences.txt"), "--locations",
                                str(metro / "locations.txt"), "--mechanism", "ngram"],
            "trajectories-safepath": ["trajectories", "--input", str(metro / "trajectories.txt"), "--locations",
                                      str(metro / "locations.txt"), "--height", "6", "--mechanism", "safepath"],
            "trajectories-markov": ["trajectories", "--input", str(metro / "trajectories.txt"), "--locations",
                                    str(metro / "locations.txt"), "--height", "6", "--mechanism", "markov"],
            "sets": ["sets", "--input", str(metro / "sets.txt"), "--locations", str(metro / "locations.txt")],
        }
        period = ["--period-start", "2016-08-08", "--period-end", "2016-08-14", "--epsilon", "1"]
        for name, args in cases.items():
            started, walls, gaps = load(), [], []
            for i in range(self.args.kinds_repeat):
                home = self.work / "homes" / f"{name}-{i}"
                shutil.rmtree(home, ignore_errors=True)
                r = run(python, src, [*args, *period, "--home", str(home)])
                walls.append(r)
                gaps.append(task_gaps(home / ".prefect" / "prefect.db"))
                shutil.rmtree(home, ignore_errors=True)
            case = {"case": f"kind:{name}", "target": "1 M records ≤ 30 s; gap between tasks ≤ 0.5 s",
                    "load": started, "wall_s": statistics.median(r["wall_s"] for r in walls),
                    "cpu_s": statistics.median(r["cpu_s"] for r in walls),
                    "longest_gap_s": max(g[0] for g in gaps), "longest_gap_between": max(gaps)[1],
                    "runs": len(walls)}
            print(json.dumps(case), flush=True)
            self.results.append(case)


def task_gaps(prefect_db: Path) -> tuple[float, str]:
    """The longest time between the end of a task run (or flow start) and the start of the next one, in the
    command's main flow run (its own tasks, in order), and the two tasks around it."""
    with sqlite3.connect(prefect_db) as db:
        flows = db.execute("SELECT id, start_time, end_time FROM flow_run WHERE parent_task_run_id IS NULL "
                           "ORDER BY start_time DESC LIMIT 1").fetchall()
        if not flows:
            return 0.0, ""
        flow_id, flow_start, flow_end = flows[0]
        tasks = db.execute("SELECT name, start_time, end_time FROM task_run WHERE flow_run_id = ? AND start_time IS "
                           "NOT NULL ORDER BY start_time", (flow_id,)).fetchall()

    def t(x: str) -> float:
        from datetime import datetime

        return datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp()

    worst, where, covered, prev = 0.0, "", t(flow_start), "flow start"
    for name, start, end in tasks:
        gap = t(start) - covered
        if gap > worst:
            worst, where = gap, f"{prev} → {name.rsplit('-', 1)[0]}"
        if end:
            covered, prev = max(covered, t(end)), name.rsplit("-", 1)[0]
    return worst, where


def steps_table(steps: dict[str, list[dict]]) -> str:
    """Per step of the tiny release in a new home: the median seconds with this code and with the baseline's."""
    names = [n for n in ("before the flow", "the flow", "after the flow", *STEPS)
             if any(n in r for runs in steps.values() for r in runs)]
    rows = ["| step | baseline (s) | now (s) |", "|---|---:|---:|"]
    for n in names:
        cells = []
        for label in ("base", "now"):
            values = [r.get(n, 0.0) for r in steps.get(label, [])]
            cells.append(f"{statistics.median(values):.2f}" if values else "—")
        rows.append(f"| {n} | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


def table(results: list[dict]) -> str:
    rows = ["| case | target | figure | CPU (user+sys) | load at start |", "|---|---|---|---|---|"]
    for r in results:
        if r["case"] == "files":
            fig = f"new home {r['new_home_mib']:.2f} MiB; next release +{r['next_release_mib']:.2f} MiB"
        elif r["case"] == "first-line":
            fig = f"first line {r['first_line_s']:.2f} s; longest silence {r['longest_silence_s']:.2f} s"
        elif r["case"] == "full":
            fig = (f"{r['wall_s']:.1f} s = {r['ratio']:.2f}× the bare read ({r['bare_read_s']:.2f} s); peak "
                   f"{r['peak_gib']:.2f} GiB")
        elif r["case"].startswith("kind:"):
            fig = f"{r['wall_s']:.1f} s; longest gap {r['longest_gap_s']:.2f} s ({r['longest_gap_between']})"
        else:
            fig = f"{r['wall_s']:.2f} s (min {r['wall_min_max'][0]:.2f}, max {r['wall_min_max'][1]:.2f})"
            if "baseline_wall_s" in r:
                fig += f"; baseline {r['baseline_wall_s']:.2f} s, ratio {r['ratio']:.2f}"
        cpu = f"{r['cpu_s']:.1f} s" if "cpu_s" in r else "—"
        rows.append(f"| {r['case']} | {r['target']} | {fig} | {cpu} | {r['load']} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=5, help="runs of each tiny-week case (the median is printed)")
    ap.add_argument("--full-repeat", type=int, default=5, help="runs of the full-size week")
    ap.add_argument("--kinds-repeat", type=int, default=3, help="runs of each passenger kind at 1 M records")
    ap.add_argument("--records", type=int, default=1_000_000, help="records of each passenger kind's input")
    ap.add_argument("--skip", default="", help="comma-separated: tiny, terminal, files, full, kinds")
    ap.add_argument("--src", default=str(ROOT), help="the checkout whose code is measured (default: this one)")
    ap.add_argument("--baseline-python", help="another virtual environment's python, run after each run")
    ap.add_argument("--baseline-src", help="the checkout that python runs (its code, from its directory)")
    args = ap.parse_args()
    args.work = (args.work or Path(tempfile.mkdtemp(prefix="bench-targets-"))).resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    runner = Runner(args)
    weeks = tiny_weeks(args.work, max(2, args.repeat + 1))
    if "tiny" not in skip:
        runner.tiny(weeks)
    if "terminal" not in skip:
        runner.terminal(weeks)
    if "files" not in skip:
        runner.files(weeks)
    if "kinds" not in skip:
        runner.kinds()
    if "full" not in skip:
        runner.full()
    print(table(runner.results))
    if getattr(runner, "steps", None):
        print()
        print(steps_table(runner.steps))
    (args.work / "targets.json").write_text(json.dumps(runner.results, indent=1), encoding="utf-8")
    print(f"results: {args.work / 'targets.json'}")


if __name__ == "__main__":
    main()
