"""Stability-based histogram (SBH): Algorithm 1 of Asghar, Tyler & Kaafar (2018).

For every point ``x`` *present* in the data (never for absent points):
``a_x = q_x(D) + Z`` with ``Z`` discrete Laplace at scale ``t = 2/ε``; the
point is released with count ``a_x`` when ``a_x ≥ T`` and dropped otherwise.

Privacy (Theorem 5 of the paper, adapted to integer noise). Neighbours differ
by *replacing* one row, which changes two points by one each. For one changed
point: if it is present on both sides, the shift by one costs ``ε/2`` (the
ratio of neighbouring discrete-Laplace masses is ``e^{1/t} = e^{ε/2}``); if it
is absent on one side, the only difference is the "bad event" that a true
count of 1 passes the threshold, ``P(1 + Z ≥ T)``. We choose the smallest
integer ``T`` with

    P̂(Z ≥ T - 1) + (1 + e^{ε/2}) · η  ≤  δ/2

where ``P̂`` is the distribution actually drawn and ``η`` its exact
total-variation distance to the ideal one (see :mod:`transit_release.noise`).
For the ideal distribution this is the spec's
``T = 1 + ceil(t · ln(2 / (δ (1 + a))))`` with ``a = e^{-1/t}``: 34 at ε = 1
and 18 at ε = 2 for δ = 1/8,000,000. Each point is (ε/2, δ/2)-indistinguishable,
so the histogram is (ε, δ)-DP under replace-one and (ε/2, δ/2)-DP under
add/remove-one neighbours.

Where we differ from the paper, and why: the paper adds continuous Laplace
noise, thresholds at ``2 ln(2/δ)/ε + 1`` and rounds. We follow the spec
(``../shared/specs/stability_histogram.md``): integer noise, so no rounding is
needed and nothing of the true count leaks through floating-point artefacts;
the threshold is the exact integer bound above, which gives the same smallest
released counts as the paper's rounding (34 and 18).

Order: the caller passes the counts of the present points in key order; the
output is in that same order, never in the data's order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from transit_release.noise import discrete_laplace_table, exact_fraction

MECHANISM_NAME = "stability_histogram"


def sbh_scale(epsilon: float) -> Fraction:
    """Noise scale ``t = 2/ε`` (sensitivity 1 per point, two points per replacement)."""
    eps = exact_fraction(epsilon)
    if eps <= 0:
        raise ValueError(f"epsilon must be positive. Found {float(eps)}.")
    return Fraction(2) / eps


def bad_event_bound(epsilon: float, threshold: int) -> float:
    """Per-point δ actually achieved: ``P̂(Z ≥ T-1) + (1 + e^{ε/2}) η``."""
    table = discrete_laplace_table(sbh_scale(epsilon))
    return table.upper_tail(threshold - 1) + (1.0 + math.exp(float(epsilon) / 2.0)) * table.total_variation


def sbh_threshold(epsilon: float, delta: float) -> int:
    """The smallest integer threshold ``T`` whose bad event is at most ``δ/2``."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1). Found {delta}.")
    table = discrete_laplace_table(sbh_scale(epsilon))
    slack = (1.0 + math.exp(float(epsilon) / 2.0)) * table.total_variation
    for k in range(1, table.support_max + 2):
        if table.upper_tail(k) + slack <= delta / 2.0:
            return k + 1
    raise ValueError(
        f"delta={delta:.3g} is too small for epsilon={float(epsilon)}: "
        f"the noise table's error bound {slack:.3g} already exceeds delta/2."
    )


@dataclass(frozen=True)
class SBHResult:
    """Positions (into the input) of released points and their released counts."""

    kept: np.ndarray  # int64 positions, increasing
    counts: np.ndarray  # int64, >= threshold
    threshold: int


def stability_histogram(
    counts: np.ndarray,
    epsilon: float,
    delta: float,
    generator: np.random.Generator,
) -> SBHResult:
    """Run the SBH on the true counts of the points present in one histogram.

    ``counts`` must be positive integers (absent points are never passed in).
    """
    counts = np.asarray(counts)
    if counts.ndim != 1:
        raise ValueError(f"counts must be one-dimensional. Found shape {counts.shape}.")
    if counts.size and (not np.issubdtype(counts.dtype, np.integer) or counts.min() < 1):
        raise ValueError("counts must be positive integers: only points present in the data are sanitized.")
    threshold = sbh_threshold(epsilon, delta)
    noisy = counts.astype(np.int64) + discrete_laplace_table(sbh_scale(epsilon)).sample(generator, counts.size)
    kept = np.flatnonzero(noisy >= threshold)
    return SBHResult(kept=kept, counts=noisy[kept], threshold=threshold)
