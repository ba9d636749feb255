"""Speed of the prefix-tree sanitizer on the synthetic metro (not a test).

    python benchmarks/bench_prefix_tree.py [--sizes 1000000,4000000] [--variants hybrid,simple]

For each size and variant: the time to build the noisy tree, to run the
constrained inference and to generate the release, and the tree's size, over
68 stations (the metro's line taxonomy) and over 944 locations (a fan-out
taxonomy of 16 per group, locations drawn by popularity). The simple variant over
944 locations is refused (``TreeTooLargeError``): its empty nodes alone would
number about 3e20 at h = 12 (Theorem 4.2 of the paper).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transit_release.mechanisms.prefix_tree import (Sequences, Taxonomy, TreeBudget, TreeTooLargeError,  # noqa: E402
                                                    build_noisy_prefix_tree, constrained_inference,
                                                    release_sequences)
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.synth.metro import synthesize_metro  # noqa: E402


def widen(seqs: Sequences, n_locations: int, seed: int = 0) -> Sequences:
    """The same sequences over a larger universe (each station split into several stops)."""
    rng = np.random.default_rng(seed)
    start = (seqs.locations * n_locations) // seqs.n_locations
    span = ((seqs.locations + 1) * n_locations) // seqs.n_locations - start
    locs = start + (rng.random(seqs.locations.size) * span).astype(np.int64)
    return Sequences(locs.astype(np.int64), seqs.offsets, n_locations)


def run(seqs: Sequences, taxonomy: Taxonomy, variant: str, eps: float, h: int) -> dict:
    gen = NoiseSource().stream("bench", variant)
    budget = TreeBudget.of(eps, h, variant, taxonomy)
    t0 = time.perf_counter()
    tree = build_noisy_prefix_tree(seqs, budget, taxonomy, gen)
    t1 = time.perf_counter()
    bar = constrained_inference(tree)
    t2 = time.perf_counter()
    release = release_sequences(tree, bar)
    t3 = time.perf_counter()
    return {"build_s": round(t1 - t0, 2), "inference_s": round(t2 - t1, 2), "release_s": round(t3 - t2, 2),
            "total_s": round(t3 - t0, 2), "nodes": tree.n_nodes, "released_prefixes": len(release)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,4000000")
    ap.add_argument("--variants", default="hybrid,simple")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--height", type=int, default=12)
    args = ap.parse_args()
    results = []
    for size in (int(x) for x in args.sizes.split(",")):
        seqs, metro = synthesize_metro(size, seed=0)
        cases = [("68 stations", seqs, metro.taxonomy)]
        wide = widen(seqs, 944)
        cases.append((f"{wide.n_locations} locations", wide, Taxonomy.from_fanout(wide.n_locations, 16)))
        for label, data, tax in cases:
            for variant in args.variants.split(","):
                r = {"sequences": size, "universe": label, "variant": variant}
                try:
                    r.update(run(data, tax, variant, args.epsilon, args.height))
                except TreeTooLargeError as exc:  # refused before any noise is drawn
                    r["refused"] = str(exc)
                print(json.dumps(r), flush=True)
                results.append(r)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
