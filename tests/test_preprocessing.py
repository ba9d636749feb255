import numpy as np
import pandas as pd
import pytest

from transit_release.config import MARGINAL_BY_NAME, load_release_config
from transit_release.noise import NoiseSource
from transit_release.releases.opal import release_tables, sanitize_partition
from transit_release.preprocessing import (build_location_index, encode_trips, key_space, partition_histograms,
                                           time_label)

MODES = ("bus", "ferry", "lightrail", "train")


@pytest.fixture
def stops():
    return pd.DataFrame({
        "stop_id": [1, 2, 3, 10, 11],
        "mode": ["bus", "bus", "bus", "train", "train"],
        "name": ["a", "b", "c", "Central Station", "Town Hall Station"],
        "postcode": pd.array([2000, 2000, None, None, None], dtype="Int64"),
    })


def trips(rows):
    df = pd.DataFrame(rows, columns=["card_id", "mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop"])
    df["tap_on_time"] = pd.to_datetime(df["tap_on_time"])
    df["tap_off_time"] = pd.to_datetime(df["tap_off_time"])
    df["tap_off_stop"] = df["tap_off_stop"].astype("Int64")
    return df


def test_encoding_drops_the_card_and_maps_stops(stops):
    df = trips([
        (1, "bus", "2016-08-08 07:07", 1, "2016-08-08 07:29", 2),
        (2, "bus", "2016-08-08 23:59", 3, None, None),          # unmapped stop, missing tap-off
        (3, "train", "2016-08-09 00:00", 10, "2016-08-09 00:20", 99),  # unknown stop
        (4, "bus", "2016-08-08 07:14", 10, "2016-08-08 07:16", 1),    # a train stop used as a bus stop
    ])
    enc = encode_trips(df, build_location_index(stops, MODES), 15)
    assert "card_id" not in enc.frame.columns
    assert enc.partitions == (("bus", "20160808"), ("train", "20160809"))
    assert enc.vocab["bus"] == ("2000",)
    assert enc.vocab["train"] == ("Central Station", "Town Hall Station")
    f = enc.frame
    assert f["on_bin"].tolist() == [28, 95, 0, 28]
    assert f["off_bin"].tolist() == [29, -1, 1, 29]
    assert f["on_loc"].tolist() == [0, -1, 0, -1]
    assert f["off_loc"].tolist() == [0, -1, -1, 0]
    assert f["part"].tolist() == [0, 0, 1, 0]


def test_dense_and_binary_search_lookups_agree(monkeypatch):
    """Stop ids in a narrow range are looked up by array index, in a wide one by binary search: same codes,
    including ids below, between and above the table's, the wrong mode, and absent tap-offs."""
    import transit_release.preprocessing as pre

    rng = np.random.default_rng(3)
    ids = np.sort(rng.choice(np.arange(100_000, 100_400), 150, replace=False))
    table = pd.DataFrame({"stop_id": ids, "mode": rng.choice(["bus", "train"], ids.size),
                          "name": [f"s{i % 17}" for i in range(ids.size)],
                          "postcode": pd.array([None if i % 5 == 0 else 2000 + i % 7 for i in range(ids.size)],
                                               dtype="Int64")})
    stop = rng.integers(99_990, 100_410, 5000)
    present = rng.random(5000) < 0.9
    mode = rng.integers(0, 2, 5000).astype(np.int8)
    index = build_location_index(table, ("bus", "train"))
    assert index.dense is not None
    dense = pre._lookup(index, stop, present, mode)
    monkeypatch.setattr(pre, "DENSE_SPAN", 10)
    wide = build_location_index(table, ("bus", "train"))
    assert wide.dense is None
    searched = pre._lookup(wide, stop, present, mode)
    assert (dense >= 0).sum() > 500 and (dense == -1).sum() > 1000
    np.testing.assert_array_equal(dense, searched)
    # the stops' names as location ids (issue #40's tap-on claims): the same both ways
    np.testing.assert_array_equal(pre._lookup(index, stop, present, mode, names=True),
                                  pre._lookup(wide, stop, present, mode, names=True))


def test_the_index_names_each_stop_by_its_location_id_as_the_passenger_kinds_do(tmp_path):
    """The index's name codes (a bus stop's too) are the universe's ``stop_location_id`` of each name (white space
    runs as ``_``, trimmed; a stop without a name has none), and survive the index's file."""
    import transit_release.preprocessing as pre
    from transit_release.inputs.universe import stop_location_id

    names = ["Central", "  Town  Hall ", "Wynyard\tStation", "Circular\u00a0Quay", None, "Museum\n"]
    table = pd.DataFrame({"stop_id": np.arange(1, 7), "mode": ["train", "train", "bus", "bus", "train", "ferry"],
                          "name": names, "postcode": pd.array([2000] * 6, dtype="Int64")})
    index = build_location_index(table, ("bus", "ferry", "train"))
    got = [None if c < 0 else index.name_vocab[m][c] for m, c in zip(table["mode"], index.stop_name_code)]
    assert got == [None if n is None else stop_location_id(n) for n in names]
    assert index.name_vocab == {"bus": ("Circular_Quay", "Wynyard_Station"), "ferry": ("Museum",),
                                "train": ("Central", "Town_Hall")}
    again = pre.load_location_index(pre.save_location_index(index, tmp_path / "locations.npz"))
    assert again.name_vocab == index.name_vocab
    np.testing.assert_array_equal(again.stop_name_code, index.stop_name_code)


def test_histograms_equal_a_groupby(small_week):
    from transit_release.inputs.tables import read_stops, read_trips

    t = read_trips(small_week["trips"])
    s = read_stops(small_week["stops"])
    enc = encode_trips(t, build_location_index(s, MODES), 15)
    parts = partition_histograms(enc)
    assert len(parts) == 28
    assert sum(p.n_trips for p in parts) == len(t)
    ks = key_space(enc)
    f = enc.frame
    m = MARGINAL_BY_NAME["tap_off_time_location"]
    expected = f.groupby(["part", "off_bin", "off_loc"]).size()
    for p, ph in enumerate(parts):
        h = ph.histograms[m.name]
        tb, lc = ks.decode(m, h.keys)
        got = pd.Series(h.counts, index=pd.MultiIndex.from_arrays([np.full(len(tb), p), tb, lc]))
        exp = expected.loc[[p]]
        exp.index = exp.index.set_levels(exp.index.levels[1].astype(np.int64), level=1)
        assert sorted(zip(got.index.tolist(), got.tolist())) == \
            sorted(((int(a), int(b), int(c)), int(v)) for (a, b, c), v in exp.items())
        assert np.all(np.diff(h.keys) > 0) and h.counts.min() >= 1


def test_time_labels():
    assert time_label(np.array([-1, 0, 1, 95]), 15).tolist() == ["-1", "00:00", "00:15", "23:45"]


def test_permuting_input_rows_does_not_change_the_release(small_week):
    """With a fixed test seed, shuffled input rows give identical output files."""
    from transit_release.inputs.tables import read_stops, read_trips

    cfg = load_release_config()
    t = read_trips(small_week["trips"])
    s = read_stops(small_week["stops"])

    def run(trips_df, stops_df):
        enc = encode_trips(trips_df, build_location_index(stops_df, MODES), 15)
        sanitized = [sanitize_partition(p, cfg, NoiseSource(seed=42)) for p in partition_histograms(enc)]
        return release_tables(sanitized, key_space(enc), enc.vocab, 15)

    a = run(t, s)
    b = run(t.sample(frac=1.0, random_state=3).reset_index(drop=True),
            s.sample(frac=1.0, random_state=4).reset_index(drop=True))
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name])
        assert len(a[name]) > 0


def test_no_point_absent_from_the_input_is_released(small_week):
    from transit_release.inputs.tables import read_stops, read_trips

    cfg = load_release_config()
    t = read_trips(small_week["trips"])
    enc = encode_trips(t, build_location_index(read_stops(small_week["stops"]), MODES), 15)
    parts = partition_histograms(enc)
    for ph in parts:
        sp = sanitize_partition(ph, cfg, NoiseSource())
        for name, rel in sp.released.items():
            assert np.isin(rel.keys, ph.histograms[name].keys).all()
            assert rel.counts.min(initial=10**9) >= sp.thresholds[name]
