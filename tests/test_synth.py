import numpy as np
import pandas as pd
import pytest

from transit_release.preprocessing import build_location_index, encode_trips, location_label
from transit_release.synth.opal_week import load_calibration, synthesize_week

MODES = ("bus", "ferry", "lightrail", "train")


@pytest.fixture(scope="module")
def full_week():
    return synthesize_week(scale=1.0, seed=0)


def tap_counts(week):
    enc = encode_trips(week.trips, build_location_index(week.stops, MODES), 15)
    f = enc.frame
    out = []
    for tap, col in (("on", "on_loc"), ("off", "off_loc")):
        g = f.groupby(["part", col]).size().reset_index(name="count")
        g["mode"] = [enc.partitions[p][0] for p in g["part"]]
        g["date"] = [enc.partitions[p][1] for p in g["part"]]
        g["loc"] = [location_label(np.array([c]), enc.vocab[m])[0] for c, m in zip(g[col], g["mode"])]
        g["tap"] = tap
        out.append(g[["mode", "date", "tap", "loc", "count"]])
    return pd.concat(out)


@pytest.mark.long  # 13 million trips
def test_full_scale_week_matches_the_real_release(full_week):
    from scipy.stats import spearmanr

    cal = load_calibration()
    syn = tap_counts(full_week)
    merged = cal.merge(syn, on=["mode", "date", "tap", "loc"], how="left", suffixes=("_real", "_syn"))
    assert merged["count_syn"].notna().all()
    total_real, total_syn = cal["count"].sum(), merged["count_syn"].sum()
    assert abs(total_syn / total_real - 1) < 0.01
    rho = spearmanr(merged["count_real"], merged["count_syn"]).statistic
    assert rho >= 0.99
    assert 13_000_000 < len(full_week.trips) < 14_000_000


@pytest.mark.long
def test_shape_of_the_week(full_week):
    t = full_week.trips
    day = t["tap_on_time"].dt.normalize()
    per_card_day = t.groupby([day, "card_id"]).size()
    assert per_card_day.mean() > 1.8 and per_card_day.max() >= 4
    hour = t["tap_on_time"].dt.hour
    weekday = t["tap_on_time"].dt.dayofweek < 5
    peak = hour.isin([7, 8, 16, 17])
    assert peak[weekday].mean() > 1.5 * peak[~weekday].mean()
    missing_off = t["tap_off_time"].isna()
    assert 0 < missing_off.mean() < 0.05
    assert (t.loc[missing_off, "mode"] == "bus").all()
    assert (t["tap_off_time"].dropna() >= t.loc[~missing_off, "tap_on_time"]).all()
    bus_stops = full_week.stops[full_week.stops["mode"] == "bus"]
    assert bus_stops.groupby("postcode").size().min() >= 2
    assert bus_stops["postcode"].isna().sum() > 0


def test_deterministic_for_a_seed():
    a = synthesize_week(scale=0.005, seed=3)
    b = synthesize_week(scale=0.005, seed=3)
    c = synthesize_week(scale=0.005, seed=4)
    pd.testing.assert_frame_equal(a.trips, b.trips)
    assert not a.trips.equals(c.trips)


def test_cards_ride_like_opal_riders():
    """Most card-days have 1–2 trips, commuters make about 10 trips a week, many cards ride once or twice,
    and a card rarely has more than two trips in one (mode, date) partition."""
    t = synthesize_week(scale=0.02, seed=1).trips
    day = t["tap_on_time"].dt.normalize()
    per_day = t.groupby([day, "card_id"]).size()
    assert 0.7 <= per_day.isin([1, 2]).mean() <= 0.9
    per_week = t.groupby("card_id").size()
    assert per_week.le(2).mean() >= 0.2
    assert per_week.ge(10).mean() >= 0.15
    assert 4 <= per_week.median() <= 8
    per_partition = t.groupby(["card_id", "mode", day]).size()
    assert per_partition.le(2).mean() >= 0.95
    assert per_partition.max() >= 3
    assert t.groupby("card_id")["mode"].nunique().eq(1).mean() >= 0.3
