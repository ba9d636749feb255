"""One passenger, one loss: every kind of release of a population composed for one person, and capped."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from tests.test_accounting import ngram_event, partition_events, seq_event
from tests.test_card_level import card_events
from transit_release.accounting.events import (DEFAULT_POPULATION, InvalidEventError, event_from_json,
                                              population_named)
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.person import KIND_NAMES, person_loss, person_losses
from transit_release.accounting.pld import pld_epsilon
from transit_release.accounting.policy import BudgetPolicy, load_budget_policy
from transit_release.errors import (BudgetExceededError, ConfigError, PopulationError, PopulationOverlapError,
                                   UnboundedPersonLossError)
from transit_release.releases.loss_statement import person_text

WEEK = ("2016-08-08", "2016-08-14")


def mixed_week(population: str = DEFAULT_POPULATION) -> list:
    """A card-level Opal release (ε 8 for a card), an n-gram (1) and a prefix-tree (0.5) release of the same week."""
    out = card_events("card") + [ngram_event("ngram", *WEEK, 1.0), seq_event("tree", "..".join(WEEK), 0.5)]
    return [replace(e, population=population) for e in out]


def trip_release(rid: str = "trip") -> list:
    return [e for d in range(8, 15) for e in partition_events(rid, date=f"201608{d:02d}")]


def test_every_kind_of_release_adds_up_for_one_person():
    loss = person_loss(mixed_week())
    assert loss.bounded and loss.releases == ("card", "ngram", "tree")
    assert loss.basic.epsilon == pytest.approx(8.0 + 1.0 + 0.5)
    assert loss.basic.delta == pytest.approx(6e-9 + 1e-13)
    per_kind = {k.kind: (k.releases, k.basic.epsilon) for k in loss.per_kind}
    assert per_kind == {KIND_NAMES["truncated_card_stability_histogram"]: (("card",), pytest.approx(8.0)),
                        KIND_NAMES["ngram"]: (("ngram",), 1.0), KIND_NAMES["prefix_tree"]: (("tree",), 0.5)}
    # privacy-loss distributions: tighter than basic, and no tighter than the card release alone
    card_alone = person_loss(card_events("card"))
    assert card_alone.pld_epsilon < loss.pld_epsilon < loss.basic.epsilon


def test_releases_of_disjoint_periods_add_up_for_a_person():
    """The per-unit accounting composes sequence releases of disjoint periods in parallel (one period's record);
    a person who travelled in both periods is in both."""
    jan, feb = seq_event("jan", "2026-01-01..2026-01-31"), seq_event("feb", "2026-02-01..2026-02-28")
    assert person_loss([jan, feb]).basic.epsilon == 2.0


def test_pure_epsilon_releases_compose_by_privacy_loss_distributions():
    """Eight ε = 1 releases: the PLD of eight (1, 0)-DP mechanisms (dp_accounting), below basic composition's 8."""
    events = [seq_event(f"r{i}", "2026-01-01..2026-01-31") for i in range(8)]
    loss = person_loss(events)
    assert loss.basic.epsilon == 8.0
    assert loss.pld_epsilon == pytest.approx(pld_epsilon([], 1e-7, pure=[(1.0, 0.0)] * 8))
    assert loss.pld_epsilon < 8.0


def test_a_trip_level_release_leaves_a_person_unbounded_and_the_rest_is_stated_beside():
    loss = person_loss(mixed_week() + trip_release())
    assert not loss.bounded
    assert [u.to_dict() for u in loss.unbounded_by] == [{"release_id": "trip", "period": "2016-08-08..2016-08-14"}]
    assert loss.basic.epsilon == pytest.approx(9.5)  # what the other releases add for a passenger with no trips there
    d = loss.to_dict()
    assert d["per_kind"][KIND_NAMES["stability_histogram"]] == {"releases": ["trip"], "basic": None}
    assert json.loads(json.dumps(d)) == d


def test_populations_are_composed_apart():
    events = mixed_week() + [replace(e, population="montreal-metro") for e in [ngram_event("mtl", *WEEK, 1.0)]]
    losses = person_losses(events)
    assert set(losses) == {DEFAULT_POPULATION, "montreal-metro"}
    assert losses["montreal-metro"].basic.epsilon == 1.0 and losses[DEFAULT_POPULATION].basic.epsilon == 9.5


def test_records_written_before_populations_are_about_the_default_population():
    e = ngram_event("old", *WEEK)
    payload = json.loads(e.to_json())
    del payload["population"]
    assert event_from_json(json.dumps(payload)).population == DEFAULT_POPULATION
    assert json.loads(replace(e, population="montreal-metro").to_json())["population"] == "montreal-metro"


@pytest.mark.parametrize("name", ["", "Montreal", "a b", "x" * 65, "-lead", "é"])
def test_a_population_name_is_checked(name):
    with pytest.raises(InvalidEventError, match="population must be lower-case letters"):
        replace(ngram_event("x", *WEEK), population=name)
    with pytest.raises(ConfigError, match="^--population: population must be lower-case letters"):
        population_named(name)


# ---- the person cap ------------------------------------------------------------------------------------------

def test_the_default_policy_refuses_a_trip_level_release_with_the_words_a_reader_understands():
    with pytest.raises(UnboundedPersonLossError) as info:
        load_budget_policy().check([], trip_release())
    assert str(info.value) == (
        "release 'trip' is at trip level: it bounds a trip, not a passenger (a passenger's loss grows with their "
        "number of trips), and cap 'person-year': ε ≤ 80, δ ≤ 1e-06 per person (every kind of release of a "
        f"population), calendar year {datetime.now(timezone.utc).year}, by privacy-loss distributions caps "
        "a passenger's loss; refused. Release at card level (--unit card), or set 'allow_unbounded_person_loss: "
        "true' in the budget policy to let trip-level releases leave a passenger's loss unbounded (data cards and "
        "the audit then say so)")


def _default_policy_data() -> dict:
    import yaml

    from transit_release.accounting.policy import default_policy_path

    return yaml.safe_load(default_policy_path().read_text(encoding="utf-8"))


def _policy(allow: bool, person: dict | None = None) -> BudgetPolicy:
    """The shipped policy, with the allowance set and (optionally) its person cap replaced."""
    data = _default_policy_data()
    data["policy"]["allow_unbounded_person_loss"] = allow
    if person is not None:
        data["policy"]["caps"] = [c for c in data["policy"]["caps"] if c["unit_of_privacy"] != "person"] + [person]
    return BudgetPolicy.from_dict(data)


def test_with_the_allowance_a_trip_level_release_passes_and_later_ones_are_still_capped(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    strict, allowing = _policy(False), _policy(True)
    ledger.charge(trip_release(), check=allowing.check)
    with pytest.raises(UnboundedPersonLossError, match="has an unbounded loss already: trip-level release"):
        strict.check(ledger.entries(), card_events("card"))
    ledger.charge(card_events("card"), check=allowing.check)  # the cap holds for the releases that bound a person
    status = {s.scope: s for s in allowing.status(ledger.entries()) if s.cap.on_person}
    assert status["population default"].note == "unbounded: trip-level release(s) trip"


def test_a_basic_person_cap_counts_every_kind_and_names_what_remains(tmp_path):
    cap = {"name": "person", "unit_of_privacy": "person", "per": "person", "epsilon": 9.0, "delta": 1e-6}
    policy = _policy(False, cap)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.charge(card_events("card"), check=policy.check)
    ledger.charge([ngram_event("ngram", *WEEK, 0.5)], check=policy.check)
    with pytest.raises(BudgetExceededError) as info:
        ledger.charge([ngram_event("n2", "2016-08-15", "2016-08-21", 1.0)], check=policy.check)
    assert str(info.value).startswith("Cannot release 'n2' without exceeding the budget. Requested: ε=1.000; "
                                      "remaining: ε=0.500; short by ε=0.500")
    assert "cap 'person': ε ≤ 9, δ ≤ 1e-06 per person (every kind of release of a population), all time, " \
           "population 'default'" in str(info.value)
    # another population is other people (from other input files): its own budget
    ledger.charge([replace(ngram_event("mtl", *WEEK, 1.0), population="montreal-metro", input_fingerprint="m" * 64)],
                  check=policy.check)


def test_a_population_the_ledger_contradicts_is_refused(tmp_path):
    """The same input files released about two populations would hide one person's releases from each other."""
    policy = _policy(False)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.charge(card_events("card"), check=policy.check)
    other = [replace(ngram_event("sets", *WEEK, 1.0), population="other-riders", input_fingerprint="f")]
    with pytest.raises(PopulationOverlapError) as info:  # exit 3: the policy refuses, nothing is charged
        policy.check(ledger.entries(), other)
    assert str(info.value) == ("release 'sets' names population 'other-riders', but release 'card' was made from the "
                               "same input files about population 'default': the same passengers cannot be two "
                               "populations; use --population default (or leave --population out); nothing was "
                               "charged")
    assert info.value.refusal == "population-overlap"
    mixed = [ngram_event("two", *WEEK), replace(ngram_event("two", *WEEK), population="b")]
    with pytest.raises(PopulationError, match=r"one release is about one population; its spends name \['b', 'default'\]"):
        policy.check([], mixed)


def test_a_trip_level_release_of_an_earlier_year_still_leaves_a_person_unbounded(tmp_path):
    """A calendar-year cap renews the budget, not a loss that a trip-level release made unbounded."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.charge(trip_release(), check=_policy(True).check)
    next_year = datetime(datetime.now(timezone.utc).year + 1, 1, 3, tzinfo=timezone.utc)
    with pytest.raises(UnboundedPersonLossError, match="has an unbounded loss already"):
        _policy(False).check(ledger.entries(), card_events("card"), now=next_year)


def test_a_pld_person_cap_composes_card_and_pure_releases_together():
    cap = {"name": "person", "unit_of_privacy": "person", "per": "person", "measure": "pld", "epsilon": 6.0,
           "delta": 1e-6}
    policy = _policy(False, cap)
    policy.check([], card_events("card"))  # PLD ε ≈ 5.1 for the card release alone at δ = 1e-6
    with pytest.raises(BudgetExceededError, match="a passenger's loss by privacy-loss distributions would be ε="):
        policy.check([], mixed_week())


def test_caps_on_a_person_refuse_modes_and_the_allowance_is_a_boolean():
    data = _default_policy_data()
    data["policy"]["caps"][0]["modes"] = ["bus"]
    with pytest.raises(ConfigError, match="spends of unit 'person' have no mode"):
        BudgetPolicy.from_dict(data)
    data = _default_policy_data()
    data["policy"]["allow_unbounded_person_loss"] = "yes"
    with pytest.raises(ConfigError, match="'allow_unbounded_person_loss' must be true or false. Found str."):
        BudgetPolicy.from_dict(data)


# ---- the data card's words -----------------------------------------------------------------------------------

def test_the_data_card_states_the_person_and_names_what_leaves_it_unbounded():
    bounded = person_text({"person_at_publication": person_loss(mixed_week()).to_dict()})
    assert "## Where a passenger stands\n" in bounded and "3 release(s), this one included" in bounded
    # bounds are rounded up (6.0001e-09 is not printed as 6e-09)
    assert "one passenger's privacy loss was at most **ε = 9.5, δ = 6.01e-09** by basic composition" in bounded
    # "a passenger" is one card (#40): someone with m cards counts m times
    assert ("A passenger here is one card (a passenger's record is one card's): someone who uses m cards counts as "
            "m passengers and can lose up to m times as much.") in bounded
    assert "| card-level Opal tap counts | 1 | 8 | 6e-09 |" in bounded
    others = mixed_week() + trip_release() + [replace(ngram_event("mtl", *WEEK), population="montreal-metro")]
    policy = _policy(True).public_summary()
    unbounded = person_text({"person_at_publication": {**person_loss(others).to_dict(), "ledger_entries": 216},
                             "budget_policy": policy})
    assert "## Where a passenger stands: unbounded" in unbounded
    assert "**a passenger's privacy loss has no bound**" in unbounded
    assert "`trip` (2016-08-08..2016-08-14)" in unbounded
    assert "For a passenger with no trip in those periods, the other 3 release(s) add up to at most **ε = 9.5" \
        in unbounded
    assert "on the privacy ledger up to entry 216, the head this release anchors" in unbounded
    assert ("This assumes, as the agency declares, that the people of population `default` are in no release of its "
            "other population(s) (`montreal-metro`).") in unbounded
    assert "Trip-level releases may leave a passenger's loss unbounded: yes." in unbounded
    assert "Budget policy at publication: cap 'person-year': ε ≤ 80" in unbounded


def test_every_kind_of_spend_is_classified_for_a_person():
    """A new kind of release must say how it bounds a person (or it is read as leaving the person unbounded)."""
    from transit_release.accounting.events import EVENT_TYPES
    from transit_release.accounting.person import BOUNDS_A_PERSON

    assert set(EVENT_TYPES) == set(BOUNDS_A_PERSON) | {"stability_histogram"}
    assert set(EVENT_TYPES) <= set(KIND_NAMES)
