import json
import os
import stat

import pandas as pd
import pytest

from transit_release.accounting.ledger import Ledger
from transit_release.config import load_release_config
from transit_release.errors import ConfigError, ReleaseExistsError
from transit_release.files.publish import (check_release_id, commit_release, neutralise_cell, stage_release,
                                     verify_release)
from transit_release.releases.opal import privacy_statement, render_datacard


def manifest(rid="r1"):
    return {"release_id": rid, "period": {"start": "2016-08-08", "end": "2016-08-14"}, "modes": ["bus"],
            "parameters": {"bin_minutes": 15}, "privacy": privacy_statement(load_release_config()),
            "noise_source": "os-entropy", "code_version": "test"}


def tables():
    return {"time": pd.DataFrame({"mode": ["bus"], "date": ["20160808"], "tap": ["on"], "time": ["07:00"],
                                  "count": [40]})}


def test_staged_release_is_invisible_until_committed(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    staged = stage_release(tmp_path / "releases", "r1", tables(), manifest(), render_datacard(manifest()))
    assert not (tmp_path / "releases" / "r1").exists()
    assert staged.staging_dir.name.startswith(".tmp-r1-")
    final = commit_release(staged, ledger)
    assert final == tmp_path / "releases" / "r1" and not staged.staging_dir.exists()
    m = json.loads((final / "manifest.json").read_text())
    assert set(m["files"]) == {"time.csv", "time.parquet", "DATACARD.md"}
    assert verify_release(final) == []
    assert set(ledger.published()) == {"r1"} and [i.release_id for i in ledger.intents()] == ["r1"]
    # public files are world-readable whatever the umask
    assert stat.S_IMODE(final.stat().st_mode) == 0o755
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in final.iterdir())


def test_existing_release_is_never_overwritten(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    root = tmp_path / "releases"
    commit_release(stage_release(root, "r1", tables(), manifest(), "card"), ledger)
    before = (root / "r1" / "time.csv").read_bytes()
    with pytest.raises(ReleaseExistsError, match="release 'r1' already exists"):
        stage_release(root, "r1", tables(), manifest(), "card")
    staged = stage_release(root, "r2", tables(), manifest("r2"), "card")
    (root / "r2").mkdir()
    with pytest.raises(ReleaseExistsError, match="appeared while publishing"):
        commit_release(staged, ledger)
    assert (root / "r1" / "time.csv").read_bytes() == before
    assert not list(root.glob(".tmp-*"))


def test_modified_or_added_files_are_detected(tmp_path):
    final = commit_release(stage_release(tmp_path, "r1", tables(), manifest(), "card"), Ledger(tmp_path / "l.sqlite"))
    with open(final / "time.csv", "a") as fh:
        fh.write("bus,20160808,on,07:15,99\n")
    assert verify_release(final) == ["r1/time.csv: sha256 differs from the manifest"]
    (final / "extra.csv").write_text("mode,count\nbus,1\n")
    (final / "sub").mkdir()
    (final / "sub" / "note.txt").write_text("x")
    assert verify_release(final)[1:] == ["r1/extra.csv: not listed in the manifest",
                                         "r1/sub: not listed in the manifest",
                                         "r1/sub/note.txt: not listed in the manifest"]


def test_release_ids_are_checked():
    assert check_release_id("opal-20160808-20160814") == "opal-20160808-20160814"
    for bad in ("../escape", "", "opal\n", "r1\n", " r1", "a" * 101):
        with pytest.raises(ConfigError, match="is not valid"):
            check_release_id(bad)
    for reserved in ("index.html", "INDEX.HTML", "audit-20260101", "experiments-sets", "ledger.sqlite",
                     "mlflow.db", "privacy-audit"):
        with pytest.raises(ConfigError, match="is reserved: it would collide with the home's own files"):
            check_release_id(reserved)


@pytest.mark.parametrize("cell,expected", [
    ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"), ("+cmd", "'+cmd"), ("@SUM(1)", "'@SUM(1)"),
    ("-2+3", "'-2+3"), ("\tx", "'\tx"), ("\rx", "'\rx"), ("-1", "-1"), ("+1", "+1"), ("-1.5e3", "-1.5e3"),
    ("Central", "Central"), ("2000", "2000"),
    # the findings: a pipe (DDE) and full-width operators passed the guard
    ("|calc", "'|calc"), ("\uff1d7+7", "'\uff1d7+7"), ("\uff0bcmd", "'\uff0bcmd"), ("\uff0dx", "'\uff0dx"),
    ("\uff20SUM(1)", "'\uff20SUM(1)"), ("\uff5cx", "'\uff5cx"), ("\ufe661", "'\ufe661"), ("\u22121+1", "'\u22121+1"),
    (" \uff1d1", "' \uff1d1"), ("Caf\u00e9 \uff1d", "Caf\u00e9 \uff1d"),
])
def test_csv_cells_never_start_a_formula(cell, expected):
    assert neutralise_cell(cell) == expected


def test_published_csv_neutralises_stop_names(tmp_path):
    t = {"location": pd.DataFrame({"mode": ["train", "train", "bus"], "date": ["20160808"] * 3, "tap": ["on"] * 3,
                                   "loc": ["=HYPERLINK(\"evil\")", "@SUM(1)", "-1"], "count": [40, 41, 42]})}
    final = commit_release(stage_release(tmp_path, "r1", t, manifest(), "card"), Ledger(tmp_path / "l.sqlite"))
    text = (final / "location.csv").read_text()
    assert "'=HYPERLINK" in text and "'@SUM(1)" in text and ",-1," in text
    assert not any(line.split(",")[3].startswith(("=", "+", "@")) for line in text.splitlines()[1:])
    assert pd.read_parquet(final / "location.parquet")["loc"].tolist()[0].startswith("=")  # Parquet: as it is


def test_datacard_states_the_guarantee_and_what_thresholds_do():
    card = render_datacard(manifest())
    assert "(8, 7.5e-07)-differentially private for one\n**trip**" in card
    assert "| 5 | `tap_on_time_location` | `time-loc.csv` | 2 | 1.25e-07 | 1 | 18 |" in card
    # the finding: "absent means below about the threshold" was wrong; a true 34 is dropped about 38% of the time
    assert "below about its threshold" not in card
    # P(Z < T - c) for the discrete Laplace at scale 2: a^(T-c+1)/(1+a), a = e^-1/2: 38% at c = T, 3.1% at T + 5
    assert "| 1 | 34 | 94.9% | 37.8% | 3.1% | 0.25% | +1.5 |" in card
    assert "| 5 | 18 | 99.5% | 26.9% | 0.18% | 0.0012% | +0.6 |" in card
    assert "A passenger is protected per trip, not as a whole" in card
    assert "| 2 | 16 | 0.0045 |" in card and "| 10 | 80 | ≥ 1 (no guarantee) |" in card
    assert "single quote" in card


def test_private_files_are_not_world_readable(tmp_path):
    from transit_release.files.home import Home

    home = Home.at(tmp_path / "h").prepare()
    assert stat.S_IMODE(home.private.stat().st_mode) == 0o700
    assert stat.S_IMODE(home.reports.stat().st_mode) == 0o750
    Ledger(home.ledger)
    assert stat.S_IMODE(home.ledger.stat().st_mode) == 0o600
    old = os.umask(0o027)
    try:
        (home.private / "x").write_text("raw")
        assert not stat.S_IMODE((home.private / "x").stat().st_mode) & 0o007
    finally:
        os.umask(old)


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this process cannot write: a read-only tmpfs when running as root (modes do not stop root)."""
    import subprocess

    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
        yield ro
        subprocess.run(["umount", str(ro)], check=True)
    else:
        os.chmod(ro, 0o555)
        yield ro
        os.chmod(ro, 0o755)


def test_a_home_that_is_a_file_or_read_only_is_refused_at_once(tmp_path, read_only_dir):
    import time

    from transit_release.files.home import Home

    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        Home.at(tmp_path / "file").prepare()
    start = time.monotonic()
    with pytest.raises(ConfigError, match="is not writable"):
        Home.at(read_only_dir).prepare()
    assert time.monotonic() - start < 1


def test_formulas_behind_spaces_or_invisible_characters_are_neutralised():
    """The finding: a leading space or a zero-width space let `=HYPERLINK(...)` through the CSV guard."""
    from transit_release.files.publish import neutralise_cell

    for text in (" =HYPERLINK(\"http://x\")", "\u200b=1+1", "\ufeff@SUM(A1)", "\u00a0+1+2"):
        assert neutralise_cell(text) == "'" + text
    for text in ("-1", " -1", "Central Station", "2000"):
        assert neutralise_cell(text) == text


def test_released_keys_outside_the_input_are_counted_in_plain_code():
    """The finding: the release suite's value sets were the input's stations and time bins, which Great Expectations
    rendered into the Data Docs (report and MLflow): a station only one passenger used was named there. The suite now
    gets the public domain; this check (counts only) keeps "only keys the input has"."""
    from tasks.quality import _keys_outside

    tables = {"time": pd.DataFrame({"mode": ["bus", "bus"], "time": ["07:00", "03:00"], "count": [40, 40]}),
              "location": pd.DataFrame({"mode": ["bus", "train"], "loc": ["2000", "Central"], "count": [40, 40]})}
    assert _keys_outside(tables, {"07:00", "03:00"}, {"bus": {"2000"}, "train": {"Central"}}) == 0
    assert _keys_outside(tables, {"07:00"}, {"bus": {"2000"}, "train": set()}) == 2


def test_neutralising_keeps_every_column_kind():
    """Text columns by distinct value, object and categorical columns cell by cell (unhashable cells too):
    every formula-like cell gets its quote, and the result is what the cell-by-cell rule gives."""
    import pandas as pd

    from transit_release.files.publish import neutralise_cell, neutralise_frame

    df = pd.DataFrame({"s": pd.array(["=1", "ok", None, "=1"], dtype="string"),
                       "c": pd.Series(["=1", "ok", "ok", "+x"], dtype="category"),
                       "o": pd.Series(["@x", ["=y"], None, 3], dtype=object), "n": [1, 2, 3, 4]})
    out = neutralise_frame(df)
    assert out["s"].tolist()[:2] == ["'=1", "ok"] and out["s"].tolist()[3] == "'=1"
    assert out["c"].tolist() == ["'=1", "ok", "ok", "'+x"]
    assert out["o"].tolist()[0] == "'@x" and out["o"].tolist()[1] == ["=y"] and out["o"].tolist()[3] == 3
    assert out["n"].tolist() == [1, 2, 3, 4]
    assert out["s"].dtype == df["s"].dtype
    assert neutralise_cell("-1") == "-1"


def test_files_a_describe_hook_writes_are_listed_and_a_failing_hook_leaves_nothing(tmp_path):
    """``describe`` (the open-data files) sees the files written so far and adds its own to the manifest."""
    seen = {}

    def describe(staging, m):
        seen.update(m["files"])
        (staging / "about.json").write_text("{}")
        return {"about.json": {"sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                               "bytes": 2}}

    final = commit_release(stage_release(tmp_path, "r1", tables(), manifest(), "card", describe=describe),
                           Ledger(tmp_path / "l.sqlite"))
    assert set(seen) == {"time.csv", "time.parquet", "DATACARD.md"}
    assert "about.json" in json.loads((final / "manifest.json").read_text())["files"] and verify_release(final) == []

    def broken(staging, m):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        stage_release(tmp_path, "r2", tables(), manifest("r2"), "card", describe=broken)
    assert not list(tmp_path.glob(".tmp-*")) and not (tmp_path / "r2").exists()
