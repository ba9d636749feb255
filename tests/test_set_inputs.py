"""Set-valued inputs: the one-set-a-line format against a public universe, and sets from tap data."""

from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from transit_release.errors import InputDataError
from transit_release.inputs.screening import Period
from transit_release.inputs.sets import format_sets, read_set_file, sets_from_trips, write_set_file
from transit_release.inputs.universe import LocationUniverse, from_stop_locations, read_locations_file

STATIONS = ("Berri-UQAM", "Jean-Talon", "Lionel-Groulx", "Snowdon")  # items 0..3: the universe's sorted ids
UNIVERSE = LocationUniverse(STATIONS, "public station list")


def test_one_set_a_line_ignores_order_repeats_and_comments(tmp_path):
    f = tmp_path / "sets.txt"
    f.write_text("% a comment\n# another\nSnowdon Berri-UQAM Snowdon\n  Jean-Talon  \nBerri-UQAM\tLionel-Groulx\n")
    got = read_set_file(f, UNIVERSE)
    assert got.sets.to_lists() == [(0, 3), (1,), (0, 2)]
    assert got.universe is UNIVERSE and got.lines == 3 and got.quarantined == {}


def test_bad_lines_are_quarantined_with_reasons_and_line_numbers(tmp_path):
    f = tmp_path / "sets.txt"
    f.write_text("Snowdon\n\n   \nSnowdon Atwater\nBerri-UQAM Snowdon Jean-Talon\n# c\nJean-Talon\n")
    got = read_set_file(f, UNIVERSE, max_size=2)
    assert got.sets.to_lists() == [(3,), (1,)]
    assert got.quarantined == {"empty": [2, 3], "unknown_item": [4], "too_large": [5]}
    assert got.quarantine_counts == {"empty": 2, "unknown_item": 1, "too_large": 1}
    assert got.lines == 6 and got.quarantined_share == pytest.approx(4 / 6)


def test_messages_name_positions_and_counts_never_tokens(tmp_path):
    with pytest.raises(InputDataError, match="not found"):
        read_set_file(tmp_path / "nope.txt", UNIVERSE)
    c = tmp_path / "c.txt"
    c.write_text("# only comments\n")
    with pytest.raises(InputDataError, match="no sets"):
        read_set_file(c, UNIVERSE)
    b = tmp_path / "b.txt"
    b.write_bytes(b"Snowdon \xff\n")
    with pytest.raises(InputDataError, match="not valid UTF-8") as e:
        read_set_file(b, UNIVERSE)
    assert "Snowdon" not in str(e.value)


def test_the_universe_is_the_public_location_list_never_the_data(tmp_path):
    """One universe reader for every kind (``inputs/universe.py``): its sorted ids are the items, whatever the
    file holds, unused stations included; a bare tuple of tokens (which could come from the data) is refused."""
    u = tmp_path / "universe.txt"
    u.write_text("# stations\nSnowdon\nBerri-UQAM\n\nLionel-Groulx\nJean-Talon\nAtwater\n")
    universe = read_locations_file(u)
    assert universe.ids == ("Atwater", *STATIONS)
    f = tmp_path / "sets.txt"
    f.write_text("Snowdon Berri-UQAM\n\ufeffSnowdon\n")
    got = read_set_file(f, universe)
    assert got.sets.universe_size == 5 and got.sets.to_lists() == [(1, 4)]  # Atwater (item 0): used by nobody
    assert got.quarantined == {"unknown_item": [2]}  # a BOM inside the file is not part of the universe
    u.write_text("a\nb\na\n")
    with pytest.raises(InputDataError, match=r"locations file universe.txt: 1 location id\(s\) listed twice"):
        read_locations_file(u)
    for call in (lambda: read_set_file(f, STATIONS), lambda: format_sets([], STATIONS),
                 lambda: sets_from_trips(*_taps(), Period(date(2016, 8, 8), date(2016, 8, 14)), STATIONS)):
        with pytest.raises(TypeError, match="needs the public LocationUniverse"):
            call()


def test_write_round_trip(tmp_path):
    f = tmp_path / "out.txt"
    release = [((0, 1), 2), ((3,), 1)]
    write_set_file(f, release, UNIVERSE, header="release x\nε = 1")
    assert f.read_text() == "# release x\n# ε = 1\nBerri-UQAM Jean-Talon\nBerri-UQAM Jean-Talon\nSnowdon\n"
    assert read_set_file(f, UNIVERSE).sets.to_lists() == [(0, 1), (0, 1), (3,)]
    assert format_sets([], UNIVERSE) == ""


def _taps():
    trips = pd.DataFrame({
        "card_id": [7, 7, 7, 8, 9, 9, 7, 8],
        "mode": ["train", "train", "bus", "train", "train", "bus", "train", "ferry"],
        "tap_on_time": pd.to_datetime(["2016-08-08 08:00", "2016-08-09 17:00", "2016-08-10 12:00",
                                       "2016-08-08 09:00", "2016-08-08 10:00", "2016-08-11 10:00",
                                       "2016-08-20 10:00", "2016-08-12 10:00"]),
        "tap_on_stop": [1, 2, 10, 3, 1, 12, 1, 20],
        "tap_off_stop": pd.array([2, 1, pd.NA, 99, 3, 11, 3, 21], dtype="Int64"),
    })
    stops = pd.DataFrame({"stop_id": [1, 2, 3, 10, 11, 12, 20, 21],
                          "mode": ["train", "train", "train", "bus", "bus", "bus", "ferry", "ferry"],
                          "name": ["Central Station", "Redfern Station", "Town Hall Station", "Stop a", "Stop b",
                                   "Stop c", "Manly Wharf", "Circular Quay"],
                          "postcode": pd.array([None, None, None, 2000, 2010, None, None, None], dtype="Int64")})
    return trips, stops


def test_sets_from_taps_are_each_cards_distinct_locations_over_the_period():
    trips, stops = _taps()
    universe = from_stop_locations(stops, name="stops file s.csv")
    # universe: every location of the stop table as mode:location (bus: postcode), white space as _, sorted
    assert universe.ids == ("bus:2000", "bus:2010", "ferry:Circular_Quay", "ferry:Manly_Wharf",
                            "train:Central_Station", "train:Redfern_Station", "train:Town_Hall_Station")
    assert universe.source == "stops file s.csv (bus, ferry, train locations, as mode:location)"
    got = sets_from_trips(trips, stops, Period(date(2016, 8, 8), date(2016, 8, 14)), universe)
    assert got.universe is universe
    # card 7: Central, Redfern (twice) and bus 2000; the 20th is outside the period. Card 8: stop 99 is
    # unknown (row quarantined), so only its ferry trip. Card 9: Central, Town Hall, and bus 2010 (stop 12 has
    # no postcode: no item). Sets are ordered by content, card ids are gone.
    assert got.sets.to_lists() == [(0, 4, 5), (1, 4, 6), (2, 3)]
    assert got.quarantined == {"unknown_stop": [4], "outside_period": [7]}
    assert got.lines == 8


def test_the_tap_universe_is_exactly_the_items_taps_can_give():
    """Every located stop of the table gives an id of the universe, and every id of the universe is some stop's:
    the universe and the sets are built from one location index, so they match exactly."""
    trips, stops = _taps()
    universe = from_stop_locations(stops)
    period = Period(date(2016, 8, 8), date(2016, 8, 8))
    located = stops[~((stops["mode"] == "bus") & stops["postcode"].isna())]
    one_tap_each = pd.DataFrame({"card_id": range(len(located)), "mode": located["mode"].to_numpy(),
                                 "tap_on_time": pd.Timestamp("2016-08-08 08:00"),
                                 "tap_on_stop": located["stop_id"].to_numpy(),
                                 "tap_off_stop": pd.array([pd.NA] * len(located), dtype="Int64")})
    got = sets_from_trips(one_tap_each, stops, period, universe)
    assert sorted(i for s in got.sets.to_lists() for i in s) == list(range(len(universe)))
    # a universe that lacks a location the taps use: the row is quarantined, never a new item
    smaller = LocationUniverse(universe.ids[1:], "a smaller list")
    got = sets_from_trips(one_tap_each, stops, period, smaller)
    assert got.quarantine_counts == {"unknown_location": 1} and len(got.sets) == len(universe) - 1


def test_sets_from_taps_do_not_depend_on_row_order_and_can_keep_one_mode():
    trips, stops = _taps()
    period = Period(date(2016, 8, 8), date(2016, 8, 14))
    universe = from_stop_locations(stops)
    a = sets_from_trips(trips, stops, period, universe)
    b = sets_from_trips(trips.sample(frac=1, random_state=3).reset_index(drop=True), stops, period, universe)
    assert a.sets.to_lists() == b.sets.to_lists()
    train_universe = from_stop_locations(stops, ("train",))
    assert train_universe.ids == ("train:Central_Station", "train:Redfern_Station", "train:Town_Hall_Station")
    train = sets_from_trips(trips, stops, period, train_universe, modes=("train",))
    assert train.sets.to_lists() == [(0, 1), (0, 2)]
    assert train.lines == 5


def test_synthetic_set_data():
    from transit_release.synth.metro import synthesize_metro
    from transit_release.synth.sets import metro_sets, opal_week_sets, stm_like_sets

    sets, metro = metro_sets(2_000, seed=3)
    seqs, _ = synthesize_metro(2_000, seed=3)
    assert sets.to_lists() == [tuple(sorted(set(s))) for s in seqs.to_lists()]
    assert sets.universe_size == metro.n_stations == 68
    stm = stm_like_sets(50_000, seed=1)
    assert stm.universe_size == 1012 and stm.sizes.max() == 64 and 4.5 < stm.sizes.mean() < 5.2
    assert stm_like_sets(50_000, seed=1).to_lists() == stm.to_lists()  # reproducible
    opal = opal_week_sets(0.002, seed=1, modes=("train",))
    assert all(t.startswith("train:") for t in opal.universe.ids) and len(opal.sets) > 100
