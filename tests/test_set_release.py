"""The set release kind as plain functions (no Prefect): budget refusals, the spend event, outputs, evaluation."""

from __future__ import annotations

from datetime import date

import pytest

from transit_release.accounting.accountant import compose_one
from transit_release.accounting.events import DiffPartEvent, event_from_json
from transit_release.accounting.ledger import Ledger
from transit_release.errors import InputDataError, NoiseParameterError
from transit_release.inputs.screening import Period
from transit_release.inputs.sets import format_sets
from transit_release.inputs.universe import LocationUniverse
from transit_release.mechanisms.diffpart import ItemSets, delta_slack
from transit_release.noise import NoiseSource
from transit_release.releases import sets

UNIVERSE = LocationUniverse(tuple(f"S{i:02d}" for i in range(30)), "public station list")
JAN = Period(date(2026, 1, 1), date(2026, 1, 31))


def test_the_budget_comes_from_the_universe_and_refuses_with_typed_errors():
    b = sets.set_budget(UNIVERSE, 1.0, 6)
    assert (b.universe_size, b.fanout, b.epsilon) == (30, 6, 1)
    with pytest.raises(InputDataError, match="fan-out must be between 2 and 16. Found 1."):
        sets.set_budget(UNIVERSE, 1.0, 1)
    with pytest.raises(NoiseParameterError, match="Use ε ≥"):  # a configuration error, not bad input
        sets.set_budget(UNIVERSE, 1e-6, 10)


def test_one_period_scoped_event_that_round_trips_through_the_ledger(tmp_path):
    b = sets.set_budget(UNIVERSE, 1.0, 6)
    e = sets.plan_spend("sets-x", JAN, b, "fp", "v1")
    assert isinstance(e, DiffPartEvent) and e.kind == "diffpart" and e.component == "diffpart"
    assert (e.unit_of_privacy, e.neighbouring, e.scope) == ("passenger-set", "add-remove-one", "2026-01-01..2026-01-31")
    assert e.delta == delta_slack(b) and (e.fanout, e.c_leaf, e.c_split) == (6, float(b.c_leaf), float(b.c_split))
    assert event_from_json(e.to_json()) == e
    (entry,) = Ledger(tmp_path / "ledger.sqlite").charge([e])
    assert entry.event() == e
    feb = sets.plan_spend("sets-y", Period(date(2026, 2, 1), date(2026, 2, 28)), b, "fp", "v1")
    late_jan = sets.plan_spend("sets-z", Period(date(2026, 1, 20), date(2026, 2, 5)), b, "fp", "v1")
    assert compose_one([e, feb]).overall.epsilon == 1.0  # disjoint periods: parallel
    assert compose_one([e, feb, late_jan]).overall.epsilon == 2.0  # overlapping: sequential on common days
    assert sets.default_release_id(JAN) == "sets-diffpart-20260101-20260131"


def test_outputs_manifest_and_data_card():
    release = [((0, 1), 3), ((2,), 5), ((4, 29), 1)]
    table = sets.set_table(release, UNIVERSE)
    assert table.to_dict("list") == {"set": ["S00 S01", "S02", "S04 S29"], "count": [3, 5, 1]}
    lines = format_sets(release, UNIVERSE, header="h").splitlines()
    assert lines == ["# h", "S00 S01", "S00 S01", "S00 S01", "S02", "S02", "S02", "S02", "S02", "S04 S29"]
    b = sets.set_budget(UNIVERSE, 1.0, 6)
    m = sets.build_manifest("sets-x", JAN, UNIVERSE, sets.describe_input(True, ("train",)), b,
                            sets.plan_spend("sets-x", JAN, b, "fp", "v1"), "os-entropy", "v1", "now")
    p = m["privacy"]
    assert (m["kind"], p["mechanism_id"], p["fanout"], p["taxonomy_height"]) == ("sets", "diffpart", 6, 2)
    assert m["universe"] == UNIVERSE.describe() and "mode train" in m["items"]
    card = " ".join(sets.render_datacard(m).split())
    for words in ("one set per line", "Rare sets are missing", "noisy counts", "one set per smart card",
                  "1-differential privacy for one **passenger's whole set of stations over the period**",
                  "a bus stop counts as its postcode", "public list of 30 locations"):
        assert words in card, words


def test_evaluation_names_the_shared_metrics():
    recs = [[0, 1]] * 300 + [[2]] * 200 + [[3, 4, 5]] * 100
    data = ItemSets.from_lists(recs, 30)
    release = sets.sanitize(data, sets.set_budget(UNIVERSE, 1.0, 6), NoiseSource(seed=3), "sets-x")
    assert dict(release)[(0, 1)] > 250
    m = sets.evaluate(data, release, n_queries=300, top_k=(10,))
    assert {"count_query.relative_error.max_q1", "count_query.relative_error.max_q3", "itemsets.top10.tp",
            "itemsets.top10.loss"} <= set(m)
    assert {"sets.input", "sets.released", "records.share_released", "itemsets.top100.relative_error",
            "sizes.total_variation"} <= set(m) and m["sets.input"] == 600
    off = sets.evaluate(data, release, n_queries=0, top_k=(), frequent_k=0)
    assert not any(k.startswith(("count_query", "itemsets")) for k in off)
    assert set(off) == {"sets.input", "sets.released", "sets.distinct_released", "records.share_released",
                        "sizes.total_variation"}


def test_without_a_fanout_the_rule_chooses_it_from_the_universe_and_the_manifest_says_so():
    b = sets.set_budget(UNIVERSE, 1.0)  # 30 locations: round(log2 30) = 5
    assert b.fanout == 5
    e = sets.plan_spend("sets-x", JAN, b, "fp", "v1")
    described = sets.describe_input(False)
    rule = sets.build_manifest("sets-x", JAN, UNIVERSE, described, b, e, "test-seed", "0", "2026", sets.fanout_rule(None))
    given = sets.build_manifest("sets-x", JAN, UNIVERSE, described, sets.set_budget(UNIVERSE, 1.0, 5), e, "test-seed",
                                "0", "2026", sets.fanout_rule(5))
    assert rule["privacy"]["fanout"] == given["privacy"]["fanout"] == 5
    assert rule["privacy"]["fanout_rule"] == "round(log2 |I|) within 4..6, from the public universe size |I|"
    assert given["privacy"]["fanout_rule"] == "given (--fanout)"
    assert "fan-out round(log2 |I|) within 4..6" in sets.render_datacard({**rule, "files": {}})
