import json

import pandas as pd
import pytest

from transit_release.errors import ConfigError, ReleaseExistsError
from transit_release.publish import (check_release_id, commit_release, render_datacard, stage_release,
                                     verify_release)
from transit_release.config import load_release_config
from transit_release.opal import privacy_statement


def manifest(rid="r1"):
    return {"release_id": rid, "period": {"start": "2016-08-08", "end": "2016-08-14"}, "modes": ["bus"],
            "parameters": {"bin_minutes": 15}, "privacy": privacy_statement(load_release_config()),
            "noise_source": "os-entropy", "code_version": "test"}


def tables():
    return {"time": pd.DataFrame({"mode": ["bus"], "date": ["20160808"], "tap": ["on"], "time": ["07:00"],
                                  "count": [40]})}


def test_staged_release_is_invisible_until_committed(tmp_path):
    staged = stage_release(tmp_path, "r1", tables(), manifest(), render_datacard(manifest()))
    assert not (tmp_path / "r1").exists()
    assert staged.staging_dir.name.startswith(".tmp-r1-")
    final = commit_release(staged)
    assert final == tmp_path / "r1" and not staged.staging_dir.exists()
    m = json.loads((final / "manifest.json").read_text())
    assert set(m["files"]) == {"time.csv", "time.parquet", "DATACARD.md"}
    assert verify_release(final) == []


def test_existing_release_is_never_overwritten(tmp_path):
    commit_release(stage_release(tmp_path, "r1", tables(), manifest(), "card"))
    before = (tmp_path / "r1" / "time.csv").read_bytes()
    with pytest.raises(ReleaseExistsError, match="release 'r1' already exists"):
        stage_release(tmp_path, "r1", tables(), manifest(), "card")
    staged = stage_release(tmp_path, "r2", tables(), manifest("r2"), "card")
    (tmp_path / "r2").mkdir()
    with pytest.raises(ReleaseExistsError, match="appeared while publishing"):
        commit_release(staged)
    assert (tmp_path / "r1" / "time.csv").read_bytes() == before
    assert not list(tmp_path.glob(".tmp-*"))


def test_modified_file_is_detected(tmp_path):
    final = commit_release(stage_release(tmp_path, "r1", tables(), manifest(), "card"))
    with open(final / "time.csv", "a") as fh:
        fh.write("bus,20160808,on,07:15,99\n")
    assert verify_release(final) == ["r1/time.csv: sha256 differs from the manifest"]


def test_release_ids_are_checked():
    assert check_release_id("opal-20160808-20160814") == "opal-20160808-20160814"
    with pytest.raises(ConfigError, match="is not valid"):
        check_release_id("../escape")


def test_datacard_states_the_guarantee():
    card = render_datacard(manifest())
    assert "(8, 7.5e-07)-differentially private for one\n**trip**" in card
    assert "| 5 | `tap_on_time_location` | `time-loc.csv` | 2 | 1.25e-07 | 1 | 18 |" in card
