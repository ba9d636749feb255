"""Time of the factored Markov model's trajectory generation (not a test; prints numbers).

    nice -n 10 python benchmarks/bench_markov_generation.py [--passengers 1000000] [--height 6] [--data metro]
        [--repeats 3] [--no-reference]

Fits the three noisy models once (ε = 1, ``--height`` taps, nmax 3) on ``--passengers`` synthetic trajectories
(``metro``: the mixed metro week; ``commuter``: the commuter week), so that the day histogram asks for about that
many trajectories, then times the generation alone (:func:`~transit_release.mechanisms.trajectory_markov.
draw_trajectories`: days from the kept cells, stations and hours from the trees, distinct rows counted), the
vectorised sampler and, unless ``--no-reference``, the former per-row-table sampler (``tests/markov_reference.py``)
on the same model and the same seeded stream, in turn (A B A B …), checking that both drew the same release.
Wall and CPU seconds per run (CPU is less sensitive to other processes on a shared machine) and peak memory.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release.mechanisms import ngram  # noqa: E402
from transit_release.mechanisms import trajectory_markov as tm  # noqa: E402
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.synth.trajectories import (synthesize_commuter_week,  # noqa: E402
                                                synthesize_metro_trajectories)


def timed(model, reference: bool, seed: int) -> tuple[float, float, tm.MarkovRelease]:
    from tests.markov_reference import reference_count_distinct, reference_sample_from_tree

    saved = ngram.sample_from_tree, tm._count_distinct
    if reference:
        ngram.sample_from_tree, tm._count_distinct = reference_sample_from_tree, reference_count_distinct
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        out = tm.draw_trajectories(model, NoiseSource(seed=seed).stream("bench", "generation"))
        return time.perf_counter() - t0, time.process_time() - c0, out
    finally:
        ngram.sample_from_tree, tm._count_distinct = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--passengers", type=int, default=1_000_000)
    ap.add_argument("--height", type=int, default=6)
    ap.add_argument("--data", choices=("metro", "commuter"), default="metro")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-reference", action="store_true")
    args = ap.parse_args()
    synth = synthesize_metro_trajectories if args.data == "metro" else synthesize_commuter_week
    trajs, _ = synth(args.passengers, seed=0)
    budget = tm.MarkovBudget.of(1, args.height, trajs.n_locations)
    t0 = time.perf_counter()
    model = tm.fit_markov(trajs, budget, NoiseSource(seed=1).stream("bench", "fit"))
    print(f"{args.data} week, {len(trajs):,} passengers, h = {args.height}: models fitted in "
          f"{time.perf_counter() - t0:.1f} s; the day histogram asks for {int(model.day_counts.sum()):,} "
          f"trajectories; load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = {"vectorised": [], "former": []}
    for rep in range(args.repeats):
        wall, cpu, new = timed(model, False, rep)
        rows["vectorised"].append((wall, cpu))
        line = f"run {rep + 1}: vectorised {wall:.2f} s wall, {cpu:.2f} s CPU"
        if not args.no_reference:
            wall, cpu, old = timed(model, True, rep)
            rows["former"].append((wall, cpu))
            line += f"; former {wall:.2f} s wall, {cpu:.2f} s CPU; same release: {old == new}"
        print(line, f"(load {os.getloadavg()[0]:.1f})", flush=True)
    for name, r in rows.items():
        if r:
            walls, cpus = sorted(w for w, _ in r), sorted(c for _, c in r)
            print(f"{name}: median {walls[len(walls) // 2]:.2f} s wall, {cpus[len(cpus) // 2]:.2f} s CPU "
                  f"(min {walls[0]:.2f}, max {walls[-1]:.2f} s wall)")
    print(f"trajectories drawn: {sum(c for _, c in new.released):,} ({len(new.released):,} distinct); peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
