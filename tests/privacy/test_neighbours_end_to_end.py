"""End to end: one card-level release of D and of D′ = D plus one unusual passenger; nothing public may differ
except through the noise.

The library-level manifest audit (``test_manifest_audit.py``) compares manifests built by the functions a
release calls. This runs the real command twice (Prefect, MLflow, Great Expectations, the report) and
compares what a reader of each home outside ``private/`` can see: the manifest's public view, the MLflow
run's parameters and tags, and every byte of every file (releases, reports, Data Docs, MLflow's store and
artifacts) for the passenger's card id, and counts the mentions of the stop only they used (it is in the
public stop table, so the public domain may name it, but equally often for D and D′). The two outside reviews
found a plain hash of the input chained into the published ledger head, and the input's stations rendered
into the release Data Docs: the first shows in the manifest's ``ledger_head`` only through the home's
secret key, the second would show as the stop's name. The open-data files (Data Package, margins of error,
landing page, DCAT catalogue) must be the same outside the files' sizes, rows and hashes and the times.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import WEEK_FLAGS
from tests.open_data_checks import catalog_view, check_open_data, datapackage_view, page_view
from tests.privacy.test_manifest_audit import differences, public_view
from transit_release.cli import main

pytestmark = [pytest.mark.privacy, pytest.mark.flow]

LONELY = "Qzx Lonely Halt"
CARD = 987654321


def neighbour_inputs(tmp: Path) -> dict[str, Path]:
    from transit_release.synth.opal_week import write_synthetic_week

    week = write_synthetic_week(tmp / "week", scale=0.002, seed=11, show_progress=False)
    stops = pd.read_csv(week["stops"], dtype=str)
    train = stops[stops["mode"] == "train"].iloc[0]
    lonely_id = str(int(pd.to_numeric(stops["stop_id"]).max()) + 1)
    public_stops = pd.concat([stops, pd.DataFrame([{"stop_id": lonely_id, "mode": "train", "name": LONELY,
                                                    "postcode": train["postcode"]}])], ignore_index=True)
    paths = {"stops": tmp / "stops.csv", "d": tmp / "d.csv", "d2": tmp / "d2.csv"}
    public_stops.to_csv(paths["stops"], index=False)  # the same public stop table for both
    trips = pd.read_csv(week["trips"], dtype=str, keep_default_na=False)
    trips.to_csv(paths["d"], index=False)
    extra = pd.DataFrame([{"card_id": str(CARD), "mode": "train", "tap_on_time": f"2016-08-1{d} 03:0{d}:00",
                           "tap_on_stop": lonely_id, "tap_off_time": f"2016-08-1{d} 03:2{d}:00",
                           "tap_off_stop": train["stop_id"]} for d in range(3)])
    pd.concat([trips, extra[trips.columns]], ignore_index=True).to_csv(paths["d2"], index=False)
    return paths


def release(home: Path, trips: Path, stops: Path) -> dict:
    assert main(["release", "--trips", str(trips), "--stops", str(stops), "--home", str(home), "--unit", "card",
                 *WEEK_FLAGS]) == 0
    (manifest,) = home.glob("releases/*/manifest.json")
    return json.loads(manifest.read_text())


def open_data_views(home: Path) -> dict:
    (release,) = [d for d in (home / "releases").iterdir() if d.is_dir()]
    check_open_data(release, home)
    catalog = json.loads((home / "releases" / "catalog.jsonld").read_text())
    assert [n["dct:identifier"] for n in catalog["@graph"] if n.get("@type") == "dcat:Dataset"] == [release.name]
    return {"datapackage": datapackage_view(json.loads((release / "datapackage.json").read_text())),
            "uncertainty": (release / "uncertainty.csv").read_bytes(),
            "page": page_view((release / "index.html").read_text()),
            "catalog": catalog_view(json.loads((home / "releases" / "catalog.jsonld").read_text()))}


def mlflow_view(home: Path) -> tuple[dict, dict]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name("transit-release").experiment_id
    (run,) = [r for r in client.search_runs([exp]) if "mlflow.parentRunId" not in r.data.tags]
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")}
    return run.data.params, tags


def test_one_unusual_passenger_changes_nothing_public_but_the_noise(prefect_harness, tmp_path):
    paths = neighbour_inputs(tmp_path)
    m1 = release(tmp_path / "home-d", paths["d"], paths["stops"])
    m2 = release(tmp_path / "home-d2", paths["d2"], paths["stops"])
    assert differences(public_view(m1), public_view(m2)) == []
    assert m1["ledger_head"]["seq"] == m2["ledger_head"]["seq"]
    # the open-data files (Data Package, margins of error, landing page, catalogue) differ only in the files' sizes,
    # rows and hashes (the noise) and the times
    views = [open_data_views(tmp_path / home) for home in ("home-d", "home-d2")]
    for part in views[0]:
        assert views[0][part] == views[1][part], f"{part} depends on the data"
    p1, t1 = mlflow_view(tmp_path / "home-d")
    p2, t2 = mlflow_view(tmp_path / "home-d2")
    assert p1 == p2
    assert {k: v for k, v in t1.items() if k != "head_hash"} == {k: v for k, v in t2.items() if k != "head_hash"}
    # the stop is in the public stop table, so the public domain may name it, the same way for D and D′;
    # the card id never appears
    seen = {}
    for home in (tmp_path / "home-d", tmp_path / "home-d2"):
        seen[home.name] = 0
        for p in home.rglob("*"):
            if p.is_file() and "private" not in p.relative_to(home).parts:
                data = p.read_bytes()
                assert str(CARD).encode() not in data, f"{p.relative_to(home)} names the passenger's card"
                if p.relative_to(home).parts[0] != "releases":  # released cells change only through the noise
                    seen[home.name] += data.count(LONELY.encode())
    assert seen["home-d"] == seen["home-d2"], seen
