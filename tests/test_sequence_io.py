"""Sequence inputs: the one-a-line format and sequences from tap data."""

from __future__ import annotations

import pandas as pd
import pytest

from transit_release.errors import InputDataError
from transit_release.sequence_io import read_sequence_file, sequences_from_trips, write_sequence_file


def test_one_sequence_a_line_with_comments_and_quarantine(tmp_path):
    f = tmp_path / "seqs.txt"
    f.write_text("% a comment\n# another\nA B C\nB\n\n   \nA A D\n" + " ".join(["B"] * 12) + "\n")
    got = read_sequence_file(f, max_length=10)
    assert got.vocabulary == ("A", "B", "C", "D")
    assert got.sequences.to_lists() == [(0, 1, 2), (1,), (0, 0, 3)]
    assert got.quarantine_counts == {"empty": 2, "too_long": 1}
    assert got.quarantined["empty"] == [5, 6] and got.quarantined["too_long"] == [8]
    assert got.lines == 6


def test_unknown_locations_against_a_vocabulary(tmp_path):
    f = tmp_path / "seqs.txt"
    f.write_text("1 2\n2 9\n1\n")
    got = read_sequence_file(f, vocabulary=("1", "2", "3"))
    assert got.sequences.to_lists() == [(0, 1), (0,)]
    assert got.quarantined == {"unknown_location": [2]}


def test_file_errors(tmp_path):
    with pytest.raises(InputDataError, match="not found"):
        read_sequence_file(tmp_path / "nope.txt")
    f = tmp_path / "c.txt"
    f.write_text("# only comments\n")
    with pytest.raises(InputDataError, match="no sequences"):
        read_sequence_file(f)
    g = tmp_path / "b.txt"
    g.write_bytes(b"A \xff B\n")
    with pytest.raises(InputDataError, match="not valid UTF-8"):
        read_sequence_file(g)


def test_write_round_trip(tmp_path):
    f = tmp_path / "out.txt"
    write_sequence_file(f, [((0, 1), 2), ((2,), 1)], ("Jean-Talon", "Snowdon", "Berri-UQAM"), header="release x")
    assert f.read_text() == "# release x\nJean-Talon Snowdon\nJean-Talon Snowdon\nBerri-UQAM\n"
    again = read_sequence_file(f, vocabulary=("Jean-Talon", "Snowdon", "Berri-UQAM"))
    assert again.sequences.to_lists() == [(0, 1), (0, 1), (2,)]


def test_sequences_from_taps_are_per_card_day_in_time_order():
    trips = pd.DataFrame({
        "card_id": [7, 7, 7, 8, 7],
        "mode": ["train"] * 5,
        "tap_on_time": pd.to_datetime(["2016-08-08 17:00", "2016-08-08 08:00", "2016-08-09 09:00",
                                       "2016-08-08 09:00", "2016-08-08 12:00"]),
        "tap_on_stop": [2, 1, 1, 3, 99],
    })
    stops = pd.DataFrame({"stop_id": [1, 2, 3], "mode": ["train"] * 3,
                          "name": ["Central", "Redfern", "Town Hall"], "postcode": [None] * 3})
    got = sequences_from_trips(trips, stops)
    assert got.vocabulary == ("Central", "Redfern", "Town Hall")
    # card 7 on the 8th: Central (08:00) then Redfern (17:00); stop 99 is unknown; 9th: Central; card 8: Town Hall
    assert got.sequences.to_lists() == [(0,), (0, 1), (2,)]
    assert got.quarantine_counts == {"unknown_location": 1}
    shuffled = sequences_from_trips(trips.sample(frac=1, random_state=1), stops)
    assert shuffled.sequences.to_lists() == got.sequences.to_lists()
