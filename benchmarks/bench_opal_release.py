"""Benchmark of the Opal release on the full-size synthetic week (not a test).

    python benchmarks/bench_opal_release.py [--scale 1.0] [--work DIR] [--skip-e2e] [--skip-opendp]

Prints, and writes to ``<work>/results.json``:

1. end to end: ``transit-release release`` as a subprocess (Prefect's temporary
   server, MLflow, report, everything): wall time and peak resident memory;
2. stage by stage, in-process without Prefect: the whole-frame path (read;
   pandera file contract, row screen, pandera clean contract; encode,
   group-count, sanitize, assemble), and the release's streamed path (the
   streaming pass; each partition's step, one after the other);
3. the sanitization step on the same histograms three ways: a bare NumPy
   group-count (``np.bincount`` of the six marginals), our SBH (noise and
   threshold only), and OpenDP's ``make_laplace_threshold`` on the same
   histograms as dictionaries (noise and threshold only);
4. scale-out (``--workers 1,2``): ``transit-release release --workers N`` as a
   subprocess for each N: wall time, the sanitization subflow's and its
   partition tasks' durations (from Prefect's database), and the peak resident
   memory (``VmHWM``) of every process — the flow process, each Dask worker,
   Prefect's temporary server — sampled from ``/proc`` while it runs; plus a
   Dask worker's memory after imports alone and the size of the largest
   partition's rows, to compare the workers' peak with.

    python benchmarks/bench_opal_release.py --only-scale-out --workers 1,2
    python benchmarks/bench_opal_release.py --only-e2e --units trip,card    # card level within 1.2x the trip level?
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def period_flags() -> list[str]:
    """The synthetic week's own (public) period: a publishing run must declare it."""
    from transit_release.synth.opal_week import week_period

    start, end = week_period()
    return ["--period-start", start, "--period-end", end]


def end_to_end(trips: Path, stops: Path, home: Path, unit: str = "trip") -> dict:
    """``transit-release release --unit UNIT`` as a subprocess: wall time, and the largest peak RSS of any child
    so far (``RUSAGE_CHILDREN`` is a running maximum; the scale-out runs measure each process separately)."""
    exe = Path(sys.executable).parent / "transit-release"
    cmd = [str(exe), "release", "--trips", str(trips), "--stops", str(stops), "--home", str(home),
           "--release-id", f"bench-{unit}-{int(time.time())}", "--unit", unit, *period_flags()]
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "WARNING"}
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if res.returncode != 0:
        raise SystemExit(f"release failed:\n{res.stderr[-3000:]}")
    return {"unit": unit, "wall_s": round(wall, 2), "peak_rss_gib_so_far": round(peak_kib / 2**20, 2)}


def _process_table() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, command line) of every process (Linux /proc)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out[int(d.name)] = (ppid, cmd)
    return out


def _peak_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _role(cmd: str, is_root: bool, parent_cmd: str = "") -> str:
    if is_root:
        return "flow"
    if "spawn_main" in cmd:
        return "dask_worker"
    if "forkserver" in cmd:  # a forked worker keeps its forkserver's command line
        return "dask_worker" if "forkserver" in parent_cmd else "forkserver"
    if "uvicorn" in cmd or "prefect" in cmd and "server" in cmd:
        return "prefect_server"
    return "other"


def watch_peaks(proc: subprocess.Popen, every_s: float = 0.2) -> dict[int, tuple[str, int]]:
    """pid → (role, peak RSS KiB) of ``proc`` and all its descendants, sampled until it exits."""
    peaks: dict[int, tuple[str, int]] = {}
    while proc.poll() is None:
        table = _process_table()
        family, frontier = {proc.pid}, [proc.pid]
        while frontier:
            parent = frontier.pop()
            for pid, (ppid, _) in table.items():
                if ppid == parent and pid not in family:
                    family.add(pid)
                    frontier.append(pid)
        for pid in family:
            kib = _peak_kib(pid)
            if kib is not None and pid in table:
                role = _role(table[pid][1], pid == proc.pid, table.get(table[pid][0], (0, ""))[1])
                peaks[pid] = (role, max(kib, peaks.get(pid, ("", 0))[1]))
        time.sleep(every_s)
    return peaks


def _subflow_times(prefect_db: Path) -> dict:
    import sqlite3

    def seconds(expr: str) -> str:
        return f"(julianday({expr}) - julianday('1970-01-01')) * 86400"

    with sqlite3.connect(prefect_db) as db:
        (sub,) = db.execute(f"SELECT r.id, {seconds('r.total_run_time')} FROM flow_run r JOIN flow f "
                            "ON f.id = r.flow_id WHERE f.name = 'sanitize-partitions'").fetchall()
        tasks = [row[0] for row in db.execute(f"SELECT {seconds('total_run_time')} FROM task_run "
                                              "WHERE flow_run_id = ? AND name LIKE 'sanitize-chunk-%'",
                                              (sub[0],))]
    return {"sanitize_subflow_s": round(sub[1], 2), "partition_tasks": len(tasks),
            "partition_task_sum_s": round(sum(tasks), 2), "partition_task_max_s": round(max(tasks), 2)}


def worker_import_baseline_mib() -> float:
    """Peak RSS of a Dask worker that has imported the sanitization task and done nothing else."""
    from distributed import Client, LocalCluster

    def imported_peak() -> int:
        import tasks.sanitize  # noqa: F401
        return _peak_kib(os.getpid())

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        (kib,) = client.run(imported_peak).values()
    return round(kib / 1024, 1)


def scale_out(trips: Path, stops: Path, work: Path, workers: list[int]) -> dict:
    """``transit-release release --workers N`` for each N, with per-process peak memory."""
    import shutil

    exe = Path(sys.executable).parent / "transit-release"
    out = {}
    for n in workers:
        home = work / f"home-workers-{n}"
        shutil.rmtree(home, ignore_errors=True)
        cmd = [str(exe), "release", "--trips", str(trips), "--stops", str(stops), "--home", str(home),
               "--release-id", f"bench-workers-{n}", "--workers", str(n), *period_flags()]
        env = {**os.environ, "PREFECT_LOGGING_LEVEL": "WARNING"}
        log = work / f"workers-{n}.log"
        t = time.perf_counter()
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
            peaks = watch_peaks(proc)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"release with {n} workers failed; see {log}")
        by_role: dict[str, list[float]] = {}
        for role, kib in peaks.values():
            by_role.setdefault(role, []).append(round(kib / 1024, 1))
        out[f"{n}_workers"] = {"wall_s": round(wall, 2), **_subflow_times(home / ".prefect" / "prefect.db"),
                               "peak_rss_mib": {r: sorted(v, reverse=True) for r, v in sorted(by_role.items())}}
        print(f"scale-out, {n} workers:", out[f"{n}_workers"], flush=True)
    return out


def partition_sizes(enc) -> dict:
    """The week's encoded rows and the largest partition's, in memory (what a sanitizer loads)."""
    from transit_release.preprocessing import TRIP_COLUMNS

    per_row = sum(enc.frame[c].dtype.itemsize for c in TRIP_COLUMNS)
    counts = np.bincount(enc.frame["part"].to_numpy(), minlength=len(enc.partitions))
    return {"partitions": len(enc.partitions), "largest_partition_trips": int(counts.max()),
            "largest_partition_rows_mib": round(int(counts.max()) * per_row / 2**20, 1),
            "week_encoded_rows_mib": round(len(enc.frame) * per_row / 2**20, 1)}


def stages(trips: Path, stops: Path, work: Path) -> tuple[dict, object, list]:
    from functools import partial

    from schemas import RawTrips, Stops, TripsFile, validate
    from transit_release import preprocessing
    from transit_release.config import load_release_config
    from transit_release.inputs import screening
    from transit_release.inputs.tables import read_stops, read_trips
    from transit_release.noise import NoiseSource
    from transit_release.releases import opal

    cfg = load_release_config()
    out = {}
    t_df, out["read_s"] = timed(read_trips, trips)
    s_df = validate(Stops, read_stops(stops), "stops")
    # the validation gate, stage by stage
    t_df, out["validate_file_s"] = timed(validate, TripsFile, t_df, "trips")
    period = screening.infer_period(t_df)
    screened, out["screen_s"] = timed(screening.screen_trips, t_df, s_df, period, cfg.quality, cfg.modes)
    screening.check_gate(screened, cfg.quality)
    del t_df
    clean, out["validate_clean_s"] = timed(validate, RawTrips, screened.clean, "clean trips")
    out["validation_total_s"] = sum(out[k] for k in ("validate_file_s", "screen_s", "validate_clean_s"))
    # the release's own path: the streaming pass (contract and screen batch by batch), then each partition's step
    # (duplicates, its pandera contract and GE suite, encoding) one after the other in this process
    from schemas.validation import check
    from tasks.stream import _clean_aggregates, check_partitions
    from schemas import EncodedPartition
    from transit_release.inputs import streaming

    st, out["stream_pass_s"] = timed(streaming.stream_trips, trips, s_df, period, cfg.quality, cfg.modes,
                                     work / "spill", work / "quarantine-parts", partial(check, TripsFile))
    index = preprocessing.build_location_index(s_df, cfg.modes)
    (work / "pairs").mkdir(exist_ok=True)
    _, out["partition_steps_s"] = timed(lambda: check_partitions([streaming.prepare_partition(
        work / "spill", work / "staged", work / "quarantine-parts", work / "pairs", m, d, cfg.modes.index(m), index,
        cfg.bin_minutes, None, NoiseSource(), partial(_clean_aggregates, f"{m}/{d}", d),
        lambda enc: validate(EncodedPartition, __import__("pandas").DataFrame(enc), "encoded"), len(period.days))
        for m, d in streaming.partition_labels(period, cfg.modes)], cfg.quality))
    out["quarantined"] = screened.quarantined_rows
    enc, out["encode_s"] = timed(preprocessing.encode_trips, clean,
                                 preprocessing.build_location_index(s_df, cfg.modes), cfg.bin_minutes)
    out["trips"] = len(clean)
    del clean, screened
    parts, out["group_count_s"] = timed(preprocessing.partition_histograms, enc)
    noise = NoiseSource()
    sanitized, out["sanitize_s"] = timed(lambda: [opal.sanitize_partition(p, cfg, noise) for p in parts])
    _, out["assemble_s"] = timed(opal.release_tables, sanitized, preprocessing.key_space(enc), enc.vocab,
                                 cfg.bin_minutes)
    out["points"] = int(sum(h.counts.size for p in parts for h in p.histograms.values()))
    out["histograms"] = int(sum(len(p.histograms) for p in parts))
    return out, enc, parts


def opendp_sanitize(parts, repeats_cap_s: float = 600.0) -> dict:
    import opendp.prelude as dp

    from transit_release.config import MARGINALS, load_release_config
    from transit_release.mechanisms.stability_histogram import sbh_scale, sbh_threshold

    dp.enable_features("contrib")
    cfg = load_release_config()
    measurements = {}
    for m in MARGINALS:
        b = cfg.budgets[m.name]
        measurements[m.name] = dp.m.make_laplace_threshold(
            dp.map_domain(dp.atom_domain(T="i64"), dp.atom_domain(T="i64")),
            dp.l01inf_distance(dp.absolute_distance(T="i64")),
            scale=float(sbh_scale(b.epsilon)), threshold=sbh_threshold(b.epsilon, b.delta) - 1)
    inputs = [(m.name, dict(zip(p.histograms[m.name].keys.tolist(), p.histograms[m.name].counts.tolist())))
              for p in parts for m in MARGINALS]
    t = time.perf_counter()
    done = 0
    for name, hist in inputs:
        measurements[name](hist)
        done += 1
        if time.perf_counter() - t > repeats_cap_s:
            break
    elapsed = time.perf_counter() - t
    return {"opendp_s": round(elapsed * len(inputs) / done, 3), "opendp_histograms_timed": done}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--skip-opendp", action="store_true")
    ap.add_argument("--workers", default="1,2", help="local Dask workers to compare, e.g. 1,2 (empty: skip)")
    ap.add_argument("--only-scale-out", action="store_true", help="only the scale-out comparison")
    ap.add_argument("--units", default="trip,card", help="end to end at these units of privacy (card/trip ratio)")
    ap.add_argument("--only-e2e", action="store_true", help="only the end-to-end runs")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-opal-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "input"
    results: dict = {"scale": args.scale, "cores": os.cpu_count()}

    from transit_release.synth.opal_week import write_synthetic_week

    if not (data / "trips.csv").exists():
        _, results["synth_s"] = timed(write_synthetic_week, data, scale=args.scale, seed=0, show_progress=False)
    trips, stops = data / "trips.csv", data / "stops.csv"
    results["input_csv_mib"] = round(trips.stat().st_size / 2**20, 1)

    workers = [int(x) for x in args.workers.split(",") if x.strip()]
    if args.only_scale_out:
        results["scale_out"] = scale_out(trips, stops, work, workers)
        results["scale_out"]["dask_worker_after_imports_mib"] = worker_import_baseline_mib()
        from schemas import Stops, validate
        from transit_release.config import load_release_config
        from transit_release.inputs.tables import read_stops, read_trips
        from transit_release.preprocessing import build_location_index, encode_trips

        cfg = load_release_config()
        enc = encode_trips(read_trips(trips), build_location_index(validate(Stops, read_stops(stops), "stops"),
                                                                   cfg.modes), cfg.bin_minutes)
        results["scale_out"].update(partition_sizes(enc))
        (work / "results.json").write_text(json.dumps(results, indent=2))
        print(json.dumps(results, indent=2))
        return

    if not args.skip_e2e:
        runs = [end_to_end(trips, stops, work / f"home-{unit}", unit) for unit in args.units.split(",")]
        results["end_to_end"] = runs
        by_unit = {r["unit"]: r["wall_s"] for r in runs}
        if {"trip", "card"} <= set(by_unit):
            results["card_over_trip"] = round(by_unit["card"] / by_unit["trip"], 3)
        print("end to end:", runs, "card/trip:", results.get("card_over_trip"), flush=True)
        if args.only_e2e:
            (work / "results.json").write_text(json.dumps(results, indent=2))
            return

    st, enc, parts = stages(trips, stops, work)
    results["stages"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in st.items()}
    results["stages"].update(partition_sizes(enc))
    print("stages:", results["stages"], flush=True)
    # repeat the two fast measurements for stable figures
    from transit_release import preprocessing
    from transit_release.releases import opal
    from transit_release.config import load_release_config
    from transit_release.noise import NoiseSource

    cfg = load_release_config()
    counts = [timed(preprocessing.partition_histograms, enc)[1] for _ in range(5)]
    sans = [timed(lambda: [opal.sanitize_partition(p, cfg, NoiseSource()) for p in parts])[1] for _ in range(5)]
    cmp = {"bare_group_count_s": round(float(np.median(counts)), 4),
           "sbh_sanitize_s": round(float(np.median(sans)), 4)}
    cmp["sanitize_over_group_count"] = round(cmp["sbh_sanitize_s"] / cmp["bare_group_count_s"], 3)
    cmp["count_plus_sanitize_over_count"] = round(1 + cmp["sanitize_over_group_count"], 3)
    if not args.skip_opendp:
        cmp.update(opendp_sanitize(parts))
        cmp["opendp_over_ours"] = round(cmp["opendp_s"] / cmp["sbh_sanitize_s"], 1)
    results["sanitization"] = cmp
    print("sanitization:", cmp, flush=True)
    enc = parts = None  # free the week before the scale-out runs
    if workers:
        results["scale_out"] = scale_out(trips, stops, work, workers)
        results["scale_out"]["dask_worker_after_imports_mib"] = worker_import_baseline_mib()
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()
