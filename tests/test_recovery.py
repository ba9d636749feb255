"""Recovery after a crash: interrupted publications are completed or rolled back; dead runs' leftovers go."""

from __future__ import annotations

import os
import shutil
import time

import pandas as pd

from transit_release import recovery
from transit_release.accounting.ledger import Ledger
from transit_release.home import Home
from transit_release.publish import stage_release, verify_release
from tests.test_accounting import partition_events
from tests.test_publish import manifest


def staged_home(tmp_path):
    home = Home.at(tmp_path / "home").prepare()
    ledger = Ledger(home.ledger)
    ledger.charge(partition_events("r1"))
    t = {"time": pd.DataFrame({"mode": ["bus"], "date": ["20160808"], "tap": ["on"], "time": ["07:00"],
                               "count": [40]})}
    staged = stage_release(home.releases, "r1", t, manifest(), "card")
    return home, ledger, staged


def test_killed_after_the_intent_completes_from_the_staging_directory(tmp_path):
    home, ledger, staged = staged_home(tmp_path)
    ledger.record_intent("r1", staged.manifest_sha256, staged.staging_dir, staged.final_dir, None)
    assert [i.release_id for i in recovery.pending_intents(ledger)] == ["r1"]
    result = recovery.repair(home, ledger)
    assert result.completed == ["r1"] and set(ledger.published()) == {"r1"}
    assert verify_release(home.releases / "r1") == [] and not staged.staging_dir.exists()
    assert recovery.pending_intents(ledger) == []


def test_killed_after_the_rename_records_the_publication(tmp_path):
    home, ledger, staged = staged_home(tmp_path)
    ledger.record_intent("r1", staged.manifest_sha256, staged.staging_dir, staged.final_dir, None)
    os.rename(staged.staging_dir, staged.final_dir)
    assert recovery.repair(home, ledger).completed == ["r1"]
    assert ledger.published()["r1"].data()["manifest_sha256"] == staged.manifest_sha256


def test_an_incomplete_staging_directory_is_rolled_back(tmp_path):
    home, ledger, staged = staged_home(tmp_path)
    ledger.record_intent("r1", staged.manifest_sha256, staged.staging_dir, staged.final_dir, None)
    (staged.staging_dir / "time.csv").unlink()  # a torn write
    result = recovery.repair(home, ledger)
    assert result.rolled_back == ["r1"] and not staged.staging_dir.exists() and not staged.final_dir.exists()
    assert ledger.published() == {} and len(ledger.spends("r1")) == 6  # the spends still count
    assert recovery.repair(home, ledger).rolled_back == ["r1"]  # idempotent


def test_leftovers_of_dead_runs_are_named_and_removed_but_live_ones_are_not(tmp_path):
    home, ledger, staged = staged_home(tmp_path)  # a staging directory without an intent: a dead run's
    (home.reports / "r1").mkdir()
    (home.reports / "index.html").write_text("index")
    (home.reports / "audit-20260101T000000Z").mkdir()
    legacy = home.private / "old-release" / "partitions"
    legacy.mkdir(parents=True)
    dead = home.work / "r9-deadbeef"
    dead.mkdir(parents=True)
    (dead / recovery.LOCK).write_text("")
    with recovery.work_dir(home, "r2") as live:
        (home.reports / "r2").mkdir()
        names = {str(p.relative_to(home.root)) for p in recovery.leftovers(home, ledger)}
        assert names == {f"releases/{staged.staging_dir.name}", "release_reports/r1", "private/old-release/partitions",
                         "private/work/r9-deadbeef"}
        assert recovery.live_release_ids(home) == {"r2"}
        removed = recovery.clean_leftovers(home, ledger)
        assert sorted(removed) == sorted(names) and live.path.exists() and (home.reports / "r2").exists()
    assert not live.path.exists()  # a run's working directory goes with it
    assert (home.reports / "index.html").exists() and (home.reports / "audit-20260101T000000Z").exists()


def test_quarantine_is_kept_for_its_retention_only(tmp_path):
    home = Home.at(tmp_path / "home").prepare()
    q = home.quarantine / "r1"
    q.mkdir(parents=True)
    old, new = q / "old.parquet", q / "new.parquet"
    old.write_text("x")
    new.write_text("y")
    forty_days_ago = time.time() - 40 * 86400
    os.utime(old, (forty_days_ago, forty_days_ago))
    assert recovery.purge_quarantine(home, 30) == ["private/quarantine/r1/old.parquet"]
    assert new.exists() and not old.exists()
    shutil.rmtree(q)
    assert recovery.purge_quarantine(home, 30) == []
