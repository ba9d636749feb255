"""The compliance audit: clean record passes; every kind of tampering is named and fails."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from tests.conftest import WEEK

from transit_release.cli import EXIT_AUDIT_FAILED, main

pytestmark = pytest.mark.flow


@pytest.fixture(scope="module")
def released_home(prefect_harness, small_week, tmp_path_factory, trip_policy):
    from flows.opal_release import opal_release

    home = tmp_path_factory.mktemp("audited")
    opal_release(trips=str(small_week["trips"]), stops=str(small_week["stops"]), home=str(home), **WEEK, unit="trip",
                 policy=trip_policy)
    return home


@pytest.fixture
def home(released_home, tmp_path):
    """A private copy of the released home, free to be tampered with."""
    copy = tmp_path / "home"
    shutil.copytree(released_home, copy)
    # the copied MLflow store still points at the original artifacts: fine for the audit,
    # which reads runs, tags and params
    return copy


def audit(home, capsys):
    rc = main(["audit", "--home", str(home), "--json"])
    out, err = capsys.readouterr()
    return rc, json.loads(out[out.index("{"):]), err


def test_clean_record_passes_and_reports_the_loss(home, capsys):
    rc, result, _ = audit(home, capsys)
    assert rc == 0 and result["ok"] and result["discrepancies"] == []
    assert list(result["loss"]) == ["person", "trip"]  # one passenger first, then the units
    person = result["loss"]["person"]["default"]
    assert not person["bounded"] and person["unbounded_by"] == [{"release_id": "opal-trip-20160808-20160814",
                                                                 "period": "2016-08-08..2016-08-14"}]
    trip = result["loss"]["trip"]
    assert trip["basic"] == {"epsilon": 8.0, "delta": 7.5e-7}
    assert trip["per_mode"]["ferry"]["epsilon"] == 8.0
    assert len(trip["per_partition"]) == 28
    assert trip["per_partition_marginal"]["bus/20160808"]["tap_on_time_location"] == 2.0
    # one release: advanced composition (52.1 here) is worse than basic (8), so it is not reported
    assert trip["advanced"] is None
    assert any("not keyed" in t for t in result["threat_model"])
    assert result["anchors_checked"] == {"manifests": 1, "mlflow": 2} and result["leftovers"] == []
    assert result["charged_not_published"] == {}
    report = result["report"]
    assert report.endswith("audit.html") and "/release_reports/audit-" in report
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    run = client.get_run(result["mlflow_run_id"])
    assert run.data.tags["status"] == "passed" and run.data.metrics["trip.epsilon"] == 8.0


def test_ledger_row_edited_behind_the_triggers(home, capsys):
    con = sqlite3.connect(home / "ledger.sqlite")
    con.execute("DROP TRIGGER entries_no_update")
    con.execute("UPDATE entries SET payload = replace(payload, '\"epsilon\":2.0', '\"epsilon\":0.2') WHERE seq = 6")
    con.commit()
    con.close()
    rc, result, err = audit(home, capsys)
    assert rc == EXIT_AUDIT_FAILED
    assert any("entry 6 was modified after it was recorded" in d for d in result["discrepancies"])
    assert "audit failed" in err and "entry 6 was modified" in err


def test_deleted_ledger_row(home, capsys):
    con = sqlite3.connect(home / "ledger.sqlite")
    con.execute("DROP TRIGGER entries_no_delete")
    con.execute("DELETE FROM entries WHERE seq = 40")
    con.commit()
    con.close()
    rc, result, _ = audit(home, capsys)
    assert rc == EXIT_AUDIT_FAILED
    assert any("entry 40 is missing" in d for d in result["discrepancies"])
    assert any("ledger spends" not in d and "mlflow" in d and "40" in d for d in result["discrepancies"])


def test_deleted_mlflow_run(home, capsys):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name("transit-release")
    (run,) = client.search_runs([exp.experiment_id], filter_string="tags.release_id = 'opal-trip-20160808-20160814'")
    client.delete_run(run.info.run_id)
    rc, result, _ = audit(home, capsys)
    assert rc == EXIT_AUDIT_FAILED
    assert f"mlflow: opal-trip-20160808-20160814: run {run.info.run_id} was deleted" in result["discrepancies"]
    assert "mlflow: opal-trip-20160808-20160814: published release has no MLflow run" in result["discrepancies"]


def test_modified_published_file(home, capsys):
    f = home / "releases" / "opal-trip-20160808-20160814" / "time.csv"
    f.write_text(f.read_text().replace(",on,", ",off,", 1))
    rc, result, _ = audit(home, capsys)
    assert rc == EXIT_AUDIT_FAILED
    assert result["discrepancies"] == ["release: opal-trip-20160808-20160814: time.csv: sha256 differs from the manifest"]


def test_release_directory_not_on_the_ledger(home, capsys):
    shutil.copytree(home / "releases" / "opal-trip-20160808-20160814", home / "releases" / "forged")
    rc, result, _ = audit(home, capsys)
    assert rc == EXIT_AUDIT_FAILED
    assert result["discrepancies"] == ["release: forged: in releases/ but never recorded as published on the ledger"]


def test_a_ledger_that_cannot_be_opened_is_the_audits_one_discrepancy(home, capsys):
    """atk40 N4: a ledger with a hard link is refused, rightly; the audit then read no entries and called every
    published release "never recorded as published", its MLflow runs unknown, its reports left behind, and wrote
    that to the history. A ledger that cannot be opened is now the audit's one discrepancy, and nothing else."""
    import os

    from transit_release.cli.printing import print_audit
    from transit_release.runtime.outcome import summary_line

    ledger = home / "ledger.sqlite"
    os.link(ledger, home / "ledger-2.sqlite")
    rc, result, err = audit(home, capsys)
    assert rc == EXIT_AUDIT_FAILED
    assert result["discrepancies"] == [
        f"ledger: database: {ledger}: the privacy ledger file has 2 names (hard links); SQLite keeps its write-ahead "
        "log per name, so runs reaching it by two names would not see each other's writes. Remove the other names "
        f"(find / -xdev -samefile {ledger} lists them) and keep this one"]
    assert result["ledger_unreadable"] is True
    assert (result["leftovers"], result["releases_published"], result["loss"], result["populations"]) == ([], [], {},
                                                                                                         [])
    history = (home / "release_reports" / "audit_history.jsonl").read_text(encoding="utf-8").splitlines()
    last = json.loads(history[-1])
    assert (last["ok"], last["discrepancies"], last["ledger_unreadable"]) == (False, 1, True)
    print_audit(result)
    out = capsys.readouterr().out
    assert out.startswith("Privacy audit FAILED: the privacy ledger could not be opened; nothing else was checked\n"
                          "  discrepancy: ledger: database: ")
    assert "never recorded" not in out and "left behind" not in out and "ledger entries" not in out
    assert summary_line({**result, "report": "r"}).startswith(
        "audit FAILED: the privacy ledger could not be opened, nothing else checked; report r (exit ")
