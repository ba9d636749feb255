"""The audit's statistics: Clopper–Pearson bounds, ε lower bounds, Bonferroni, verdicts, calibration."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from tests.privacy.audit import AuditReport, audit, count_events, cp_lower, cp_upper, log_ratio

pytestmark = pytest.mark.privacy


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (1, 1000), (500, 1000), (999_000, 1_000_000)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n):
    ci = binomtest(k, n).proportion_ci(confidence_level=0.98, method="exact")
    assert float(cp_lower(k, n, 0.01)) == pytest.approx(ci.low, rel=1e-9, abs=1e-15)
    assert float(cp_upper(k, n, 0.01)) == pytest.approx(ci.high, rel=1e-9, abs=1e-15)


def test_clopper_pearson_closed_forms_at_the_edges():
    n, a = 2000, 1e-4
    assert float(cp_upper(0, n, a)) == pytest.approx(1 - a ** (1 / n), rel=1e-12)
    assert float(cp_lower(n, n, a)) == pytest.approx(a ** (1 / n), rel=1e-12)
    assert float(cp_lower(0, n, a)) == 0.0 and float(cp_upper(n, n, a)) == 1.0


def test_log_ratio_edges():
    assert float(log_ratio(0.5, 0.25, 0.0)) == pytest.approx(math.log(2))
    assert float(log_ratio(0.3, 0.1, 0.1)) == pytest.approx(math.log(2))
    assert float(log_ratio(0.1, 0.5, 0.1)) == -math.inf  # no evidence once δ covers the event
    assert float(log_ratio(0.2, 0.0, 0.1)) == math.inf


def test_bounds_both_directions_complements_and_bonferroni():
    r = audit("c", "m", {"S": 300, "T": 50}, {"S": 100, "T": 50}, 1000, 1000, 1.0, 0.0, alpha=0.01)
    assert r.n_tests == 2 * 2 * 2  # 2 events, their complements, both directions
    level = 0.01 / (2 * r.n_tests)
    s = next(b for b in r.bounds if b.event == "S" and b.direction == "D vs D′")
    assert s.eps_lb == pytest.approx(math.log(float(cp_lower(300, 1000, level)) / float(cp_upper(100, 1000, level))))
    assert s.eps_ub == pytest.approx(math.log(float(cp_upper(300, 1000, level)) / float(cp_lower(100, 1000, level))))
    assert s.eps_hat == pytest.approx(math.log(3))
    back = next(b for b in r.bounds if b.event == "not (S)" and b.direction == "D′ vs D")
    assert (back.hits_num, back.hits_den) == (900, 700)
    assert r.worst.event == "S" and r.verdict == "PASS"  # ε_lb ≈ 0.8 < 1
    assert audit("c", "m", {"S": 300}, {"S": 100}, 1000, 1000, 0.5, 0.0).verdict == "FAIL"


def test_epsilon_and_delta_lower_bounds_agree():
    rng = np.random.default_rng(3)
    for _ in range(200):
        k1, k2 = rng.integers(0, 1001, 2)
        eps, delta = rng.uniform(0.1, 2), rng.choice([0.0, 0.01, 0.1])
        for b in audit("c", "m", {"S": k1}, {"S": k2}, 1000, 1000, eps, delta).bounds:
            if math.isfinite(b.eps_lb) or b.eps_lb == math.inf:
                assert (b.eps_lb > eps) == (b.delta_lb > delta)


@pytest.mark.parametrize("eps,delta", [(1.0, 0.0), (1.0, 0.05), (0.3, 0.01)])
def test_a_mechanism_at_exactly_its_claim_fails_at_most_alpha_of_the_time(eps, delta):
    """Calibration on randomized response tight at (ε, δ) in both directions and for both outcomes:
    ``P_D(1) = (e^ε + δ)/(e^ε + 1)``, ``P_D′(1) = (1 − δ)/(e^ε + 1)``; many simulated audits."""
    rng = np.random.default_rng(11)  # simulation of counts only, not privacy noise
    n, alpha, sims = 5000, 0.2, 300
    p, q = (math.exp(eps) + delta) / (math.exp(eps) + 1), (1 - delta) / (math.exp(eps) + 1)
    assert p == pytest.approx(math.exp(eps) * q + delta) and 1 - q == pytest.approx(math.exp(eps) * (1 - p) + delta)
    k1, k2 = rng.binomial(n, p, sims), rng.binomial(n, q, sims)
    results = [audit("sim", "m", {"1": int(a)}, {"1": int(b)}, n, n, eps, delta, alpha=alpha) for a, b in zip(k1, k2)]
    assert sum(not r.passed for r in results) / sims <= alpha
    assert np.median([r.worst.eps_lb for r in results]) > 0.6 * eps  # and the bound is not vacuous
    # a mechanism at 2ε is caught
    p2, q2 = (math.exp(2 * eps) + delta) / (math.exp(2 * eps) + 1), (1 - delta) / (math.exp(2 * eps) + 1)
    a, b = rng.binomial(10 * n, p2), rng.binomial(10 * n, q2)
    assert audit("sim", "m", {"1": int(a)}, {"1": int(b)}, 10 * n, 10 * n, eps, delta).verdict == "FAIL"


def test_count_events_does_not_depend_on_the_chunk_size():
    def draw_factory():
        rng = np.random.default_rng(5)
        return lambda size: rng.integers(0, 10, size)
    events = {"small": lambda x: x < 3, "seven": lambda x: x == 7}
    a = count_events(draw_factory(), events, 10_000, chunk=10_000)
    b = count_events(draw_factory(), events, 10_000, chunk=10_000)
    c = count_events(draw_factory(), events, 10_000, chunk=333)
    assert a == b and sum(c.values()) > 0 and set(c) == set(a)
    with pytest.raises(ValueError, match="shape"):
        count_events(draw_factory(), {"bad": lambda x: x[:1] > 0}, 10, chunk=10)


def test_report_writes_markdown_and_json(tmp_path):
    report = AuditReport("ci", "1")
    report.add(audit("case one", "SBH", {"S": 60}, {"S": 0}, 100, 100, 1.0, 0.0, control="broken"))
    files = report.write(tmp_path)
    md, js = (p.read_text(encoding="utf-8") for p in files)
    assert "| case one | SBH | broken | 1 |" in md and "FAIL" in md
    data = json.loads(js)
    assert data["cases"][0]["verdict"] == "FAIL" and data["cases"][0]["eps_ci"][1] == "inf"
