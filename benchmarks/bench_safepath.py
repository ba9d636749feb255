"""Speed of the SafePath sanitizer (not a test).

    nice -n 10 python benchmarks/bench_safepath.py [--rules paper,node] [--cases metro,bus,metro4x]

Cases (ε = 1, h = 12, location and time taxonomies of height 6 with 2 children, as in the paper):

* ``metro``: 850,000 synthetic metro trajectories over 68 stations × 168 hours (target ≤ 10 s;
  the paper's C++ took 15 s on its Metro);
* ``bus``: 773,000 trajectories over a 893-stop bus-like network (target ≤ 20 s; the paper: 27 s);
* ``metro4x``: 3,400,000 metro trajectories (four times ``metro``): is the time linear in |D|?

For each case and threshold rule: the time to build the noisy tree, to make it consistent and to
generate the release, the tree's size and the released trajectories. The noise tables (one per
public budget, data-independent) are built first and timed separately (``tables_s``): they depend
only on ε, h, |L|, |T| and the taxonomy heights. ``cpu_s`` is the process's CPU time over the same
span (less sensitive than the wall time to other processes on a shared machine); both are indicative.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release.mechanisms.safepath import (Hierarchy, SafePathBudget, Trajectories,  # noqa: E402
                                                 build_safepath_tree, consistent_counts, delta_slack,
                                                 release_trajectories, thresholds_for)
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.synth.trajectories import (synthesize_bus_trajectories,  # noqa: E402
                                                synthesize_metro_trajectories)


def warm_tables(budget: SafePathBudget) -> float:
    t = time.perf_counter()
    delta_slack(budget)  # builds every table the run uses
    return time.perf_counter() - t


def run(trajs: Trajectories, eps: float, h: int, height: int, fanout: int, rule: str) -> dict:
    locations = Hierarchy.from_fanout(trajs.n_locations, fanout, height)
    hours = Hierarchy.from_fanout(trajs.n_hours, fanout, height, "time")
    budget = SafePathBudget.of(eps, h, trajs.n_locations, height, height, trajs.n_hours)
    tables = warm_tables(budget)
    thresholds = thresholds_for(budget, rule, locations, hours)
    gen = NoiseSource().stream("bench", rule)
    c0 = time.process_time()
    t0 = time.perf_counter()
    tree = build_safepath_tree(trajs, budget, locations, hours, thresholds, gen)
    t1 = time.perf_counter()
    bar = consistent_counts(tree)
    t2 = time.perf_counter()
    release = release_trajectories(tree, bar)
    t3 = time.perf_counter()
    cpu = time.process_time() - c0
    return {"cpu_s": round(cpu, 2), "tables_s": round(tables, 2), "build_s": round(t1 - t0, 2),
            "consistency_s": round(t2 - t1, 2),
            "release_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2), "nodes": tree.n_nodes,
            "levels": len(tree.levels), "released_trajectories": int(sum(c for _, c in release))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rules", default="paper,node")
    ap.add_argument("--cases", default="metro,bus,metro4x")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--height", type=int, default=12)
    ap.add_argument("--taxonomy-height", type=int, default=6)
    ap.add_argument("--fanout", type=int, default=2)
    args = ap.parse_args()
    results = []
    for case in args.cases.split(","):
        t = time.perf_counter()
        if case == "metro":
            trajs, _ = synthesize_metro_trajectories(850_000, seed=0)
        elif case == "metro4x":
            trajs, _ = synthesize_metro_trajectories(3_400_000, seed=0)
        elif case == "bus":
            trajs, _ = synthesize_bus_trajectories(773_000, seed=0)
        else:
            raise SystemExit(f"unknown case {case!r}")
        synth_s = time.perf_counter() - t
        for rule in args.rules.split(","):
            r = {"case": case, "trajectories": len(trajs), "locations": trajs.n_locations, "hours": trajs.n_hours,
                 "avg_length": round(float(trajs.lengths.mean()), 2), "synth_s": round(synth_s, 1), "rule": rule,
                 "epsilon": args.epsilon, "h": args.height}
            r.update(run(trajs, args.epsilon, args.height, args.taxonomy_height, args.fanout, rule))
            print(json.dumps(r), flush=True)
            results.append(r)
    by = {(r["case"], r["rule"]): r for r in results}
    for rule in args.rules.split(","):
        if ("metro", rule) in by and ("metro4x", rule) in by:
            ratio = by[("metro4x", rule)]["total_s"] / max(by[("metro", rule)]["total_s"], 1e-9)
            cpu = by[("metro4x", rule)]["cpu_s"] / max(by[("metro", rule)]["cpu_s"], 1e-9)
            print(json.dumps({"linearity": rule, "wall_4x_over_1x": round(ratio, 2),
                              "cpu_4x_over_1x": round(cpu, 2)}))


if __name__ == "__main__":
    main()
