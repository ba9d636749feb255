"""Recovery after a crash: interrupted publications are completed or rolled back; dead runs' leftovers go."""

from __future__ import annotations

import os
import shutil
import time

import pandas as pd

from transit_release.accounting.ledger import Ledger
from transit_release.files.home import LOCK, Home, live_release_ids
from transit_release.files.publish import stage_release, verify_release
from transit_release.integrity import recovery
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
    (dead / LOCK).write_text("")
    with recovery.work_dir(home, "r2") as live:
        (home.reports / "r2").mkdir()
        names = {str(p.relative_to(home.root)) for p in recovery.leftovers(home, ledger)}
        assert names == {f"releases/{staged.staging_dir.name}", "release_reports/r1", "private/old-release/partitions",
                         "private/work/r9-deadbeef"}
        assert live_release_ids(home) == {"r2"}
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
    # atk39 #16 (kept, by decision): a refused raw-data quality suite's Data Docs stay in the quarantine, where its
    # message points, and go with the quarantine's retention, folders and all
    docs = home.quarantine / "r2" / "validation-20260101T000000Z" / "data_docs" / "raw"
    docs.mkdir(parents=True)
    (docs / "index.html").write_text("<html></html>")
    os.utime(docs / "index.html", (forty_days_ago, forty_days_ago))
    assert recovery.purge_quarantine(home, 30) == [
        "private/quarantine/r2/validation-20260101T000000Z/data_docs/raw/index.html"]
    assert not any(home.quarantine.iterdir())


def test_an_intent_naming_directories_outside_the_releases_is_refused_and_nothing_is_touched(tmp_path):
    """The finding: intents are not chained, and repair renamed and deleted whatever directories an intent named
    (one written into the ledger made `repair` delete a directory outside the home)."""
    import pytest

    from transit_release.errors import LedgerIntegrityError

    home, ledger, staged = staged_home(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    ledger.record_intent("r1", staged.manifest_sha256, victim, staged.final_dir, None)
    with pytest.raises(LedgerIntegrityError, match="publication intent 1 names directories outside this home's "
                                                   "releases"):
        recovery.repair(home, ledger)
    assert (victim / "keep.txt").exists() and staged.staging_dir.exists() and not staged.final_dir.exists()
    for final in (tmp_path / "r1", home.releases / "other", home.private / "r1"):
        bad = ledger.record_intent("r1", staged.manifest_sha256, staged.staging_dir, final, None)
        with pytest.raises(LedgerIntegrityError):
            recovery.intent_paths(home, bad)
    assert recovery.intent_paths(home, ledger.record_intent("r1", staged.manifest_sha256, staged.staging_dir,
                                                            staged.final_dir, None)) == (staged.final_dir,
                                                                                         staged.staging_dir)


def test_a_key_is_never_adopted_by_a_ledger_an_anchor_says_was_keyed(tmp_path):
    """The finding: stripping every MAC and re-chaining made a keyed ledger look never keyed, and the refusal's
    advice (`repair --adopt-ledger-key`) then vouched for the forgery."""
    import json

    import pytest

    from transit_release.errors import LedgerIntegrityError
    from transit_release.integrity.audit import check_anchors

    home = Home.at(tmp_path / "home").prepare()
    keyed = Ledger(home.ledger, key=b"k" * 32)
    keyed.charge(partition_events("r1"))
    with pytest.raises(LedgerIntegrityError, match="already holds MACs"):
        keyed.adopt_key()
    (home.releases / "r1").mkdir()
    head = {**keyed.head().to_dict(), "keyed": True}
    (home.releases / "r1" / "manifest.json").write_text(json.dumps({"ledger_head": head}))
    with pytest.raises(LedgerIntegrityError, match=r"its public manifest's ledger head \(r1\) says the ledger was "
                                                   "keyed"):
        recovery.check_never_keyed(home, [])
    with pytest.raises(LedgerIntegrityError, match="anchored in MLflow at charged"):
        recovery.check_never_keyed(Home.at(tmp_path / "other").prepare(),
                                   [{"release_id": "r1", "run_id": "x", "event": "charged", "keyed": True}])
    problems, _ = check_anchors(lambda seq, h: None, {"r1": {"ledger_head": head}}, [], ledger_keyed=False)
    assert [p.problem for p in problems] == ["its public manifest's ledger head says the ledger was keyed, but it "
                                            "holds no MAC: it was rewritten without the key; restore it from a backup"]
    recovery.check_never_keyed(Home.at(tmp_path / "fresh").prepare(), [])  # nothing says keyed: adoption may go on


def test_an_intent_for_a_release_never_charged_is_refused(tmp_path):
    """The finding: with a staged directory and one intent row written by hand, `repair` published the raw trips
    as release 'evil' (a MACed publication entry, no spend) and the audit passed."""
    import pytest

    from transit_release.errors import LedgerIntegrityError
    from transit_release.integrity.audit import check_releases

    home, ledger, _ = staged_home(tmp_path)
    t = {"trips": pd.DataFrame({"card_id": [1], "mode": ["bus"]})}
    evil = stage_release(home.releases, "evil", t, manifest("evil"), "card")
    ledger.record_intent("evil", evil.manifest_sha256, evil.staging_dir, evil.final_dir, None)
    with pytest.raises(LedgerIntegrityError, match="release 'evil', which the ledger never charged"):
        recovery.repair(home, ledger)
    assert not (home.releases / "evil").exists() and ledger.published() == {}
    # had it been published anyway, the audit names it
    os.rename(evil.staging_dir, evil.final_dir)
    ledger.record_publication("evil", evil.manifest_sha256)
    problems, _, _ = check_releases(home, ledger.published(), {e.release_id for e in ledger.spends()})
    assert [str(p) for p in problems] == ["release: evil: published on the ledger without a single spend: its files "
                                          "were never charged (a forged publication?); withdraw it"]


def test_the_audit_names_anything_under_releases_that_is_not_a_release(tmp_path):
    """The finding: plain files and hidden folders under releases/ (raw trips dropped there) passed the audit."""
    from transit_release.integrity.audit import check_releases

    home = Home.at(tmp_path / "home").prepare()
    (home.releases / "trips.csv").write_text("card_id\n1\n")
    (home.releases / ".hidden").mkdir()
    (home.releases / ".tmp-r1-0000abcd").mkdir()  # a staging leftover: reported as such, not here
    problems, leftovers, _ = check_releases(home, {}, set())
    assert [str(p) for p in problems] == [
        "release: releases/.hidden: not a release: nothing but release directories belongs there; remove it",
        "release: releases/trips.csv: not a release: nothing but release directories belongs there; remove it"]
    assert leftovers == [".tmp-r1-0000abcd"]


def test_a_new_ledger_never_restarts_the_budget_of_a_home_that_published(tmp_path):
    """The finding: `release --ledger <new file>` on a home with published releases spent from a fresh budget."""
    import pytest

    from tasks.budget import charge_budget
    from transit_release.accounting.policy import load_budget_policy
    from transit_release.errors import LedgerIntegrityError

    home = Home.at(tmp_path / "home").prepare()
    (home.releases / "opal-20160808-20160814").mkdir()
    (home.releases / "opal-20160808-20160814" / "manifest.json").write_text("{}")
    with pytest.raises(LedgerIntegrityError, match=r"is empty, but this home has published 1 release\(s\) \(first: "
                                                   r"opal-20160808-20160814\)"):
        charge_budget.fn(home, partition_events("r2"), load_budget_policy())
    assert not Ledger(home.ledger).entries()


def test_auditing_a_home_that_does_not_exist_is_refused_and_creates_nothing(tmp_path, capsys):
    from transit_release.cli import main

    assert main(["audit", "--home", str(tmp_path / "nowhere")]) == 2
    assert "--home" in capsys.readouterr().err and not (tmp_path / "nowhere").exists()


def test_with_a_key_repair_acts_only_on_intents_the_tool_wrote(tmp_path):
    """The re-check's finding: an intent written by hand for a charged, unpublished id (its own manifest, raw files)
    was completed by `repair`. With a ledger key every intent is MACed; one without a valid MAC is refused."""
    import sqlite3

    import pytest

    from transit_release.errors import LedgerIntegrityError

    home = Home.at(tmp_path / "home").prepare()
    ledger = Ledger(home.ledger, key=b"k" * 32)
    ledger.charge(partition_events("r1"))
    t = {"trips": pd.DataFrame({"card_id": [1], "mode": ["bus"]})}
    forged = stage_release(home.releases, "r1", t, manifest(), "card")
    con = sqlite3.connect(home.ledger)  # as someone without the key would: a plain row
    con.execute("INSERT INTO publication_intents (recorded_at, release_id, manifest_sha256, staging_dir, final_dir) "
                "VALUES ('now', 'r1', ?, ?, ?)", (forged.manifest_sha256, str(forged.staging_dir),
                                                  str(forged.final_dir)))
    con.commit()
    con.close()
    with pytest.raises(LedgerIntegrityError, match="publication intent 1 carries no valid MAC"):
        recovery.repair(home, ledger)
    assert not forged.final_dir.exists() and ledger.published() == {}
    real = ledger.record_intent("r1", forged.manifest_sha256, forged.staging_dir, forged.final_dir, None)
    ledger.check_intent(real)  # the tool's own intent passes


def test_a_ledger_the_key_record_lists_never_adopts_the_key_again(tmp_path, monkeypatch):
    """The re-check's finding: with every MAC stripped, the chain rebuilt and every anchor in the home doctored,
    `repair --adopt-ledger-key` vouched for the forgery. The key's own record, beside it outside the home, lists
    the ledgers it has MACed."""
    import sqlite3

    import pytest

    from transit_release.accounting.ledger_key import KEY_FILE_ENV
    from transit_release.errors import LedgerIntegrityError

    key = tmp_path / "keys" / "ledger.key"
    key.parent.mkdir()
    key.write_bytes(b"k" * 48)
    key.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(key))
    path = tmp_path / "home" / "ledger.sqlite"
    Ledger(path).charge(partition_events("r1"))
    assert (tmp_path / "keys" / "ledger.key.ledgers").read_text().splitlines() == [str(path.resolve())]
    con = sqlite3.connect(path)  # the insider strips every MAC (the chain itself is untouched here)
    con.execute("DROP TRIGGER entry_macs_no_delete")
    con.execute("DELETE FROM entry_macs")
    con.commit()
    con.close()
    with pytest.raises(LedgerIntegrityError, match="records .* as keyed by this key: its MACs were removed"):
        Ledger(path).adopt_key()


def test_a_release_staged_in_private_is_unreadable_until_published_and_repair_completes_it(tmp_path):
    """Staging happens where the public cannot see it: under private/staging/ (same filesystem, one rename), the
    staged directory 0700 until published; an intent staged there is completed by repair, which opens it."""
    import stat

    home = Home.at(tmp_path / "home").prepare()
    ledger = Ledger(home.ledger)
    ledger.charge(partition_events("r1"))
    t = {"time": pd.DataFrame({"mode": ["bus"], "date": ["20160808"], "tap": ["on"], "time": ["07:00"],
                               "count": [40]})}
    staged = stage_release(home.releases, "r1", t, manifest(), "card", staging_root=home.staging_root(home.releases))
    assert staged.staging_dir.parent == home.staging and list(home.releases.iterdir()) == []
    assert stat.S_IMODE(staged.staging_dir.stat().st_mode) == 0o700
    assert recovery.leftovers(home, ledger) == [staged.staging_dir]  # without an intent: a dead run's
    ledger.record_intent("r1", staged.manifest_sha256, staged.staging_dir, staged.final_dir, None)
    assert recovery.leftovers(home, ledger) == []  # pending: repair's to complete, not to remove
    assert recovery.repair(home, ledger).completed == ["r1"]
    assert stat.S_IMODE((home.releases / "r1").stat().st_mode) == 0o755
    assert verify_release(home.releases / "r1") == [] and not staged.staging_dir.exists()
