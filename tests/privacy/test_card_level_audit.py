"""Empirical audit of the card-level Opal release: contribution bounding, then the card-level SBH.

The claim (``CardStabilityHistogramEvent``): after bounding (at most k trips per card per (mode, date)
partition, at most P partitions per card), one card changes each marginal's histogram by at most
(L0, L1, L∞) = (k, k, k), and the card-level SBH of a marginal with (ε_j, δ_j) is (ε_j, δ_j)-DP for
add/remove one card. The neighbours: D, and D′ = D plus one card with many trips in one partition (far
more than k), all at the same tap-on time, so its whole contribution lands on one key of the tap-on-time
histogram — the tight case for L1 = k.

Each run is the project's own code path: :func:`transit_release.releases.opal.bound_card_contributions`
on the trips (the card's kept trips chosen by the secure source), the histograms, and the sanitizer the
release calls for the configuration's budget (:func:`transit_release.releases.opal.sanitizer_for`: the SBH
with truncated noise). The key a card holds alone is audited for both noises: the truncated one (what
card-level releases draw) and the untruncated card-level SBH (the library function the trip level also uses). The SBH treats points independently, so one call on ``n`` copies of the
watched point is ``n`` independent runs of it. The negative control skips the bounding (a card with an
unbounded number of trips): it must FAIL.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import transit_release.mechanisms.stability_histogram as sbh
from transit_release.config import load_release_config
from transit_release.mechanisms.contribution_bounding import ContributionBounds
from transit_release.noise import NoiseSource, discrete_laplace_table
from transit_release.releases import opal
from tests.privacy.audit import check, run_case

pytestmark = pytest.mark.privacy

NOT_RELEASED = -1
HEAVY_TRIPS = 30  # the added card's trips in one partition, all at 08:00


def trips_of(cards: list[tuple[int, str, int]]) -> pd.DataFrame:
    """(card, tap-on time, stop) rows of the train on Monday 2016-08-08, each 20 minutes long."""
    on = pd.to_datetime([t for _, t, _ in cards])
    return pd.DataFrame({"card_id": np.array([c for c, _, _ in cards], dtype=np.int64), "mode": "train",
                         "tap_on_time": on, "tap_on_stop": np.array([s for _, _, s in cards], dtype=np.int64),
                         "tap_off_time": on + pd.Timedelta(minutes=20),
                         "tap_off_stop": pd.array([s + 1 for _, _, s in cards], dtype="Int64")})


def base_trips() -> pd.DataFrame:
    """D: 60 riders at 08:00 (a count just above the threshold region of the k = 2, ε = 2 marginal)."""
    return trips_of([(1000 + i, "2016-08-08 08:00", 100 + i % 5) for i in range(60)])


def heavy_card() -> pd.DataFrame:
    """30 trips of one card in the 08:00–08:15 window (distinct by their stops)."""
    return trips_of([(7, f"2016-08-08 08:{m % 15:02d}", 200 + m) for m in range(HEAVY_TRIPS)])


def watched_count(trips: pd.DataFrame, bounds: ContributionBounds, seed: int | None, bound: bool) -> int:
    """The tap-on-time count of the 08:00 window after (or, broken, without) the contribution bounding."""
    if bound:
        kept, _ = opal.bound_card_contributions(trips, bounds, NoiseSource(seed=seed))
        trips = trips.loc[kept]
    minute = trips["tap_on_time"].dt.hour * 60 + trips["tap_on_time"].dt.minute
    return int(((minute // 15) == 32).sum())  # the 08:00–08:15 window


def draw_of(count: int, budget, generator: np.random.Generator):
    sanitize = opal.sanitizer_for(budget)

    def draw(n: int) -> np.ndarray:
        res = sanitize(np.full(n, count, dtype=np.int64), budget, generator)
        out = np.full(n, NOT_RELEASED, dtype=np.int64)
        out[res.kept] = res.counts
        return out
    return draw


def events(count: int) -> dict:
    """Tail events around the watched count (where a shift by the card's contribution shows), and dropped."""
    ev = {"dropped": lambda v: v == NOT_RELEASED}
    for x in range(count - 4, count + 16, 2):
        ev[f"released ≥ {x}"] = lambda v, x=x: v >= x
    return ev


def card_case(name: str, bound: bool, runs: int, seed: int, control: str = ""):
    cfg = load_release_config(unit="card").with_overrides(epsilons=[2.0] * 6, delta=1e-3)  # stressed: measurable
    budget = cfg.sbh_budget("tap_on_time")
    bounds = ContributionBounds(cfg.bounds.max_trips_per_partition, cfg.bounds.max_partitions)
    d, d2 = base_trips(), pd.concat([base_trips(), heavy_card()], ignore_index=True)
    c, c2 = watched_count(d, bounds, seed, bound), watched_count(d2, bounds, seed, bound)
    assert c == 60 and c2 == 60 + (2 if bound else HEAVY_TRIPS)  # k = 2 kept, or all of the card's trips
    g = NoiseSource(seed=seed)
    return run_case(name, "card-level SBH", draw_of(c, budget, g.stream("card", name, "D")),
                    draw_of(c2, budget, g.stream("card", name, "D2")), events(c), runs,
                    budget.epsilon, budget.delta, control=control)


def test_a_card_of_many_trips_is_bounded_to_its_claim(audit_sizes, audit_seed, audit_report):
    result = card_case("card-level: a card with 30 trips in one partition added (k = 2)", True,
                       audit_sizes.sbh, audit_seed)
    check(result, audit_report, "PASS")


def test_control_an_unbounded_card_fails(audit_sizes, audit_seed, audit_report):
    result = card_case("card-level: the same card, no contribution bounding", False, audit_sizes.sbh_control,
                       audit_seed, control="bounding skipped (a card's trips unbounded)")
    check(result, audit_report, "FAIL")


def test_the_bounding_keeps_k_per_partition_and_p_partitions_whatever_the_row_order():
    """The card's rows: ≤ k per partition, ≤ P partitions, and the same kept rows for shuffled input (test seed)."""
    bounds = ContributionBounds(2, 3)
    rows = [(7, f"2016-08-{8 + d:02d} 0{h}:00", 100 + h) for d in range(6) for h in range(5)]
    trips = pd.concat([trips_of(rows), base_trips()], ignore_index=True)
    kept, counts = opal.bound_card_contributions(trips, bounds, NoiseSource(seed=5))
    card = trips.loc[kept & (trips["card_id"] == 7).to_numpy()]
    per_day = card["tap_on_time"].dt.date.value_counts()
    assert per_day.max() == 2 and per_day.size == 3 and counts["cards_truncated"] == 1
    shuffled = trips.sample(frac=1, random_state=3)
    kept2, _ = opal.bound_card_contributions(shuffled, bounds, NoiseSource(seed=5))
    a = trips.loc[kept].sort_values(["card_id", "tap_on_time"]).reset_index(drop=True)
    b = shuffled.loc[kept2].sort_values(["card_id", "tap_on_time"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def absent_key_case(name: str, runs: int, seed: int, lowered: int = 0, control: str = "", truncated: bool = True):
    """D′ = D plus one card whose k kept trips are the only ones at a key (03:00): in D the key is absent (never
    released), in D′ its count is k. The claim at the card threshold: Pr[released | D′] ≤ δ_j (and ε_j).
    ``truncated``: the release's noise (bounded by A, threshold A + k + 1: never released at all); otherwise
    the untruncated card-level SBH (released only through the bad event)."""
    cfg = load_release_config(unit="card").with_overrides(epsilons=[2.0] * 6, delta=1e-3)  # stressed: measurable
    budget = cfg.sbh_budget("tap_on_time")
    if not truncated:
        budget = sbh.CardLevelBudget(budget.epsilon, budget.delta, budget.max_rows_per_partition)
    assert isinstance(budget, sbh.TruncatedCardLevelBudget) == truncated
    k = budget.max_rows_per_partition
    threshold = budget.threshold - lowered
    g = NoiseSource(seed=seed)
    generator = g.stream("card-absent", name, "D2")
    table = discrete_laplace_table(budget.scale)

    def draw_d(n: int) -> np.ndarray:
        return np.full(n, NOT_RELEASED, dtype=np.int64)

    def draw_d2(n: int) -> np.ndarray:
        noise = (table.sample_within(generator, budget.noise_bound, n) if truncated else table.sample(generator, n))
        noisy = k + noise
        return np.where(noisy >= threshold, noisy, NOT_RELEASED).astype(np.int64)

    ev = {"released": lambda v: v != NOT_RELEASED}
    for x in range(threshold - 1, budget.threshold + 3):
        ev[f"released ≥ {x}"] = lambda v, x=x: v >= x
    return run_case(name, "card-level SBH" + (", truncated noise" if truncated else ""), draw_d, draw_d2, ev, runs,
                    budget.epsilon, budget.delta, control=control)


@pytest.mark.parametrize("truncated", [True, False], ids=["truncated", "untruncated"])
def test_a_card_alone_at_a_key_is_released_at_most_delta_of_the_time(truncated, audit_sizes, audit_seed,
                                                                      audit_report):
    result = absent_key_case("card-level: a card's k trips alone at a key, present vs absent"
                             + (" (truncated noise)" if truncated else " (untruncated)"), audit_sizes.sbh,
                             audit_seed, truncated=truncated)
    check(result, audit_report, "PASS")


@pytest.mark.parametrize("truncated,lowered", [(True, 4), (False, 3)], ids=["truncated", "untruncated"])
def test_control_the_card_threshold_lowered_fails(truncated, lowered, audit_sizes, audit_seed, audit_report):
    result = absent_key_case(f"card-level: the same, card threshold lowered by {lowered}"
                             + (" (truncated noise)" if truncated else " (untruncated)"), audit_sizes.sbh_control,
                             audit_seed, lowered=lowered, truncated=truncated,
                             control=f"card threshold lowered by {lowered}")
    check(result, audit_report, "FAIL")
