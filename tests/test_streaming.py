"""The streamed input (issue 18): one pass in batches, then one step per partition, equal to the in-memory path.

The library is driven directly (no Prefect) with tiny batches, so that duplicates, contract problems, unknown
stops and one card's many trips fall in different batches.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from schemas import EncodedPartition, Stops, TripsFile, validate
from schemas.validation import check
from tasks.stream import _clean_aggregates, check_partitions
from transit_release.config import load_release_config
from transit_release.errors import SchemaViolationError
from transit_release.inputs import screening, streaming
from transit_release.inputs.tables import read_stops, read_trips
from transit_release.mechanisms.contribution_bounding import ContributionBounds
from transit_release.noise import NoiseSource
from transit_release.preprocessing import build_location_index, encode_trips, split_by_partition
from transit_release.releases import opal

PERIOD = screening.parse_period("2016-08-08", "2016-08-14")
SMALL_BATCH = 1 << 16  # 64 KiB of CSV: a few hundred rows per batch


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    from transit_release.synth.opal_week import write_synthetic_week

    paths = write_synthetic_week(tmp_path_factory.mktemp("stream"), scale=0.001, seed=3, show_progress=False)
    return paths, pd.read_csv(paths["trips"], dtype=str, keep_default_na=False)


def messy(base: pd.DataFrame, path: Path) -> Path:
    """Duplicates far apart (other batches), unknown stops, a row outside the period, a heavy card."""
    df = base.copy()
    n = len(df)
    df = pd.concat([df, df.iloc[[3, 50, n // 2, n - 2]]], ignore_index=True)  # exact repeats, in later batches
    df.loc[[10, n // 3], "tap_on_stop"] = "999999"
    df.loc[[20], "tap_on_time"] = "2016-09-01 10:00:00"
    heavy = df.iloc[[100]].copy()
    heavy = pd.concat([heavy] * 40, ignore_index=True)
    heavy["tap_on_time"] = [f"2016-08-09 {6 + i // 6:02d}:{(i % 6) * 10:02d}:00" for i in range(40)]
    heavy["tap_off_time"] = [f"2016-08-09 {6 + i // 6:02d}:{(i % 6) * 10 + 5:02d}:00" for i in range(40)]
    df = pd.concat([df.iloc[: n // 4], heavy, df.iloc[n // 4:]], ignore_index=True)
    df.to_csv(path, index=False)
    return path


def in_memory(trips_path, stops, cfg, seed, card: bool):
    """The whole-frame path: read, contract, screen, bound (card level), encode, split by partition."""
    raw = validate(TripsFile, read_trips(trips_path), "trips")
    screened = screening.screen_trips(raw, stops, PERIOD, cfg.quality, cfg.modes)
    kept = None
    if card:
        bounds = ContributionBounds(cfg.bounds.max_trips_per_partition, cfg.bounds.max_partitions)
        kept, _ = opal.bound_card_contributions(screened.clean, bounds, NoiseSource(seed=seed), PERIOD, cfg.modes)
    enc = encode_trips(screened.clean, build_location_index(stops, cfg.modes), cfg.bin_minutes, kept)
    return screened, {key: rows for key, rows in split_by_partition(enc)}


def streamed(trips_path, stops, cfg, seed, card: bool, work: Path):
    """The streamed path, every partition step in this process."""
    st = streaming.stream_trips(trips_path, stops, PERIOD, cfg.quality, cfg.modes, work / "spill", work / "q",
                                partial(check, TripsFile), batch_bytes=SMALL_BATCH)
    index = build_location_index(stops, cfg.modes)
    staging = work / "staging"
    prepared = []
    for mode, date in streaming.partition_labels(PERIOD, cfg.modes):
        prepared.append(streaming.prepare_partition(
            work / "spill", staging, work / "q", work / "pairs", mode, date, cfg.modes.index(mode), index,
            cfg.bin_minutes, cfg.bounds.max_trips_per_partition if card else None, NoiseSource(seed=seed),
            partial(_clean_aggregates, f"{mode}/{date}", date),
            lambda enc: validate(EncodedPartition, pd.DataFrame(enc), "encoded"), shards=3))
    prepared = check_partitions(prepared, cfg.quality)
    dropped = {}
    if card:
        dropped = streaming.bound_partitions_per_card(work / "pairs", streaming.partition_labels(PERIOD, cfg.modes),
                                                      prepared, cfg.bounds.max_partitions,
                                                      NoiseSource(seed=seed), shards=3).dropped
    repeats = {d.strftime("%Y%m%d"): 0 for d in PERIOD.days}
    for p in prepared:
        repeats[p.date] += p.duplicates
    figures = st.tally.figures(np.array(list(repeats.values())))
    parts = {}
    for p in prepared:
        if p.entry is None:
            continue
        import pyarrow.feather as feather

        t = feather.read_table(staging / p.entry.relative_path).to_pandas()
        if (p.mode, p.date) in dropped:
            t["kept"] &= ~t["pair"].isin(dropped[(p.mode, p.date)])
        parts[(p.mode, p.date)] = t.drop(columns=[c for c in ("pair",) if c in t.columns])
    return st, prepared, figures, parts


@pytest.mark.parametrize("card", [False, True], ids=["trip", "card"])
def test_streamed_partitions_equal_the_in_memory_path(week, tmp_path, card):
    paths, base = week
    cfg = load_release_config(unit="card" if card else None)
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    trips = messy(base, tmp_path / "trips.csv")
    screened, expected = in_memory(trips, stops, cfg, 11, card)
    st, prepared, figures, parts = streamed(trips, stops, cfg, 11, card, tmp_path / "work")

    assert st.tally.rows == screened.total_rows and len(st.quarantine_parts) > 1  # several batches had problems
    assert figures.counts == screened.counts and figures.counts["duplicate"] == 4
    assert figures.summary() == screened.summary()
    first = screening._figures(screened)
    assert (figures.unknown_stop_first, figures.outside_first, figures.unknown_stop_ids) == \
        (first.unknown_stop_first, first.outside_first, first.unknown_stop_ids)
    assert list(figures.clean_per_day) == list(screened.clean_per_day)
    assert set(parts) == set(expected)
    for key, rows in expected.items():
        got = parts[key]
        pd.testing.assert_frame_equal(got[list(rows.columns)].reset_index(drop=True), rows, check_dtype=False)
    if card:
        assert not all(r["kept"].all() for r in expected.values())  # the heavy card was bounded

    q = pd.concat([pd.read_parquet(f) for f in sorted((tmp_path / "work" / "q").glob("*.parquet"))])
    assert sorted(q["row"]) == sorted(screened.quarantined["row"])
    assert not any((tmp_path / "work" / "spill").rglob("*.arrow"))  # the spill (card ids) is gone


def test_contract_problems_over_batches_are_reported_as_one_file(week, tmp_path):
    """Bad values in different batches: the same message (counts, first rows) as validating the whole file."""
    paths, base = week
    df = base.copy()
    bad_rows = [5, 700, 1500, 2600, 3900, 5000, 6100]
    df.loc[bad_rows, "card_id"] = "abc"
    f = tmp_path / "trips.csv"
    df.to_csv(f, index=False)
    cfg = load_release_config()
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    with pytest.raises(SchemaViolationError) as whole:
        validate(TripsFile, read_trips(f), "trips file trips.csv")
    with pytest.raises(SchemaViolationError) as batched:
        streaming.stream_trips(f, stops, PERIOD, cfg.quality, cfg.modes, tmp_path / "s", tmp_path / "q",
                               partial(check, TripsFile), batch_bytes=SMALL_BATCH)
    assert str(batched.value) == str(whole.value)
    assert "7 row(s), first at row(s) 6, 701, 1501, 2601, 3901" in str(batched.value)


def test_bad_times_over_batches_are_reported_as_one_file(week, tmp_path):
    from transit_release.inputs.tables import _check_time_text, read_table, TRIP_COLUMN_TYPES  # noqa: F401

    paths, base = week
    df = base.copy()
    df.loc[[30, 3000], "tap_on_time"] = "2016-08-09T10:00:00+02:00"
    f = tmp_path / "trips.csv"
    df.to_csv(f, index=False)
    cfg = load_release_config()
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    with pytest.raises(SchemaViolationError) as whole:
        read_trips(f)
    with pytest.raises(SchemaViolationError) as batched:
        streaming.stream_trips(f, stops, PERIOD, cfg.quality, cfg.modes, tmp_path / "s", tmp_path / "q",
                               partial(check, TripsFile), batch_bytes=SMALL_BATCH)
    assert str(batched.value) == str(whole.value)
    assert "2 row(s), first at row(s) 31, 3001" in str(batched.value)


def test_row_order_does_not_change_the_partitions(week, tmp_path):
    """Shuffling the file's rows changes which batch a row is in, not what a partition holds (as a multiset)."""
    paths, base = week
    cfg = load_release_config(unit="card")
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    a = tmp_path / "a.csv"
    base.to_csv(a, index=False)
    b = tmp_path / "b.csv"
    base.sample(frac=1.0, random_state=4).to_csv(b, index=False)
    _, _, _, pa_ = streamed(a, stops, cfg, 2, True, tmp_path / "wa")
    _, _, _, pb = streamed(b, stops, cfg, 2, True, tmp_path / "wb")
    assert set(pa_) == set(pb)
    for key in pa_:
        sort = list(pa_[key].columns)
        pd.testing.assert_frame_equal(pa_[key].sort_values(sort).reset_index(drop=True),
                                      pb[key].sort_values(sort).reset_index(drop=True))


def test_infer_period_counts_batch_by_batch(week):
    paths, base = week
    assert streaming.infer_period(paths["trips"]) == screening.infer_period(read_trips(paths["trips"]))


def test_a_file_of_one_batch_is_gated_by_the_pass_alone(week, tmp_path):
    """One batch: the pass finds every repeat itself, so the gate can refuse before any partition is prepared,
    with the figures of a whole-file screen."""
    paths, base = week
    cfg = load_release_config()
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    f = messy(base, tmp_path / "trips.csv")
    st = streaming.stream_trips(f, stops, PERIOD, cfg.quality, cfg.modes, tmp_path / "s", tmp_path / "q",
                                partial(check, TripsFile))  # the default batch holds the whole small file
    screened = screening.screen_trips(validate(TripsFile, read_trips(f), "trips"), stops, PERIOD, cfg.quality,
                                      cfg.modes)
    assert st.tally.complete
    figures = st.tally.figures()
    assert figures.summary() == screened.summary() and figures.counts["duplicate"] == 4
    assert list(figures.clean_per_day) == list(screened.clean_per_day)
    many = streaming.stream_trips(f, stops, PERIOD, cfg.quality, cfg.modes, tmp_path / "s2", tmp_path / "q2",
                                  partial(check, TripsFile), batch_bytes=SMALL_BATCH)
    assert not many.tally.complete  # repeats across batches are the partition steps' to find


def test_a_parquet_file_with_text_times_gets_the_text_checks(week, tmp_path):
    """A Parquet file that stores its times as text with a UTC offset is refused as a CSV one is (it was
    accepted and moved to UTC); integers stored as text are read as integers, but not 200782.0 (a float written
    out: refused, never rounded)."""
    paths, base = week
    cfg = load_release_config()
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    df = base.copy().replace("", None)  # missing values as nulls, as a Parquet export has them
    floats = df.assign(card_id=df["card_id"] + ".0")
    floats.to_parquet(tmp_path / "floats.parquet", index=False)
    with pytest.raises(SchemaViolationError, match=rf"column 'card_id': not a whole number .*: {len(df)} row\(s\)"):
        streaming.stream_trips(tmp_path / "floats.parquet", stops, PERIOD, cfg.quality, cfg.modes, tmp_path / "s",
                               tmp_path / "q", partial(check, TripsFile))
    good = tmp_path / "good.parquet"
    df.to_parquet(good, index=False)
    st = streaming.stream_trips(good, stops, PERIOD, cfg.quality, cfg.modes, tmp_path / "s", tmp_path / "q",
                                partial(check, TripsFile))
    assert st.tally.rows == len(df) and st.tally.figures().quarantined_rows == 0
    df.loc[[4, 9], "tap_on_time"] = "2016-08-09T13:16:00+01:00"
    bad = tmp_path / "bad.parquet"
    df.to_parquet(bad, index=False)
    with pytest.raises(SchemaViolationError, match=r"column 'tap_on_time': not a local time .*2 row\(s\), first "
                                                   r"at row\(s\) 5, 10"):
        streaming.stream_trips(bad, stops, PERIOD, cfg.quality, cfg.modes, tmp_path / "s", tmp_path / "q",
                               partial(check, TripsFile))


def test_a_partition_step_run_again_after_its_spill_is_gone_is_refused(week, tmp_path):
    """Dask re-runs a task whose worker died: the step finds its spill removed and prepares nothing, and the
    flow would count that partition as empty. The pass's per-partition row counts catch it."""
    paths, base = week
    cfg = load_release_config()
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    f = tmp_path / "trips.csv"
    base.to_csv(f, index=False)
    st, prepared, _, _ = streamed(f, stops, cfg, 1, False, tmp_path / "w")
    streaming.check_accounted(st.tally, prepared, cfg.modes)  # every row accounted for
    index = build_location_index(stops, cfg.modes)
    again = streaming.prepare_partition(
        tmp_path / "w" / "spill", tmp_path / "w" / "staging2", tmp_path / "w" / "q", tmp_path / "w" / "pairs", "bus",
        "20160809", 0, index, cfg.bin_minutes, None, NoiseSource(seed=1), lambda rows: {"success": True},
        lambda enc: None)
    assert again.rows == 0
    redone = [again if (p.mode, p.date) == ("bus", "20160809") else p for p in prepared]
    with pytest.raises(streaming.UnaccountedRowsError, match=r"partition bus/20160809: its step accounted for 0 of "
                                                             r"the [\d,]+ rows the pass spilled"):
        streaming.check_accounted(st.tally, redone, cfg.modes)


def test_a_lost_record_of_dropped_pairs_fails_closed(week, tmp_path):
    """Card level: the partitions-per-card bound is stored beside the rows; if its record is lost or altered,
    reading the partition refuses instead of counting a card in more than P partitions."""
    from transit_release.files import partition_store

    paths, base = week
    cfg = load_release_config(unit="card")
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    f = messy(base, tmp_path / "trips.csv")
    st, prepared, _, _ = streamed(f, stops, cfg, 11, True, tmp_path / "w")
    labels = streaming.partition_labels(PERIOD, cfg.modes)
    result = streaming.bound_partitions_per_card(tmp_path / "w" / "pairs", labels, prepared, 1, NoiseSource(seed=1),
                                                 shards=3)  # P = 1: surely some pairs dropped
    assert result.dropped
    staging = tmp_path / "w" / "staging"
    for (mode, date), d in result.dropped.items():
        partition_store.write_dropped_pairs(staging, mode, date, d)
    index = build_location_index(stops, cfg.modes)
    from transit_release.preprocessing import key_space_of

    ds = partition_store.commit_dataset(staging, tmp_path / "w" / "partitions", [p.entry for p in prepared if p.entry],
                                        key_space_of(index, cfg.bin_minutes), index.vocab, cfg.bin_minutes)
    ds = partition_store.load_dataset(ds.root)
    hit = next(e for e in ds.partitions if e.dropped_pairs)
    partition_store.read_partition(ds, hit)  # reads
    (ds.root / hit.relative_path).with_name(partition_store.DROPPED_PAIRS).unlink()
    with pytest.raises(partition_store.PartitionStoreError, match="is missing or does not match"):
        partition_store.read_partition(ds, hit)


def test_an_id_too_large_for_an_integer_is_a_contract_problem_not_a_crash(week, tmp_path):
    paths, base = week
    cfg = load_release_config()
    stops = validate(Stops, read_stops(paths["stops"]), "stops")
    df = base.copy()
    df.loc[7, "card_id"] = "99999999999999999999"  # read as text, then as integers where they fit
    f = tmp_path / "trips.csv"
    df.to_csv(f, index=False)
    with pytest.raises(SchemaViolationError, match=r"trips file trips.csv: 1 problem\(s\): column 'card_id': a whole "
                                                   r"number outside the 64-bit integer range: 1 row\(s\), first at "
                                                   r"row\(s\) 8"):
        streaming.stream_trips(f, stops, PERIOD, cfg.quality, cfg.modes, tmp_path / "s", tmp_path / "q",
                               partial(check, TripsFile))


def test_the_partitions_aggregates_do_not_outlive_their_validation():
    """Great Expectations' execution engine keeps the last batch's data; the partitions' aggregates (keyless row
    fingerprints, minutes) are dropped once validated, not kept while the process goes on to other partitions or,
    without a cluster, to sanitizing and publishing."""
    import gc
    import weakref

    from schemas import expectations
    from transit_release.config import QualityPolicy

    made = []
    real = expectations.partitions_view

    def view(aggregates):
        frame = real(aggregates)
        made.append(weakref.ref(frame))
        return frame

    n, day = 50, 1470614400 * 10**9  # 2016-08-08
    rows = {"card": np.arange(n, dtype=np.int64), "on_ns": day + np.arange(n, dtype=np.int64) * 60 * 10**9,
            "on_stop": np.zeros(n, dtype=np.int64), "off_ns": day + (np.arange(n) + 10) * 60 * 10**9,
            "off_stop": np.ones(n, dtype=np.int64)}
    expectations.partitions_view = view
    try:
        result = expectations.validate_partitions(
            {"bus/20160808": expectations.partition_aggregates(rows, "20160808")}, QualityPolicy())
    finally:
        expectations.partitions_view = real
    assert result["bus/20160808"]["success"]
    gc.collect()
    assert len(made) == 1 and made[0]() is None


def test_the_partitions_suite_names_each_failing_partition_whatever_it_is_validated_with():
    """The partitions a task prepared are validated in one Great Expectations run, one row of aggregates each:
    each keeps its own verdict (the same alone or with others), and the step's error names the partitions that
    failed and the expectations they broke, never a value."""
    from schemas import expectations
    from tasks.stream import PartitionCheckError
    from transit_release.config import QualityPolicy

    day = 1470614400 * 10**9  # 2016-08-08
    minute = 60 * 10**9

    def rows(on_minutes, off_minutes, card=None):
        on = day + np.asarray(on_minutes, dtype=np.int64) * minute
        off = day + np.asarray(off_minutes, dtype=np.int64) * minute
        n = on.size
        return {"card": np.arange(n, dtype=np.int64) if card is None else np.asarray(card, dtype=np.int64),
                "on_ns": on, "on_stop": np.zeros(n, dtype=np.int64), "off_ns": off,
                "off_stop": np.ones(n, dtype=np.int64)}

    quality = QualityPolicy()
    aggregates = {
        "bus/20160808": expectations.partition_aggregates(rows([10, 20], [30, 40]), "20160808"),
        "bus/20160809": expectations.partition_aggregates(rows([10, 1500], [30, 1510]), "20160809"),  # the day before
        "ferry/20160808": expectations.partition_aggregates(rows([10, 10], [30, 30], card=[7, 7]), "20160808"),
        "train/20160808": expectations.partition_aggregates(rows([100], [90]), "20160808"),  # off before on
    }
    together = expectations.validate_partitions(aggregates, quality)
    assert {k: v["success"] for k, v in together.items()} == {
        "bus/20160808": True, "bus/20160809": False, "ferry/20160808": False, "train/20160808": False}
    for label, a in aggregates.items():
        assert expectations.validate_partitions({label: a}, quality)[label] == together[label]
    broken = {e["column"] for e in together["bus/20160809"]["expectations"] if not e["success"]}
    assert broken == {"first_tap_on_minute_of_day"}  # a tap-on the day before; the other is inside the day
    prepared = [streaming.PreparedPartition(*label.split("/"), 2, 0, 0, 2, a, None) for label, a in aggregates.items()]
    with pytest.raises(PartitionCheckError) as err:
        check_partitions(prepared, quality)
    message = str(err.value)
    assert message.startswith("partition bus/20160809, ferry/20160808, train/20160808: its clean trips failed")
    assert "expect_column_pair_values_to_be_equal(distinct_trips) unexpected 1" in message
    assert "1500" not in message and "1440" not in message
    ok = check_partitions(prepared[:1], quality)
    assert ok[0].checks["success"] and ok[0].checks["expectations"][0]["element_count"] == 1


def test_the_read_ahead_thread_hands_over_errors_and_stops_with_its_consumer():
    """Batches are read by a thread of their own: its errors are raised in the consumer, as Arrow's were; a
    consumer that stops early stops it, and the reader's file is closed."""
    import threading

    closed = []

    def batches():
        try:
            for i in range(1000):
                yield i
        finally:
            closed.append(True)

    it = streaming._read_ahead(batches(), depth=2)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()
    assert closed == [True]
    assert not [t for t in threading.enumerate() if t.name == "trips-reader"]

    def failing():
        yield 1
        raise ValueError("the reader's own error")

    it = streaming._read_ahead(failing())
    assert next(it) == 1
    with pytest.raises(ValueError, match="the reader's own error"):
        next(it)
    assert list(streaming._read_ahead(iter(range(5)))) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("value,parsed", [
    ("2016-08-08 17:51:00", "2016-08-08 17:51:00"), ("2016-08-08 17:51", "2016-08-08 17:51:00"),
    ("2016-08-08T17:51", "2016-08-08 17:51:00"), ("2016-08-08T17:51:09", "2016-08-08 17:51:09"), ("", None),
    ("2016-02-30 10:00:00", "text"), ("2016-08-08 23:59:60", "text"), ("2016-8-8 1:02", "text"),
    ("2016-08-08", "text"), ("2016-08-08 17", "text"), ("2016-08-08 17:51:00.5", "text"),
    ("2016-08-08T17:51:00Z", "text"), ("2016-08-08 24:00", "text"), (" 2016-08-08 17:51 ", "2016-08-08 17:51:00")])
def test_only_local_times_of_the_calendar_take_the_typed_path(value, parsed):
    """The typed path reads times as text and casts them with Arrow's strict ISO 8601 parser, lengths 16 or 19
    only (after blanks around it, which the text path allows too); anything else (``text``) sends the file to
    the text path, whose checks say where."""
    import pyarrow as pa

    from transit_release.inputs.tables import TRIP_COLUMN_TYPES, parse_local_times

    table = pa.table({"tap_on_time": pa.array([value or None, "2016-08-08 00:00"], pa.string())})
    out = parse_local_times(table, TRIP_COLUMN_TYPES)
    if parsed == "text":
        assert out is None
    else:
        got = out.column("tap_on_time").to_pylist()[0]
        assert (got is None if parsed is None else str(got) == parsed)


def test_the_period_probe_reads_only_the_tap_on_dates(tmp_path):
    """Whether the command's checks run the whole screen before the flow (a declared period the trips may not fit):
    the tap-on dates read alone, as text; anything it cannot read is left to the flow (False)."""
    from datetime import date

    from transit_release.inputs import streaming
    from transit_release.inputs.screening import Period

    week = Period(date(2016, 8, 8), date(2016, 8, 14))
    days = [f"2016-08-{d:02d} 07:30:00" for d in range(8, 15)] * 20
    path = tmp_path / "trips.csv"

    def probe(times, limit=0.01):
        path.write_text("tap_on_time,other\n" + "".join(f"{t},x\n" for t in times), encoding="utf-8")
        return streaming.period_may_not_fit(path, week, limit)

    assert not probe(days)  # every row in the period, every day seen
    assert not probe(days + ["2016-08-15 00:10:00"], limit=0.01)  # one row outside: under the limit
    assert probe(days + ["2016-08-15 00:10:00"] * 5)  # more than 1% outside
    assert probe([t.replace("2016-08", "2016-09") for t in days])  # another week
    assert probe([t for t in days if not t.startswith("2016-08-10")])  # a day without a tap-on
    assert probe(days + ["08/09/2016 07:30"] * 5)  # not read as dates: the screen decides
    assert not probe([])  # nothing to say
    path.write_text("no_such_column\n1\n", encoding="utf-8")
    assert not streaming.period_may_not_fit(path, week, 0.01)
