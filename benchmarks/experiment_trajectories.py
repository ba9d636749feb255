"""Where SafePath loses the journeys, and what keeps them (not a test; prints numbers).

    nice -n 10 python benchmarks/experiment_trajectories.py [--data commuter|metro] [--passengers 300000]
        [--height 6] [--reps 3] [--queries 10000] [--out release_reports/experiments-trajectories]
        [--skip-diagnosis] [--skip-targets]
    nice -n 10 python benchmarks/experiment_trajectories.py --defaults [--data commuter|metro] [--passengers 300000]
        [--reps 3]

Data: ``commuter`` is :func:`transit_release.synth.trajectories.synthesize_commuter_week` (every passenger
home→work in a morning hour and back from work in an evening hour on 1–5 weekdays); ``metro`` the mixed
synthetic metro week (commuters, occasional, weekend and heavy riders).

1. **Diagnosis** (SafePath with the paper's budget split and thresholds, ε = 1 and ε = 100): what the
   release holds (single points, lengths); how many trajectories keep their prefix of each length in the
   noisy tree; the same tree with its noisy counts replaced by the exact ones; the probability that a node
   of ``c`` passengers survives all the tests of one level; and the best any prefix tree can do: the exact
   tree cut at a threshold ``T``, with the paper's terminating release.
2. **Targets** (mean of ``reps`` runs): for SafePath (paper budget and thresholds; paper budget, node
   thresholds; joint budget) and the factored Markov model (nmax 3 and 5), at ε = 1 and ε = 100: mean
   relative error of the counts of the 100 most frequent (station, hour) points and ordered pairs, the
   top-100 sequential patterns found (PrefixSpan, against the trajectories cut at ``h`` and against the raw
   ones), the total variation of the length distribution, and the paper's count queries (uniform pairs)
   beside non-empty ones (sub-trajectories of the data), ``|q| ≤ h/3``.

3. ``--defaults``: only the former default (SafePath, the paper's budget and thresholds) and the new one (the
   Markov model, nmax 3) at ε = 1: the table of old against new default, with each one's time.

The truth of every figure but the raw-pattern TP is the data cut at ``h``: what a release of height ``h``
can hold. Writes ``diagnosis.csv``, ``targets.csv`` (every run) and ``targets_mean.csv`` under ``--out``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release.mechanisms import safepath as sp  # noqa: E402
from transit_release.mechanisms.trajectory_markov import MarkovBudget, sanitize_markov  # noqa: E402
from transit_release.noise import NoiseSource, discrete_laplace_table  # noqa: E402
from transit_release.synth.trajectories import (synthesize_commuter_week,  # noqa: E402
                                                synthesize_metro_trajectories)
from transit_release.utility.sequences import WeightedSequences, top_k_subsequence_patterns  # noqa: E402
from transit_release.utility.trajectories import (TrajectoryIndex, length_shares, nonempty_workload,  # noqa: E402
                                                  relative_errors, release_index, top_ordered_pairs, top_points,
                                                  total_variation, uniform_workload)

K = 100


def as_pattern_data(release: list, n_pairs: int, n_hours: int) -> WeightedSequences:
    return WeightedSequences.from_release([(tuple(loc * n_hours + hr for loc, hr in t), c) for t, c in release],
                                          n_pairs)


class Truth:
    """Everything about the data a release is scored against, computed once."""

    def __init__(self, trajs: sp.Trajectories, height: int, n_queries: int):
        self.raw, self.h = trajs, height
        self.cut = trajs.truncated(height)
        self.n = len(trajs)
        self.n_pairs = trajs.n_locations * trajs.n_hours
        self.points, self.points_true = top_points(self.cut, K)
        self.pairs, self.pairs_true = top_ordered_pairs(self.cut, K)
        self.patterns_cut = {p for p, _ in top_k_subsequence_patterns(self.cut.pairs(), K)}
        self.patterns_raw = {p for p, _ in top_k_subsequence_patterns(trajs.pairs(), K)}
        self.lengths = length_shares(self.cut.lengths, height=height)
        q = max(1, height // 3)
        index = TrajectoryIndex(trajs)
        self.workloads = []
        for wl in (uniform_workload(trajs.n_locations, trajs.n_hours, q, n_queries, seed=1),
                   nonempty_workload(trajs, q, n_queries, seed=2)):
            queries = [x for k in sorted(wl.by_length) for x in wl.by_length[k]]
            self.workloads.append((wl.kind, queries, index.counts(queries)))

    def score(self, release: list) -> dict:
        idx = release_index(release, self.raw.n_locations, self.raw.n_hours)
        got_points = idx.counts([np.array([p]) for p in self.points])
        got_pairs = idx.counts(list(self.pairs))
        found = {p for p, _ in top_k_subsequence_patterns(as_pattern_data(release, self.n_pairs, self.raw.n_hours),
                                                          K)} if release else set()
        lengths = np.array([len(t) for t, _ in release], dtype=np.int64)
        copies = np.array([c for _, c in release], dtype=float)
        out = {"released": int(copies.sum()), "distinct": len(release),
               "single_points": int(copies[lengths == 1].sum()) if release else 0,
               "points_mre": float(relative_errors(self.points_true, got_points, self.n).mean()),
               "pairs_mre": float(relative_errors(self.pairs_true, got_pairs, self.n).mean()),
               "tp_cut": len(self.patterns_cut & found), "tp_raw": len(self.patterns_raw & found),
               "length_tv": total_variation(self.lengths, length_shares(lengths, copies, self.h) if release
                                            else np.zeros(self.h + 1))}
        for kind, queries, truth in self.workloads:
            out[f"{kind}_queries_mre"] = float(relative_errors(truth, idx.counts(queries), self.n).mean())
        return out


# ---- diagnosis --------------------------------------------------------------------------------------------

def tree_prefix_survival(tree: sp.NoisySafePathTree, cut: sp.Trajectories) -> list[float]:
    """Per level d: share of the trajectories of at least d points whose d-point prefix is a node of the tree."""
    P = cut.n_locations * cut.n_hours
    node = np.zeros(len(cut), dtype=np.int64)
    alive = np.ones(len(cut), dtype=bool)
    out = []
    for d, lv in enumerate(tree.levels):
        has = cut.lengths > d
        keys = lv.parent * P + lv.location * cut.n_hours + lv.hour
        rows = np.flatnonzero(has & alive)
        pos = cut.offsets[rows] + d
        want = node[rows] * P + cut.locations[pos] * cut.n_hours + cut.hours[pos]
        at = np.searchsorted(keys, want).clip(0, max(keys.size - 1, 0))
        hit = keys[at] == want if keys.size else np.zeros(rows.size, dtype=bool)
        alive[rows[~hit]] = False
        node[rows[hit]] = at[hit]
        alive &= has
        out.append(float(hit.sum() / max(int(has.sum()), 1)))
    out += [0.0] * (cut.lengths.max() - len(out))
    return out


def exact_counts_on(tree: sp.NoisySafePathTree, cut: sp.Trajectories) -> sp.NoisySafePathTree:
    """The same nodes with their true counts (trajectories whose prefix they are)."""
    P = cut.n_locations * cut.n_hours
    node = np.zeros(len(cut), dtype=np.int64)
    alive = np.ones(len(cut), dtype=bool)
    levels = []
    for d, lv in enumerate(tree.levels):
        has = cut.lengths > d
        keys = lv.parent * P + lv.location * cut.n_hours + lv.hour
        rows = np.flatnonzero(has & alive)
        pos = cut.offsets[rows] + d
        want = node[rows] * P + cut.locations[pos] * cut.n_hours + cut.hours[pos]
        at = np.searchsorted(keys, want).clip(0, max(keys.size - 1, 0))
        hit = keys[at] == want
        alive[rows[~hit]] = False
        alive &= has
        node[rows[hit]] = at[hit]
        levels.append(sp.TrajectoryLevel(lv.parent, lv.location, lv.hour,
                                         np.bincount(at[hit], minlength=keys.size).astype(np.int64)))
    return sp.NoisySafePathTree(levels, tree.budget, tree.thresholds, tree.monotone)


def level_survival(budget: sp.SafePathBudget, thresholds: sp.Thresholds, c: int) -> float:
    """P(a node of ``c`` passengers passes every test of one level), its general ancestors counted at ``c`` too
    (they hold at least as many: a lower bound)."""
    p = 1.0
    for sub, ths in ((budget.location, thresholds.location), (budget.time, thresholds.time)):
        for eps, theta in zip(sub.per_step, ths):
            p *= _at_least(discrete_laplace_table(1 / eps), int(theta) - c)  # P(c + Z ≥ θ)
    return p


def _at_least(table, k: int) -> float:
    """P(Z ≥ k) for any integer k (the tail by symmetry for k ≤ 0)."""
    if k >= 1:
        return table.upper_tail(k)
    return 1.0 - table.upper_tail(1 - k)  # P(Z ≥ k) = 1 − P(Z ≤ k − 1) = 1 − P(Z ≥ 1 − k)


def exact_tree_release(cut: sp.Trajectories, threshold: int) -> list:
    """The exact prefix tree cut at ``threshold`` (nodes whose prefix count and every ancestor's is at least it),
    released as SafePath does: each node its count minus its children's."""
    counts = Counter(t[:d] for t in cut.to_lists() for d in range(1, len(t) + 1))
    kept = {p for p, c in counts.items() if c >= threshold}
    kept = {p for p in kept if all(p[:d] in kept for d in range(1, len(p)))}
    children = Counter()
    for p in kept:
        if len(p) > 1:
            children[p[:-1]] += counts[p]
    return sorted((p, counts[p] - children[p]) for p in kept if counts[p] - children[p] > 0)


def diagnosis(truth: Truth, args) -> pd.DataFrame:
    cut = truth.cut
    n_loc = cut.n_locations
    locs = sp.Hierarchy.from_fanout(n_loc, 2, 6)
    hours = sp.Hierarchy.from_fanout(cut.n_hours, 2, 6, "time")
    rows = []
    print(f"\n== diagnosis: SafePath, paper budget and thresholds, h = {args.height}, taxonomies of height 6 ==")
    print(f"truth (cut at h): {truth.n:,} trajectories; length shares "
          + ", ".join(f"{k}: {v:.3f}" for k, v in enumerate(truth.lengths) if v))
    for eps in (1.0, 100.0):
        budget = sp.SafePathBudget.of(eps, args.height, n_loc, 6, 6)
        th = sp.thresholds_for(budget, "paper", locs, hours)
        tree, release = sp.sanitize_trajectories(truth.raw, budget, locs, hours,
                                                 NoiseSource(seed=11).stream("diagnosis", str(eps)))
        score = truth.score(release)
        surv = tree_prefix_survival(tree, cut)
        exact_tree = exact_counts_on(tree, cut)
        exact = truth.score(sp.release_trajectories(exact_tree, sp.consistent_counts(exact_tree)))
        print(f"\nε = {eps:g}: level budget {float(budget.level_epsilon):.4g}; location tests at scales "
              + "/".join(f"{float(1 / e):.3g}" for e in budget.location.per_step) + " against θ "
              + "/".join(map(str, th.location)) + "; hour tests at scales "
              + "/".join(f"{float(1 / e):.3g}" for e in budget.time.per_step) + " against θ "
              + "/".join(map(str, th.time)))
        print(f"  released {score['released']:,} trajectories, {score['single_points']:,} single points, "
              f"{score['distinct']:,} distinct; points MRE {score['points_mre']:.3f}, ordered pairs MRE "
              f"{score['pairs_mre']:.3f}, top-100 TP {score['tp_cut']} (cut) / {score['tp_raw']} (raw), length TV "
              f"{score['length_tv']:.3f}")
        print("  trajectories whose d-point prefix is in the noisy tree: "
              + ", ".join(f"d={d + 1}: {s:.3f}" for d, s in enumerate(surv)))
        print(f"  same tree, exact counts: released {exact['released']:,}, single points {exact['single_points']:,}; "
              f"points MRE {exact['points_mre']:.3f}, ordered pairs {exact['pairs_mre']:.3f}, TP {exact['tp_cut']}, "
              f"length TV {exact['length_tv']:.3f}")
        surv_c = {c: level_survival(budget, th, c) for c in (1, 2, 5, 20, 100)}
        print("  P(a node of c passengers survives the 14 tests of one level): "
              + ", ".join(f"c={c}: {p:.3g}" for c, p in surv_c.items()))
        rows.append({"part": "safepath-paper", "epsilon": eps, **score,
                     **{f"prefix_in_tree_d{d + 1}": s for d, s in enumerate(surv)},
                     **{f"exact_counts_{k}": v for k, v in exact.items()},
                     **{f"level_survival_c{c}": p for c, p in surv_c.items()}})
    joint1 = sp.JointBudget.of(1, args.height, n_loc)
    print(f"\n== the best a prefix tree can do: exact counts, nodes of at least T passengers, terminating release "
          f"(the joint rule's threshold at ε = 1 is {joint1.threshold}) ==")
    for T in (1, 2, 5, 20, joint1.threshold):
        score = truth.score(exact_tree_release(cut, T))
        print(f"  T = {T:>3}: released {score['released']:,}, single points {score['single_points']:,}; points MRE "
              f"{score['points_mre']:.3f}, ordered pairs {score['pairs_mre']:.3f}, TP {score['tp_cut']}, length TV "
              f"{score['length_tv']:.3f}")
        rows.append({"part": f"exact-tree-T{T}", "epsilon": math.inf, **score})
    raw_vs_cut = len(truth.patterns_raw & truth.patterns_cut)
    print(f"\nthe data cut at h itself finds {raw_vs_cut} of the raw data's top-100 patterns")
    return pd.DataFrame(rows)


# ---- targets ----------------------------------------------------------------------------------------------

METHODS = (("safepath paper/paper", "paper", "paper"), ("safepath paper/node", "paper", "node"),
           ("safepath joint", "joint", None), ("markov nmax=3", "markov", 3), ("markov nmax=5", "markov", 5))
#: ``--defaults``: the former default command's mechanism and the new one's
DEFAULTS = (("former default: safepath paper/paper", "paper", "paper"), ("new default: markov nmax=3", "markov", 3))


def one_run(truth: Truth, method: tuple, eps: float, rep: int, height: int) -> dict:
    name, rule, arg = method
    trajs = truth.raw
    gen = NoiseSource(seed=1000 * rep + int(eps)).stream("targets", name)
    t = time.perf_counter()
    if rule == "paper":
        locs = sp.Hierarchy.from_fanout(trajs.n_locations, 2, 6)
        hrs = sp.Hierarchy.from_fanout(trajs.n_hours, 2, 6, "time")
        budget = sp.SafePathBudget.of(eps, height, trajs.n_locations, 6, 6)
        _, release = sp.sanitize_trajectories(trajs, budget, locs, hrs, gen, rule=arg)
    elif rule == "joint":
        _, release = sp.sanitize_joint(trajs, sp.JointBudget.of(eps, height, trajs.n_locations), gen)
    else:
        release = sanitize_markov(trajs, MarkovBudget.of(eps, height, trajs.n_locations, arg), gen).released
    seconds = time.perf_counter() - t
    return {"method": name, "epsilon": eps, "rep": rep, "seconds": round(seconds, 1),
            "load": round(os.getloadavg()[0], 1), **truth.score(release)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", choices=("commuter", "metro"), default="commuter")
    ap.add_argument("--passengers", type=int, default=300_000)
    ap.add_argument("--height", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--epsilons", default="1,100")
    ap.add_argument("--out", type=Path, default=Path("release_reports/experiments-trajectories"))
    ap.add_argument("--skip-diagnosis", action="store_true")
    ap.add_argument("--skip-targets", action="store_true")
    ap.add_argument("--defaults", action="store_true", help="former default vs new default at ε = 1 only")
    args = ap.parse_args()
    if args.defaults:
        args.skip_diagnosis, args.epsilons = True, "1"
    out = args.out / args.data
    out.mkdir(parents=True, exist_ok=True)
    make = synthesize_commuter_week if args.data == "commuter" else synthesize_metro_trajectories
    trajs, _ = make(args.passengers, seed=0)
    t = time.perf_counter()
    truth = Truth(trajs, args.height, args.queries)
    print(f"{args.data}: {len(trajs):,} trajectories over {trajs.n_locations} stations × {trajs.n_hours} hours, "
          f"h = {args.height}; truth computed in {time.perf_counter() - t:.0f} s", flush=True)
    if not args.skip_diagnosis:
        diagnosis(truth, args).to_csv(out / "diagnosis.csv", index=False)
    if args.skip_targets:
        return
    rows = []
    for eps in [float(x) for x in args.epsilons.split(",")]:
        for method in DEFAULTS if args.defaults else METHODS:
            for rep in range(args.reps):
                r = one_run(truth, method, eps, rep, args.height)
                rows.append(r)
                print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
                pd.DataFrame(rows).to_csv(out / "targets.csv", index=False)
    df = pd.DataFrame(rows)
    cols = ["points_mre", "pairs_mre", "tp_cut", "tp_raw", "length_tv", "uniform_queries_mre",
            "non-empty_queries_mre", "released", "single_points", "seconds"]
    mean = df.groupby(["epsilon", "method"], sort=False)[cols].mean().reset_index()
    mean.to_csv(out / "targets_mean.csv", index=False)
    print(f"\n== targets, mean of {args.reps} runs ({args.data}, h = {args.height}; "
          "targets at ε = 1: points and pairs MRE ≤ 0.25, TP ≥ 60; at ε = 100: length TV ≤ 0.05, TP ≥ 95) ==")
    print(mean.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
