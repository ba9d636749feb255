"""DiffPart's fan-out against the public universe size (not a test; prints numbers).

    nice -n 10 python benchmarks/experiment_fanout.py [--records 200000] [--runs 2] [--fanouts 3,4,5,6,8,10]
        [--sizes 16,68,278,1012] [--big-records 989818] [--out release_reports/experiments-fanout]

For each universe size |I|, a synthetic set data set of the small-universe shape
(:func:`transit_release.synth.sets.small_universe_sets`: most sets of one or two items, Zipf popularity, related
items together; ``--records`` sets over |I| items) or, with ``--shape stm``, of the STM shape
(:func:`transit_release.synth.sets.stm_like_sets`: about 4.8 stations per set, most sets unique); for each fan-out f, DiffPart at ε = 1 (C1, C2 from f): the mean relative
error of containment queries of 1–3 items (10,000 queries, sanity bound 0.1% of |D|) and the top-100 frequent
itemsets found, mean of ``--runs`` runs. The rule's choice
(:func:`transit_release.mechanisms.diffpart.fanout_for`) is marked. Then the target data set: ≈1 M sets over a
small universe (:func:`transit_release.synth.sets.small_universe_sets`, shaped like the thesis's MSNBC data),
at the rule's fan-out and at the former default 10. Writes ``fanout.csv``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release.mechanisms.diffpart import DiffPartBudget, fanout_for, sanitize_sets  # noqa: E402
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.synth.sets import small_universe_sets, stm_like_sets  # noqa: E402
from transit_release.utility.sets import (WeightedSets, count_query_error, query_workload,  # noqa: E402
                                          release_pairs, top_k_itemsets)


def score(sets, pairs, weighted, workload, fanout: int, runs: int, top: bool) -> dict:
    truth = set(top_k_itemsets(pairs, sets.universe_size, 100)) if top else set()
    errs, tps, secs = [], [], []
    for run in range(runs):
        budget = DiffPartBudget.of(1.0, sets.universe_size, fanout)
        t = time.perf_counter()
        released = sanitize_sets(sets, budget, NoiseSource(seed=100 + run).stream("fanout", str(fanout))).released
        secs.append(time.perf_counter() - t)
        errs.append(count_query_error(weighted, WeightedSets.of(released, sets.universe_size), workload)["max_q3"])
        if top:
            tps.append(len(truth & set(top_k_itemsets(released, sets.universe_size, 100))))
    return {"error_q3": float(np.mean(errs)), "top100_tp": float(np.mean(tps)) if tps else float("nan"),
            "seconds": float(np.mean(secs))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--fanouts", default="3,4,5,6,8,10")
    ap.add_argument("--sizes", default="16,68,278,1012")
    ap.add_argument("--big-records", type=int, default=989_818)
    ap.add_argument("--big-runs", type=int, default=3)
    ap.add_argument("--top", action="store_true", help="also the top-100 itemsets of every setting (slower)")
    ap.add_argument("--shape", choices=("small", "stm"), default="small")
    ap.add_argument("--skip-sweep", action="store_true", help="only the ≈1 M-record target data set")
    ap.add_argument("--out", type=Path, default=Path("release_reports/experiments-fanout"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in [] if args.skip_sweep else [int(x) for x in args.sizes.split(",")]:
        sets = (small_universe_sets(args.records, size, seed=size) if args.shape == "small"
                else stm_like_sets(args.records, size, seed=size, max_size=min(64, size)))
        pairs = release_pairs(sets)
        weighted = WeightedSets.of(pairs, size)
        workload = query_workload(size, 3, per_subset=10_000, seed=12, max_sizes=[3])
        rule = fanout_for(size)
        for f in [int(x) for x in args.fanouts.split(",")]:
            r = {"data": f"{args.shape} {args.records:,}", "universe": size, "fanout": f, "rule": f == rule,
                 **score(sets, pairs, weighted, workload, f, args.runs, args.top)}
            rows.append(r)
            print(r, flush=True)
            pd.DataFrame(rows).to_csv(args.out / "fanout.csv", index=False)
    big = small_universe_sets(args.big_records)
    pairs = release_pairs(big)
    weighted = WeightedSets.of(pairs, big.universe_size)
    workload = query_workload(big.universe_size, 3, per_subset=10_000, seed=12, max_sizes=[3])
    rule = fanout_for(big.universe_size)
    for f in sorted({rule, 10}):
        r = {"data": f"small universe {len(big):,}", "universe": big.universe_size, "fanout": f, "rule": f == rule,
             **score(big, pairs, weighted, workload, f, args.big_runs, True)}
        rows.append(r)
        print(r, flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "fanout.csv", index=False)
    print("\n== containment queries of 1–3 items at ε = 1: mean relative error (and top-100 itemsets found) ==")
    table = df.pivot_table(index=["data", "universe"], columns="fanout", values="error_q3")
    print(table.to_string(float_format=lambda x: f"{x:.3f}"))
    print("\nthe rule's fan-out: " + ", ".join(f"|I| = {u}: f = {fanout_for(u)}"
                                              for u in sorted(df["universe"].unique())))
    print(df[df["rule"] | (df["fanout"] == 10)].to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
