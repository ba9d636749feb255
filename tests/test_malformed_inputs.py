"""A corpus of malformed inputs run through the opal_release flow.

Each case asserts the exact error (or the exact quarantine counts) and that no
release directory, no ledger spend and no MLflow run appeared. A few cases are
tolerated on purpose (BOM, shuffled columns, a single partition, a few bad
rows under the quarantine limit) and must publish.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import WEEK

from transit_release.accounting.ledger import Ledger
from transit_release.errors import InputDataError, SchemaViolationError, TransitReleaseError
from transit_release.inputs.screening import PeriodMismatchError, QuarantineLimitError, StopTableCoverageError

pytestmark = pytest.mark.flow


@pytest.fixture(scope="module")
def base(tmp_path_factory, prefect_harness):
    """A small valid week (scale 0.002, about 27,000 trips) as text and as frames."""
    from transit_release.synth.opal_week import write_synthetic_week

    paths = write_synthetic_week(tmp_path_factory.mktemp("base"), scale=0.002, seed=5, show_progress=False)
    trips = pd.read_csv(paths["trips"], dtype=str, keep_default_na=False)
    return {"trips_path": paths["trips"], "stops_path": paths["stops"], "trips": trips,
            "text": paths["trips"].read_bytes(), "stops": pd.read_csv(paths["stops"], dtype=str,
                                                                     keep_default_na=False)}


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=False)
    return path


def run(tmp_path: Path, trips: Path, stops: Path, **kwargs):
    from flows.opal_release import opal_release

    home = tmp_path / "home"
    try:
        # the base week's period, declared as a publishing run must; no Dask cluster (these tests are about the
        # input: the cluster has its own in tests/test_scale_out.py, and the results do not depend on it)
        kwargs = {**WEEK, "workers": 0, **kwargs}
        return home, opal_release(trips=str(trips), stops=str(stops), home=str(home), **kwargs), None
    except TransitReleaseError as exc:
        return home, None, exc


def assert_nothing_appeared(home: Path) -> None:
    releases = home / "releases"
    assert not releases.exists() or not [p for p in releases.iterdir() if not p.name.startswith(".tmp-")]
    assert not (home / "ledger.sqlite").exists() or Ledger(home / "ledger.sqlite").entries() == []
    if (home / "mlflow.db").exists():
        con = sqlite3.connect(home / "mlflow.db")
        assert con.execute("SELECT count(*) FROM tags WHERE key = 'release_id'").fetchone()[0] == 0
        con.close()


def expect_error(tmp_path, trips, stops, exc_type, message, **kwargs):
    home, summary, exc = run(tmp_path, trips, stops, **kwargs)
    assert summary is None, "expected a refusal"
    assert type(exc) is exc_type, repr(exc)
    text = str(exc).split(" (quarantined rows: ")[0]
    assert text == message
    assert_nothing_appeared(home)
    return home, exc


# ---- file-level problems: abort, naming file, column and rows -------------------------------------

def test_truncated_csv(base, tmp_path):
    lines = base["text"].split(b"\n")
    cut = b"\n".join(lines[:101]) + b"\n" + lines[101].split(b",")[0]
    f = tmp_path / "trips.csv"
    f.write_bytes(cut)
    expect_error(tmp_path, f, base["stops_path"], InputDataError,
                 "trips file trips.csv: cannot be read as csv: a row has 1 fields where the header has 6 "
                 "(a truncated file, a wrong delimiter or an unquoted comma?)")


def test_wrong_delimiter(base, tmp_path):
    f = tmp_path / "trips.csv"
    f.write_bytes(base["text"].replace(b",", b";"))
    expect_error(tmp_path, f, base["stops_path"], SchemaViolationError,
                 "trips file trips.csv: 7 problem(s): "
                 "column '<name not shown: it does not look like a column name; is the header row missing?>': "
                 "unexpected column; column 'card_id': missing column; "
                 "column 'mode': missing column; column 'tap_off_stop': missing column; "
                 "column 'tap_off_time': missing column; column 'tap_on_stop': missing column; "
                 "column 'tap_on_time': missing column")


def test_file_without_header_row_never_echoes_its_first_row(base, tmp_path):
    f = tmp_path / "trips.csv"
    f.write_bytes(b"\n".join(base["text"].split(b"\n")[1:]))
    first_row = base["trips"].iloc[0]
    _, exc = expect_error(
        tmp_path, f, base["stops_path"], SchemaViolationError,
        "trips file trips.csv: 7 problem(s): "
        "column '<name not shown: it does not look like a column name; is the header row missing?>': "
        "unexpected column; column 'card_id': missing column; column 'mode': missing column; "
        "column 'tap_off_stop': missing column; column 'tap_off_time': missing column; "
        "column 'tap_on_stop': missing column; column 'tap_on_time': missing column")
    for value in first_row:
        if value:
            assert str(value) not in str(exc)


def test_missing_column(base, tmp_path):
    f = write_csv(base["trips"].drop(columns=["tap_off_stop"]), tmp_path / "trips.csv")
    expect_error(tmp_path, f, base["stops_path"], SchemaViolationError,
                 "trips file trips.csv: 1 problem(s): column 'tap_off_stop': missing column")


def test_extra_column(base, tmp_path):
    df = base["trips"].copy()
    df["holder_name"] = "x"
    f = write_csv(df, tmp_path / "trips.csv")
    expect_error(tmp_path, f, base["stops_path"], SchemaViolationError,
                 "trips file trips.csv: 1 problem(s): column 'holder_name': unexpected column")


def test_renamed_column(base, tmp_path):
    f = write_csv(base["trips"].rename(columns={"tap_on_stop": "stop_on"}), tmp_path / "trips.csv")
    expect_error(tmp_path, f, base["stops_path"], SchemaViolationError,
                 "trips file trips.csv: 2 problem(s): column 'stop_on': unexpected column; "
                 "column 'tap_on_stop': missing column")


@pytest.mark.parametrize("value,rows", [("soon", [3, 9, 11]), ("2016-08-08 24:30:00", [5]),
                                        ("2016-08-08T07:43:00+10:00", [0, 2]), ("2016-08-08 07:43:60", [4]),
                                        ("2016-8-8 7:43", [1, 6]), ("2016-08-08", [7]), ("2016-08-08 07", [8])],
                         ids=["text-in-time", "past-24h", "time-zone-suffix", "second-60", "unpadded", "date-only",
                              "hour-only"])
def test_bad_times(base, tmp_path, value, rows):
    df = base["trips"].copy()
    df.loc[rows, "tap_on_time"] = value
    f = write_csv(df, tmp_path / "trips.csv")
    first = ", ".join(str(r + 1) for r in rows)
    _, exc = expect_error(tmp_path, f, base["stops_path"], SchemaViolationError,
                          "trips file trips.csv: 1 problem(s): column 'tap_on_time': not a local time "
                          "YYYY-MM-DD HH:MM[:SS] (text, hour 24 or a time zone offset?): "
                          f"{len(rows)} row(s), first at row(s) {first}")
    assert value not in str(exc)


@pytest.mark.parametrize("value", ["2016-02-30 10:00:00", "2016-09-31 10:00"], ids=["30-february", "31-september"])
def test_impossible_calendar_dates(base, tmp_path, value):
    """A day the month does not have is refused, not rolled into the next month (Arrow's strptime formats, used
    until stop 26, read 2016-02-30 as 1 March)."""
    df = base["trips"].copy()
    df.loc[[2, 5], "tap_off_time"] = value
    f = write_csv(df, tmp_path / "trips.csv")
    _, exc = expect_error(tmp_path, f, base["stops_path"], SchemaViolationError,
                          "trips file trips.csv: 1 problem(s): column 'tap_off_time': not a day of the calendar "
                          "(e.g. 30 February): 2 row(s), first at row(s) 3, 6")
    assert value not in str(exc)


def test_empty_file(base, tmp_path):
    f = tmp_path / "trips.csv"
    f.write_bytes(b"")
    expect_error(tmp_path, f, base["stops_path"], InputDataError,
                 "trips file trips.csv: the file is empty (no header row)")


def test_header_only(base, tmp_path):
    f = tmp_path / "trips.csv"
    f.write_bytes(base["text"].split(b"\n")[0] + b"\n")
    expect_error(tmp_path, f, base["stops_path"], InputDataError,
                 "trips file trips.csv: no data rows (header only)")


def test_non_utf8_bytes(base, tmp_path):
    lines = base["text"].split(b"\n")
    for i in (10, 11, 12):
        lines[i] = lines[i].replace(b'"bus"', b'"b\xfas"').replace(b'"train"', b'"tr\xe4in"')
    assert b"\xfa" in b"".join(lines) or b"\xe4" in b"".join(lines)
    f = tmp_path / "trips.csv"
    f.write_bytes(b"\n".join(lines))
    expect_error(tmp_path, f, base["stops_path"], InputDataError,
                 "trips file trips.csv: cannot be read as csv: the text is not valid UTF-8 (export the file as UTF-8)")


@pytest.mark.parametrize("column,value,row", [("card_id", "NaN", 7), ("tap_on_stop", "inf", 8),
                                              ("tap_off_stop", "-inf", 12), ("card_id", "12.5", 4),
                                              ("card_id", "200782.0", 9), ("tap_on_stop", "2e5", 3)],
                         ids=["nan-card", "inf-stop", "minus-inf-stop", "fractional-card", "float-export-card",
                              "exponent-stop"])
def test_nan_infinity_and_fractions(base, tmp_path, column, value, row):
    df = base["trips"].copy()
    df.loc[row, column] = value
    f = write_csv(df, tmp_path / "trips.csv")
    expect_error(tmp_path, f, base["stops_path"], SchemaViolationError,
                 f"trips file trips.csv: 1 problem(s): column '{column}': not a whole number (a decimal point, an "
                 f"exponent or letters: a float export?): 1 row(s), first at row(s) {row + 1}")


def test_parquet_missing_column(base, tmp_path):
    f = tmp_path / "trips.parquet"
    trips = pd.read_csv(base["trips_path"]).drop(columns=["mode"])
    trips["tap_off_stop"] = trips["tap_off_stop"].astype("Int64")  # not float64: ids are stored as integers
    trips.to_parquet(f)
    expect_error(tmp_path, f, base["stops_path"], SchemaViolationError,
                 "trips file trips.parquet: 1 problem(s): column 'mode': missing column")


def test_parquet_corrupt(base, tmp_path):
    good = tmp_path / "good.parquet"
    pd.read_csv(base["trips_path"]).to_parquet(good)
    f = tmp_path / "trips.parquet"
    f.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    expect_error(tmp_path, f, base["stops_path"], InputDataError,
                 "trips file trips.parquet: cannot be read as parquet: not a readable Parquet file (truncated or corrupt?)")


def test_stop_table_missing_column(base, tmp_path):
    s = write_csv(base["stops"].drop(columns=["postcode"]), tmp_path / "stops.csv")
    expect_error(tmp_path, base["trips_path"], s, SchemaViolationError,
                 "stops file stops.csv: 1 problem(s): column 'postcode': missing column")


def test_stop_table_that_does_not_cover_the_data(base, tmp_path):
    stops = base["stops"]
    s = write_csv(stops[stops["mode"] != "ferry"], tmp_path / "stops.csv")
    ferry = base["trips"]["mode"] == "ferry"
    first = ", ".join(str(i + 1) for i in ferry[ferry].index[:5])
    n = int(ferry.sum())
    ids = pd.concat([base["trips"].loc[ferry, "tap_on_stop"], base["trips"].loc[ferry, "tap_off_stop"]]).nunique()
    expect_error(tmp_path, base["trips_path"], s, StopTableCoverageError,
                 f"trips file trips.csv: the stop table does not cover the trips: {n:,} rows "
                 f"({n / len(ferry):.1%}) use stops missing from it for their mode ({ids:,} distinct stop ids), "
                 f"first at row(s) {first}")


def test_declared_period_not_covered(base, tmp_path):
    expect_error(tmp_path, base["trips_path"], base["stops_path"], PeriodMismatchError,
                 "trips file trips.csv: the trips do not cover the release period 2016-08-01..2016-08-14: "
                 "no trips on 2016-08-01, 2016-08-02, 2016-08-03, 2016-08-04, 2016-08-05 ...",
                 period_start="2016-08-01", period_end="2016-08-14")


def test_dates_outside_the_declared_period(base, tmp_path):
    df = base["trips"].copy()
    rows = df.index[df["tap_off_time"] != ""][20:23]
    df.loc[rows, "tap_on_time"] = "2017-01-02 08:00:00"
    df.loc[rows, "tap_off_time"] = "2017-01-02 08:10:00"
    f = write_csv(df, tmp_path / "trips.csv")
    expect_error(tmp_path, f, base["stops_path"], PeriodMismatchError,
                 f"trips file trips.csv: the trips do not match the release period 2016-08-08..2016-08-14: "
                 f"3 rows (0.0%) fall outside it, first at row(s) {', '.join(str(r + 1) for r in rows)}",
                 period_start="2016-08-08", period_end="2016-08-14", quarantine_limit=0.0)


# ---- row-level problems: exact quarantine counts ----------------------------------------------------

def quarantine_case(base, tmp_path, mutate, reason, n_rows):
    df = base["trips"].copy()
    mutate(df)
    f = write_csv(df, tmp_path / "trips.csv")
    total = len(df)
    home, exc = expect_error(
        tmp_path, f, base["stops_path"], QuarantineLimitError,
        f"trips file trips.csv: {n_rows:,} of {total:,} rows ({n_rows / total:.2%}) would be quarantined, more than "
        f"the limit of 0.00%: {reason} {n_rows:,}", quarantine_limit=0.0)
    files = list((home / "private" / "quarantine").rglob("*.parquet"))
    assert len(files) == 1 and str(files[0]) in str(exc)
    q = pd.read_parquet(files[0])
    assert len(q) == n_rows and set(q["reason"]) == {reason}
    return q


def test_tap_off_before_tap_on(base, tmp_path):
    def mutate(df):
        rows = df.index[df["tap_off_time"] != ""][:5]
        df.loc[rows, "tap_off_time"] = (pd.to_datetime(df.loc[rows, "tap_on_time"]) - pd.Timedelta(minutes=3)
                                        ).dt.strftime("%Y-%m-%d %H:%M:%S")
    q = quarantine_case(base, tmp_path, mutate, "tap_off_before_tap_on", 5)
    assert q["row"].min() >= 1


def test_absurd_duration(base, tmp_path):
    def mutate(df):
        rows = df.index[df["tap_off_time"] != ""][10:14]
        df.loc[rows, "tap_on_time"] = pd.to_datetime(df.loc[rows, "tap_on_time"]).dt.strftime("%Y-%m-%d 00:01:00")
        df.loc[rows, "tap_off_time"] = pd.to_datetime(df.loc[rows, "tap_on_time"]).dt.strftime("%Y-%m-%d 23:59:00")
    quarantine_case(base, tmp_path, mutate, "absurd_duration", 4)


def test_unknown_mode(base, tmp_path):
    quarantine_case(base, tmp_path, lambda df: df.loc.__setitem__(([1, 2, 3], "mode"), "hovercraft"),
                    "unknown_mode", 3)


def test_huge_field(base, tmp_path):
    quarantine_case(base, tmp_path, lambda df: df.loc.__setitem__(([4], "mode"), "x" * 5_000_000),
                    "unknown_mode", 1)


def test_tap_off_time_without_stop(base, tmp_path):
    def mutate(df):
        rows = df.index[df["tap_off_stop"] != ""][:6]
        df.loc[rows, "tap_off_stop"] = ""
    quarantine_case(base, tmp_path, mutate, "tap_off_incomplete", 6)


def test_negative_and_missing_card_ids(base, tmp_path):
    def mutate(df):
        df.loc[[30, 31], "card_id"] = "-7"
        df.loc[[32], "card_id"] = ""
    quarantine_case(base, tmp_path, mutate, "invalid_card_id", 3)


def test_missing_tap_on_time(base, tmp_path):
    quarantine_case(base, tmp_path, lambda df: df.loc.__setitem__(([40, 41], "tap_on_time"), ""),
                    "missing_tap_on", 2)


def test_duplicated_file(base, tmp_path):
    df = pd.concat([base["trips"], base["trips"]], ignore_index=True)
    f = write_csv(df, tmp_path / "trips.csv")
    n = len(base["trips"])
    expect_error(tmp_path, f, base["stops_path"], QuarantineLimitError,
                 f"trips file trips.csv: {n:,} of {2 * n:,} rows (50.00%) would be quarantined, more than the "
                 f"limit of 1.00%: duplicate {n:,}")


# ---- tolerated on purpose ---------------------------------------------------------------------------

class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_a_few_bad_rows_under_the_limit_are_quarantined_and_the_release_goes_on(prefect_harness, base, tmp_path):
    df = base["trips"].copy()
    df.loc[[5, 6], "tap_on_stop"] = "999999"
    df.loc[[7], "mode"] = "hovercraft"
    f = write_csv(df, tmp_path / "trips.csv")
    from prefect.logging.configuration import setup_logging

    setup_logging()  # Prefect (re)configures its loggers once; attach after that, or the handler is dropped
    collect = _Collect()
    loggers = [logging.getLogger(n) for n in ("prefect.task_runs", "prefect.flow_runs")]
    for lg in loggers:
        lg.addHandler(collect)
    try:
        home, summary, exc = run(tmp_path, f, base["stops_path"])
    finally:
        for lg in loggers:
            lg.removeHandler(collect)
    logged = "\n".join(collect.lines)
    assert exc is None, exc
    assert "quarantined 3 of" in logged, logged[:2000]
    for raw in ("hovercraft", "999999", df.loc[5, "card_id"], df.loc[7, "card_id"]):
        assert raw not in logged
    assert exc is None and summary["status"] == "published"
    assert summary["quarantine"]["by_reason"] == {"unknown_mode": 1, "unknown_stop": 2}
    q = pd.read_parquet(next((home / "private" / "quarantine").rglob("*.parquet")))
    assert q["row"].tolist() == [6, 7, 8]
    released = (Path(summary["release_dir"]) / "location.csv").read_text()
    assert "hovercraft" not in released and "999999" not in released


def test_utf8_bom_is_tolerated(base, tmp_path):
    f = tmp_path / "trips.csv"
    f.write_bytes(b"\xef\xbb\xbf" + base["text"])
    home, summary, exc = run(tmp_path, f, base["stops_path"])
    assert exc is None and summary["status"] == "published"


def test_shuffled_columns_give_the_same_release(base, tmp_path, test_seed):
    cols = list(base["trips"].columns)
    f = write_csv(base["trips"][cols[::-1]], tmp_path / "trips.csv")
    _, a, exc = run(tmp_path / "a", f, base["stops_path"])
    assert exc is None
    _, b, exc = run(tmp_path / "b", base["trips_path"], base["stops_path"])
    for name in ("time.csv", "location.csv", "time-loc.csv"):
        assert (Path(a["release_dir"]) / name).read_bytes() == (Path(b["release_dir"]) / name).read_bytes()


def test_single_partition(base, tmp_path):
    df = base["trips"]
    one = df[(df["mode"] == "bus") & df["tap_on_time"].str.startswith("2016-08-09")]
    f = write_csv(one, tmp_path / "trips.csv")
    home, summary, exc = run(tmp_path, f, base["stops_path"], period_start="2016-08-09", period_end="2016-08-09")
    assert exc is None and summary["release_id"] == "opal-card-20160809-20160809"
    assert len(Ledger(home / "ledger.sqlite").spends()) == 4 * 6  # every mode of the declared day: the public domain


def test_parquet_input_publishes(base, tmp_path):
    t = tmp_path / "trips.parquet"
    s = tmp_path / "stops.parquet"
    trips = pd.read_csv(base["trips_path"], parse_dates=["tap_on_time", "tap_off_time"])
    trips["tap_off_stop"] = trips["tap_off_stop"].astype("Int64")
    trips.to_parquet(t)
    stops = pd.read_csv(base["stops_path"])
    stops["postcode"] = stops["postcode"].astype("Int64")
    stops.to_parquet(s)
    _, summary, exc = run(tmp_path, t, s)
    assert exc is None and summary["status"] == "published"
