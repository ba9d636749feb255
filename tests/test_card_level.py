"""Card-level privacy: the card as the unit, end to end (bounding, user-level SBH, accounting, audit, data card)."""

from __future__ import annotations

import json
import pandas as pd
import pytest

from tests.conftest import WEEK_FLAGS
from tests.test_accounting import partition_events
from transit_release.accounting.accountant import compose_one
from transit_release.accounting.events import CardStabilityHistogramEvent, TruncatedCardStabilityHistogramEvent
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.policy import BudgetPolicy, load_budget_policy
from transit_release.cli import main
from transit_release.config import default_config_path, load_release_config
from transit_release.errors import BudgetExceededError, ConfigError
from transit_release.mechanisms.stability_histogram import CardLevelBudget


def card_events(rid: str, eps_scale: float = 0.1, days: int = 7, truncated: bool = True):
    """A card-level release's spends; ``truncated=False``: as releases recorded them before card-level releases
    drew truncated noise (a ledger may hold both)."""
    cfg = load_release_config(unit="card").with_overrides(epsilons=[eps_scale * w for w in (1, 1, 1, 1, 2, 2)])
    out = []
    for mode in ("bus", "ferry", "lightrail", "train"):
        for d in range(days):
            for name, b in cfg.budgets.items():
                sbh = cfg.sbh_budget(name)
                common = dict(release_id=rid, mode=mode, date=f"201608{8 + d:02d}", marginal=name,
                              epsilon=b.epsilon, delta=b.delta, noise_scale=str(sbh.scale), sensitivity=2,
                              max_trips_per_partition=2, max_partitions=10, period_start="2016-08-08",
                              period_end="2016-08-14", unit_of_privacy="card", neighbouring="add-remove-one",
                              input_fingerprint="f", code_version="c")
                out.append(TruncatedCardStabilityHistogramEvent(**common, threshold=sbh.threshold,
                                                                noise_bound=sbh.noise_bound) if truncated
                           else CardStabilityHistogramEvent(**common,
                                                            threshold=CardLevelBudget(b.epsilon, b.delta, 2).threshold))
    return out


def test_the_card_defaults_and_their_thresholds():
    cfg = load_release_config(unit="card")
    assert (cfg.unit_of_privacy, cfg.bounds.max_trips_per_partition, cfg.bounds.max_partitions) == ("card", 2, 10)
    assert cfg.partition_epsilon == pytest.approx(0.8) and cfg.release_epsilon == pytest.approx(8.0)
    # truncated noise (what card-level releases draw): bound A, threshold A + k + 1
    assert [cfg.sbh_budget(m).noise_bound for m in cfg.budgets] == [402, 402, 402, 402, 208, 208]
    assert [cfg.sbh_budget(m).threshold for m in cfg.budgets] == [405, 405, 405, 405, 211, 211]
    # the untruncated card-level SBH at the same (ε_j, δ_j, k) needs higher thresholds
    untruncated = [CardLevelBudget(b.epsilon, b.delta, 2).threshold for b in cfg.budgets.values()]
    assert untruncated == [464, 464, 464, 464, 233, 233]
    trip = load_release_config()
    assert [trip.sbh_budget(m).threshold for m in trip.budgets] == [34, 34, 34, 34, 18, 18]  # the paper's, unchanged
    with pytest.raises(ConfigError, match="is for unit 'card', not 'trip'"):
        load_release_config(default_config_path("card"), "trip")


def test_a_card_is_charged_for_its_p_most_expensive_partitions_and_every_release():
    """28 partitions of 0.8 each, P = 10: a release costs a card 8 (not 28 × 0.8, not 0.8); releases add up."""
    one = compose_one(card_events("w1"))
    assert one.overall.epsilon == pytest.approx(8.0) and one.overall.delta == pytest.approx(10 * 6 * 1e-10)
    two = compose_one(card_events("w1") + card_events("w2", days=2))  # 8 partitions < P: all 8 count
    assert two.overall.epsilon == pytest.approx(8.0 + 8 * 0.8)


def test_the_data_card_states_what_the_ledger_composes_for_a_card():
    """The finding: a card-level release's data card said a card stood at ε = 0, δ = 0 (the partition cells of its
    spends were looked up among the card unit's single cell)."""
    from transit_release.accounting.accountant import cumulative_for

    first, second = card_events("w1"), card_events("w2", days=2)
    assert cumulative_for(first, first) == {"epsilon": pytest.approx(8.0), "delta": pytest.approx(6e-9),
                                            "releases": 1}
    both = cumulative_for(first + second, second)
    assert both == {"epsilon": pytest.approx(compose_one(first + second).overall.epsilon),
                    "delta": pytest.approx(compose_one(first + second).overall.delta), "releases": 2}


def test_the_card_cap_by_privacy_loss_distributions(tmp_path):
    policy = BudgetPolicy(tuple(c for c in load_budget_policy().caps if not c.on_person))  # the card cap alone
    cap = next(c for c in policy.caps if c.unit_of_privacy == "card")
    assert (cap.measure, cap.epsilon, cap.delta, cap.period) == ("pld", 70.0, 1e-6, "calendar-year")
    ledger = Ledger(tmp_path / "l.sqlite")
    ledger.charge(card_events("w1"), check=policy.check)  # one week: PLD ≈ 5.1, well inside
    big = card_events("big", eps_scale=2.0)  # ε_j × 20: one release's PLD alone is far above 70
    with pytest.raises(BudgetExceededError, match="with this release the loss by privacy-loss distributions would "
                                                  "be ε="):
        ledger.charge(big, check=policy.check)
    with pytest.raises(ConfigError, match="measure 'pld' caps a card's or a person's loss"):
        BudgetPolicy.from_dict({"policy": {"caps": [
            {"name": "t", "unit_of_privacy": "trip", "per": "partition", "epsilon": 8, "delta": 1e-6,
             "measure": "pld"}]}})


def test_52_weekly_card_releases_by_basic_composition_and_by_pld():
    from transit_release.accounting.pld import default_weekly_releases_loss, release_components

    loss = default_weekly_releases_loss(52, 5e-7)
    assert loss.basic_epsilon == pytest.approx(416.0)
    assert 60 < loss.pld_epsilon < 75 and loss.pld_epsilon < loss.basic_epsilon
    # the audit's reading of the ledger gives the same components as the closed description of a release
    comps = release_components(card_events("w1"))
    assert sum(c.count for c in comps) == 60 and {c.sensitivity for c in comps} == {2}
    assert {c.noise_bound for c in comps} == {402, 208} and {c.threshold_delta for c in comps} == {0.0}
    old = release_components(card_events("w0", truncated=False))  # spends recorded before: untruncated, δ_j beside
    assert {c.noise_bound for c in old} == {None} and {c.threshold_delta for c in old} == {1e-10}


def test_after_a_trip_level_release_the_per_card_loss_of_its_period_is_unbounded():
    from transit_release.integrity.audit import card_unbounded_periods

    class E:  # a ledger entry as the audit reads it
        def __init__(self, ev):
            self.entry_type, self._ev = "spend", ev

        def event(self):
            return self._ev

    entries = [E(e) for e in partition_events("trip-week", date="20160808") + partition_events("trip-week",
                                                                                                date="20160814")]
    assert card_unbounded_periods(entries) == ["2016-08-08..2016-08-14"]


@pytest.mark.flow
def test_a_card_level_release_end_to_end(prefect_harness, small_week, tmp_path, capsys):
    home = tmp_path / "home"
    rc = main(["release", "--trips", str(small_week["trips"]), "--stops", str(small_week["stops"]), "--home",
               str(home), "--unit", "card", "--release-id", "cards", *WEEK_FLAGS])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "privacy: (ε=8, δ=6e-09)-DP per card (add or remove one card's trips)" in out
    assert "contribution bounding:" in out and "trips kept (internal figure)" in out
    d = home / "releases" / "cards"
    manifest = json.loads((d / "manifest.json").read_text())
    p = manifest["privacy"]
    assert p["unit_of_privacy"] == "card" and p["bounds"] == {"max_trips_per_partition": 2, "max_partitions": 10}
    assert {m["threshold"] for m in p["marginals"].values()} == {405, 211}
    assert {m["noise_bound"] for m in p["marginals"].values()} == {402, 208}
    assert pd.read_csv(d / "location.csv")["count"].min() >= 405
    card = (d / "DATACARD.md").read_text()
    assert "**card**: all of one passenger's trips in the period" in card
    assert "- Each card kept at most **2 trips per mode and day**, chosen at random." in card
    assert "- Each card kept at most **10 (mode, day) partitions** of the period, chosen at random." in card
    assert "never exceeds A taps either way: A = 402 for j = 1–4 and A = 208 for j = 5–6" in card
    assert "rows_dropped" not in json.dumps(manifest) and "rows_dropped" not in card  # internal figures stay internal
    spends = Ledger(home / "ledger.sqlite").spends("cards")
    assert len(spends) == 28 * 6 and all(e.event().kind == "truncated_card_stability_histogram" for e in spends)
    report = home / "release_reports" / "cards"
    assert (report / "card_level_curve.png").stat().st_size > 5_000
    assert "Contribution bounding (card level)" in (report / "report.html").read_text()
    capsys.readouterr()
    assert main(["audit", "--home", str(home), "--json"]) == 0
    audit_out = capsys.readouterr().out
    result = json.loads(audit_out[audit_out.index("{"):])
    loss = result["loss"]["card"]
    assert loss["basic"]["epsilon"] == pytest.approx(8.0)
    # truncated noise: no threshold δ beside the PLD; the noise's edges are inside it, read at δ' + edges
    assert loss["pld"] and loss["pld"]["epsilon"] < 8.0 and loss["pld"]["threshold_delta"] == 0
    assert loss["pld"]["delta"] == pytest.approx(loss["pld"]["pld_delta"] + loss["pld"]["edge_delta"])
    assert 0 < loss["pld"]["edge_delta"] <= 6e-9
    year = loss["year_projection"]
    assert year["releases"] == 52 and year["basic"]["epsilon"] == pytest.approx(416)
    assert year["pld"]["epsilon"] < 416 and year["parameters"]["noise"] == "truncated"
    assert result["card_unbounded_periods"] == []
    assert manifest["privacy"]["cumulative_at_publication"] == {"epsilon": pytest.approx(8.0),
                                                                "delta": pytest.approx(6e-9), "releases": 1}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("transit-release").experiment_id],
                              filter_string="tags.release_id = 'cards' and tags.unit_of_privacy = 'card'")
    (run,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]  # the release's run, not a partition's
    assert run.data.metrics["bounding.rows_dropped"] >= 0 and "mean_rel_error" in run.data.metrics


def test_noise_is_never_drawn_for_a_spend_that_describes_other_noise():
    """The charge must describe the noise about to be drawn (the adversarial review's hardening): a spend of the
    right ε and δ but of the untruncated kind, or with another noise bound, is refused before any draw."""
    import dataclasses

    import numpy as np

    from transit_release.preprocessing import Histogram, PartitionHistograms
    from transit_release.releases.opal import check_charges

    cfg = load_release_config(unit="card")
    ph = PartitionHistograms(mode="bus", date="20160808", n_trips=0, histograms={
        name: Histogram(keys=np.zeros(0, np.int64), counts=np.zeros(0, np.int64)) for name in cfg.budgets})
    good = [e for e in card_events("w1") if (e.mode, e.date) == ("bus", "20160808")]
    check_charges(ph, cfg, good)  # what plan_spends records: accepted
    old = [e for e in card_events("w1", truncated=False) if (e.mode, e.date) == ("bus", "20160808")]
    with pytest.raises(RuntimeError, match=r"describes other noise than the one about to be drawn \(kind, "
                                           r"noise_bound, threshold differ\)"):
        check_charges(ph, cfg, old)
    moved = [dataclasses.replace(e, noise_bound=e.noise_bound + 1, threshold=e.threshold + 1) for e in good]
    with pytest.raises(RuntimeError, match=r"bus/20160808 tap_on_time describes other noise .*\(noise_bound, "
                                           r"threshold differ\)"):
        check_charges(ph, cfg, moved)
