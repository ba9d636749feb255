"""Time of the utility evaluation of a sequence release (not a test).

    python benchmarks/bench_sequence_utility.py [--sequences 1000000] [--old]

Sanitizes the synthetic metro once with the hybrid prefix tree (h = 12) and once with the
n-gram sanitizer (ℓmax = 20, nmax = 5), both at ε = 1, then times
``sequence_release.evaluate`` — both workloads, every query evaluated exactly:
40,000 set-containment count queries and the top-100/200/300 PrefixSpan patterns
(the prefix-tree paper's), 5 × 10,000 contiguous-occurrence count queries and the
top-20…100 grams (the n-gram thesis's) — raw side and release side, part by part.

``--old`` also times the evaluation as it was before (bitsets on the expanded release and one
run of the ``prefixspan`` package per k and per data set), which is where the two minutes went.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release.mechanisms.ngram import sanitize_ngrams  # noqa: E402
from transit_release.mechanisms.prefix_tree import sanitize_sequences  # noqa: E402
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.synth.metro import synthesize_metro  # noqa: E402
from transit_release.utility.sequence_evaluation import SequenceUtility  # noqa: E402
from transit_release.utility.sequences import count_query_error, expand_release, query_workload  # noqa: E402


def old_evaluation(seqs, release, ks=(100, 200, 300)) -> dict[str, float]:
    """The evaluation as it was: expand, bitsets, and the prefixspan package once per k and data set."""
    from prefixspan import PrefixSpan

    def top(data, k):
        ps = PrefixSpan(data.to_lists())
        ps.minlen = 2
        return {tuple(p) for _, p in ps.topk(k)}

    times = {}
    t = time.perf_counter()
    released = expand_release(release, seqs.n_locations)
    times["expand"] = time.perf_counter() - t
    t = time.perf_counter()
    count_query_error(seqs, released, query_workload(seqs.n_locations, 12, 40_000, seed=0))
    times["count_queries"] = time.perf_counter() - t
    t = time.perf_counter()
    for k in ks:
        top(seqs, k), top(released, k)
    times["prefixspan_6_runs"] = time.perf_counter() - t
    times["total"] = sum(times.values())
    return {k: round(v, 2) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=1_000_000)
    ap.add_argument("--old", action="store_true", help="also time the previous evaluation (about two minutes)")
    args = ap.parse_args()
    seqs, metro = synthesize_metro(args.sequences, seed=0)
    releases = {
        "prefix_tree_hybrid": sanitize_sequences(seqs, 1.0, 12, "hybrid", metro.taxonomy,
                                                 NoiseSource().stream("bench", "hybrid"))[1],
        "ngram": sanitize_ngrams(seqs, 1.0, 20, 5, NoiseSource().stream("bench", "ngram")).sequences,
    }
    for name, release in releases.items():
        t = time.perf_counter()
        utility = SequenceUtility(seqs)  # what sequence_release.evaluate does: raw side, then the release
        metrics = utility.evaluate(release)
        total = time.perf_counter() - t
        row = {"release": name, "sequences": len(seqs), "evaluate_s": round(total, 2),
               **{k: round(v, 2) for k, v in utility.timings.items()},
               "gram_query.max_q4": round(metrics["gram_query.relative_error.max_q4"], 4),
               "patterns.top100.tp": metrics["patterns.top100.tp"], "grams.top100.tp": metrics["grams.top100.tp"]}
        print(json.dumps(row), flush=True)
    if args.old:
        for name, release in releases.items():
            print(json.dumps({"release": name, "old_evaluation_s": old_evaluation(seqs, release)}), flush=True)


if __name__ == "__main__":
    main()
