"""Time the integer noise samplers: table builds (up to the scale limit) and the empty-candidate sampler.

Run from a checkout (the same script also runs on an older checkout, for comparison):

    cd <checkout> && PYTHONPATH=$PWD nice -n 10 python benchmarks/bench_noise_samplers.py [--quick]

Prints, per scale, the table's build time, entries, bytes and exact TV η with the δ charge
(1 + e^{1/t})·η; then the time of ``sample_passing_empties`` for 10^6 groups × 68 candidates
at prefix-tree scales and thresholds (best of three). Times are CPU seconds of this process
(less sensitive than wall time to other processes on a shared machine).
"""

from __future__ import annotations

import math
import sys
import time
from fractions import Fraction

import numpy as np

import transit_release.noise as noise
from transit_release.mechanisms.empty_candidates import sample_passing_empties
from transit_release.noise import NoiseSource, discrete_laplace_table


def main(quick: bool) -> None:
    limit = getattr(noise, "MAX_SCALE", None)
    low = getattr(noise, "MIN_SCALE", None)
    scales = [Fraction(1), Fraction(12), Fraction(102), Fraction(1000), Fraction(10_000)]
    if low is not None:
        scales.insert(0, low)
    if limit is not None and not quick:
        scales.append(limit)
    print("scale        build_s   entries      MB   eta        (1+e^(1/t))*eta")
    for scale in scales:
        discrete_laplace_table.cache_clear()
        t0 = time.process_time()
        table = discrete_laplace_table(scale)
        dt = time.process_time() - t0
        eta = table.total_variation
        print(f"{float(scale):<12.6g} {dt:7.3f} {table.cuts.size:9d} {table.cuts.nbytes / 1e6:7.2f}   "
              f"{eta:.3e}  {(1 + math.exp(1 / float(scale))) * eta:.3e}")
    groups = 10 ** 5 if quick else 10 ** 6
    # simple variant ε=1, h=12 (station scale 12, θ 34); hybrid ε=1, h=12, f=17 (stations 13.6/39, groups 102/577)
    for scale, threshold in ((Fraction(12), 34), (Fraction(68, 5), 39), (Fraction(102), 577)):
        discrete_laplace_table(scale)
        m = np.full(groups, 68)
        times = []
        for rep in range(3):
            gen = NoiseSource(seed=rep).stream("bench")
            t0 = time.process_time()
            out = sample_passing_empties(gen, m, scale, threshold)
            times.append(time.process_time() - t0)
        print(f"sample_passing_empties {groups:,} groups x 68, scale {float(scale):g}, threshold {threshold}: "
              f"{min(times):.3f} s (best of 3), {out.size:,} passing")


if __name__ == "__main__":
    main("--quick" in sys.argv)
