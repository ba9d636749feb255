"""Speed and size of the n-gram sanitizer on the synthetic metro (not a test).

    python benchmarks/bench_ngram.py [--sizes 1000000,4000000] [--epsilon 1.0] [--max-length 20] [--max-gram 5]

For each size: the time to build the noisy exploration tree (truncation, counting and noise),
to enforce consistency, to list the published n-gram table and to build the synthetic
database (the fastest of ``--repeat`` runs, each with fresh noise: the machine is shared);
the tree's size and the output sizes; the peak memory those steps allocate (``tracemalloc``,
a separate run, so that tracing does not slow the timed ones). The integer
noise tables (one per budget a count can be produced with) are built once per process by
``noise_delta`` at planning time, before any timing: their cost is printed separately.
68 stations (the synthetic metro), ``ℓmax = 20``, ``nmax = 5`` by default.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release.mechanisms.ngram import (NGramBudget, build_exploration_tree, enforce_consistency,  # noqa: E402
                                              noise_delta, released_ngrams, synthetic_database)
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.synth.metro import synthesize_metro  # noqa: E402


def run(seqs, budget: NGramBudget) -> dict:
    gen = NoiseSource().stream("bench", "ngram")
    t0 = time.perf_counter()
    tree = build_exploration_tree(seqs, budget, gen)
    t1 = time.perf_counter()
    enforce_consistency(tree)
    t2 = time.perf_counter()
    table = released_ngrams(tree)
    t3 = time.perf_counter()
    database = synthetic_database(tree)
    t4 = time.perf_counter()
    return {"build_s": round(t1 - t0, 2), "consistency_s": round(t2 - t1, 2), "table_s": round(t3 - t2, 2),
            "synthetic_s": round(t4 - t3, 2), "total_s": round(t4 - t0, 2), "nodes": tree.n_nodes,
            "levels": len(tree.levels), "expanded": int(sum(lv.expanded.sum() for lv in tree.levels)),
            "published_grams": len(table), "synthetic_distinct": len(database),
            "synthetic_sequences": sum(c for _, c in database)}


def peak_memory_mb(seqs, budget: NGramBudget) -> float:
    tracemalloc.start()
    tree = build_exploration_tree(seqs, budget, NoiseSource().stream("bench", "memory"))
    enforce_consistency(tree)
    released_ngrams(tree)
    synthetic_database(tree)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return round(peak / 2**20, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,4000000")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--max-length", type=int, default=20)
    ap.add_argument("--max-gram", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per size; the fastest is reported")
    ap.add_argument("--no-memory", action="store_true", help="skip the traced run")
    args = ap.parse_args()
    results = []
    for size in (int(x) for x in args.sizes.split(",")):
        t = time.perf_counter()
        seqs, metro = synthesize_metro(size, seed=0)
        made = time.perf_counter() - t
        budget = NGramBudget.of(args.epsilon, args.max_length, args.max_gram, metro.n_stations)
        t = time.perf_counter()
        delta = noise_delta(budget)  # builds every noise table the tree can use (cached per process)
        tables = time.perf_counter() - t
        r = {"sequences": size, "taps": int(seqs.locations.size), "epsilon": args.epsilon,
             "max_length": args.max_length, "max_gram": args.max_gram, "synthesize_metro_s": round(made, 1),
             "noise_tables_s": round(tables, 2), "delta": delta}
        runs = [run(seqs, budget) for _ in range(args.repeat)]
        r.update(runs[0])
        for key in ("build_s", "consistency_s", "table_s", "synthetic_s", "total_s"):
            r[key] = min(x[key] for x in runs)  # the least disturbed run (the machine is shared)
        if not args.no_memory:
            r["peak_traced_mb"] = peak_memory_mb(seqs, budget)
        print(json.dumps(r), flush=True)
        results.append(r)
    if len(results) > 1:
        a, b = results[0], results[-1]
        print(f"scaling {b['sequences'] / a['sequences']:.0f}× data: total {b['total_s'] / a['total_s']:.2f}×, "
              f"build {b['build_s'] / max(a['build_s'], 1e-9):.2f}×")


if __name__ == "__main__":
    main()
