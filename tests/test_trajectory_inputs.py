"""Trajectory inputs: the ``station@hour`` one-a-line format and trajectories from tap data."""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pytest

from transit_release.errors import InputDataError
from transit_release.inputs.trajectories import read_trajectory_file, trajectories_from_trips, write_trajectory_file
from transit_release.inputs.universe import LocationUniverse, read_taxonomy_file

UNIVERSE = LocationUniverse(("A", "B", "C", "D"), "test")


def test_one_trajectory_a_line_with_comments_and_quarantine(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("% comment\n# another\nA@7 B@17 A@20\n\n"  # 3, 4
                 "B@8 C\n"  # 5 malformed (no @)
                 "B@x\n"  # 6 malformed (hour not a number)
                 "C@168\n"  # 7 hour out of range
                 "E@3\n"  # 8 unknown location
                 "A@9 B@8\n"  # 9 time decreasing
                 + " ".join(["D@1"] * 6) + "\n"  # 10 too long
                 "D@0 D@0 C@167\n"  # 11
                 "B@-1\n"  # 12 malformed (a sign is not a whole number)
                 "x@y@5\n")  # 13 id "x@y" is unknown
    got = read_trajectory_file(f, UNIVERSE, max_length=5)
    assert got.trajectories.to_lists() == [((0, 7), (1, 17), (0, 20)), ((3, 0), (3, 0), (2, 167))]
    assert got.quarantined == {"empty": [4], "too_long": [10], "malformed": [5, 6, 12],
                               "hour_out_of_range": [7], "unknown_location": [8, 13], "time_decreasing": [9]}
    assert got.quarantine_counts["malformed"] == 3
    assert got.lines == 11 and got.quarantined_share == pytest.approx(9 / 11)
    assert got.universe == UNIVERSE and got.locations == UNIVERSE.ids and got.trajectories.n_locations == 4


def test_messages_never_echo_a_token(tmp_path):
    f = tmp_path / "only.txt"
    f.write_text("# SECRET@3\n")
    with pytest.raises(InputDataError, match="no trajectories") as err:
        read_trajectory_file(f, UNIVERSE)
    assert "SECRET" not in str(err.value)
    with pytest.raises(InputDataError, match="not found"):
        read_trajectory_file(tmp_path / "nope.txt", UNIVERSE)
    g = tmp_path / "bad.txt"
    g.write_bytes(b"A@1 \xff@2\n")
    with pytest.raises(InputDataError, match="not valid UTF-8"):
        read_trajectory_file(g, UNIVERSE)


def test_the_universe_is_the_public_one_never_the_data(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("A@1\n")
    with pytest.raises(TypeError, match="public LocationUniverse"):
        read_trajectory_file(f, ("A", "B"))


def test_write_round_trip(tmp_path):
    f = tmp_path / "out.txt"
    release = [(((0, 7), (1, 17)), 2), (((3, 100),), 1)]
    write_trajectory_file(f, release, UNIVERSE.ids, header="release x\nε = 1")
    assert f.read_text() == "# release x\n# ε = 1\nA@7 B@17\nA@7 B@17\nD@100\n"
    again = read_trajectory_file(f, UNIVERSE)
    assert again.trajectories.to_lists() == [((0, 7), (1, 17)), ((0, 7), (1, 17)), ((3, 100),)]


def _taps():
    trips = pd.DataFrame({
        "card_id": [7, 7, 7, 8, 7, 9, 8, 9, 9],
        "mode": ["train"] * 8 + ["bus"],
        "tap_on_time": pd.to_datetime(["2016-08-08 17:10", "2016-08-08 08:05", "2016-08-10 09:00",
                                       "2016-08-08 09:30", "2016-08-08 12:00", "2016-08-15 10:00",
                                       "2016-08-14 23:59", "2016-08-09 08:00", "2016-08-09 08:00"]),
        "tap_on_stop": [2, 1, 1, 3, 99, 1, 2, 3, 1],
    })
    stops = pd.DataFrame({"stop_id": [1, 2, 3, 4], "mode": ["train"] * 3 + ["bus"],
                          "name": ["Central", "Redfern", "Town Hall", "x"], "postcode": [2000, 2016, 2000, 2000]})
    return trips, stops


def test_trajectories_from_taps_are_per_card_over_the_week_in_time_order():
    trips, stops = _taps()
    got = trajectories_from_trips(trips, stops, date(2016, 8, 8))
    assert got.locations == ("Central", "Redfern", "Town_Hall")  # the stop table's names (universe.from_stop_table)
    # card 7: Central 08:05 Mon (h 8), Redfern 17:10 Mon (h 17), Central Wed 09:00 (h 57); stop 99 unknown
    # card 8: Town Hall Mon 09:30 (h 9), Redfern Sun 23:59 (h 167); card 9: Town Hall Tue 08:00 (h 32)
    assert got.trajectories.to_lists() == [((0, 8), (1, 17), (0, 57)), ((2, 9), (1, 167)), ((2, 32),)]
    assert got.quarantined == {"unknown_location": [5], "outside_period": [6]}
    assert got.lines == 8


def test_taps_order_never_depends_on_the_rows_order():
    trips, stops = _taps()
    trips = pd.concat([trips, pd.DataFrame({"card_id": [7], "mode": ["train"],
                                            "tap_on_time": pd.to_datetime(["2016-08-08 08:05"]),
                                            "tap_on_stop": [3]})], ignore_index=True)
    a = trajectories_from_trips(trips, stops, date(2016, 8, 8)).trajectories.to_lists()
    b = trajectories_from_trips(trips.iloc[::-1].reset_index(drop=True), stops,
                                date(2016, 8, 8)).trajectories.to_lists()
    assert a == b
    assert a[0] == ((0, 8), (2, 8), (1, 17), (0, 57))  # the same minute: ordered by location


def test_the_period_is_declared_a_week_from_monday():
    trips, stops = _taps()
    with pytest.raises(InputDataError, match="must start on a Monday"):
        trajectories_from_trips(trips, stops, date(2016, 8, 9))
    with pytest.raises(InputDataError, match="at most 7 days"):
        trajectories_from_trips(trips, stops, date(2016, 8, 8), date(2016, 8, 15))
    short = trajectories_from_trips(trips, stops, date(2016, 8, 8), date(2016, 8, 9))  # Monday and Tuesday
    assert short.trajectories.to_lists() == [((0, 8), (1, 17)), ((2, 9),), ((2, 32),)]
    assert short.quarantined["outside_period"] == [3, 6, 7]
    long = trajectories_from_trips(trips, stops, date(2016, 8, 8), max_length=2)
    assert long.quarantined["too_long"] == [2]  # card 7's first tap in time order
    assert np.all(long.trajectories.lengths <= 2)


def test_taxonomy_file_with_lines_is_a_three_level_universe(tmp_path):
    """The one universe reader (inputs/universe.py) reads a ``line`` column as the level above the groups."""
    from transit_release.mechanisms.safepath import Hierarchy
    from transit_release.synth.metro import build_metro
    from transit_release.synth.trajectories import metro_location_table

    f = tmp_path / "tax.csv"
    f.write_text("location,group,line\nC,north,red\nA,north,blue\nB,south,blue\nD,north,red\n")
    u = read_taxonomy_file(f)
    assert u.ids == ("A", "B", "C", "D") and u.lines == ("blue", "blue", "red", "red")
    assert u.describe()["lines"] == 2 and u.describe()["groups"] == 2
    tax = Hierarchy.from_labels(u.taxonomy_levels, "location", len(u))
    assert tax.height == 2
    assert tax.node_at[0].tolist() == [0, 0, 1, 1]  # lines: blue (A, B), red (C, D)
    assert tax.node_at[1].tolist() == [0, 1, 2, 2]  # groups: blue/north, blue/south, red/north
    plain = tmp_path / "plain.csv"
    plain.write_text("location,group\nC,north\nA,north\nB,south\nD,north\n")
    assert read_taxonomy_file(plain).lines is None and read_taxonomy_file(plain).sha256 != u.sha256
    f.write_text("location,group,line\nA,x,\n")
    with pytest.raises(InputDataError, match="1 location\\(s\\) have an empty 'line', first at line\\(s\\) 2"):
        read_taxonomy_file(f)
    m = tmp_path / "metro.csv"
    metro_location_table(build_metro()).to_csv(m, index=False)
    metro = read_taxonomy_file(m)
    metro_tax = Hierarchy.from_labels(metro.taxonomy_levels, "location", len(metro))
    assert metro_tax.n_nodes(1) == 4 and metro_tax.height == 2 and metro_tax.sibling_candidates()[-1] == 4
