"""The sequence release kind's plain functions (no Prefect): both mechanisms, budgets, spends, outputs."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from transit_release.accounting.events import NGramEvent, PrefixTreeEvent
from transit_release.errors import InputDataError
from transit_release.inputs.screening import Period
from transit_release.inputs.universe import LocationUniverse
from transit_release.mechanisms import ngram
from transit_release.mechanisms.prefix_tree import Sequences
from transit_release.noise import NoiseSource
from transit_release.releases import sequences as kind

PERIOD = Period(date(2026, 1, 1), date(2026, 1, 31))
UNIVERSE = LocationUniverse(tuple(f"S{i}" for i in range(1, 7)), "public station list")


def test_the_ngram_budget_takes_the_defaults_and_refuses_the_prefix_trees_flags():
    budget, tax = kind.budget_for("ngram", UNIVERSE, 1.0)
    assert (budget.max_length, budget.max_gram, budget.n_locations, tax) == (20, 5, 6, None)
    assert kind.budget_for("ngram", UNIVERSE, 1.0, lmax=4, nmax=3)[0].max_gram == 3
    with pytest.raises(InputDataError, match="--height, --variant: prefix-tree parameter"):
        kind.budget_for("ngram", UNIVERSE, 1.0, height=3, variant="simple")
    with pytest.raises(InputDataError, match="--lmax: n-gram parameter"):
        kind.budget_for("prefix-tree", UNIVERSE, 1.0, height=3, variant="simple", lmax=4)
    with pytest.raises(InputDataError, match="the prefix tree needs --height H"):
        kind.budget_for("prefix-tree", UNIVERSE, 1.0)
    with pytest.raises(InputDataError, match="unknown sequence mechanism 'markov'"):
        kind.budget_for("markov", UNIVERSE, 1.0)


@pytest.mark.parametrize("universe,args,message", [
    (UNIVERSE, (1e-4, 20, 5), "n-gram sanitizer .*Use ε ≥"),
    (UNIVERSE, (1.0, 3, 5), "exceeds ℓmax \\+ 1 = 4"),
    (LocationUniverse(("&", "S1", "S2"), "odd list"), (1.0, 4, 3), "odd list: a location is named '&'"),
    (LocationUniverse(tuple(f"L{i:05d}" for i in range(5000)), "wide"), (1.0, 20, 5), "would draw about"),
])
def test_impossible_ngram_releases_are_refused_from_public_inputs(universe, args, message):
    with pytest.raises(InputDataError, match=message):
        kind.ngram_budget(universe, *args)


def test_the_ngram_spend_is_one_period_scoped_event_with_the_samplers_slack():
    budget, _ = kind.budget_for("ngram", UNIVERSE, 1.0, lmax=4, nmax=3)
    event = kind.plan_spend("r", PERIOD, budget, "fp", "cv")
    assert isinstance(event, NGramEvent)
    assert (event.epsilon, event.delta, event.max_length, event.max_gram, event.n_locations) == \
        (1.0, ngram.noise_delta(budget), 4, 3, 6)
    assert (event.unit_of_privacy, event.neighbouring, event.scope) == \
        ("passenger-sequence", "add-remove-one", "2026-01-01..2026-01-31")
    assert kind.default_release_id("ngram", PERIOD) == "sequences-ngram-20260101-20260131"


def test_same_release_tells_the_mechanisms_and_their_parameters_apart():
    ng, _ = kind.budget_for("ngram", UNIVERSE, 1.0, lmax=4, nmax=3)
    tree, _ = kind.budget_for("prefix-tree", UNIVERSE, 1.0, height=4, variant="simple")
    ng_event, tree_event = kind.plan_spend("r", PERIOD, ng, "fp", "cv"), kind.plan_spend("r", PERIOD, tree, "fp", "cv")
    assert isinstance(tree_event, PrefixTreeEvent)
    assert kind.same_release(ng, "fp")([ng_event]) and kind.same_release(tree, "fp")([tree_event])
    assert not kind.same_release(ng, "fp")([tree_event]) and not kind.same_release(tree, "fp")([ng_event])
    assert not kind.same_release(ng, "other")([ng_event])
    assert not kind.same_release(kind.budget_for("ngram", UNIVERSE, 1.0, lmax=5, nmax=3)[0], "fp")([ng_event])


def test_the_ngram_table_is_sorted_by_gram_with_the_end_first_and_rounded():
    table = [((0,), 12.0), ((0, ngram.END), 2.004), ((0, 1), 9.996), ((1,), 3.333), ((1, 0, ngram.END), 0.004)]
    df = kind.ngram_table(table, UNIVERSE)
    assert list(df.columns) == ["gram", "count"]
    assert df["gram"].tolist() == ["S1", "S1 &", "S1 S2", "S2"]  # 0.004 rounds to 0: left out
    assert df["count"].tolist() == [12.0, 2.0, 10.0, 3.33]


def _records(rng, n=400):
    return [list(rng.integers(0, 6, rng.integers(1, 7))) for _ in range(n)]


def test_shuffled_input_gives_the_same_ngram_release_with_a_fixed_seed():
    rng = np.random.default_rng(5)
    recs = _records(rng)
    budget, _ = kind.budget_for("ngram", UNIVERSE, 2.0, lmax=4, nmax=3)
    event = kind.plan_spend("r", PERIOD, budget, "fp", "cv")
    out = []
    for order in (recs, [recs[i] for i in rng.permutation(len(recs))]):
        release = kind.sanitize(Sequences.from_lists(order, 6), budget, None, NoiseSource(seed=3), "r")
        tables, texts, _ = kind.outputs("r", PERIOD, UNIVERSE, budget, event, "test-seed", "cv", "now", release)
        out.append((tables["ngrams"].to_csv(), tables["sequences"].to_csv(), texts["sequences.txt"]))
    assert out[0] == out[1]
    assert "S1" in out[0][0] and out[0][2].startswith("# r: one synthetic sequence generated from the n-grams")


def test_the_ngram_manifest_datacard_and_tracking_say_what_was_done():
    budget, _ = kind.budget_for("ngram", UNIVERSE, 1.0, lmax=4, nmax=3)
    event = kind.plan_spend("r", PERIOD, budget, "fp", "cv")
    m = kind.build_manifest("r", PERIOD, UNIVERSE, budget, event, "test-seed", "cv", "now")
    p = m["privacy"]
    assert (p["mechanism_id"], p["max_length"], p["max_gram"], p["end_marker"]) == ("ngram", 4, 3, "&")
    assert [b["epsilon_exact"] for b in p["node_budgets"]] == [str(e) for e in budget.node_budgets()]
    assert p["level1_threshold"] == budget.integer_threshold(budget.root_epsilon)
    card = kind.render_datacard(m)
    for phrase in ("`ngrams.csv`", "stands for the end of the\n  journey", "cut to their first 4",
                   "generated from the gram counts alone", "not the number of passengers",
                   "1-differential privacy for one **passenger's whole sequence"):
        assert phrase in card, phrase
    record = kind.tracking(m, {"grams.top20.tp": 3.0}, {"empty": 1})
    assert record["mechanism"] == "ngram" and record["params"]["lmax"] == 4
    assert record["metrics"] == {"grams.top20.tp": 3.0, "input.quarantined.empty": 1}


def test_without_a_mechanism_ngrams_unless_the_prefix_trees_own_parameters_are_given():
    """The shortest command gets the recommended n-grams, without --height; --height, --variant or --fanout alone
    keep the prefix tree (its release id too), as when it was the default."""
    budget, _ = kind.budget_for(None, UNIVERSE, 1.0)
    assert isinstance(budget, ngram.NGramBudget) and (budget.max_length, budget.max_gram) == (20, 5)
    assert kind.resolve_mechanism(None) == kind.DEFAULT_MECHANISM == "ngram"
    for given in ({"height": 6}, {"variant": "simple"}, {"fanout": 4}):
        assert kind.resolve_mechanism(None, **given) == "prefix-tree"
    assert kind.resolve_mechanism("ngram", height=6) == "ngram"  # named: then --height is refused, as before
    assert kind.budget_for(None, UNIVERSE, 1.0, height=3, variant="simple")[0].height == 3
