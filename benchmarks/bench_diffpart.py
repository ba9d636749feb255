"""Speed of the DiffPart sanitizer on STM-shaped set data (not a test).

    python benchmarks/bench_diffpart.py [--sizes 1200000,4800000] [--epsilon 1] [--fanout 10] [--repeat 1]

For each size: 1,012 stations, sets shaped like the thesis's STM data (average ≈ 4.8 stations, largest 64;
:func:`transit_release.synth.sets.stm_like_sets`), the time to sanitize at ε = 1, f = 10 with the default
C1, C2 (generation not counted), the partitioning's size and the release's size. The noise tables are
built afresh for every run (their caches are cleared), as in a single release. Target: 1.2M sets in ≤ 20 s
(the thesis's C++: under 35 s) and time linear in |D| (the 4× run about 4× the 1× run, or less).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release import noise  # noqa: E402
from transit_release.mechanisms.diffpart import DiffPartBudget, delta_slack, sanitize_sets  # noqa: E402
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.synth.sets import STM_STATIONS, stm_like_sets  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1200000,4800000")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--fanout", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    budget = DiffPartBudget.of(args.epsilon, STM_STATIONS, args.fanout)
    results = []
    for size in (int(x) for x in args.sizes.split(",")):
        t = time.perf_counter()
        data = stm_like_sets(size, seed=0)
        gen_s = time.perf_counter() - t
        for rep in range(args.repeat):
            noise.discrete_laplace_table.cache_clear()
            t = time.perf_counter()
            result = sanitize_sets(data, budget, NoiseSource().stream("bench", str(size), str(rep)))
            elapsed = time.perf_counter() - t
            r = {"sets": size, "stations": STM_STATIONS, "avg_size": round(float(data.sizes.mean()), 2),
                 "max_size": int(data.sizes.max()), "epsilon": args.epsilon, "fanout": args.fanout,
                 "C2": float(budget.c_split), "C1": float(budget.c_leaf), "generate_s": round(gen_s, 2),
                 "sanitize_s": round(elapsed, 2), **result.stats, "released_sets": len(result.released),
                 "released_records": sum(c for _, c in result.released), "delta_slack": delta_slack(budget)}
            print(json.dumps(r), flush=True)
            results.append(r)
    if len(results) > 1:
        base = results[0]
        for r in results[1:]:
            print(f"{r['sets'] / base['sets']:.1f}x sets: {r['sanitize_s'] / base['sanitize_s']:.2f}x time")


if __name__ == "__main__":
    main()
