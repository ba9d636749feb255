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


# ---- each marginal at its own share, through the release's own loop over them (#40) ---------------------------------
#
# The cases above and the card-level audit give every marginal one budget: a release that drew marginals 1–4 with
# the budget of 5–6 (ε_j = 0.2 instead of 0.1 at the card defaults: half their noise) passed them all. This draws
# through ``opal.sanitize_partition`` — the loop that gives each marginal its budget — on the card-level defaults,
# with every marginal's key well above its threshold (every draw released: the audit sees the noise) and D′ adding
# one card's k trips there: "released ≥ c + k + i" has ratio exactly e^{ε_j}, the ε the ledger charges that marginal
# (``opal.plan_spends``). One sanitize_partition call on n keys per marginal is n independent runs of each.

MARGINAL_CASES = ("tap_on_time", "tap_on_time_location")  # ε_j = 0.1 (j = 1..4) and 0.2 (j = 5, 6) by default


def per_marginal_case(marginal: str, runs: int, seed, control: str = ""):
    from datetime import date

    from tests.privacy.audit import OneStream
    from transit_release.config import MARGINALS, load_release_config
    from transit_release.inputs.screening import Period
    from transit_release.preprocessing import Histogram, PartitionHistograms
    from transit_release.releases import opal

    config = load_release_config(None, "card")
    period = Period(date(2016, 8, 8), date(2016, 8, 14))
    charged = {e.marginal: e for e in opal.plan_spends(period, config, "audit", "f", "0")
               if (e.mode, e.date) == (config.modes[0], "20160808")}
    k = config.bounds.max_trips_per_partition
    base = {m.name: config.sbh_budget(m.name).threshold + config.sbh_budget(m.name).noise_bound + 5
            for m in MARGINALS}  # from the public budget: every draw is released

    def draw_of(extra: int, generator):
        def draw(n: int) -> np.ndarray:
            keys = np.arange(n, dtype=np.int64)
            ph = PartitionHistograms(config.modes[0], "20160808", n, {
                m.name: Histogram(keys, np.full(n, base[m.name] + extra, dtype=np.int64)) for m in MARGINALS})
            released = opal.sanitize_partition(ph, config, OneStream(generator)).released[marginal]
            out = np.full(n, NOT_RELEASED, dtype=np.int64)
            out[released.keys] = released.counts
            return out
        return draw

    c = base[marginal]
    events = {f"released ≥ {c + k + i}": (lambda v, x=c + k + i: v >= x) for i in (0, 1, 2, 4)}
    g = NoiseSource(seed=seed)
    name = f"card-level release: marginal {marginal} at its own ε_j, through the release's loop over marginals"
    return run_case(name, "card-level SBH, truncated noise", draw_of(0, g.stream("marginal", marginal, "D")),
                    draw_of(k, g.stream("marginal", marginal, "D2")), events, runs, charged[marginal].epsilon,
                    charged[marginal].delta, control=control)


@pytest.mark.parametrize("marginal", MARGINAL_CASES)
def test_each_marginal_is_drawn_at_its_own_share(marginal, audit_sizes, audit_seed, audit_report):
    check(per_marginal_case(marginal, audit_sizes.sbh // 2, audit_seed), audit_report, "PASS", power=0.6)


def test_control_the_first_marginals_drawn_with_the_last_ones_budget_fails(monkeypatch, audit_sizes, audit_seed,
                                                                           audit_report):
    """The review's kind of regression: every marginal drawn with the budget of j = 6 (at the defaults, j = 1..4 at
    ε 0.2 instead of 0.1); the charge unchanged."""
    from transit_release.config import MARGINALS, ReleaseConfig

    original = ReleaseConfig.sbh_budget
    monkeypatch.setattr(ReleaseConfig, "sbh_budget", lambda self, name: original(self, MARGINALS[-1].name))
    check(per_marginal_case("tap_on_time", audit_sizes.sbh_control, audit_seed,
                            control="marginals drawn with the budget of j = 6"), audit_report, "FAIL")
