"""The trajectory release kind as plain functions (no Prefect): setup, spend, outputs, metrics."""

from __future__ import annotations

import random
from datetime import date
from fractions import Fraction

import pytest

from transit_release.accounting.accountant import compose
from transit_release.accounting.events import SafePathEvent, event_from_dict, event_from_json
from transit_release.errors import InputDataError
from transit_release.inputs.screening import Period
from transit_release.inputs.universe import LocationUniverse
from transit_release.mechanisms.safepath import Trajectories, delta_slack
from transit_release.noise import NoiseSource
from transit_release.releases import trajectories as kind

WEEK = Period(date(2026, 1, 5), date(2026, 1, 11))
METRO = LocationUniverse(tuple(f"{i:02d}" for i in range(68)), "locations file metro.txt")


def metro_with_lines() -> LocationUniverse:
    lines = tuple("ABCD"[i * 4 // 68] for i in range(68))
    groups = tuple(f"{lines[i]}-{i // 5}" for i in range(68))
    return LocationUniverse(METRO.ids, "taxonomy file metro.csv", groups, lines)


@pytest.mark.parametrize("universe,options", [
    (METRO, {}),  # the paper's defaults: fan-out 2, height 6, both taxonomies
    (METRO, {"location_fanout": 3, "location_taxonomy_height": 3, "time_fanout": 3, "time_taxonomy_height": 4}),
    (metro_with_lines(), {}),
])
@pytest.mark.parametrize("epsilon,height", [(1, 12), (Fraction(7, 10), 9), (2, 3)])
def test_every_path_of_the_release_setup_spends_exactly_epsilon(universe, options, epsilon, height):
    setup = kind.safepath_setup(universe, epsilon, height, **options)
    assert setup.budget.path_spend() == epsilon
    assert setup.budget.item_path_spends(setup.locations, setup.hours) == {Fraction(epsilon)}
    assert setup.hours.size == 168 and setup.locations.size == 68 and setup.hours.is_intervals


def test_the_setup_comes_from_the_universe_and_refuses_what_it_cannot_carry():
    tax = kind.safepath_setup(metro_with_lines(), 1, 12)
    assert tax.locations.height == 2 and tax.location_taxonomy == "taxonomy file (groups, lines)"
    assert tax.location_fanout is None and tax.time_fanout == 2 and tax.hours.height == 6
    with pytest.raises(InputDataError, match=r"^SafePath over locations file metro.txt \(68 locations, location "
                                             r"taxonomy of height 8\) and the 168 hours of the week \(time taxonomy "
                                             r"of height 6\): the location universe \(\|U\| = 68\) cannot carry a "
                                             r"taxonomy of height H = 8"):
        kind.safepath_setup(METRO, 1, 12, location_taxonomy_height=8)
    with pytest.raises(InputDataError, match="not both"):
        kind.safepath_setup(metro_with_lines(), 1, 12, location_fanout=2)
    with pytest.raises(InputDataError, match="fixes its own height"):
        kind.safepath_setup(metro_with_lines(), 1, 12, location_taxonomy_height=1)
    with pytest.raises(InputDataError, match="would grow about"):
        kind.safepath_setup(METRO, 1, 12, location_taxonomy_height=0, time_taxonomy_height=0)
    with pytest.raises(InputDataError, match="threshold rule must be one of paper, node"):
        kind.safepath_setup(METRO, 1, 12, rule="median")


@pytest.mark.parametrize("start,end", [("2026-01-06", "2026-01-12"), ("2026-01-05", "2026-01-10"),
                                       ("2026-01-05", "2026-01-18"), ("2026-01-01", "2026-01-31")])
def test_a_release_covers_one_monday_to_sunday_week(start, end):
    kind.check_period(WEEK)
    with pytest.raises(InputDataError, match="covers one calendar week, Monday to Sunday"):
        kind.check_period(Period(date.fromisoformat(start), date.fromisoformat(end)))


def test_the_event_round_trips_and_weeks_compose_in_parallel():
    setup = kind.safepath_setup(METRO, 1, 12)
    e = kind.plan_spend("r1", WEEK, setup, "f" * 64, "0")
    assert isinstance(e, SafePathEvent) and e.component == "safepath" and e.delta == delta_slack(setup.budget)
    assert (e.scope, e.locations, e.hours, e.location_taxonomy_height, e.time_taxonomy_height, e.thresholds) == \
        ("2026-01-05..2026-01-11", 68, 168, 6, 6, "paper")
    assert event_from_dict(e.to_dict()) == e and event_from_json(e.to_json()) == e
    assert all(not isinstance(v, (dict, list)) for v in e.to_dict().values())
    next_week = kind.plan_spend("r2", Period(date(2026, 1, 12), date(2026, 1, 18)), setup, "f" * 64, "0")
    again = kind.plan_spend("r3", WEEK, setup, "f" * 64, "0")
    (report,) = compose([e, next_week]).values()
    assert report.overall.epsilon == 1.0
    (report,) = compose([e, next_week, again]).values()
    assert report.overall.epsilon == 2.0


def _trajs(n=3000, seed=1):
    from transit_release.synth.trajectories import synthesize_metro_trajectories

    return synthesize_metro_trajectories(n, seed=seed)[0]


def test_the_release_does_not_depend_on_the_input_order():
    trajs = _trajs()
    setup = kind.safepath_setup(METRO, 2, 3, location_taxonomy_height=2, time_taxonomy_height=3)
    lists = trajs.to_lists()
    random.Random(3).shuffle(lists)
    shuffled = Trajectories.from_lists(lists, 68)
    a = kind.sanitize(trajs, setup, NoiseSource(seed=9), "x")[1]
    b = kind.sanitize(shuffled, setup, NoiseSource(seed=9), "x")[1]
    assert a == b and a


def test_outputs_and_metrics_use_the_shared_names():
    trajs = _trajs()
    setup = kind.safepath_setup(METRO, 2, 6)
    size, release = kind.sanitize(trajs, setup, NoiseSource(seed=2), "x")
    figures = {}
    metrics = kind.evaluate(trajs, release, 6, 400, (100,), size, figures)
    assert {"count_query.relative_error.max_q1", "count_query.relative_error.max_q2",
            "nonempty_query.relative_error.max_q2", "patterns.top100.tp", "pairs.top100.tp", "tree.nodes",
            "trajectories.input", "trajectories.released", "points.top100.relative_error",
            "ordered_pairs.top100.relative_error", "lengths.total_variation", "records.share_released"} <= set(metrics)
    assert len(figures["top_points.true"]) == 100 and len(figures["lengths.true"]) == 7
    assert metrics["trajectories.released"] == sum(c for _, c in release)
    table = kind.trajectory_table(release, METRO)
    assert list(table.columns) == ["trajectory", "count"] and table["count"].sum() == sum(c for _, c in release)
    assert all("@" in tok for t in table["trajectory"] for tok in t.split())
    text = kind.trajectory_text(release, METRO, "x")
    assert sum(1 for line in text.splitlines() if not line.startswith("#")) == table["count"].sum()
    event = kind.plan_spend("x", WEEK, setup, "f", "0")
    manifest = kind.build_manifest("x", WEEK, METRO, setup, event, "test-seed", "0", "2026-01-12T00:00:00+00:00")
    record = kind.tracking(manifest, metrics, {"malformed": 2})
    assert record["kind"] == "trajectories" and record["mechanism"] == "safepath"
    assert record["metrics"]["input.quarantined.malformed"] == 2 and record["params"]["universe.hours"] == 168
    assert record["params"]["time_thresholds"] == "/".join(map(str, setup.thresholds.time))
    card = kind.render_datacard({**manifest, "files": {}})
    assert "2-differential privacy" in card and "station@hour" in card and "locations file metro.txt" in card


def test_tap_data_take_the_stop_table_universe_with_an_optional_taxonomy(tmp_path):
    """With --trips the stop table's stations are the universe; a taxonomy file adds its groups (and lines) and must
    cover exactly those stations."""
    from tasks.trajectories import trajectory_universe

    stops = LocationUniverse(("Central", "Redfern", "Town_Hall"), "stops file stops.csv (train stop names)")
    assert trajectory_universe.fn(None, None, stops) == stops
    tax = tmp_path / "tax.csv"
    tax.write_text("location,group,line\nTown_Hall,city,T1\nCentral,city,T1\nRedfern,inner,T2\n", encoding="utf-8")
    got = trajectory_universe.fn(None, str(tax), stops)
    assert got.ids == stops.ids and got.source == stops.source and got.lines == ("T1", "T2", "T1")
    with pytest.raises(InputDataError, match=r"^SafePath over stops file stops.csv \(train stop names\) \(3 locations, "
                                             r"location taxonomy of height 2\).*cannot carry a taxonomy of height H = 2"):
        kind.safepath_setup(got, 1, 2, time_taxonomy_height=3)  # the ε_ng guard: H(H+1) = 6 ≥ 3 stations
    tax.write_text("location,group\nCentral,city\n", encoding="utf-8")
    with pytest.raises(InputDataError, match="2 location\\(s\\) of the universe have no group"):
        trajectory_universe.fn(None, str(tax), stops)


# ---- the joint budget rule and the factored Markov model ------------------------------------------------------

@pytest.mark.parametrize("epsilon,height", [(1, 6), (Fraction(7, 10), 9), (2, 3), (100, 6)])
def test_the_other_mechanisms_spend_at_most_epsilon_exactly(epsilon, height):
    joint = kind.trajectory_setup(METRO, epsilon, height, budget="joint")
    b = joint.budget
    assert b.level_epsilon == min(Fraction(epsilon) / height, 16) and b.path_spend() <= epsilon
    if Fraction(epsilon) / height <= 16:
        assert b.path_spend() == epsilon
    markov = kind.trajectory_setup(METRO, epsilon, height, mechanism="markov")
    m = markov.budget
    assert m.path_spend() == epsilon and m.day_epsilon == Fraction(epsilon) / 10
    assert m.station_epsilon == m.hour_epsilon == Fraction(epsilon) * 9 / 20


def test_the_default_and_the_former_defaults_own_flags():
    """No --mechanism: the Markov model at h = 6; one of SafePath's own options: SafePath, as when it was the
    default; the former default's setup (what its id is recognised by) is SafePath's paper budget."""
    assert isinstance(kind.trajectory_setup(METRO, 1), kind.MarkovSetup)
    assert kind.trajectory_setup(METRO, 1).budget.height == kind.DEFAULT_HEIGHT == 6
    assert isinstance(kind.trajectory_setup(METRO, 1, 6, rule="paper"), kind.SafePathSetup)
    assert isinstance(kind.trajectory_setup(METRO, 1, 6, budget="joint"), kind.JointSetup)
    assert kind.resolve_mechanism(None) == "markov" and kind.resolve_mechanism(None, time_fanout=2) == "safepath"
    former = kind.former_default_setup(METRO, 1, 6)
    assert isinstance(former, kind.SafePathSetup) and former.rule == "paper"
    assert kind.earlier_release_ids(WEEK, former) == ("trajectories-safepath-20260105-20260111",)
    assert kind.earlier_release_ids(WEEK, None) == ()


def test_the_other_mechanisms_refuse_the_flags_they_do_not_take():
    for options in ({"budget": "joint", "location_fanout": 2}, {"mechanism": "markov", "rule": "node"},
                    {"mechanism": "markov", "time_taxonomy_height": 3}):
        with pytest.raises(InputDataError, match="go\\(es\\) with SafePath's paper budget"):
            kind.trajectory_setup(METRO, 1, 6, **options)
    with pytest.raises(InputDataError, match="--nmax goes with --mechanism markov"):
        kind.trajectory_setup(METRO, 1, 6, mechanism="safepath", max_gram=3)
    with pytest.raises(InputDataError, match="--budget .* goes with --mechanism safepath, not with markov"):
        kind.trajectory_setup(METRO, 1, 6, mechanism="markov", budget="paper")
    with pytest.raises(InputDataError, match="use a height of at most 22"):
        kind.trajectory_setup(METRO, 1, 23, mechanism="markov")
    with pytest.raises(InputDataError, match="trajectory mechanism must be one of safepath, markov"):
        kind.trajectory_setup(METRO, 1, 6, mechanism="tree")


@pytest.mark.parametrize("mechanism,budget,event_kind", [("safepath", "joint", "safepath_joint"),
                                                         ("markov", None, "trajectory_markov_parts")])
def test_the_other_mechanisms_publish_through_the_same_outputs(mechanism, budget, event_kind):
    trajs = _trajs()
    setup = kind.trajectory_setup(METRO, 2, 6, mechanism=mechanism, budget=budget)
    e = kind.plan_spend("r1", WEEK, setup, "f" * 64, "0")
    assert e.kind == event_kind and e.epsilon == 2.0 and 0 < e.delta < 1e-12 and e.scope == "2026-01-05..2026-01-11"
    assert event_from_dict(e.to_dict()) == e and event_from_json(e.to_json()) == e
    lists = trajs.to_lists()
    random.Random(3).shuffle(lists)
    size, release = kind.sanitize(trajs, setup, NoiseSource(seed=9), "x")
    assert release and (size, release) == kind.sanitize(Trajectories.from_lists(lists, 68), setup,
                                                        NoiseSource(seed=9), "x")
    assert all(1 <= len(t) <= 6 and [h for _, h in t] == sorted(h for _, h in t) for t, _ in release)
    manifest = kind.build_manifest("x", WEEK, METRO, setup, e, "test-seed", "0", "2026-01-12T00:00:00+00:00")
    record = kind.tracking(manifest, kind.evaluate(trajs, release, 6, 0, (), size), {})
    assert record["mechanism"] == mechanism and record["params"]["height"] == 6
    card = kind.render_datacard({**manifest, "files": {}})
    assert "2-differential privacy" in card and ("drawn from the models" in card) == (mechanism == "markov")
    # the open-data step staging runs after the charge reads the same manifest: it must describe every mechanism
    from transit_release.opendata.uncertainty import card_section, uncertainty_table

    margins = uncertainty_table(manifest)
    assert margins is not None and len(margins) >= 1 and set(margins["file"]) == {"trajectories.csv"}
    assert "## Margins of error" in card_section(manifest)


def test_a_markov_release_names_each_parts_sensitivity_and_says_its_lines_are_drawn(tmp_path):
    """#40: the event's sensitivity names the day histogram's (1) and each n-gram model's per level (ℓmax = h + 1);
    a Markov release recorded before (its sensitivity 1) is still read, and is still the same release; the
    published text's header says its lines are synthetic."""
    from dataclasses import asdict

    from tasks.trajectories import same_release
    from transit_release.accounting.events import TrajectoryMarkovEvent, TrajectoryMarkovPartsEvent

    setup = kind.trajectory_setup(METRO, 2, 6, mechanism="markov")
    e = kind.plan_spend("r1", WEEK, setup, "f" * 64, "0")
    assert isinstance(e, TrajectoryMarkovPartsEvent) and e.sensitivity == "days 1; stations 7; hours 7"
    with pytest.raises(ValueError, match="sensitivity must name each part's"):
        TrajectoryMarkovPartsEvent(**{**asdict(e), "sensitivity": "1"})
    older = TrajectoryMarkovEvent(**{**asdict(e), "sensitivity": 1})
    assert event_from_json(older.to_json()) == older and older.kind == "trajectory_markov"
    assert same_release(setup, "f" * 64)([older]) and same_release(setup, "f" * 64)([e])
    assert not same_release(setup, "g" * 64)([older])
    header = kind.trajectory_header("trajectories-markov-x", setup)
    assert "synthetic trajectories" in header and "drawn from noisy models" in header
    text = kind.trajectory_text([(((0, 7),), 2)], METRO, header)
    assert text.splitlines()[0] == f"# {header}"
    assert "synthetic" not in kind.trajectory_header("t", kind.trajectory_setup(METRO, 2, 6, mechanism="safepath"))
