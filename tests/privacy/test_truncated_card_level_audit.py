"""Empirical audit of the truncated-noise card-level SBH (``truncated_card_level_stability_histogram``).

The claim: at the card budget (ε_j, δ_j) with ``(l0, l1, l∞) = (k, k, k)``, noise bounded by ``A`` and threshold
``A + k + 1``, the marginal is (ε_j, δ_j)-DP for add/remove one card. Its δ is no longer spent on a key the card
holds alone (never released: checked exactly in ``tests/test_truncated_sbh.py``) but on the edge of the noise
support when the card's k rows land on a key others share: D has 60 riders at a key, D′ the same plus one card
whose k kept trips are at that key (62). The tight events are "released ≥ 60 + A + 1" (possible only on D′).
The negative control lowers the budget's noise bound by 3 (a monkeypatch of ``TruncatedCardLevelBudget.noise_bound``,
which the sanitizer reads) while claiming the same δ: it must FAIL. The whole release path (streamed input,
bounding, this sanitizer) is audited in ``test_card_level_audit.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import transit_release.mechanisms.stability_histogram as sbh
from transit_release.noise import NoiseSource
from tests.privacy.audit import check, run_case

pytestmark = pytest.mark.privacy

NOT_RELEASED = -1
BASE = 60
EPS, DELTA, K = 2.0, 1e-3, 2  # stressed so that δ is measurable


def draw_of(count: int, budget: sbh.TruncatedCardLevelBudget, generator):
    def draw(n: int) -> np.ndarray:
        res = sbh.truncated_card_level_stability_histogram(np.full(n, count, dtype=np.int64), budget, generator)
        out = np.full(n, NOT_RELEASED, dtype=np.int64)
        out[res.kept] = res.counts
        return out
    return draw


def shared_key_case(name: str, runs: int, seed: int | None, control: str = ""):
    budget = sbh.TruncatedCardLevelBudget(EPS, DELTA, K)
    a = budget.noise_bound
    assert BASE - a > budget.threshold  # every draw is released: the audit sees the noise itself
    g = NoiseSource(seed=seed)
    ev = {}
    for x in range(BASE + a - 3, BASE + a + K + 1):
        ev[f"released ≥ {x}"] = lambda v, x=x: v >= x
    for x in range(BASE - a - 1, BASE - a + K + 2):
        ev[f"released ≤ {x}"] = lambda v, x=x: (v != NOT_RELEASED) & (v <= x)
    for x in range(BASE - 4, BASE + 6, 2):
        ev[f"released ≥ {x} (centre)"] = lambda v, x=x: v >= x
    return run_case(name, "card-level SBH, truncated noise",
                    draw_of(BASE, budget, g.stream("trunc", name, "D")),
                    draw_of(BASE + K, budget, g.stream("trunc", name, "D2")), ev, runs,
                    budget.epsilon, budget.delta, control=control)


def test_a_card_on_a_shared_key_moves_the_output_within_its_claim(audit_sizes, audit_seed, audit_report):
    result = shared_key_case("card-level truncated: a card's k trips on a key 60 riders share", audit_sizes.sbh,
                             audit_seed)
    check(result, audit_report, "PASS")


def test_control_the_noise_bound_lowered_fails(monkeypatch, audit_sizes, audit_seed, audit_report):
    original = sbh.TruncatedCardLevelBudget.noise_bound
    monkeypatch.setattr(sbh.TruncatedCardLevelBudget, "noise_bound", property(lambda b: original.fget(b) - 3))
    result = shared_key_case("card-level truncated: the same, noise bound lowered by 3", audit_sizes.sbh_control,
                             audit_seed, control="noise bound lowered by 3")
    check(result, audit_report, "FAIL")
