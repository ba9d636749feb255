"""Sequence inputs: the public universe, the one-a-line format and sequences from tap data."""

from __future__ import annotations

import pandas as pd
import pytest

from transit_release.errors import InputDataError
from transit_release.inputs.sequences import read_sequence_file, sequences_from_trips, write_sequence_file
from transit_release.inputs.universe import (LocationUniverse, from_stop_table, read_locations_file,
                                             read_taxonomy_file, with_taxonomy)


def universe(*ids: str) -> LocationUniverse:
    return LocationUniverse(tuple(sorted(ids)), "test")


def test_one_sequence_a_line_with_comments_and_quarantine(tmp_path):
    f = tmp_path / "seqs.txt"
    f.write_text("% a comment\n# another\nA B C\nB\n\n   \nA A D\n" + " ".join(["B"] * 12) + "\n")
    got = read_sequence_file(f, universe("A", "B", "C", "D", "E"), max_length=10)
    assert got.vocabulary == ("A", "B", "C", "D", "E")  # the universe, including E nobody used
    assert got.sequences.n_locations == 5
    assert got.sequences.to_lists() == [(0, 1, 2), (1,), (0, 0, 3)]
    assert got.quarantine_counts == {"empty": 2, "too_long": 1}
    assert got.quarantined["empty"] == [5, 6] and got.quarantined["too_long"] == [8]
    assert got.lines == 6


def test_a_token_outside_the_public_universe_is_quarantined_never_added(tmp_path):
    """The finding: without a universe, one passenger at a station nobody else used entered the universe."""
    f = tmp_path / "seqs.txt"
    f.write_text("1 2\n2 9\n1\n")
    got = read_sequence_file(f, universe("1", "2", "3"))
    assert got.sequences.to_lists() == [(0, 1), (0,)]
    assert got.quarantined == {"unknown_location": [2]}
    assert got.vocabulary == ("1", "2", "3")
    with pytest.raises(TypeError, match="needs the public LocationUniverse"):
        read_sequence_file(f, ("1", "2", "3"))


def test_file_errors(tmp_path):
    u = universe("A", "B")
    with pytest.raises(InputDataError, match="not found"):
        read_sequence_file(tmp_path / "nope.txt", u)
    f = tmp_path / "c.txt"
    f.write_text("# only comments\n")
    with pytest.raises(InputDataError, match="no sequences"):
        read_sequence_file(f, u)
    g = tmp_path / "b.txt"
    g.write_bytes(b"A \xff B\n")
    with pytest.raises(InputDataError, match="not valid UTF-8"):
        read_sequence_file(g, u)


def test_write_round_trip(tmp_path):
    f = tmp_path / "out.txt"
    ids = ("Berri-UQAM", "Jean-Talon", "Snowdon")
    write_sequence_file(f, [((1, 2), 2), ((0,), 1)], ids, header="release x")
    assert f.read_text() == "# release x\nJean-Talon Snowdon\nJean-Talon Snowdon\nBerri-UQAM\n"
    again = read_sequence_file(f, universe(*ids))
    assert again.sequences.to_lists() == [(1, 2), (1, 2), (0,)]


def test_sequences_from_taps_are_one_per_card_over_the_period_in_time_order():
    trips = pd.DataFrame({
        "card_id": [7, 7, 7, 8, 7],
        "mode": ["train"] * 5,
        "tap_on_time": pd.to_datetime(["2016-08-08 17:00", "2016-08-08 08:00", "2016-08-09 09:00",
                                       "2016-08-08 09:00", "2016-08-08 12:00"]),
        "tap_on_stop": [2, 1, 1, 3, 99],
    })
    stops = pd.DataFrame({"stop_id": [1, 2, 3, 4], "mode": ["train"] * 4,
                          "name": ["Central", "Redfern", "Town Hall", "Wynyard"], "postcode": [None] * 4})
    got = sequences_from_trips(trips, stops)
    assert got.vocabulary == ("Central", "Redfern", "Town_Hall", "Wynyard")  # the stop table's, spaces as _
    # card 7: Central (8th 08:00), Redfern (8th 17:00), Central (9th); stop 99 is unknown; card 8: Town Hall
    assert got.sequences.to_lists() == [(0, 1, 0), (2,)]
    assert got.quarantine_counts == {"unknown_location": 1}
    shuffled = sequences_from_trips(trips.sample(frac=1, random_state=1), stops)
    assert shuffled.sequences.to_lists() == got.sequences.to_lists()


def test_locations_file(tmp_path):
    f = tmp_path / "locations.txt"
    f.write_text("# stations\nSnowdon\n\nBerri-UQAM\n% more\nJean-Talon\n")
    u = read_locations_file(f)
    assert u.ids == ("Berri-UQAM", "Jean-Talon", "Snowdon") and u.groups is None
    assert u.describe()["locations"] == 3 and len(u.sha256) == 64
    f.write_text("A\nB\nA\n")
    with pytest.raises(InputDataError, match=r"1 location id\(s\) listed twice, first repeat at line\(s\) 3"):
        read_locations_file(f)
    f.write_text("A\nst@tion\n")
    with pytest.raises(InputDataError, match="contain white space or '@'"):
        read_locations_file(f)
    f.write_text("# nothing\n")
    with pytest.raises(InputDataError, match="the location universe is empty"):
        read_locations_file(f)


def test_taxonomy_file_is_a_universe_with_groups(tmp_path):
    t = tmp_path / "taxonomy.csv"
    t.write_text("location,group,name\n2,green,b\n1,orange,a\n3,green,c\n")
    u = read_taxonomy_file(t)
    assert u.ids == ("1", "2", "3") and u.groups == ("orange", "green", "green")
    loc = tmp_path / "l.txt"
    loc.write_text("1\n2\n3\n")
    assert with_taxonomy(read_locations_file(loc), u).groups == u.groups
    loc.write_text("1\n2\n3\n4\n")
    with pytest.raises(InputDataError, match="1 location\\(s\\) of the universe have no group"):
        with_taxonomy(read_locations_file(loc), u)
    t.write_text("station,line\n1,a\n")
    with pytest.raises(InputDataError, match="expected the columns 'location,group' first"):
        read_taxonomy_file(t)


def test_stop_table_universe():
    stops = pd.DataFrame({"stop_id": [1, 2, 3], "mode": ["train", "train", "bus"],
                          "name": ["Town Hall", None, "x"], "postcode": [None, None, 2000]})
    assert from_stop_table(stops, "train").ids == ("Town_Hall",)
    with pytest.raises(InputDataError, match="no named stop of mode 'ferry'"):
        from_stop_table(stops, "ferry")
