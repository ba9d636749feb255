"""End to end: the opal_release flow under Prefect's test harness, with a temporary MLflow store."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import WEEK
from tests.open_data_checks import check_open_data

from transit_release.accounting.ledger import Ledger
from transit_release.errors import ReleaseExistsError, SchemaViolationError
from transit_release.files.home import Home

pytestmark = pytest.mark.flow


@pytest.fixture(scope="module")
def released(prefect_harness, small_week, tmp_path_factory, trip_policy):
    """One trip-level release of the small week (the paper's unit, whose figures this module checks), made once."""
    import os

    from flows.opal_release import opal_release
    from transit_release.noise import TEST_SEED_ENV

    home = tmp_path_factory.mktemp("home")
    os.environ[TEST_SEED_ENV] = "99"
    try:
        summary = opal_release(trips=str(small_week["trips"]), stops=str(small_week["stops"]), home=str(home), **WEEK,
                               unit="trip", policy=trip_policy)
    finally:
        os.environ.pop(TEST_SEED_ENV, None)
    return Home.at(home), summary


def all_bytes(root: Path):
    for p in root.rglob("*"):
        if p.is_file():
            yield p, p.read_bytes()


def test_files_and_columns(released):
    home, summary = released
    rid = summary["release_id"]
    assert rid == "opal-trip-20160808-20160814" and summary["status"] == "published"
    d = home.release_dir(rid)
    expected = {"time": "mode,date,tap,time,count", "location": "mode,date,tap,loc,count",
                "time-loc": "mode,date,tap,time,loc,count"}
    for name, header in expected.items():
        text = (d / f"{name}.csv").read_text()
        assert text.splitlines()[0] == header
        csv = pd.read_csv(d / f"{name}.csv", dtype=str)
        pq = pd.read_parquet(d / f"{name}.parquet")
        assert len(csv) == len(pq) > 0
        assert set(csv["mode"]) <= {"bus", "ferry", "lightrail", "train"}
        sorted_csv = csv.sort_values(list(csv.columns[:-1]), kind="stable")
        assert len(sorted_csv) == len(csv)
    loc = pd.read_csv(d / "location.csv", dtype={"loc": str})
    tl = pd.read_csv(d / "time-loc.csv", dtype={"loc": str, "time": str})
    assert loc["count"].min() >= 34
    assert tl["count"].min() >= 18
    assert "-1" in set(loc["loc"])  # missing tap-offs and unmapped stops stay visible as -1


def test_manifest_hashes_and_privacy_statement(released):
    home, summary = released
    d = home.release_dir(summary["release_id"])
    m = json.loads((d / "manifest.json").read_text())
    for name, meta in m["files"].items():
        assert hashlib.sha256((d / name).read_bytes()).hexdigest() == meta["sha256"]
    assert m["privacy"]["epsilon"] == 8.0 and m["privacy"]["delta"] == 7.5e-7
    assert m["privacy"]["unit_of_privacy"] == "trip"
    assert "replace one trip" in m["privacy"]["neighbouring_relation"]
    assert m["noise_source"] == "test-seed"
    assert m["code_version"]
    card = (d / "DATACARD.md").read_text()
    assert card.startswith("> **TEST SEED: NOT PRIVATE.**") and (
        "\n# Public-transport taps by time and location, 8–14 August 2016 (per-trip privacy)\n\n"
        f"Release `{summary['release_id']}`.\n") in card
    assert not list(home.releases.glob(".tmp-*")) and not list(home.test_releases.glob(".tmp-*"))


def test_open_data_beside_the_files(released):
    """A valid Data Package listed in the manifest, the margins of error of each marginal, a landing page with
    nothing internal; a test-seed release is never in the DCAT catalogue (public releases are:
    test_neighbours_end_to_end)."""
    home, summary = released
    d = home.release_dir(summary["release_id"])
    package = check_open_data(d, home.root)
    m = json.loads((d / "manifest.json").read_text())
    assert package["differentialPrivacy"]["unit_of_privacy"] == "trip"
    assert package["differentialPrivacy"]["population"] == m["privacy"]["population"]
    u = pd.read_csv(d / "uncertainty.csv", keep_default_na=False)
    assert len(u) == 6 and set(u["noise_scale"].astype(str)) == {"2", "1"} and set(u["half_width_95"]) == {6, 3}
    assert "## Margins of error" in (d / "DATACARD.md").read_text()
    assert not (d.parent / "catalog.jsonld").exists() and not (home.releases / "catalog.jsonld").exists()


def test_ledger_records_every_spend_and_the_publication(released):
    home, summary = released
    ledger = Ledger(home.ledger)
    assert ledger.verify() == 28 * 6 + 1
    spends = ledger.spends(summary["release_id"])
    assert len(spends) == 168
    assert {s.event().partition for s in spends} == {f"{m}/201608{d:02d}" for m in
                                                     ("bus", "ferry", "lightrail", "train") for d in range(8, 15)}
    assert summary["release_id"] in ledger.published()


def test_mlflow_run_has_params_metrics_and_artifacts(released):
    """One run per release (no nested runs), tagged as the release's own; the partitions' figures as metric
    histories (one value per day of the period) and as a table; the report without its Data Docs."""
    from mlflow.tracking import MlflowClient

    home, summary = released
    client = MlflowClient(tracking_uri=home.mlflow_uri)
    exp = client.get_experiment_by_name("transit-release")
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.release_id = '{summary['release_id']}'")
    (p,) = runs
    assert p.info.run_id == summary["mlflow_run_id"] and "mlflow.parentRunId" not in p.data.tags
    assert p.data.tags["transit_release.role"] == "release"
    assert p.info.run_name == summary["release_id"] and p.info.status == "FINISHED"
    assert p.data.tags["published"] == "true" and p.data.tags["unit_of_privacy"] == "trip"
    assert p.data.tags["report"].endswith(f"{summary['release_id']}/report.html")
    assert p.data.params["tap_on_time.epsilon"] == "1.0"
    assert p.data.params["tap_on_time_location.threshold"] == "18"
    assert p.data.params["tap_off_location.delta"] == "1.25e-07"
    assert p.data.params["ledger.spends"] == "168"
    assert p.data.metrics["privacy.epsilon"] == 8.0
    assert 0 < p.data.metrics["tap_on_location.trip_coverage"] <= 1
    assert "tap_on_location.top_rank_correlation" in p.data.metrics
    assert {"bus.cells.released", "bus.trip_coverage", "train.trip_coverage"} <= set(p.data.metrics)
    mirrored = {k for k in p.data.params if k.startswith("spend.")}
    assert len(mirrored) == 168  # the run mirrors every ledger spend
    history = client.get_metric_history(p.info.run_id, "bus/tap_on_time.trip_coverage")
    assert sorted(m.step for m in history) == list(range(7))  # one value per day, Monday = step 0
    monday = next(m for m in history if m.step == 0)
    assert monday.timestamp == int(pd.Timestamp("2016-08-08", tz="UTC").value // 1_000_000)
    arts = {a.path for a in client.list_artifacts(p.info.run_id)}
    assert {"manifest.json", "ledger_spends.json", "input_quality.json", "partitions.csv", "report"} <= arts
    table = pd.read_csv(client.download_artifacts(p.info.run_id, "partitions.csv", str(home.root / "private")))
    assert len(table) == 28 * 6 and {"partition", "weekday", "marginal", "trip_coverage"} <= set(table.columns)
    row = table[(table["partition"] == "bus/20160808") & (table["marginal"] == "tap_on_time")].iloc[0]
    assert row["weekday"] == "Monday" and row["trip_coverage"] == pytest.approx(monday.value, rel=1e-5)
    report_files = {a.path for a in client.list_artifacts(p.info.run_id, "report")}
    assert {"report/report.html", "report/validation-raw.json", "report/validation-release.json",
            "report/released_vs_true.png"} <= report_files
    assert "report/data_docs" not in report_files  # they stay in the report's folder, which the run names
    assert p.data.metrics["validation.raw.success"] == 1.0 and p.data.metrics["input.quarantined"] == 0


def test_no_card_id_anywhere(released, small_week):
    home, summary = released
    trips = pd.read_csv(small_week["trips"], usecols=["card_id"])
    sample = np.random.default_rng(0).choice(trips["card_id"].unique(), 300, replace=False)
    needles = [str(c).encode() for c in sample]
    roots = [home.releases, home.test_releases, home.reports, home.mlflow_artifacts]
    for root in roots:
        for path, data in all_bytes(root):
            assert b"card_id" not in data, path
            for n in needles:
                assert n not in data, path
    con = sqlite3.connect(home.mlflow_db)
    dump = "\n".join(con.iterdump()).encode()
    con.close()
    assert b"card_id" not in dump
    for n in needles:
        assert n not in dump


def test_report_is_readable(released):
    home, summary = released
    html = (home.reports / summary["release_id"] / "report.html").read_text()
    assert "Do not publish" in html and "Released versus true counts" in html
    for png in ("released_vs_true.png", "coverage.png", "budget.png"):
        assert (home.reports / summary["release_id"] / png).stat().st_size > 10_000


def test_republishing_the_same_release_draws_and_spends_nothing(released, small_week, trip_policy):
    from flows.opal_release import opal_release

    home, summary = released
    before = Ledger(home.ledger).entries()
    again = opal_release(trips=str(small_week["trips"]), stops=str(small_week["stops"]), home=str(home.root), **WEEK,
                         unit="trip", policy=trip_policy)
    assert again["status"] == "already published: nothing drawn or spent"
    assert Ledger(home.ledger).entries() == before


def test_same_id_from_other_input_is_refused_and_spends_nothing(released, small_week, tmp_path, trip_policy):
    from flows.opal_release import opal_release

    home, summary = released
    trips = pd.read_csv(small_week["trips"])
    other = tmp_path / "trips.csv"
    trips.iloc[:-10].to_csv(other, index=False)
    before = Ledger(home.ledger).entries()
    files_before = {p: d for p, d in all_bytes(home.root / "private" / "test-releases")}
    with pytest.raises(ReleaseExistsError, match="already exists and was made from other input or parameters"):
        opal_release(trips=str(other), stops=str(small_week["stops"]), home=str(home.root), **WEEK, unit="trip",
                     policy=trip_policy)
    assert Ledger(home.ledger).entries() == before
    assert {p: d for p, d in all_bytes(home.root / "private" / "test-releases")} == files_before


def test_a_failed_fingerprint_stops_the_release_with_its_own_error(prefect_harness, tiny_week, tmp_path,
                                                                     monkeypatch):
    """The input is hashed while it is read: when hashing fails, the run stops with that error before the spends
    are planned (not with a later one about a missing plan), and nothing is charged or published."""
    from flows.opal_release import opal_release
    from transit_release.errors import InputDataError
    from transit_release.inputs import tables

    def unreadable(*paths, key):
        raise InputDataError("input file trips.csv: cannot be read (test)")

    monkeypatch.setattr(tables, "fingerprint", unreadable)
    home = tmp_path / "home"
    with pytest.raises(InputDataError, match=r"cannot be read \(test\)"):
        opal_release(trips=str(tiny_week["trips"]), stops=str(tiny_week["stops"]), home=str(home), workers=0,
                     **WEEK)
    assert not any((home / "releases").iterdir())
    assert not Ledger(home / "ledger.sqlite").entries()


def test_bad_input_publishes_and_spends_nothing(prefect_harness, small_week, tmp_path):
    from flows.opal_release import opal_release

    trips = pd.read_csv(small_week["trips"], nrows=500, dtype=str)
    trips.loc[[3, 7], "card_id"] = "hovercraft"
    bad = tmp_path / "bad.csv"
    trips.to_csv(bad, index=False)
    home = tmp_path / "home"
    with pytest.raises(SchemaViolationError) as info:
        opal_release(trips=str(bad), stops=str(small_week["stops"]), home=str(home), **WEEK)
    assert str(info.value) == ("trips file bad.csv: 1 problem(s): column 'card_id': not a whole number (a decimal "
                               "point, an exponent or letters: a float export?): 2 row(s), first at row(s) 4, 8")
    assert "hovercraft" not in str(info.value)
    assert not any((home / "releases").iterdir())
    assert not Ledger(home / "ledger.sqlite").entries()


def test_a_release_that_fails_while_its_figures_are_drawn_waits_for_them_and_keeps_no_report(
        prefect_harness, tiny_week, tmp_path, monkeypatch):
    """The report's figures are drawn in a process of their own while the release is checked and staged: a run
    that fails meanwhile waits for that process (it writes into the report's folder) before removing the
    folder, so that nothing it writes outlives the run."""
    import time

    from flows.opal_release import opal_release
    from transit_release.files import publish
    from transit_release.reports import report_process

    real, drawn = report_process.draw, {}

    def slow(*a, **k):
        time.sleep(1.5)  # still drawing when staging fails
        real(*a, **k)
        drawn["at"] = time.monotonic()

    def refused(*a, **k):
        raise ReleaseExistsError("staging refused (test)")

    monkeypatch.setattr(report_process, "draw", slow)
    monkeypatch.setattr(publish, "stage_release", refused)
    home = tmp_path / "home"
    with pytest.raises(ReleaseExistsError, match=r"staging refused \(test\)"):
        opal_release(trips=str(tiny_week["trips"]), stops=str(tiny_week["stops"]), home=str(home), workers=0,
                     **WEEK)
    assert "at" in drawn  # the drawing had finished when the run ended
    assert not [p for p in (home / "release_reports").rglob("*") if p.is_file()]
    assert not any((home / "releases").iterdir())
