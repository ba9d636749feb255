"""MLflow as a reviewer uses it: one run per release, and two weeks compared in the runs view.

Unit level (no flow): two weeks' Opal tracking records, logged by :func:`transit_release.reports.tracking.log_to_run` into a real SQLite
store, must give two runs with the same metric keys, and each partition's figure at the same step (the day of the
period), so that MLflow's runs table and charts lay them side by side; the partitions' table names the weekday.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from transit_release.reports.tracking import ROLE_TAG, RELEASE_ROLE, log_to_run
from transit_release.releases.opal import SERIES_METRICS, UTILITY_METRICS, partition_series, partition_table, tracking

MARGINALS = ("tap_on_time", "tap_off_time")


def _utility(start: str, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for mode in ("bus", "train"):
        for day in pd.date_range(start, periods=7):
            for m in MARGINALS:
                figures = {k: float(rng.uniform(0, 1)) for k in UTILITY_METRICS}
                figures["points_released"] = float(rng.integers(0, 50))
                rows.append({"partition": f"{mode}/{day:%Y%m%d}", "mode": mode, "date": f"{day:%Y%m%d}",
                             "marginal": m, "threshold": 40, "epsilon": 1.0, **figures})
    return pd.DataFrame(rows)


def test_two_weeks_have_the_same_keys_and_the_same_step_for_the_same_weekday():
    a, b = partition_series(_utility("2016-08-08", 1), "2016-08-08"), partition_series(_utility("2016-08-15", 2),
                                                                                       "2016-08-15")
    assert set(a) == set(b) == {f"{mode}/{m}.{k}" for mode in ("bus", "train") for m in MARGINALS
                                for k in SERIES_METRICS}
    for key in a:
        assert [step for step, _, _ in a[key]] == [step for step, _, _ in b[key]] == list(range(7))
    # the day's own time: the charts can also put the weeks on one calendar axis
    (_, monday, _), (_, next_monday, _) = a["bus/tap_on_time.trip_coverage"][0], b["bus/tap_on_time.trip_coverage"][0]
    assert next_monday - monday == 7 * 86_400_000


def test_the_partitions_table_has_a_row_per_partition_and_marginal_with_its_weekday():
    table = pd.read_csv(io.StringIO(partition_table(_utility("2016-08-08", 1))))
    assert len(table) == 2 * 7 * len(MARGINALS)
    assert table.loc[table["date"] == 20160808, "weekday"].unique().tolist() == ["Monday"]
    assert list(table.columns[:6]) == ["partition", "mode", "date", "weekday", "marginal", "threshold"]


def test_a_release_is_one_run_whose_partitions_are_metric_histories(tmp_path):
    """What the runs view shows of two weeks: two runs (no nested runs), the same metric names, each partition's
    figure as a history over the days."""
    from transit_release.reports.tracking import experiment_id, mlflow_client
    from transit_release.files.home import Home

    home = Home.at(tmp_path)
    client = mlflow_client(home)  # a copy of the session's empty store (no migrations)
    exp = experiment_id(client, home)
    manifest = {"modes": ["bus", "train"], "parameters": {"bin_minutes": 15},
                "privacy": {"marginals": {}}, "files": {"time.csv": {"rows": 3}}}
    quarantine = {"rows": 10, "quarantined": 0, "quarantined_share": 0.0, "by_reason": {}}
    runs = {}
    for start, seed in (("2016-08-08", 1), ("2016-08-15", 2)):
        record = tracking({**manifest, "period": {"start": start}}, _utility(start, seed), quarantine, {},
                          {"runner": "in-process", "processes": 1})
        run = client.create_run(exp, run_name=start, tags={ROLE_TAG: RELEASE_ROLE}).info.run_id
        log_to_run(client, run, record["params"], record["metrics"], series=record["series"])
        runs[start] = client.get_run(run)
    first, second = runs.values()
    assert set(first.data.metrics) == set(second.data.metrics)
    assert {"bus/tap_on_time.trip_coverage", "bus.trip_coverage", "train.cells.released"} <= set(first.data.metrics)
    found = client.search_runs([exp], filter_string=f"tags.`{ROLE_TAG}` = '{RELEASE_ROLE}'")
    assert len(found) == 2 and all("mlflow.parentRunId" not in r.data.tags for r in found)
    history = client.get_metric_history(first.info.run_id, "train/tap_off_time.mean_rel_error")
    assert sorted(m.step for m in history) == list(range(7))
    expected = _utility("2016-08-08", 1).query("mode == 'train' and marginal == 'tap_off_time'")["mean_rel_error"]
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(expected.tolist())
