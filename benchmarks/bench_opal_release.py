"""Benchmark of the Opal release on the full-size synthetic week (not a test).

    python benchmarks/bench_opal_release.py [--scale 1.0] [--work DIR] [--skip-e2e] [--skip-opendp]

Prints, and writes to ``<work>/results.json``:

1. end to end: ``transit-release release`` as a subprocess (Prefect's temporary
   server, MLflow, report, everything): wall time and peak resident memory;
2. stage by stage, in-process without Prefect: read; the validation gate
   (pandera file contract, row screen, GE raw-data suite, pandera clean
   contract; in the flow the GE suite runs concurrently with the screen and
   preprocessing); encode, group-count, sanitize, assemble;
3. the sanitization step on the same histograms three ways: a bare NumPy
   group-count (``np.bincount`` of the six marginals), our SBH (noise and
   threshold only), and OpenDP's ``make_laplace_threshold`` on the same
   histograms as dictionaries (noise and threshold only).
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


def end_to_end(trips: Path, stops: Path, home: Path) -> dict:
    exe = Path(sys.executable).parent / "transit-release"
    cmd = [str(exe), "release", "--trips", str(trips), "--stops", str(stops), "--home", str(home),
           "--release-id", f"bench-{int(time.time())}"]
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "WARNING"}
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"release failed:\n{res.stderr[-3000:]}")
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"wall_s": round(wall, 2), "peak_rss_gib": round(peak_kib / 2**20, 2)}


def stages(trips: Path, stops: Path, work: Path) -> tuple[dict, object, list]:
    from functools import partial

    from schemas import RawTrips, Stops, TripsFile, expectations, validate
    from transit_release import opal, preprocessing, screening
    from transit_release.config import load_release_config
    from transit_release.io import read_stops, read_trips
    from transit_release.noise import NoiseSource

    cfg = load_release_config()
    out = {}
    t_df, out["read_s"] = timed(read_trips, trips)
    s_df = validate(Stops, read_stops(stops), "stops")
    # the validation gate, stage by stage
    t_df, out["validate_file_s"] = timed(validate, TripsFile, t_df, "trips")
    period = screening.infer_period(t_df)
    screened, out["screen_s"] = timed(screening.screen_trips, t_df, s_df, period, cfg.quality, cfg.modes)
    screening.check_gate(screened, cfg.quality)
    view, out["ge_view_s"] = timed(expectations.raw_view, t_df)
    ge, out["ge_raw_suite_s"] = timed(expectations.validate_frames, work / "data_docs", {
        "raw_trips": (view, partial(expectations.raw_suite, period, cfg.quality, cfg.modes,
                                    sorted(int(x) for x in s_df["stop_id"])))})
    assert ge["success"]
    del view, t_df
    clean, out["validate_clean_s"] = timed(validate, RawTrips, screened.clean, "clean trips")
    out["validation_total_s"] = sum(out[k] for k in ("validate_file_s", "screen_s", "ge_view_s", "ge_raw_suite_s",
                                                    "validate_clean_s"))
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

    if not args.skip_e2e:
        results["end_to_end"] = end_to_end(trips, stops, work / "home")
        print("end to end:", results["end_to_end"], flush=True)

    st, enc, parts = stages(trips, stops, work)
    results["stages"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in st.items()}
    print("stages:", results["stages"], flush=True)
    # repeat the two fast measurements for stable figures
    from transit_release import opal, preprocessing
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
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()
